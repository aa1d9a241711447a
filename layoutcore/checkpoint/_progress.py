"""Progress bars for long checkpoint work (rich is imported only when a bar is shown on a terminal, and only
where it is installed: it is the ``cli`` extra)."""

from __future__ import annotations

import contextlib
import sys
from typing import Any

__all__ = ["PROGRESS_MIN_BYTES", "progress"]

#: Saves and loads of at least this many bytes show a progress bar when stderr is a terminal.
PROGRESS_MIN_BYTES = 256 << 20


@contextlib.contextmanager
def progress(what: str, total: int) -> Any:
    """A callback advancing a rich progress bar by n bytes (rich imported only on a terminal, and
    optional: it comes with the ``cli`` extra; without it there is no bar)."""
    if total < PROGRESS_MIN_BYTES or not sys.stderr.isatty():
        yield lambda n: None
        return
    try:
        from rich.console import Console
        from rich.progress import BarColumn, DownloadColumn, Progress, TransferSpeedColumn
    except ImportError:  # rich comes with the cli extra; without it, no bar
        yield lambda n: None
        return

    columns = (what, BarColumn(), DownloadColumn(binary_units=True), TransferSpeedColumn())
    with Progress(*columns, console=Console(stderr=True), transient=True) as bar:
        task = bar.add_task(what, total=total)
        yield lambda n: bar.advance(task, n)
