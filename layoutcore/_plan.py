"""Seeing before running (docs/design.md#seeing-before-running): per-device memory of a LayoutMap.

Pure accounting on :mod:`layoutcore.geometry`; no framework is imported and no data is touched.
:func:`plan` applies a :class:`LayoutMap` to a model's variables (shapes and dtypes only) and
says which pattern each takes, what each device holds, what nothing matched and what is held
whole on every device. The exact data movement of a relayout is :mod:`layoutcore._relayout_plan`.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from . import _dtypes, geometry
from ._errors import LayoutError
from ._layout import Layout
from ._layout_map import LayoutMap
from ._mesh import Mesh
from ._paths import flatten_with_paths

#: How many unmatched paths a plan lists near misses for (each costs a pass over the patterns).
NEAR_MISS_PATHS = 50

__all__ = [
    "NEAR_MISS_PATHS",
    "Plan",
    "PlanEntry",
    "dtype_name_and_itemsize",
    "plan",
]

#: Bytes per element of dtypes a plan may count but layoutcore does not move (outside ``_dtypes.ALL_DTYPES``).
_OTHER_ITEMSIZE = {"int4": 1, "uint4": 1, "float8_e4m3fnuz": 1, "float8_e5m2fnuz": 1}


def dtype_name_and_itemsize(dtype: Any) -> tuple[str, int]:
    """A dtype's canonical name and its bytes per element, for any framework's dtype object or name.

    The 18 dtypes layoutcore moves are named by :func:`layoutcore._dtypes.dtype_name` (``"half"`` and
    ``torch.float16`` are ``"float16"``), the one normaliser every module uses. Others (``int4``,
    the ``fnuz`` float8 kinds, NumPy's ``float128``) keep their own name, sized by their
    ``itemsize``/``size`` attribute or NumPy.

    Raises:
        LayoutError: a dtype whose size cannot be told, naming it.
    """
    try:
        name = _dtypes.dtype_name(dtype)
    except LayoutError:
        pass
    else:
        return name, _dtypes.itemsize(name)
    text = dtype if isinstance(dtype, str) else getattr(dtype, "name", None) or str(dtype)
    text = str(text).removeprefix("torch.").removeprefix("tf.").removeprefix("<dtype: '").removesuffix("'>")
    if text in _OTHER_ITEMSIZE:
        return text, _OTHER_ITEMSIZE[text]
    for attribute in ("itemsize", "size"):  # NumPy / torch (itemsize), TF DType (size)
        size = getattr(dtype, attribute, None)
        if isinstance(size, int) and not isinstance(size, bool) and size > 0:
            return text, size
    try:
        import numpy as np  # the core depends on NumPy already (the reference driver)

        numpy_dtype = np.dtype(dtype)
    except Exception:
        raise LayoutError(f"Cannot tell the size of dtype {dtype!r}; give a NumPy dtype name.", value=dtype) from None
    return numpy_dtype.name, numpy_dtype.itemsize


def _shape(value: Any, path: str) -> tuple[int, ...]:
    try:
        shape = tuple(value)
    except TypeError:
        raise LayoutError(
            f"The shape of {path!r} is not a sequence of ints. Received: {value!r}", value=value
        ) from None
    for size in shape:
        if isinstance(size, bool) or not hasattr(type(size), "__index__") or int(size) < 0:
            raise LayoutError(
                f"The shape of {path!r} must hold non-negative ints (known sizes). Received: {value!r}", value=value
            )
    return tuple(int(s) for s in shape)


def _is_shape(value: Any) -> bool:
    return (isinstance(value, (tuple, list)) and all(hasattr(type(s), "__index__") for s in value)) or (
        type(value).__name__ in ("Size", "TensorShape")
    )


def _leaf(path: str, value: Any) -> tuple[str, tuple[int, ...], Any]:
    """``(path, shape, dtype)`` from a shape, a ``(shape, dtype)`` pair or an object with ``.shape``."""
    if hasattr(value, "shape"):
        dtype = getattr(value, "dtype", None)
        if dtype is None and hasattr(value, "value"):  # flax VariableState-like wrappers
            dtype = getattr(value.value, "dtype", None)
        return path, _shape(value.shape, path), "float32" if dtype is None else dtype
    if hasattr(value, "value") and hasattr(value.value, "shape"):
        return _leaf(path, value.value)
    if _is_shape(value):
        return path, _shape(value, path), "float32"
    if isinstance(value, (tuple, list)) and len(value) == 2 and _is_shape(value[0]):
        return path, _shape(value[0], path), value[1]
    raise LayoutError(
        f"Variable {path!r}: expected a shape, a (shape, dtype) pair, or something with .shape and .dtype. "
        f"Received: {value!r}",
        value=value,
    )


def _variables(variables: Any, separator: str) -> list[tuple[str, tuple[int, ...], Any]]:
    """Flatten what :func:`plan` accepts into ``(path, shape, dtype)`` triples."""
    if isinstance(variables, Mapping):
        items = list(variables.items())
        if all(isinstance(k, str) and not isinstance(v, Mapping) for k, v in items) and all(
            hasattr(v, "shape") or _is_shape(v) or (isinstance(v, (tuple, list)) and len(v) == 2 and _is_shape(v[0]))
            for _, v in items
        ):
            return [_leaf(k, v) for k, v in items]

        leaves = flatten_with_paths(variables, separator)
        if items and not leaves:  # e.g. {"w": "float32"}: nothing to count, and silence would hide it
            raise LayoutError(f"plan found no variable with a .shape in {variables!r}", value=variables)
        return [_leaf(p, v) for p, v in leaves]
    if isinstance(variables, (str, bytes)) or not isinstance(variables, Iterable):
        raise LayoutError(
            "plan expects a mapping from path to shape, a tree, a module's named_parameters() or a model's "
            f"variables. Received: {variables!r}",
            value=variables,
        )
    out = []
    for item in variables:
        if isinstance(item, tuple) and len(item) == 2 and isinstance(item[0], str):  # named_parameters()
            out.append(_leaf(item[0], item[1]))
        elif isinstance(getattr(item, "path", None), str):  # keras 3 variables
            out.append(_leaf(item.path, item))
        elif isinstance(getattr(item, "name", None), str) and hasattr(item, "shape"):  # tf-keras variables
            out.append(_leaf(item.name, item))
        else:
            raise LayoutError(
                f"plan cannot tell the path of {item!r}: give (path, value) pairs or objects with .path.", value=item
            )
    return out


@dataclass(frozen=True, slots=True)
class PlanEntry:
    """One variable under a plan.

    Attributes:
        path: the variable's path. shape: its global shape. dtype: its dtype's name.
        pattern: the map key it took (``None``: nothing matched, replicated).
        layout: its layout. shard_shape: the largest shard's shape.
        device_bytes: the bytes each mesh device holds of it, row-major.
    """

    path: str
    shape: tuple[int, ...]
    dtype: str
    pattern: str | None
    layout: Layout
    shard_shape: tuple[int, ...]
    device_bytes: tuple[int, ...]

    @property
    def nbytes(self) -> int:
        """Bytes of the whole (global) value."""
        return math.prod(self.shape) * dtype_name_and_itemsize(self.dtype)[1]

    @property
    def held_whole(self) -> bool:
        """Every device of a mesh of more than one holds the whole value."""
        return len(self.device_bytes) > 1 and self.shard_shape == self.shape

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready fields (the layout as its axes)."""
        return {
            "path": self.path,
            "shape": list(self.shape),
            "dtype": self.dtype,
            "pattern": self.pattern,
            "axes": _axes_json(self.layout),
            "shard_shape": list(self.shard_shape),
            "device_bytes": list(self.device_bytes),
        }


def _axes_json(layout: Layout) -> list[Any]:
    return [list(a) if isinstance(a, tuple) else a for a in layout.axes]


@dataclass(frozen=True, slots=True)
class Plan:
    """What a :class:`LayoutMap` does to a set of variables, before anything runs.

    Attributes:
        mesh: the map's mesh.
        entries: one :class:`PlanEntry` per variable, in the order given.
        unmatched: paths no pattern matched (replicated).
        near_misses: for the first :data:`NEAR_MISS_PATHS` unmatched paths (same order), the closest
            patterns; ``layout_map.explain(path)`` gives them for any path.
        unused_patterns: map keys no variable took.
        device_bytes: per mesh device (row-major), the bytes it holds in all.
        replicated_bytes: bytes of the entries held whole on every device (counted once each).
    """

    mesh: Mesh
    entries: tuple[PlanEntry, ...]
    unmatched: tuple[str, ...]
    near_misses: tuple[tuple[str, ...], ...]
    unused_patterns: tuple[str, ...]
    device_bytes: tuple[int, ...]
    replicated_bytes: int

    def __repr__(self) -> str:
        # A model's plan has thousands of entries: count them, as RelayoutPlan counts its transfers.
        return (
            f"Plan(mesh={self.mesh!r}, entries=<{len(self.entries)} entries>, unmatched={self.unmatched!r}, "
            f"unused_patterns={self.unused_patterns!r}, device_bytes={self.device_bytes!r}, "
            f"replicated_bytes={self.replicated_bytes})"
        )

    @property
    def max_device_bytes(self) -> int:
        """The most any one device holds."""
        return max(self.device_bytes, default=0)

    def check(self, max_device_bytes: int | None = None, allow_unmatched: bool = True) -> Plan:
        """Raise if a device would hold more than ``max_device_bytes`` or a path matched nothing.

        Returns the plan itself, so ``plan(lm, vars).check(...)`` chains.

        Raises:
            LayoutError: naming the unmatched paths (with their near misses) when
                ``allow_unmatched=False``, or the devices over the budget and the largest entries
                on them.
        """
        problems = []
        if not allow_unmatched and self.unmatched:
            shown = "; ".join(
                f"{p!r} (closest: {', '.join(repr(m) for m in near)})" if near else repr(p)
                for p, near in zip(self.unmatched[:10], self.near_misses, strict=False)
            )
            more = f" and {len(self.unmatched) - 10} more" if len(self.unmatched) > 10 else ""
            problems.append(f"{len(self.unmatched)} path(s) match no pattern and would be replicated: {shown}{more}")
        if max_device_bytes is not None:
            over = [(d, b) for d, b in enumerate(self.device_bytes) if b > max_device_bytes]
            if over:
                device, most = max(over, key=lambda item: item[1])
                biggest = sorted(self.entries, key=lambda e: -e.device_bytes[device])[:3]
                problems.append(
                    f"{len(over)} device(s) exceed max_device_bytes={max_device_bytes}: device {device} holds {most} "
                    f"bytes, most of it {', '.join(f'{e.path!r} ({e.device_bytes[device]} B)' for e in biggest)}"
                )
        if problems:
            raise LayoutError(
                "Plan check failed: " + "; ".join(problems) + ".", value=self.unmatched or max_device_bytes
            )
        return self

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready: the mesh string form, every entry, and the totals (see docs/before-you-run.md)."""
        return {
            "mesh": {"shape": list(self.mesh.shape), "axis_names": list(self.mesh.axis_names)},
            "entries": [e.to_dict() for e in self.entries],
            "unmatched": [
                {"path": p, "near_misses": list(self.near_misses[i]) if i < len(self.near_misses) else []}
                for i, p in enumerate(self.unmatched)
            ],
            "unused_patterns": list(self.unused_patterns),
            "device_bytes": list(self.device_bytes),
            "max_device_bytes": self.max_device_bytes,
            "replicated_bytes": self.replicated_bytes,
        }


def _device_bytes(
    layout: Layout,
    shape: tuple[int, ...],
    itemsize: int,
    cache: dict[Any, Any],  # (layout, shape, itemsize) -> bytes per device; layout -> its blocks
) -> tuple[int, ...]:
    key = (layout, shape, itemsize)
    found: tuple[int, ...] | None = cache.get(key)
    if found is not None:
        return found
    mesh = layout.mesh
    assert mesh is not None
    blocks = cache.get(layout)
    if blocks is None:
        blocks = cache[layout] = layout.offset_to_shard()
    sizes = [geometry.chunk_sizes(size, layout.num_shards(d)) for d, size in enumerate(shape)]
    by_block: dict[tuple[int, ...], int] = {}
    out = []
    for block in blocks:
        nbytes = by_block.get(block)
        if nbytes is None:
            nbytes = by_block[block] = math.prod(s[b] for s, b in zip(sizes, block, strict=True)) * itemsize
        out.append(nbytes)
    result = tuple(out)
    cache[key] = result
    return result


def plan(layout_map: LayoutMap, variables: Any, *, separator: str = "/") -> Plan:
    """Apply ``layout_map`` to ``variables`` without data: who takes which pattern, and the bytes per device.

    ``variables`` is a mapping from path to a shape, a ``(shape, dtype)`` pair, or anything with
    ``.shape`` and ``.dtype``; a tree (§6, paths joined by ``separator``); an iterable of
    ``(path, value)`` pairs (``module.named_parameters()``); or objects with ``.path`` (keras
    variables). A shape alone means ``float32``. The map's ``on_missing`` applies to the
    unmatched paths (once, naming all of them); they are replicated in the plan.

    Raises:
        LayoutError: the map has no mesh, a value is none of the above, an entry's rank differs
            from its variable's (naming both), or a dtype's size is unknown.
        UnmatchedPathError: ``on_missing="error"`` and a path matches nothing.
        AmbiguousLayoutError: a path matches several patterns (``on_multiple="error"``).
    """
    if not isinstance(layout_map, LayoutMap):
        raise LayoutError(f"plan expects a LayoutMap. Received: {layout_map!r}", value=layout_map)
    mesh = layout_map.mesh
    if mesh is None:
        raise LayoutError("plan needs a LayoutMap with a mesh (the devices to count bytes on).", value=layout_map)
    cache: dict[Any, Any] = {}
    dtypes: dict[Any, tuple[str, int]] = {}
    replicated: dict[int, Layout] = {}
    shard_counts: dict[Layout, tuple[int, ...]] = {}
    entries = []
    unmatched = []
    used: set[str] = set()
    totals = [0] * mesh.size
    replicated_bytes = 0
    for path, shape, dtype in _variables(variables, separator):
        try:
            name, itemsize = dtypes[dtype]
        except (KeyError, TypeError):
            name, itemsize = dtype_name_and_itemsize(dtype)
            with contextlib.suppress(TypeError):  # an unhashable dtype object is just not cached
                dtypes[dtype] = (name, itemsize)
        pattern = layout_map.pattern_for(path)
        if pattern is None:
            unmatched.append(path)
            layout = replicated.get(len(shape))
            if layout is None:
                layout = replicated[len(shape)] = Layout.replicated(mesh, len(shape))
        else:
            used.add(pattern)
            layout = layout_map[pattern]
            assert layout is not None
            if layout.rank != len(shape):
                raise LayoutError(
                    f"LayoutMap pattern {pattern!r} gives variable {path!r} (shape {shape}) the rank-{layout.rank} "
                    f"layout {layout.axes}, but the variable has rank {len(shape)}.",
                    value=layout,
                )
            if layout.mesh is None:
                layout = layout.with_mesh(mesh)
            elif layout.mesh.size != mesh.size:
                raise LayoutError(
                    f"Pattern {pattern!r} has its own mesh {layout.mesh}; plan counts bytes on the map's mesh {mesh}.",
                    value=layout,
                )
        device_bytes = _device_bytes(layout, shape, itemsize, cache)
        counts = shard_counts.get(layout)
        if counts is None:  # num_shards validates its argument: once per layout, not per variable
            counts = shard_counts[layout] = tuple(layout.num_shards(d) for d in range(layout.rank))
        shard_shape = tuple(geometry.chunk_size(s, n) for s, n in zip(shape, counts, strict=True))
        entry = PlanEntry(path, shape, name, pattern, layout, shard_shape, device_bytes)
        entries.append(entry)
        for d, b in enumerate(device_bytes):
            totals[d] += b
        if entry.held_whole:
            replicated_bytes += math.prod(shape) * itemsize
    layout_map.unmatched(unmatched)
    # Near misses cost a similarity pass over the patterns: for the first paths only (explain() has any other).
    near = tuple(layout_map.near_misses(p) for p in unmatched[:NEAR_MISS_PATHS])
    unused = tuple(p for p in layout_map if p not in used)
    return Plan(mesh, tuple(entries), tuple(unmatched), near, unused, tuple(totals), replicated_bytes)
