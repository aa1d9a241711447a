"""The ``plan`` and ``relayout-plan`` commands: their arguments and tables (the JSON readers are :mod:`._json`).

``rich`` is imported inside the drawing functions, as in the rest of the command line.

JSON formats (documented in docs/before-you-run.md):

* RULES: ``{"mesh": "data=4,model=2" | {"shape": [4, 2], "axis_names": ["data", "model"]},
  "rules": {"pattern": [null, "model"], ...}, "match": "search", "on_multiple": "error",
  "on_missing": "replicate"}``; a layout entry is ``null``, an axis name, or a list of names.
* VARIABLES: ``{"path": [1024, 64] | {"shape": [1024, 64], "dtype": "bfloat16"}, ...}``.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from .._errors import LayoutcoreError
from .._layout import Layout
from .._mesh import Mesh
from .._plan import Plan, plan
from .._relayout_plan import RelayoutPlan, relayout_plan
from ._args import UsageError, parse_layout, parse_mesh, parse_shape, say
from ._args import console as _console
from ._json import layout_map_from_json, load_json, variables_from_json

if TYPE_CHECKING:
    from rich.console import Console

__all__ = ["add_commands", "format_bytes", "layout_map_from_json", "variables_from_json"]

#: Devices drawn one bar each; a larger mesh is summarised (min / median / max).
MAX_DEVICE_ROWS = 64
#: Unmatched paths listed in the table.
MAX_UNMATCHED_ROWS = 50
#: Rows in the "biggest" tables.
TOP = 10
_BAR_WIDTH = 40

_PLAN_EPILOG = """\
RULES.json:      {"mesh": "data=4,model=2", "rules": {"dense.*kernel": [null, "model"]},
                  "on_missing": "replicate"}
VARIABLES.json:  {"encoder/dense/kernel": [1024, 4096],
                  "encoder/dense/bias": {"shape": [4096], "dtype": "bfloat16"}}

examples:
  layoutcore plan --rules rules.json --variables vars.json
  layoutcore plan --rules rules.json --variables vars.json --strict --max-device-bytes 16GiB   # for CI
  layoutcore plan --rules rules.json --variables vars.json --json

Exit status 1 when --strict or --max-device-bytes finds a problem (it is named).
"""

_RELAYOUT_EPILOG = """\
examples:
  layoutcore relayout-plan --mesh x=4,y=2 --from x,y --to y,x --shape 4096,4096
  layoutcore relayout-plan --mesh x=8 --from x,none --to none,x --shape 8192,8192 --dtype bfloat16
  layoutcore relayout-plan --mesh x=4 --from x --to-mesh a=2 --to-devices CPU:4,CPU:5 --to a --shape 64
  layoutcore relayout-plan --mesh x=4,y=2 --from x,y --to y,x --shape 8,8 --json --transfers
"""


def _usage_error(message: str) -> Exception:
    return UsageError(message)


def format_bytes(n: int) -> str:
    """``1536`` -> ``"1.5 KiB"`` (binary units)."""
    value = float(n)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(value) < 1024 or unit == "TiB":
            return f"{int(value)} B" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    raise AssertionError("unreachable")


def _parse_bytes(text: str) -> int:
    units = {"": 1, "b": 1, "kib": 1 << 10, "mib": 1 << 20, "gib": 1 << 30, "tib": 1 << 40, "kb": 10**3}
    units |= {"mb": 10**6, "gb": 10**9, "tb": 10**12}
    stripped = text.strip().lower().replace(" ", "")
    digits = stripped.rstrip("abcdefghijklmnopqrstuvwxyz")
    if not digits or stripped[len(digits) :] not in units:
        raise _usage_error(f"--max-device-bytes {text!r}: write a number of bytes, e.g. 17179869184 or 16GiB")
    try:
        return int(float(digits) * units[stripped[len(digits) :]])
    except ValueError:
        raise _usage_error(f"--max-device-bytes {text!r}: {digits!r} is not a number") from None


# ----------------------------------------------------------------------------------------------
# Commands
# ----------------------------------------------------------------------------------------------
def add_commands(command: Callable[..., Any]) -> None:
    """Add ``plan`` and ``relayout-plan`` through the command line's ``command(name, help, run, **kw)``."""
    sub = command(
        "plan",
        "Apply a LayoutMap to a model's variables without running anything: the pattern each takes, the bytes "
        "each device holds, what matched nothing, unused patterns and the biggest replicated tensors.",
        _cmd_plan,
        epilog=_PLAN_EPILOG,
    )
    sub.add_argument("--rules", metavar="RULES.json", required=True, help="the mesh and the LayoutMap rules")
    sub.add_argument("--variables", metavar="VARS.json", required=True, help="path -> shape (and dtype)")
    sub.add_argument("--json", action="store_true", help="print Plan.to_dict() as JSON instead of tables")
    sub.add_argument("--strict", action="store_true", help="fail (exit 1) when a path matches no pattern")
    sub.add_argument("--max-device-bytes", metavar="N", help="fail (exit 1) when a device would hold more, e.g. 16GiB")

    sub = command(
        "relayout-plan",
        "The exact minimum data movement of a relayout: every rectangle each device must receive, and from whom.",
        _cmd_relayout_plan,
        epilog=_RELAYOUT_EPILOG,
    )
    sub.add_argument("--mesh", metavar="AXES", required=True, help="source mesh, e.g. x=4,y=2")
    sub.add_argument("--devices", metavar="NAMES", help="source mesh device names, row-major (default: abstract)")
    sub.add_argument("--from", dest="source", metavar="ENTRIES", required=True, help="source layout, e.g. x,y")
    sub.add_argument("--to", dest="target", metavar="ENTRIES", required=True, help="target layout, e.g. y,x")
    sub.add_argument("--to-mesh", metavar="AXES", help="target mesh (default: the source mesh)")
    sub.add_argument("--to-devices", metavar="NAMES", help="target mesh device names (matched by name)")
    sub.add_argument("--shape", metavar="DIMS", required=True, help="global shape, e.g. 4096,4096")
    sub.add_argument("--dtype", default="float32", help="element type (default float32)")
    sub.add_argument("--json", action="store_true", help="print RelayoutPlan.to_dict() as JSON instead of tables")
    sub.add_argument("--transfers", action="store_true", help="list every transfer (JSON: include them)")


def _cmd_plan(args: argparse.Namespace, extra: list[str]) -> int:
    budget = None if args.max_device_bytes is None else _parse_bytes(args.max_device_bytes)
    try:
        layout_map = layout_map_from_json(load_json(args.rules, "--rules"), f"--rules {args.rules}")
        variables = variables_from_json(load_json(args.variables, "--variables"), f"--variables {args.variables}")
        result = plan(layout_map, variables)
    except LayoutcoreError as exc:
        raise _usage_error(str(exc)) from None

    if args.json:
        print(json.dumps(result.to_dict(), indent=1))
    else:
        render_plan(result, _console())
    try:
        result.check(max_device_bytes=budget, allow_unmatched=not args.strict)
    except LayoutcoreError as exc:
        print(f"layoutcore plan: {exc}", file=sys.stderr)
        return 1
    return 0


def _cmd_relayout_plan(args: argparse.Namespace, extra: list[str]) -> int:

    mesh = parse_mesh(args.mesh, args.devices)
    target_mesh = mesh if args.to_mesh is None else parse_mesh(args.to_mesh, args.to_devices)
    if args.to_mesh is None and args.to_devices is not None:
        target_mesh = parse_mesh(args.mesh, args.to_devices)
    shape = parse_shape(args.shape)
    try:
        source = Layout(parse_layout(args.source), mesh)
        target = Layout(parse_layout(args.target), target_mesh)
        result = relayout_plan(source, target, shape, args.dtype)
    except LayoutcoreError as exc:
        raise _usage_error(str(exc)) from None
    if args.json:
        print(json.dumps(result.to_dict(transfers=args.transfers), indent=1))
    else:
        render_relayout_plan(result, _console(), transfers=args.transfers)
    return 0


# ----------------------------------------------------------------------------------------------
# Drawing
# ----------------------------------------------------------------------------------------------
def _bar(value: int, most: int) -> str:
    if most <= 0:
        return ""
    cells = value * _BAR_WIDTH / most
    return "█" * int(cells) + ("▌" if cells - int(cells) >= 0.5 else "")


def _device_label(mesh: Mesh, position: int) -> str:
    return mesh.devices[position] if mesh.devices is not None else f"#{position}"


def _print_per_device(console: Console, title: str, mesh: Mesh, columns: dict[str, tuple[int, ...]]) -> None:
    """``title`` on its own line, then :func:`_per_device_table`."""
    say(console, title)
    console.print(_per_device_table(mesh, columns))


def _per_device_table(mesh: Mesh, columns: dict[str, tuple[int, ...]]) -> Any:
    """One row per device (a bar for the first column), or a min / median / max summary for big meshes."""
    from rich.table import Table

    table = Table()
    first = next(iter(columns))
    if mesh.size > MAX_DEVICE_ROWS:
        table.add_column("statistic")
        for name in columns:
            table.add_column(name, justify="right")
        for label, pick in (("min", min), ("median", lambda v: sorted(v)[len(v) // 2]), ("max", max)):
            table.add_row(label, *(format_bytes(pick(v)) for v in columns.values()))
        return table
    table.add_column("device")
    for name in columns:
        table.add_column(name, justify="right")
    table.add_column("")  # the bar of the first column
    most = max(columns[first], default=0)
    for position in range(mesh.size):
        cells = [format_bytes(v[position]) for v in columns.values()]
        table.add_row(_device_label(mesh, position), *cells, _bar(columns[first][position], most))
    return table


def render_plan(result: Plan, console: Console) -> None:
    """Tables for a :class:`Plan`: per-device memory bars, unmatched paths, unused patterns, biggest tensors."""
    from rich.table import Table

    total = sum(e.nbytes for e in result.entries)
    say(
        console,
        f"{len(result.entries)} variables, {format_bytes(total)} in all, on mesh {result.mesh}: "
        f"the fullest device holds {format_bytes(result.max_device_bytes)}; "
        f"{format_bytes(result.replicated_bytes)} is held whole on every device.",
    )
    _print_per_device(console, "Memory per device", result.mesh, {"bytes": result.device_bytes})
    if result.unmatched:
        say(console, f"{len(result.unmatched)} path(s) match no pattern (replicated)")
        table = Table()
        table.add_column("path")
        table.add_column("shape")
        table.add_column("bytes", justify="right")
        table.add_column("closest patterns")
        by_path = {e.path: e for e in result.entries}
        for i, path in enumerate(result.unmatched[:MAX_UNMATCHED_ROWS]):
            near = result.near_misses[i] if i < len(result.near_misses) else ()
            entry = by_path[path]
            table.add_row(path, str(entry.shape), format_bytes(entry.nbytes), ", ".join(near) or "-")
        console.print(table)
        if len(result.unmatched) > MAX_UNMATCHED_ROWS:
            say(console, f"... and {len(result.unmatched) - MAX_UNMATCHED_ROWS} more (--json lists them all).")
    else:
        say(console, "Every path matches a pattern.")
    if result.unused_patterns:
        say(console, "Unused patterns (no variable takes them): " + ", ".join(repr(p) for p in result.unused_patterns))
    whole = sorted((e for e in result.entries if e.held_whole), key=lambda e: -e.nbytes)[:TOP]
    if whole:
        say(console, "Biggest tensors held whole on every device")
        table = Table()
        for name in ("path", "shape", "dtype", "bytes", "pattern"):
            table.add_column(name, justify="right" if name == "bytes" else "left")
        for e in whole:
            table.add_row(e.path, str(e.shape), e.dtype, format_bytes(e.nbytes), e.pattern or "(no match)")
        console.print(table)


def render_relayout_plan(result: RelayoutPlan, console: Console, *, transfers: bool = False) -> None:
    """Tables for a :class:`RelayoutPlan`: the floor, per-device ingress and egress, and optionally every transfer."""
    from rich.table import Table

    share = result.floor_bytes / result.nbytes if result.nbytes else 0.0
    say(
        console,
        f"{result.source} -> {result.target}, shape {result.shape} {result.dtype} ({format_bytes(result.nbytes)}): "
        f"the minimum is {format_bytes(result.floor_bytes)} in {len(result.transfers)} transfers "
        f"({share:.3g}x the array); largest ingress {format_bytes(max(result.ingress_bytes, default=0))}, "
        f"largest egress {format_bytes(max(result.egress_bytes, default=0))}.",
    )
    source_mesh, target_mesh = result.source.mesh, result.target.mesh
    assert source_mesh is not None and target_mesh is not None
    if source_mesh == target_mesh:
        columns = {"receives": result.ingress_bytes, "sends": result.egress_bytes}
        _print_per_device(console, "Bytes per device", target_mesh, columns)
    else:
        _print_per_device(console, "Received per target device", target_mesh, {"receives": result.ingress_bytes})
        _print_per_device(console, "Sent per source device", source_mesh, {"sends": result.egress_bytes})
    if transfers:
        say(console, "Transfers")
        table = Table()
        for name in ("from", "to", "index", "bytes"):
            table.add_column(name, justify="right" if name == "bytes" else "left")
        for t in result.transfers:
            index = "[" + ", ".join(f"{s.start}:{s.stop}" for s in t.index) + "]"
            table.add_row(
                _device_label(source_mesh, t.src), _device_label(target_mesh, t.dst), index, format_bytes(t.nbytes)
            )
        console.print(table)
