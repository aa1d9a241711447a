"""What the ``layoutcore`` commands share: argument parsing, the usage errors and the console.

Its own module so that the command modules (``layoutcore.cli._main``, ``_render_plan``,
``_checkpoint``, ``_interchange``) import it, and never each other.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING

import layoutcore as lc

if TYPE_CHECKING:
    from rich.console import Console

__all__ = [
    "CLI_EXTRA",
    "REPLICATED_TOKENS",
    "MissingDependencyError",
    "UsageError",
    "console",
    "missing_rich",
    "parse_layout",
    "parse_mesh",
    "parse_shape",
    "reported",
    "say",
]

#: Spellings of a replicated tensor axis in ``--layout`` (compared case-insensitively).
REPLICATED_TOKENS = frozenset({"none", "unsharded", "-"})


class UsageError(Exception):
    """A bad command-line value; ``main`` prints it on one line and exits with status 2."""


class MissingDependencyError(UsageError):
    """A command needs an optional package that is not installed; the message gives the install command
    (exit status 3)."""

    exit_status = 3


def parse_mesh(text: str, devices: str | None = None) -> lc.Mesh:
    """``"x=3,y=2"`` (or a TF DTensor mesh string, recognised by its ``|``) as a :class:`Mesh`.

    Args:
        text: comma-separated ``name=size`` pairs, major to minor.
        devices: optional comma-separated device names, one per mesh position, row-major.

    Raises:
        UsageError: a malformed pair, a non-integer size, or any invalid mesh (naming it).
    """
    try:
        if "|" in text:
            mesh = lc.Mesh.from_string(text)
        else:
            pairs: list[tuple[str, int]] = []
            for part in text.split(","):
                name, eq, size = part.partition("=")
                if not eq or not size.strip().isdigit():
                    raise UsageError(f"--mesh {text!r}: {part.strip()!r} is not 'name=size' (e.g. --mesh x=3,y=2)")
                pairs.append((name.strip(), int(size)))
            mesh = lc.create_mesh(pairs)
    except lc.LayoutcoreError as exc:
        raise UsageError(f"--mesh {text!r}: {exc}") from None
    if devices is None:
        return mesh
    try:
        return mesh.with_devices([d.strip() for d in devices.split(",")])
    except lc.LayoutcoreError as exc:
        raise UsageError(f"--devices {devices!r}: {exc}") from None


def parse_layout(text: str) -> list[lc.AxisSpec]:
    """``--layout`` text as one layout entry per tensor axis.

    Entries are comma-separated. ``none``, ``None``, ``unsharded`` or ``-`` is a replicated
    axis; a mesh axis name shards it; several mesh axes on one tensor axis are written
    ``x+y`` or ``(x,y)`` (major to minor, like ``PartitionSpec(("x", "y"))``). The empty
    string is a rank-0 layout.

    Raises:
        UsageError: an empty entry, unbalanced parentheses, or an empty group.
    """
    entries: list[str] = []
    depth, current = 0, ""
    for char in text:
        if char == "(":
            depth += 1
            if depth > 1:
                raise UsageError(f"--layout {text!r}: nested parentheses")
        elif char == ")":
            depth -= 1
            if depth < 0:
                raise UsageError(f"--layout {text!r}: ')' without '('")
        if char == "," and depth == 0:
            entries.append(current)
            current = ""
        else:
            current += char
    if depth:
        raise UsageError(f"--layout {text!r}: '(' without ')'")
    entries.append(current)
    if len(entries) == 1 and not entries[0].strip():
        return []
    axes: list[lc.AxisSpec] = []
    for raw in entries:
        entry = raw.strip()
        if not entry:
            raise UsageError(f"--layout {text!r}: empty entry; write 'none' for a replicated tensor axis")
        if entry.lower() in REPLICATED_TOKENS:
            axes.append(None)
            continue
        grouped = entry.startswith("(") and entry.endswith(")")
        names = [n.strip() for n in (entry[1:-1].split(",") if grouped else entry.split("+"))]
        if not all(names) or any(n.lower() in REPLICATED_TOKENS for n in names):
            raise UsageError(f"--layout {text!r}: {entry!r} must list mesh axis names, e.g. x+y or (x,y)")
        axes.append(names[0] if len(names) == 1 else tuple(names))
    return axes


def parse_shape(text: str) -> tuple[int, ...]:
    """``"6,4"`` as ``(6, 4)``; the empty string is a scalar's shape ``()``.

    Raises:
        UsageError: an entry that is not a non-negative integer.
    """
    if not text.strip():
        return ()
    shape = []
    for part in text.split(","):
        if not part.strip().isdigit():
            raise UsageError(f"--shape {text!r}: {part.strip()!r} is not a non-negative integer (e.g. --shape 6,4)")
        shape.append(int(part))
    return tuple(shape)


#: The command that installs what the drawing commands need (rich).
CLI_EXTRA = "pip install 'layoutcore[cli]'"


def missing_rich() -> MissingDependencyError:
    """The error of a command that draws tables or pictures where ``rich`` is not installed."""
    return MissingDependencyError(
        f"this command draws with 'rich', which is not installed; install the cli extra: {CLI_EXTRA} "
        "(or pass --json where the command has it)"
    )


def console() -> Console:
    """The commands' rich console (imported here, on first use).

    Raises:
        MissingDependencyError: ``rich`` is not installed (it comes with the ``cli`` extra).
    """
    try:
        from rich.console import Console
    except ModuleNotFoundError as exc:
        if (exc.name or "").split(".")[0] != "rich":
            raise
        raise missing_rich() from None

    # markup off: layouts print as "Layout[x, unsharded]", which rich would take for a tag.
    return Console(highlight=False, markup=False, emoji=False)


def say(out: Console, text: str) -> None:
    """Print ``text`` (a one-line summary or a table's title) as one line: rich never wraps it at the
    console's width, so a narrow terminal folds it at its own edge and a pipe gets it whole."""
    out.print(text, soft_wrap=True)


def reported(run: Callable[[argparse.Namespace], int]) -> Callable[[argparse.Namespace, list[str]], int]:
    """A ``layoutcore checkpoint`` action whose layoutcore errors (no checkpoint, corrupt metadata, a bad
    target) print as one line, ``layoutcore checkpoint ACTION: error: ...`` on stderr, with exit status 1."""

    def wrapped(args: argparse.Namespace, extra: list[str]) -> int:
        try:
            return run(args)
        except lc.LayoutcoreError as exc:
            print(f"layoutcore checkpoint {args.action}: error: {exc}", file=sys.stderr)
            return 1

    return wrapped
