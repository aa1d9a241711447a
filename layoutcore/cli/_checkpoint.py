"""``layoutcore checkpoint inspect|plan``: what a checkpoint holds, and what a load would read."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from typing import Any

from .. import checkpoint
from .._layout import Layout
from ._args import UsageError, console, parse_layout, parse_mesh, reported, say
from ._json import layout_map_from_json, load_json
from ._render_plan import format_bytes

_EPILOG = """\
examples:
  layoutcore checkpoint inspect ckpt/
  layoutcore checkpoint plan ckpt/ --mesh x=8 --layout none,x            # columns over 8, one process
  layoutcore checkpoint plan ckpt/ --mesh x=8 --layout none,x --process-devices 0,1 --json
  layoutcore checkpoint plan ckpt/ --rules rules.json --granularity piece # what whole-chunk readers read
"""


def add_commands(command: Callable[..., Any]) -> None:
    """Add ``checkpoint inspect`` and ``checkpoint plan`` through the command line's ``command``."""
    sub = command(
        "checkpoint",
        "Inspect a layoutcore (or torch DCP / Orbax / safetensors) checkpoint, or plan the bytes a load reads.",
        _cmd_help,
        epilog=_EPILOG,
    )
    actions = sub.add_subparsers(dest="action", metavar="ACTION", required=True)
    inspect = actions.add_parser("inspect", help="tensors, shapes, dtypes, saved layouts, files and bytes")
    inspect.add_argument("path", metavar="PATH")
    inspect.add_argument("--json", action="store_true", help="print JSON instead of tables")
    inspect.set_defaults(run=reported(_inspect))
    plan = actions.add_parser("plan", help="the byte ranges a load under a target reads, before reading any data")
    plan.add_argument("path", metavar="PATH")
    plan.add_argument("--rules", metavar="RULES.json", help="the target as a LayoutMap (mesh and rules)")
    plan.add_argument("--mesh", metavar="AXES", help="target mesh, e.g. x=4,y=2 (with --layout)")
    plan.add_argument("--layout", metavar="ENTRIES", help="target layout for tensors of its rank, e.g. none,x")
    plan.add_argument("--process-devices", metavar="POSITIONS", help="the loading process's mesh positions, e.g. 0,1")
    plan.add_argument("--granularity", choices=("exact", "piece"), default="exact", help="piece: whole-chunk reads")
    plan.add_argument("--json", action="store_true", help="print JSON instead of tables")
    plan.set_defaults(run=reported(_plan))
    from ._interchange import add_convert

    add_convert(actions)


def _cmd_help(args: argparse.Namespace, extra: list[str]) -> int:
    raise UsageError("choose an action: inspect or plan")


def _inspect(args: argparse.Namespace) -> int:
    info = checkpoint.inspect(args.path)
    from ._interchange import foreign_columns, foreign_json

    fmt = getattr(info, "format", "") or "layoutcore"
    rows: list[dict[str, Any]] = [
        {"path": p, "shape": list(s.shape), "dtype": s.dtype, "layout": foreign_columns(info, p)[1], "bytes": s.nbytes}
        for p, s in info.tensors.items()
    ]
    if args.json:
        data = {
            "path": str(info.path),
            "format_version": info.format_version,
            "total_bytes": info.total_bytes,
            "files": len(info.files),
            "tensors": {p: s.to_dict() for p, s in info.tensors.items()},
            **foreign_json(info),
        }
        print(json.dumps(data, indent=1, sort_keys=True))
        return 0
    out = console()
    from rich.table import Table

    say(out, f"{info.path} ({fmt}): {len(rows)} tensors, {format_bytes(info.total_bytes)}, {len(info.files)} files")
    table = Table()
    for col in ("path", "shape", "dtype", "saved layout", "bytes"):
        table.add_column(col, justify="right" if col == "bytes" else "left", no_wrap=col in ("dtype", "bytes"))
    for r in rows:
        table.add_row(r["path"], str(tuple(r["shape"])), r["dtype"], r["layout"], format_bytes(r["bytes"]))
    out.print(table)
    return 0


def _target(args: argparse.Namespace) -> Any:
    if args.rules and (args.mesh or args.layout):
        raise UsageError("give --rules or --mesh with --layout, not both")
    if args.rules:
        return layout_map_from_json(load_json(args.rules, "--rules"), args.rules)
    if not (args.mesh and args.layout):
        raise UsageError("give the target: --rules RULES.json, or --mesh AXES with --layout ENTRIES")
    mesh = parse_mesh(args.mesh)
    axes = parse_layout(args.layout)
    info = checkpoint.inspect(args.path)
    ranks = {p: len(s.shape) for p, s in info.tensors.items()}
    others = sorted(p for p, rank in ranks.items() if rank != len(axes))
    if ranks and len(others) == len(ranks):
        # Planning every tensor replicated would answer a question nobody asked: refuse, naming the ranks.
        held = ", ".join(f"{p!r} rank {ranks[p]}" for p in others[:5]) + (", ..." if len(others) > 5 else "")
        raise UsageError(
            f"--layout {args.layout!r} has rank {len(axes)}, but no tensor of {args.path} has that rank ({held}); "
            "give one entry per axis of the tensors to plan, or --rules RULES.json for several ranks"
        )
    if others:
        shown = ", ".join(f"{p!r} (rank {ranks[p]})" for p in others[:5]) + (", ..." if len(others) > 5 else "")
        print(
            f"layoutcore checkpoint plan: note: --layout has rank {len(axes)}; {len(others)} tensor(s) of other "
            f"ranks are planned replicated: {shown}",
            file=sys.stderr,
        )
    return {p: Layout(axes, mesh) if p not in others else Layout.replicated(mesh, ranks[p]) for p in ranks}


def _plan(args: argparse.Namespace) -> int:
    target = _target(args)
    devices = None
    if args.process_devices:
        try:
            devices = [int(x) for x in args.process_devices.split(",")]
        except ValueError:
            raise UsageError(f"--process-devices {args.process_devices!r}: write mesh positions, e.g. 0,1") from None
    plan = checkpoint.read_plan(args.path, target, process_devices=devices, granularity=args.granularity)
    if args.json:
        data = {
            "read_bytes": plan.read_bytes,
            "floor_bytes": plan.floor_bytes,
            "amplification": plan.amplification,
            "metadata_bytes": plan.metadata_bytes,
            "reads": len(plan.reads),
            "tensors": {p: {"read_bytes": r, "floor_bytes": f} for p, (r, f) in plan.tensors.items()},
        }
        print(json.dumps(data, indent=1, sort_keys=True))
        return 0
    out = console()
    from rich.table import Table

    say(
        out,
        f"read {format_bytes(plan.read_bytes)} for a floor of {format_bytes(plan.floor_bytes)}: "
        f"{plan.amplification:.4f}x in {len(plan.reads)} ranges",
    )
    table = Table()
    for col in ("tensor", "read", "floor", "read / floor"):
        table.add_column(col, justify="left" if col == "tensor" else "right", no_wrap=col != "tensor")
    for p, (r, f) in plan.tensors.items():
        table.add_row(p, format_bytes(r), format_bytes(f), f"{r / f:.4f}" if f else "-")
    out.print(table)
    return 0
