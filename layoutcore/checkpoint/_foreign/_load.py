"""inspect / read_plan / load over any foreign checkpoint, with the layoutcore format's target forms.

The target forms and their checks are the layoutcore format's own (``_flat_target`` /
``_target_layout`` of :mod:`layoutcore.checkpoint._api`); what differs is the saved layout:
Orbax records one, torch DCP records only boxes (the smallest layout with those blocks is
inferred, :func:`~._boxes.layout_from_boxes`), safetensors records one whole block per tensor
(replicated on a one-device mesh).
"""

from __future__ import annotations

import contextlib
import math
import os
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..._capabilities import Limitation
from ..._errors import UnsupportedLayoutError
from ..._layout import Layout
from ..._mesh import Mesh
from ..._tensor_spec import TensorSpec, device_bounds
from .._api import CheckpointInfo, ReadPlan, _flat_target, _positions, _target_layout, check_spec_dtype, pack_loaded
from .._read_plan import merge_ranges
from ._boxes import layout_from_boxes
from ._errors import checkpoint_error
from ._model import Box, ForeignCheckpoint, ForeignTensor, RefusedValue, map_tree

__all__ = ["ForeignInfo", "ForeignReadPlan", "inspect", "load", "read_plan", "saved_spec"]

#: The mesh of a tensor stored as one block with no recorded layout.
ONE_DEVICE = Mesh((1,), ("d",))


@dataclass(frozen=True, slots=True)
class ForeignInfo(CheckpointInfo):
    """A foreign checkpoint's :class:`CheckpointInfo` (``format_version`` is 0; see ``format``).

    Attributes:
        format: ``"torch-dcp"``, ``"orbax"`` or ``"safetensors"``, with the format's own
            version where it records one (``"torch-dcp 1.0.0"``, ``"orbax zarr+ocdbt"``).
        layout_known: tensor path -> whether the format recorded the layout (``False``: the
            ``TensorSpec``'s layout is inferred from the saved boxes, on an abstract mesh).
        boxes: tensor path -> the saved blocks, ``(offsets, sizes)``, in storage order.
        values: tree path -> non-tensor leaves (DCP's Python values, Orbax scalars).
    """

    format: str = ""
    layout_known: dict[str, bool] = field(default_factory=dict)
    boxes: dict[str, tuple[Box, ...]] = field(default_factory=dict)
    values: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class ForeignReadPlan(ReadPlan):
    """A foreign checkpoint's :class:`ReadPlan`.

    Attributes:
        exact: whether ``read_bytes`` are the bytes read. ``False`` for Orbax: its reads are
            whole stored chunks, named ``<dir>/<array>/<chunk index>`` with offset 0 and their
            uncompressed size (the chunks are zstd-compressed, so fewer bytes reach the disk).
    """

    exact: bool = True


def saved_spec(tensor: ForeignTensor) -> tuple[TensorSpec, bool]:
    """The tensor's saved :class:`TensorSpec` and whether its layout was recorded (not inferred)."""
    if tensor.layout is not None:
        return TensorSpec(tensor.shape, tensor.dtype, tensor.layout), True
    inferred = layout_from_boxes(tensor.shape, tensor.boxes)
    if inferred is None:  # irregular boxes: no layout has them; describe the tensor as one block
        inferred = Layout((None,) * len(tensor.shape), ONE_DEVICE)
    return TensorSpec(tensor.shape, tensor.dtype, inferred), False


def inspect(ckpt: ForeignCheckpoint) -> ForeignInfo:
    """The :class:`ForeignInfo` of an opened foreign checkpoint (metadata only)."""
    specs: dict[str, TensorSpec] = {}
    known: dict[str, bool] = {}
    for path, t in ckpt.tensors.items():
        specs[path], known[path] = saved_spec(t)
    root = ckpt.path if os.path.isdir(ckpt.path) else os.path.dirname(ckpt.path)
    files = tuple(os.path.relpath(f, os.path.realpath(root)) for f in ckpt.files)
    return ForeignInfo(
        ckpt.path,
        specs,
        sum(t.nbytes for t in ckpt.tensors.values()),
        files,
        0,
        format=f"{ckpt.format} {ckpt.version}".strip(),
        layout_known=known,
        boxes={p: t.boxes for p, t in ckpt.tensors.items()},
        values=dict(ckpt.values),
    )


def _layouts(ckpt: ForeignCheckpoint, target: Any, driver: Any = None) -> dict[str, tuple[TensorSpec, Layout]]:
    saved = {p: saved_spec(t)[0] for p, t in ckpt.tensors.items()}
    wanted = _flat_target(target, saved)
    for p in saved:
        check_spec_dtype(p, wanted.get(p), driver)
    return {p: (s, _target_layout(p, s, wanted.get(p))) for p, s in saved.items()}


def _boxes(spec: TensorSpec, layout: Layout, positions: list[int]) -> list[Box]:
    starts, stops = device_bounds(spec.shape, layout._require_mesh("load").shape, layout.dim_axes)
    return [(tuple(starts[q].tolist()), tuple((stops[q] - starts[q]).tolist())) for q in positions]


def read_plan(
    ckpt: ForeignCheckpoint, target: Any = None, *, process_devices: Iterable[int | str] | None = None
) -> ForeignReadPlan:
    """The byte runs one process reads to load ``ckpt`` under ``target`` (nothing is read).

    ``process_devices``: mesh positions (ints) or device names of this process's devices on
    each target mesh (default: every device, a one-process load).
    """
    devices = None if process_devices is None else list(process_devices)
    per_file: dict[str, list[np.ndarray[Any, Any]]] = {}
    tensors: dict[str, tuple[int, int]] = {}
    floor = 0
    for path, (saved, layout) in _layouts(ckpt, target).items():
        tensor = ckpt.tensors[path]
        needed = list(dict.fromkeys(_boxes(saved, layout, _positions(layout, devices, None))))
        tfloor = sum(math.prod(s) for _, s in needed) * (tensor.nbytes // max(1, math.prod(tensor.shape)))
        tread = 0
        for file, runs in ckpt.plan(tensor, needed):
            per_file.setdefault(file, []).append(runs)
            tread += int(runs[:, 1].sum()) if len(runs) else 0
        tensors[path] = (tread, tfloor)
        floor += tfloor
    reads: list[tuple[str, int, int]] = []
    total = 0
    for f in sorted(per_file):
        merged = merge_ranges(np.concatenate(per_file[f]))
        total += int(merged[:, 1].sum())
        reads.extend((f, int(o), int(n)) for o, n in merged.tolist())
    return ForeignReadPlan(
        tuple(reads),
        total,
        floor,
        total / floor if floor else 1.0,
        ckpt.metadata_bytes,
        tensors,
        exact=ckpt.format != "orbax",
    )


def load(ckpt: ForeignCheckpoint, target: Any = None, *, driver: Any = None) -> Any:
    """The checkpoint's tree, each tensor a distributed tensor of ``driver`` under its target layout.

    ``target=None`` loads each tensor on its saved layout (Orbax), on the inferred layout of its
    saved boxes (DCP), or replicated on one device (safetensors). Non-tensor leaves come back as
    saved. This process reads only the blocks its devices hold, each distinct block once
    (replicas get their own copy).
    """
    from ...driver._registry import get_driver

    drv = get_driver(driver)
    for value in ckpt.values.values():
        if isinstance(value, RefusedValue) and value.dtype:
            raise UnsupportedLayoutError(
                f"checkpoint.load: {ckpt.path}: tensor {value.path!r} has dtype {value.dtype}: {value.message}",
                driver=drv.name,
                feature=Limitation.DTYPE,
                value=value.dtype,
            )
        if isinstance(value, RefusedValue):
            raise checkpoint_error(
                f"{ckpt.path}: value {value.path!r} was not loaded: {value.message}", file=value.file
            )
    results: dict[str, Any] = dict(ckpt.values)
    fds: dict[str, int] = {}
    try:
        for path, (saved, layout) in _layouts(ckpt, target, drv).items():
            tensor = ckpt.tensors[path]
            boxes = _boxes(saved, layout, _positions(layout, None, drv))
            distinct = list(dict.fromkeys(boxes))
            blocks = dict(zip(distinct, ckpt.read(tensor, distinct, fds), strict=True))
            used: set[Box] = set()
            components = []
            for b in boxes:
                components.append(blocks[b] if b not in used else blocks[b].copy())
                used.add(b)
            results[path] = pack_loaded(drv, path, components, layout, tensor.shape)
    finally:
        for fd in fds.values():
            with contextlib.suppress(OSError):
                os.close(fd)
        ckpt.close()
    return map_tree(ckpt.tree, results.__getitem__)
