"""This process's side of a transfer: its sender components and its receiver buffers, by path.

Sender leaves are read through the drivers' public hooks (``driver_for``, ``fetch_layout``,
``bind_mesh``, ``local_positions``, ``unpack``, ``component_to_numpy``): a NumPy view of each local
component where the framework allows (torch CPU tensors, NumPy, JAX on CPU), so nothing is
gathered or copied before packing. Receiver leaves are made in :mod:`._into`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from .._dtypes import dtype_name, numpy_dtype
from .._errors import TransferError
from .._layout import Layout
from .._layout_map import LayoutMap
from .._paths import map_leaves
from .._tensor_spec import Box, TensorSpec

__all__ = ["Local", "distributed", "leaves", "sender_local", "target_forms"]


@dataclass(slots=True)
class Local:
    """One tensor on this process: its spec (mesh bound to device names), its local devices' boxes and arrays.

    ``arrays[i]`` is the component of mesh position ``positions[i]``, whose box in the global tensor is
    ``boxes[i]``; replicas on one process are separate entries. ``finish`` (receivers) turns the filled
    arrays into the returned tensor.
    """

    spec: TensorSpec
    positions: list[int]
    boxes: list[Box]
    arrays: list[np.ndarray]
    driver: Any = None
    finish: Any = None

    def holding(self, box: Box) -> list[int]:
        """Indices of the local devices whose block contains ``box``."""
        (offsets, sizes) = box
        return [
            i
            for i, (o, s) in enumerate(self.boxes)
            if all(a >= b and a + n <= b + m for a, n, b, m in zip(offsets, sizes, o, s, strict=True))
        ]


def leaves(tree: Any, *, keep: tuple[type, ...] = ()) -> list[tuple[str, Any]]:
    """``(path, leaf)`` for every leaf with a ``.shape`` or of a type in ``keep`` (paths as §6: keys joined by ``/``)."""
    out: list[tuple[str, Any]] = []

    def visit(path: str, leaf: Any) -> Any:
        if isinstance(leaf, keep) or hasattr(leaf, "shape"):
            out.append((path, leaf))
        return leaf

    map_leaves(tree, visit, "/")
    return out


def _bound(drv: Any, layout: Layout) -> tuple[Layout, list[int]]:
    """``layout`` on its mesh bound to ``drv``'s device names, and this process's positions in it."""
    mesh = layout.require_mesh()
    devices = drv.bind_mesh(mesh)
    concrete = mesh if mesh.devices is not None else mesh.with_devices(devices)
    return Layout(layout.axes, concrete), list(drv.local_positions(mesh, devices))


def distributed(path: str, value: Any, what: str) -> tuple[Any, Any]:
    """``value`` (a Variable's value unwrapped) and its driver ("the value chooses the driver").

    Raises:
        TransferError: ``value`` is not a distributed tensor of an installed driver (naming ``path``).
    """
    from ..driver._frontend import HoldsValue
    from ..driver._registry import driver_for

    if isinstance(value, HoldsValue):
        value = value.value
    drv = driver_for(value)
    if not drv.is_distributed(value):
        raise TransferError(
            f"transfer: {what} leaf {path!r} is a {type(value).__name__}, not a distributed tensor of any "
            "installed driver (distribute it first: lc.distribute_tensor(value, layout))",
            paths=(path,),
        )
    return value, drv


def sender_local(path: str, value: Any) -> Local:
    """This process's components of the distributed tensor ``value``, as NumPy arrays (views where possible).

    Raises:
        TransferError: ``value`` is not a distributed tensor of an installed driver.
    """
    value, drv = distributed(path, value, "sender")
    layout, positions = _bound(drv, drv.fetch_layout(value))
    spec = TensorSpec(drv.shape_of(value), dtype_name(value.dtype), layout)
    arrays = [np.asarray(drv.component_to_numpy(c)) for c in drv.unpack(value)]
    want = numpy_dtype(spec.dtype)
    arrays = [a if a.dtype == want else a.view(want) if a.dtype.itemsize == want.itemsize else a for a in arrays]
    boxes = spec.boxes()
    return Local(spec, positions, [boxes[p] for p in positions], arrays, drv)


def target_forms(target: Any) -> dict[str, Any]:
    """receiver path -> ``TensorSpec`` or ``Layout`` from a mapping or a tree of them (not a LayoutMap)."""
    if isinstance(target, Mapping) and not isinstance(target, LayoutMap):
        flat = {str(k): v for k, v in target.items()}
        if all(isinstance(v, (Layout, TensorSpec)) for v in flat.values()):
            return flat
    return dict(leaves(target, keep=(Layout, TensorSpec)))
