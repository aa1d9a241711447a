"""``layoutcore checkpoint convert`` and the foreign-format columns of ``checkpoint inspect``."""

from __future__ import annotations

import argparse
import json
import os
from typing import Any

from ._args import reported

__all__ = ["add_convert", "foreign_columns", "foreign_json"]

_EPILOG = """\
examples:
  layoutcore checkpoint convert dcp_ckpt/ out/                       # to the layoutcore format
  layoutcore checkpoint convert orbax_ckpt/ hf/ --to safetensors --max-shard-size 2GB
"""


def add_convert(actions: Any) -> None:
    """Add the ``convert`` action to the ``checkpoint`` sub-command's ``actions``."""
    convert = actions.add_parser(
        "convert",
        help="rewrite a checkpoint (layoutcore, torch DCP, Orbax, safetensors) as layoutcore or HF safetensors",
        epilog=_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    convert.add_argument("src", metavar="SRC")
    convert.add_argument("dst", metavar="DST")
    convert.add_argument("--to", choices=("layoutcore", "safetensors"), default="layoutcore")
    convert.add_argument("--max-shard-size", default="5GB", help="safetensors shard size (e.g. 5GB, 500MB)")
    convert.add_argument("--overwrite", action="store_true", help="replace DST if it exists")
    convert.set_defaults(run=reported(_convert))


def _convert(args: argparse.Namespace) -> int:
    from .. import checkpoint

    if args.to == "safetensors":
        index = checkpoint.export_safetensors(
            args.src, args.dst, max_shard_size=args.max_shard_size, overwrite=args.overwrite
        )
        print(f"wrote {index}")
        return 0
    # Each tensor on its saved layout (Orbax), its saved blocks' layout (DCP) or one block
    # (safetensors), through the NumPy driver; the layoutcore format then records those layouts.
    tree = checkpoint.load(args.src, driver="numpy")
    info = checkpoint.save(args.dst, tree, overwrite=args.overwrite)
    print(f"wrote {os.fspath(args.dst)}: {len(info.tensors)} tensors")
    return 0


def foreign_columns(info: Any, path: str) -> tuple[str, str]:
    """For a foreign checkpoint's tensor: (format text, the layout column: saved or inferred + boxes)."""
    fmt = getattr(info, "format", "")
    spec = info.tensors[path]
    if not fmt:
        return "", str(spec.layout)
    if info.layout_known.get(path, False):
        return fmt, str(spec.layout)
    boxes = info.boxes.get(path, ())
    shown = ", ".join(f"{list(o)}+{list(s)}" for o, s in boxes[:4]) + (", ..." if len(boxes) > 4 else "")
    return fmt, f"boxes {shown} (layout not stored; blocks as {spec.layout.axes})"


def foreign_json(info: Any) -> dict[str, Any]:
    """The foreign fields of ``inspect --json``: format, which layouts were stored, saved boxes, values."""
    if not getattr(info, "format", ""):
        return {}
    return {
        "format": info.format,
        "layout_known": dict(info.layout_known),
        "boxes": {p: [[list(o), list(s)] for o, s in b] for p, b in info.boxes.items()},
        "values": json.loads(json.dumps(info.values, default=repr)),
    }
