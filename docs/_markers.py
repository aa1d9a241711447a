"""Rewriting the generated part of a docs page: the text between two marker comments (docs/gen_*.py)."""

from __future__ import annotations

import sys
from pathlib import Path


def write_between(page: Path, begin: str, end: str, body: str, *, check: bool, script: str) -> int:
    """Put ``body`` between the first ``begin`` and the next ``end`` marker of ``page``.

    With ``check``, write nothing and return 1 (saying so on stderr) when the page differs from what
    ``script`` would write, else 0.

    Raises:
        ValueError: a marker is missing from the page.
    """
    text = page.read_text("utf-8")
    if begin not in text or end not in text.split(begin, 1)[1]:
        raise ValueError(f"{page}: the markers {begin!r} ... {end!r} are missing")
    head, rest = text.split(begin, 1)
    new = head + begin + body + end + rest.split(end, 1)[1]
    if check:
        if new != text:
            print(f"{page.name} is out of date: run python docs/{script}", file=sys.stderr)
            return 1
        return 0
    page.write_text(new, "utf-8")
    return 0
