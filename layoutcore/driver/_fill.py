"""Host blocks handed over to a driver: new tensors from them, or existing tensors filled with them.

The one step between "the bytes are in host blocks" and "the user holds tensors", shared by every
producer of blocks: the checkpoint loader (:mod:`layoutcore.checkpoint`, for each format) and
weight transfer (``layoutcore.transfer``'s ``receive(into=...)``).

A *block* is a C-contiguous, writable NumPy array that the caller made and hands over: it keeps no
reference it writes through afterwards. There is one block per local device position of the
layout (row-major, :meth:`~layoutcore.Driver.local_positions`); replicas are the **same** array
object, listed once per device that holds it, so they are equal by construction.

* :func:`pack_owned` -- a new distributed tensor over the blocks (the driver's
  :meth:`~layoutcore.driver.DriverHooks.native_pack_owned`: no snapshot copy, no replica
  comparison). Checks count, shapes and dtype (cheap), never the data.
* :func:`fill_target` -- what an existing tensor (or ``layoutcore.Variable``) is: driver,
  layout, shape, dtype, local positions; a shape or dtype other than expected raises
  :class:`~layoutcore.LayoutMismatchError` naming the path. It reads no data: call it for every
  tensor before any byte is read or written.
* :func:`fill` -- write the blocks into that tensor: in place where the framework's tensors are
  mutable (NumPy components, torch local tensors, TF variables, ``Variable``s of any driver),
  else a replacement with the same layout (JAX arrays, TF tensors). Returns what the caller hands
  back to the user.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from .._dtypes import dtype_name, numpy_dtype
from .._errors import LayoutError, LayoutMismatchError
from .._layout import BoundLayout, Layout
from ._frontend import Driver, HoldsValue

__all__ = ["FillTarget", "fill", "fill_target", "pack_owned"]


def _check_blocks(blocks: Sequence[Any], layout: Layout, positions: Sequence[int], shape: tuple[int, ...]) -> None:
    """Count and shapes of ``blocks`` against the layout's local blocks (no data is read).

    Raises:
        LayoutError: a wrong count or a block of another shape (naming the position).
    """
    if len(blocks) != len(positions):
        raise LayoutError(
            f"{len(blocks)} blocks for {len(positions)} local devices of {layout}; one per device is needed.",
            value=len(blocks),
        )
    expected = layout.local_shapes(shape)
    for index, (p, block) in enumerate(zip(positions, blocks, strict=True)):
        if tuple(block.shape) != tuple(expected[p]):
            raise LayoutError(
                f"block {index} (mesh position {p}) has shape {tuple(block.shape)}; {layout} with global shape "
                f"{shape} gives it {expected[p]}.",
                value=tuple(block.shape),
            )


def pack_owned(driver: Driver, blocks: Sequence[np.ndarray], layout: Layout, global_shape: Sequence[int]) -> Any:
    """A new distributed tensor of ``driver`` over host ``blocks`` whose ownership passes to it.

    Args:
        driver: the driver (front-end object).
        blocks: one per local position of ``layout``'s mesh on ``driver``, row-major; replicas
            are one object (see the module docstring).
        layout: their layout; global_shape: the tensor's shape.

    Returns:
        The tensor, recorded with ``layout`` (``fetch_layout`` gives it back).

    Raises:
        LayoutError: a wrong block count or shape. UnsupportedLayoutError: a layout or dtype the
            driver cannot hold.
    """
    shape = tuple(int(s) for s in global_shape)
    bound = driver.check_layout(layout, shape)
    devices = driver.bind_mesh(bound.mesh)
    positions = list(driver.local_positions(bound.mesh, devices))
    _check_blocks(blocks, bound, positions, shape)
    return driver._record(driver.native_pack_owned(_held(driver, blocks), bound, devices, shape), layout)


def _held(driver: Driver, blocks: Sequence[np.ndarray]) -> list[Any]:
    """``blocks`` in dtypes ``driver`` holds (``Driver.narrow_input``: JAX without x64 stores exact 64-bit
    values in 32 bits, and refuses the others); replicas stay one object.

    Raises:
        UnsupportedLayoutError: a dtype the driver does not hold, or a value it would change.
    """
    done: dict[int, Any] = {}
    out = []
    for i, block in enumerate(blocks):
        if id(block) not in done:
            done[id(block)] = driver._held_dtype(block, f"block {i}")
        out.append(done[id(block)])
    return out


@dataclass(frozen=True, slots=True)
class FillTarget:
    """An existing distributed tensor to fill, inspected once (no data read).

    Attributes:
        path: its tree path (named in errors).
        value: what the caller gave: a distributed tensor or a ``layoutcore.Variable``.
        tensor: the distributed tensor (``value`` itself, or the Variable's value).
        driver: its driver.
        layout: its layout (as ``fetch_layout`` gives it).
        devices: the devices its mesh is bound to, row-major.
        positions: this process's positions on that mesh (one block each), row-major.
        shape: its global shape.
        dtype: its canonical dtype name.
    """

    path: str
    value: Any
    tensor: Any
    driver: Driver
    layout: BoundLayout
    devices: tuple[str, ...]
    positions: tuple[int, ...]
    shape: tuple[int, ...]
    dtype: str

    @property
    def boxes(self) -> list[tuple[tuple[int, ...], tuple[int, ...]]]:
        """Per local position, the ``(offsets, sizes)`` of its block in the global value."""
        out = []
        for p in self.positions:
            bounds = [
                s.indices(d)[:2] for s, d in zip(self.layout.device_slices(self.shape)[p], self.shape, strict=True)
            ]
            out.append((tuple(lo for lo, _ in bounds), tuple(hi - lo for lo, hi in bounds)))
        return out

    def empty_blocks(self) -> list[np.ndarray]:
        """Fresh host blocks for :func:`fill`: one per distinct block, replicas the same object."""
        made: dict[tuple[tuple[int, ...], tuple[int, ...]], np.ndarray] = {}
        dtype = numpy_dtype(self.dtype)
        return [made.setdefault(box, np.empty(box[1], dtype=dtype)) for box in self.boxes]


def fill_target(
    path: str, value: Any, *, shape: Sequence[int] | None = None, dtype: Any = None, driver: Any = None
) -> FillTarget:
    """Inspect an existing tensor to fill, and check it against the ``shape`` / ``dtype`` it will get.

    Args:
        path: its tree path, named in errors.
        value: a distributed tensor of any driver, or a ``layoutcore.Variable``.
        shape, dtype: what the blocks will hold (``None``: not checked).
        driver: the driver (name or object); default: the value's own.

    Raises:
        LayoutMismatchError: another shape or dtype (naming ``path``; nothing was read or written).
        LayoutError: ``value`` is no distributed tensor (naming ``path``).
        UnsupportedLayoutError: a traced value (inside a framework's compiler).
    """
    from ._registry import driver_for

    tensor = value.value if isinstance(value, HoldsValue) else value
    drv = driver_for(tensor, driver)
    if not drv.is_distributed(tensor) and not drv.is_traced(tensor):
        raise LayoutError(
            f"into: {path!r} is not a distributed tensor of the {drv.name} driver "
            f"({type(tensor).__module__}.{type(tensor).__qualname__}); load(target=...) makes new tensors.",
            value=path,
        )
    tensor = drv._host_tensor(tensor, "load(into=...)")
    layout = drv.fetch_layout(tensor)
    got_shape = tuple(int(s) for s in drv.shape_of(tensor))
    got_dtype = dtype_name(tensor.dtype)
    want_dtype = None if dtype is None else dtype_name(dtype)
    if (shape is not None and tuple(shape) != got_shape) or (want_dtype is not None and want_dtype != got_dtype):
        raise LayoutMismatchError(
            f"into: tensor {path!r} has shape {got_shape} and dtype {got_dtype}; the data has shape "
            f"{None if shape is None else tuple(shape)} and dtype {want_dtype} (no casting, no reshaping).",
            expected=(got_shape, got_dtype),
            actual=(None if shape is None else tuple(shape), want_dtype),
        )
    bound = drv.check_layout(layout, got_shape)
    devices = drv.bind_mesh(bound.mesh)
    positions = tuple(drv.local_positions(bound.mesh, devices))
    return FillTarget(path, value, tensor, drv, bound, devices, positions, got_shape, got_dtype)


def fill(target: FillTarget, blocks: Sequence[np.ndarray]) -> Any:
    """Write ``blocks`` (handed over, one per ``target.positions``) into ``target``; return the result.

    Returns:
        ``target.value`` itself where it is mutable (a Variable is assigned; NumPy components,
        torch local tensors and TF variables are written in place), else the tensor that replaces
        it, with the same layout (JAX arrays, TF tensors).

    Raises:
        LayoutError: a wrong block count or shape. Whatever the framework raises while writing
            propagates (the tensor may then be partly written: the caller says so).
    """
    drv = target.driver
    _check_blocks(blocks, target.layout, target.positions, target.shape)
    if blocks and math.prod(target.shape) and dtype_name(blocks[0].dtype) != target.dtype:
        raise LayoutMismatchError(
            f"into: tensor {target.path!r} has dtype {target.dtype}; the blocks hold {dtype_name(blocks[0].dtype)}.",
            expected=target.dtype,
            actual=dtype_name(blocks[0].dtype),
        )
    if isinstance(target.value, HoldsValue):  # a Variable: assigned, which keeps it (and its storage)
        variable: Any = target.value  # layoutcore.Variable (the front-end does not import its class)
        variable.assign(pack_owned(drv, blocks, target.layout, target.shape))
        return target.value
    out = drv.native_fill(target.tensor, list(blocks), target.layout, target.devices)
    if out is not target.tensor:
        drv._record(out, target.layout)
    return out
