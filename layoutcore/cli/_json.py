"""The JSON readers of the ``plan`` and ``relayout-plan`` commands: RULES and VARIABLES files.

The formats are described in :mod:`layoutcore.cli._render_plan`. Bad input raises the commands'
:class:`~layoutcore.cli._args.UsageError`, naming the field.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from .._layout import Layout
from .._layout_map import LayoutMap
from .._mesh import Mesh
from ._args import UsageError, parse_mesh

__all__ = ["layout_map_from_json", "load_json", "variables_from_json"]


def _usage_error(message: str) -> Exception:
    return UsageError(message)


def _axes(entry: Any, where: str) -> Any:
    if isinstance(entry, list) and all(isinstance(a, str) for a in entry):
        return tuple(entry)
    if entry is None or isinstance(entry, str):
        return entry
    raise _usage_error(f"{where}: a layout entry is null, an axis name or a list of names. Received: {entry!r}")


def layout_map_from_json(data: Any, source: str = "RULES") -> LayoutMap:
    """A :class:`LayoutMap` from the RULES JSON format (see :mod:`layoutcore.cli._render_plan`).

    Raises:
        UsageError: a missing or malformed field, naming it; layoutcore's own errors for a bad mesh or rule.
    """
    if not isinstance(data, dict) or "rules" not in data or "mesh" not in data:
        raise _usage_error(f"{source}: expected an object with 'mesh' and 'rules'. Received keys: {_keys(data)}")
    mesh_spec = data["mesh"]
    if isinstance(mesh_spec, str):
        mesh = parse_mesh(mesh_spec)
    elif isinstance(mesh_spec, dict) and "shape" in mesh_spec and "axis_names" in mesh_spec:
        mesh = Mesh(mesh_spec["shape"], mesh_spec["axis_names"], mesh_spec.get("devices"))
    else:
        raise _usage_error(f"{source}: 'mesh' is 'x=4,y=2' or {{'shape': [...], 'axis_names': [...]}}")
    options = {k: data[k] for k in ("match", "on_multiple", "on_missing") if k in data}
    unknown = sorted(set(data) - {"mesh", "rules", "match", "on_multiple", "on_missing"})
    if unknown:
        raise _usage_error(f"{source}: unknown field(s) {unknown}")
    layout_map = LayoutMap(mesh, **options)
    rules = data["rules"]
    if not isinstance(rules, dict):
        raise _usage_error(f"{source}: 'rules' is an object from pattern to layout entries")
    for pattern, entries in rules.items():
        if not isinstance(entries, list):
            raise _usage_error(f"{source}: rule {pattern!r} needs a list of layout entries. Received: {entries!r}")
        layout_map[pattern] = Layout([_axes(e, f"{source} rule {pattern!r}") for e in entries])
    return layout_map


def variables_from_json(data: Any, source: str = "VARIABLES") -> dict[str, tuple[tuple[int, ...], str]]:
    """``{path: (shape, dtype)}`` from the VARIABLES JSON format (see :mod:`layoutcore.cli._render_plan`)."""
    if not isinstance(data, dict):
        raise _usage_error(f"{source}: expected an object from path to shape. Received: {type(data).__name__}")
    out = {}
    for path, spec in data.items():
        if isinstance(spec, dict) and "shape" in spec:
            shape, dtype = spec["shape"], spec.get("dtype", "float32")
        else:
            shape, dtype = spec, "float32"
        if not isinstance(shape, list) or not all(isinstance(s, int) and not isinstance(s, bool) for s in shape):
            raise _usage_error(f"{source}: {path!r} needs a shape (a list of ints). Received: {spec!r}")
        out[path] = (tuple(shape), dtype)
    return out


def _keys(data: Any) -> list[str]:
    return sorted(data) if isinstance(data, dict) else []


def load_json(path: str, flag: str) -> Any:
    try:
        return json.loads(Path(path).read_text(encoding="utf-8"))
    except OSError as exc:
        raise _usage_error(f"{flag} {path!r}: {exc.strerror or exc}") from None
    except json.JSONDecodeError as exc:
        raise _usage_error(f"{flag} {path!r}: not JSON ({exc})") from None
