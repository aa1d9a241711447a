"""Receiver tensors: new ones (``receive(target=...)``) and existing ones filled (``receive(into=...)``).

Both go through the core's fill step (:mod:`layoutcore.driver._fill`, shared with
``checkpoint.load``): ``fill_target`` inspects an existing tensor (driver, layout, shape, dtype,
local positions; no data), ``fill`` writes handed-over host blocks into it (in place where the
framework's tensors are mutable (TF variables are assigned), else a replacement with the same
layout: JAX arrays, TF DTensors), and ``pack_owned`` makes a new tensor over handed-over blocks
without a snapshot copy. Receive blocks are 64-byte aligned so that TensorFlow adopts them as
they are (it copies a less aligned buffer); a layout or dtype the receiving driver cannot hold is
refused when the blocks are made, before any byte moves.

One shortcut on top, because a transfer writes each received byte once: where an existing
tensor's local components expose their own memory as writable NumPy arrays (torch CPU tensors,
the NumPy driver's components), the wire writes straight into them, and ``fill`` (a second copy,
staging block -> tensor) is skipped. Elsewhere (GPU tensors, JAX, TF) the wire writes into
staging blocks and ``fill`` finishes.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .._dtypes import numpy_dtype
from .._errors import LayoutcoreError, TransferError
from .._tensor_spec import TensorSpec
from ..driver._fill import FillTarget, fill, fill_target, pack_owned
from ..driver._host_memory import aligned_empty
from ._local import Local, _bound, distributed

__all__ = ["fresh_local", "into_local"]


def _blocks(spec: TensorSpec, positions: list[int]) -> tuple[list[Any], list[np.ndarray]]:
    """Boxes and fresh aligned blocks for ``positions``: one array per distinct block, replicas the same object."""
    all_boxes = spec.boxes()
    boxes = [all_boxes[p] for p in positions]
    made: dict[Any, np.ndarray] = {}
    dtype = numpy_dtype(spec.dtype)
    for box in boxes:
        if box not in made:
            made[box] = aligned_empty(box[1], dtype)
    return boxes, [made[box] for box in boxes]


def fresh_local(path: str, spec: TensorSpec, drv: Any) -> Local:
    """Blocks for a new tensor of ``spec`` under ``drv``; ``finish`` hands them to ``pack_owned`` (no copy).

    Raises:
        TransferError: ``drv`` cannot hold ``spec``'s layout or dtype (naming ``path``), before any byte moves.
    """
    user = spec.layout  # the result carries the layout as the caller wrote it (maybe on an abstract mesh)
    try:
        drv.check_layout(user, spec.shape)
        drv._held_dtype(np.empty((0,), numpy_dtype(spec.dtype)), f"receiver path {path!r}")
    except LayoutcoreError as exc:
        raise TransferError(f"transfer: receiver path {path!r}: {exc}", paths=(path,)) from exc
    layout, positions = _bound(drv, user)
    spec = TensorSpec(spec.shape, spec.dtype, layout)
    boxes, blocks = _blocks(spec, positions)
    return Local(spec, positions, boxes, blocks, drv, lambda: pack_owned(drv, blocks, user, spec.shape))


def into_local(path: str, value: Any) -> Local:
    """Writable NumPy arrays over ``value``'s local blocks, and ``finish`` giving the filled tensor.

    ``value`` goes to ``fill_target`` as given: a ``layoutcore.Variable`` is assigned by ``fill`` (the
    same object, holding the new value), never replaced by a bare tensor while it keeps the old one.

    Raises:
        TransferError: ``value`` is not a distributed tensor of an installed driver.
    """
    distributed(path, value, "into")
    try:
        target = fill_target(path, value)
    except LayoutcoreError as exc:
        raise TransferError(f"transfer: into leaf {path!r}: {exc}", paths=(path,)) from exc
    drv = target.driver
    layout, positions = _bound(drv, drv.fetch_layout(target.tensor))
    spec = TensorSpec(target.shape, target.dtype, layout)
    direct = _views(target, numpy_dtype(spec.dtype))
    if direct is not None:
        arrays, finish = direct
        return Local(spec, positions, spec_boxes(spec, positions), arrays, drv, finish)
    boxes, blocks = _blocks(spec, positions)
    return Local(spec, positions, boxes, blocks, drv, lambda: fill(target, blocks))


def spec_boxes(spec: TensorSpec, positions: list[int]) -> list[Any]:
    all_boxes = spec.boxes()
    return [all_boxes[p] for p in positions]


def _views(target: FillTarget, dtype: np.dtype[Any]) -> tuple[list[np.ndarray], Any] | None:
    """Writable arrays over the local components' own memory, and ``finish``; ``None`` where there are none."""
    drv, value = target.driver, target.tensor
    if drv.name not in ("torch", "numpy") or target.value is not value:  # a Variable: fill assigns it
        return None
    components = drv.unpack(value)
    arrays = []
    for c in components:
        if drv.name == "torch":
            if c.device.type != "cpu" or not c.is_contiguous():
                return None
            view = np.asarray(drv.component_to_numpy(c))
            view = view.view(dtype) if view.dtype != dtype and view.dtype.itemsize == dtype.itemsize else view
            if view.ctypes.data != c.data_ptr() or not view.flags.writeable:
                return None
        else:
            view = c
            try:
                view.flags.writeable = True  # the NumPy driver's one exception to read-only components (§12)
            except ValueError:  # a view of memory it does not own
                return None
        arrays.append(view)

    def finish() -> Any:
        if drv.name == "numpy":
            for a in arrays:
                a.flags.writeable = False
        return value

    return arrays, finish
