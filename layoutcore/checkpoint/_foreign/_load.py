"""inspect / read_plan / load over any foreign checkpoint, with the layoutcore format's target forms."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..._errors import LayoutMismatchError
from ..._layout import Layout
from ..._layout_map import LayoutMap
from ..._tensor_spec import TensorSpec
from ._boxes import layout_from_boxes
from ._model import ForeignCheckpoint, ForeignTensor, map_tree
from ._pieces import Box, FileCache, Run, merge_runs

__all__ = ["ForeignInfo", "ForeignReadPlan", "inspect", "load", "read_plan", "resolve_layouts"]


@dataclass(frozen=True, slots=True)
class ForeignInfo:
    """What a foreign checkpoint holds (``checkpoint.inspect`` of a foreign path).

    Attributes:
        format: ``"torch-dcp"``, ``"orbax"`` or ``"safetensors"``.
        tensors: tree path -> :class:`TensorSpec`: the saved layout where the format records
            one (Orbax), else the smallest layout whose blocks are the saved boxes (DCP), else
            one replicated block on a one-device mesh (safetensors).
        layout_known: tree path -> whether the format recorded the layout (``False``: inferred).
        boxes: tree path -> the saved blocks, ``(offsets, sizes)``, in storage order.
        values: tree path -> non-tensor leaves (DCP/Orbax scalars).
        total_bytes: bytes of all tensors.
        files: the checkpoint's files.
        format_version: the format name and version where recorded.
    """

    format: str
    tensors: dict[str, TensorSpec]
    layout_known: dict[str, bool]
    boxes: dict[str, tuple[Box, ...]]
    values: dict[str, Any]
    total_bytes: int
    files: tuple[str, ...]
    format_version: str


@dataclass(frozen=True, slots=True)
class ForeignReadPlan:
    """The bytes one process reads to load a foreign checkpoint under a target.

    Attributes:
        reads: ``(file, offset, length)`` runs, merged per file; for Orbax one entry per stored
            chunk named ``<dir>/<array>/<chunk index>`` with its uncompressed size.
        read_bytes: sum of the run lengths.
        floor_bytes: each distinct element the process's devices need, once.
        amplification: ``read_bytes / floor_bytes`` (1.0 when nothing is needed).
        metadata_bytes: bytes read to open the checkpoint (headers, pickles, indexes).
        exact: whether ``read_bytes`` are the bytes read (``False`` for Orbax, whose chunks
            are compressed: the figure is their uncompressed size).
    """

    reads: tuple[tuple[str, int, int], ...]
    read_bytes: int
    floor_bytes: int
    amplification: float
    metadata_bytes: int
    exact: bool


def _saved_layout(tensor: ForeignTensor) -> tuple[Layout, bool]:
    if tensor.layout is not None:
        return tensor.layout, True
    inferred = layout_from_boxes(tensor.shape, tensor.boxes)
    if inferred is None:  # irregular boxes: describe the tensor as one block
        inferred = Layout((None,) * len(tensor.shape), _one_device())
    return inferred, False


def _one_device() -> Any:
    from ..._mesh import Mesh

    return Mesh((1,), ("d",))


def inspect(ckpt: ForeignCheckpoint) -> ForeignInfo:
    """The :class:`ForeignInfo` of an opened foreign checkpoint."""
    specs: dict[str, TensorSpec] = {}
    known: dict[str, bool] = {}
    for path, t in ckpt.tensors.items():
        layout, known[path] = _saved_layout(t)
        specs[path] = TensorSpec(t.shape, t.dtype, layout)
    return ForeignInfo(
        ckpt.format,
        specs,
        known,
        {p: t.boxes for p, t in ckpt.tensors.items()},
        dict(ckpt.values),
        sum(t.nbytes for t in ckpt.tensors.values()),
        ckpt.files,
        ckpt.format,
    )


def _leaf_layout(path: str, tensor: ForeignTensor, leaf: Any, driver: Any) -> Layout | None:
    if leaf is None:
        return None
    if isinstance(leaf, Layout):
        layout = leaf
    elif isinstance(leaf, TensorSpec):
        if leaf.shape != tensor.shape or leaf.dtype != tensor.dtype:
            raise LayoutMismatchError(
                f"checkpoint tensor {path!r} is {tensor.dtype}{list(tensor.shape)}, the target TensorSpec asks for "
                f"{leaf.dtype}{list(leaf.shape)}",
                expected=(leaf.shape, leaf.dtype),
                actual=(tensor.shape, tensor.dtype),
            )
        layout = leaf.layout
    else:  # a distributed tensor: its layout is used, the tensor is not modified
        from ... import fetch_layout

        layout = fetch_layout(leaf, driver=driver)
    if layout.rank != len(tensor.shape):
        raise LayoutMismatchError(
            f"checkpoint tensor {path!r} has shape {tensor.shape}; the target layout {layout.axes} has rank {layout.rank}",
            expected=layout,
            actual=tensor.shape,
        )
    if layout.mesh is None:
        raise LayoutMismatchError(f"target layout for {path!r} has no mesh: {layout!r}", expected=layout, actual=None)
    return layout


def _tree_leaf(tree: Any, path: str) -> Any:
    node = tree
    for key in path.split("/"):
        if isinstance(node, Mapping):
            if key not in node:
                return None
            node = node[key]
        elif isinstance(node, (list, tuple)) and key.isdigit() and int(key) < len(node):
            node = node[int(key)]
        else:
            return None
    return node


def resolve_layouts(ckpt: ForeignCheckpoint, target: Any = None, *, driver: Any = None) -> dict[str, Layout | None]:
    """Per tensor path, the layout to load it under (``None``: as saved, or whole where nothing is saved).

    ``target`` forms: ``None``; a :class:`LayoutMap` (``layout_for``: its ``on_missing``
    applies); a mapping tree path -> ``Layout`` / ``TensorSpec`` (paths it lacks load as
    saved); a tree of the saved structure whose leaves are ``Layout``, ``TensorSpec`` or
    distributed tensors. A tensor's exact path wins over a tree lookup in a mapping.

    Raises:
        LayoutMismatchError: a ``TensorSpec`` of another shape or dtype, or a layout of another
            rank, naming the path.
    """
    out: dict[str, Layout | None] = {}
    for path, tensor in ckpt.tensors.items():
        if target is None:
            leaf = None
        elif isinstance(target, LayoutMap):
            leaf = target.layout_for(path, tensor.shape, kind="checkpoint tensor")
        elif isinstance(target, Mapping) and path in target:
            leaf = target[path]
        elif isinstance(target, Mapping) and any("/" in str(k) for k in target):  # a flat path mapping
            leaf = None
        else:
            leaf = _tree_leaf(target, path)
        out[path] = _leaf_layout(path, tensor, leaf, driver)
    return out


def _device_boxes(shape: tuple[int, ...], layout: Layout) -> list[Box]:
    out = []
    for slices in layout.device_slices(shape):
        bounds = [s.indices(d)[:2] for s, d in zip(slices, shape, strict=True)]
        out.append((tuple(lo for lo, _ in bounds), tuple(hi - lo for lo, hi in bounds)))
    return out


def _positions(layout: Layout, process_devices: Sequence[Any] | None) -> list[int]:
    mesh = layout.mesh
    assert mesh is not None
    if process_devices is None:
        return list(range(mesh.size))
    out = []
    for d in process_devices:
        if isinstance(d, int):
            out.append(d)
        elif mesh.devices is not None and str(d) in mesh.devices:
            out.append(mesh.devices.index(str(d)))
        else:
            raise LayoutMismatchError(f"process device {d!r} is not a device of {mesh!r}", expected=mesh, actual=d)
    return [p for p in out if 0 <= p < mesh.size]


def _needed(tensor: ForeignTensor, layout: Layout | None, process_devices: Sequence[Any] | None) -> list[Box]:
    """The distinct boxes this process's devices need (a layout's blocks are equal or disjoint)."""
    if layout is None:
        return [((0,) * len(tensor.shape), tensor.shape)]
    boxes = _device_boxes(tensor.shape, layout)
    return list(dict.fromkeys(boxes[p] for p in _positions(layout, process_devices)))


def read_plan(
    ckpt: ForeignCheckpoint, target: Any = None, *, process_devices: Sequence[Any] | None = None, driver: Any = None
) -> ForeignReadPlan:
    """The byte runs one process reads to load ``ckpt`` under ``target`` (nothing is read).

    ``process_devices``: mesh positions (ints) or device names of this process's devices on
    each target mesh (default: every device: a one-process load).
    """
    layouts = resolve_layouts(ckpt, target, driver=driver)
    runs: list[Run] = []
    floor = 0
    for path, tensor in ckpt.tensors.items():
        item = tensor.nbytes // max(1, math.prod(tensor.shape)) if math.prod(tensor.shape) else 0
        for box in _needed(tensor, layouts[path], process_devices):
            floor += math.prod(box[1]) * item
            if math.prod(box[1]):
                runs.extend(ckpt.runs(tensor, box))
    merged = merge_runs(runs)
    total = sum(r.length for r in merged)
    return ForeignReadPlan(
        tuple((r.file, r.offset, r.length) for r in merged),
        total,
        floor,
        total / floor if floor else 1.0,
        ckpt.metadata_bytes,
        ckpt.format != "orbax",
    )


def load(ckpt: ForeignCheckpoint, target: Any = None, *, driver: Any = None) -> Any:
    """The checkpoint's tree, each tensor a distributed tensor of ``driver`` under its target layout.

    A tensor whose layout is unknown (safetensors, DCP) and that the target does not place is
    returned whole, as a NumPy array. Each distinct block is read once, from the byte ranges
    it needs; replicas on several devices share it.
    """
    from ... import pack

    layouts = resolve_layouts(ckpt, target, driver=driver)
    results: dict[str, Any] = dict(ckpt.values)
    with FileCache() as files:
        for path, tensor in ckpt.tensors.items():
            layout = layouts[path] if layouts[path] is not None else tensor.layout
            if layout is None:
                results[path] = ckpt.read(tensor, ((0,) * len(tensor.shape), tensor.shape), files)
                continue
            boxes = _device_boxes(tensor.shape, layout)
            blocks: dict[Box, np.ndarray[Any, Any]] = {}
            for box in boxes:
                if box not in blocks:
                    blocks[box] = ckpt.read(tensor, box, files)
            results[path] = pack([blocks[b] for b in boxes], layout, global_shape=tensor.shape, driver=driver)
    ckpt.close()
    return map_tree(ckpt.tree, results.__getitem__)
