"""The NumPy reference driver: virtual CPU devices, one real NumPy component per device.

It supports every layout of the contract (uneven and multi-axis included) and is strict:
it is the executable statement of layoutcore's semantics.

* ``distribute_tensor`` copies nothing: each component is a read-only *view* of the input
  (basic slicing), so distributing 1 GiB costs what distributing 1 KiB does. Mutating the
  input afterwards shows through, as with any zero-copy placement.
* ``relayout`` moves exactly :func:`layoutcore.relayout_plan`'s transfers, the physical
  minimum: each device keeps what it holds of its new block (a view when that is all of it) and
  receives only the rest, each element once, never through a full gather.
* ``to_numpy`` writes every byte of the result once, from one replica of each block.
"""

from __future__ import annotations

import functools
from typing import Any

import numpy as np
from numpy.lib.mixins import NDArrayOperatorsMixin

from .. import geometry
from .._capabilities import Capability
from .._config import cpu_device_count
from .._errors import LayoutError
from .._layout import Layout
from .._relayout_plan import Transfer, relayout_transfers
from ..driver._frontend import Driver
from . import _spmd

__all__ = ["NumpyDriver", "ShardedArray"]


class ShardedArray(NDArrayOperatorsMixin):
    """The NumPy driver's distributed array: one read-only component per mesh device.

    It computes as SPMD (docs/design.md#spmd, :mod:`layoutcore._spmd`): ufuncs and the arithmetic
    operators (broadcasting, scalars), ``@`` / ``np.matmul``, ``np.einsum``, ``sum`` / ``mean``
    and ``transpose`` / ``.T`` run on each device's own components, with a simulated all-reduce
    over a sharded summed axis; the result's layout is :mod:`layoutcore.propagation`'s and its
    components are new read-only arrays. Any other NumPy function, or layouts with no rule,
    raise :class:`UnsupportedLayoutError` naming the operation: never a silent gather.

    Attributes:
        shape: global shape. dtype: NumPy dtype. layout: its :class:`Layout`.
        components: per-device arrays, row-major mesh order. devices: their device names.
    """

    __slots__ = ("__weakref__", "_components", "_devices", "_dtype", "_layout", "_shape")

    def __init__(
        self,
        components: tuple[np.ndarray, ...],
        layout: Layout,
        shape: tuple[int, ...],
        dtype: np.dtype[Any],
        devices: tuple[str, ...],
    ) -> None:
        self._components = components
        self._layout = layout
        self._shape = shape
        self._dtype = dtype
        self._devices = devices

    @property
    def shape(self) -> tuple[int, ...]:
        """Global shape."""
        return self._shape

    @property
    def dtype(self) -> np.dtype[Any]:
        """NumPy dtype."""
        return self._dtype

    @property
    def layout(self) -> Layout:
        """The layout."""
        return self._layout

    @property
    def components(self) -> tuple[np.ndarray, ...]:
        """Per-device read-only components, row-major mesh order."""
        return self._components

    @property
    def devices(self) -> tuple[str, ...]:
        """Device of each component."""
        return self._devices

    @property
    def ndim(self) -> int:
        """Rank."""
        return len(self._shape)

    def __array__(self, dtype: Any = None, copy: bool | None = None) -> np.ndarray:
        if copy is False:  # NumPy 2 protocol: assembling the global value always copies
            raise ValueError("A ShardedArray cannot become one NumPy array without a copy; use copy=None or True.")
        out = _assemble(self)
        return out if dtype is None else out.astype(dtype, copy=False)

    def __repr__(self) -> str:
        return f"ShardedArray(shape={self._shape}, dtype={self._dtype}, layout={self._layout})"

    # -- SPMD operations (the machinery is in _spmd) ---------------------------------------
    __hash__ = object.__hash__  # the operator mixin's elementwise __eq__ would drop it

    def __array_ufunc__(self, ufunc: np.ufunc, method: str, *inputs: Any, **kwargs: Any) -> Any:
        return _spmd.ufunc(ufunc, method, inputs, kwargs)

    def __array_function__(self, func: Any, types: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        return _spmd.array_function(func, args, kwargs)

    def sum(self, axis: Any = None, dtype: Any = None, keepdims: bool = False) -> ShardedArray:
        """Sum over ``axis`` (``None``: all), as ``np.sum``; sharded axes are all-reduced."""
        result: ShardedArray = _spmd.reduce_sum(self, axis, dtype, keepdims)
        return result

    def mean(self, axis: Any = None, dtype: Any = None, keepdims: bool = False) -> ShardedArray:
        """Mean over ``axis``, as ``np.mean`` (float64 for integer input)."""
        result: ShardedArray = _spmd.reduce_sum(self, axis, dtype, keepdims, mean=True)
        return result

    def transpose(self, *axes: Any) -> ShardedArray:
        """Axes permuted, as ``ndarray.transpose`` (no axes: reversed)."""
        order = axes[0] if len(axes) == 1 and (axes[0] is None or not isinstance(axes[0], int)) else axes or None
        result: ShardedArray = _spmd.transpose(self, order)
        return result

    @property
    def T(self) -> ShardedArray:
        """Axes reversed."""
        return self.transpose()


# Steps of a relayout schedule, per target position (see _relayout_schedule).
_KEEP_VIEW, _TAKE_PIECE, _BUILD = 0, 1, 2
_Index = tuple[slice, ...]
_Step = tuple[Any, ...]


@functools.lru_cache(maxsize=256)
def _relayout_schedule(
    source: Layout,
    target: Layout,
    shape: tuple[int, ...],
    itemsize: int,
    source_devices: tuple[str, ...],
    target_devices: tuple[str, ...],
) -> tuple[_Step, ...]:
    """Per target position, how :meth:`NumpyDriver.native_relayout` builds its component from
    :func:`layoutcore.relayout_plan`'s transfers (cached: a training loop repeats the same relayouts).

    Each step is ``(_KEEP_VIEW, held_position, index)``, ``(_TAKE_PIECE, source_position, index)``
    or ``(_BUILD, block_shape, keep, receives)`` with ``keep = (held_position, dst_index, src_index)``
    or ``None`` and ``receives`` one ``(source_position, src_index, dst_index)`` per transfer.
    """
    transfers, _, _ = relayout_transfers(source, target, shape, itemsize, source_devices, target_devices)
    incoming: dict[int, list[Transfer]] = {}
    for transfer in transfers:
        incoming.setdefault(transfer.dst, []).append(transfer)
    source_bounds = _bounds(source, shape)
    held_at = {device: position for position, device in enumerate(source_devices)}
    steps: list[_Step] = []
    for position, block in enumerate(_bounds(target, shape)):
        held = held_at.get(target_devices[position])
        received = incoming.get(position, ())
        if held is not None and not received and all(b > a for a, b in block):
            steps.append((_KEEP_VIEW, held, _within(block, source_bounds[held])))
            continue
        if (
            len(received) == 1
            and received[0].index == _slices(block)
            and (held is None or not _overlaps(block, source_bounds[held]))
        ):
            rect = tuple((s.start, s.stop) for s in received[0].index)
            steps.append((_TAKE_PIECE, received[0].src, _within(rect, source_bounds[received[0].src])))
            continue
        keep = None
        if held is not None:
            kept = tuple((max(a, sa), min(b, sb)) for (a, b), (sa, sb) in zip(block, source_bounds[held], strict=True))
            if all(b > a for a, b in kept):
                keep = (held, _within(kept, block), _within(kept, source_bounds[held]))
        receives = []
        for transfer in received:
            rect = tuple((s.start, s.stop) for s in transfer.index)
            receives.append((transfer.src, _within(rect, source_bounds[transfer.src]), _within(rect, block)))
        steps.append((_BUILD, tuple(b - a for a, b in block), keep, tuple(receives)))
    return tuple(steps)


def _view(array: np.ndarray, index: tuple[slice, ...]) -> np.ndarray:
    """``array[index]`` as an array view (a trailing ``...`` keeps rank 0 an array, not a scalar copy)."""
    key: tuple[Any, ...] = (*index, Ellipsis)
    view: np.ndarray = array[key]
    return view


def _within(rect: tuple[tuple[int, int], ...], block: tuple[tuple[int, int], ...]) -> tuple[slice, ...]:
    """The global rectangle ``rect`` as slices local to ``block`` (which contains it)."""
    return tuple(slice(a - start, b - start) for (a, b), (start, _) in zip(rect, block, strict=True))


def _slices(bounds: tuple[tuple[int, int], ...]) -> tuple[slice, ...]:
    return tuple(slice(a, b) for a, b in bounds)


def _overlaps(a: tuple[tuple[int, int], ...], b: tuple[tuple[int, int], ...]) -> bool:
    return all(max(x0, y0) < min(x1, y1) for (x0, x1), (y0, y1) in zip(a, b, strict=True))


def _send(piece: np.ndarray) -> np.ndarray:
    """The simulated wire between two devices: every element a relayout moves passes here once."""
    return piece


def _readonly(array: np.ndarray) -> np.ndarray:
    view = array.view()
    view.flags.writeable = False
    return view


@functools.lru_cache(maxsize=4096)
def _bounds(layout: Layout, shape: tuple[int, ...]) -> tuple[tuple[tuple[int, int], ...], ...]:
    mesh = layout.mesh
    assert mesh is not None
    dim_axes = layout.dim_axes
    return tuple(geometry.shard_bounds(shape, mesh.shape, dim_axes, p) for p in range(mesh.size))


@functools.lru_cache(maxsize=4096)
def _distinct_blocks(layout: Layout) -> dict[tuple[int, ...], int]:
    """Block tuple -> first device position holding it."""
    first: dict[tuple[int, ...], int] = {}
    for position, block in enumerate(layout.offset_to_shard()):
        first.setdefault(block, position)
    return first


def _assemble(array: ShardedArray) -> np.ndarray:
    out = np.empty(array.shape, dtype=array.dtype)
    bounds = _bounds(array.layout, array.shape)
    for position in _distinct_blocks(array.layout).values():
        out[tuple(slice(a, b) for a, b in bounds[position])] = array.components[position]
    return out


class NumpyDriver(Driver):
    """The reference driver (see the module docstring)."""

    name = "numpy"
    capabilities = frozenset(Capability)  # traced included, vacuously: NumPy has no compiler, so no tracer
    # Components are read-only views of the caller's array (no copy): its later writes show through.
    input_aliasing = "shares"
    native_types = ("layoutcore.numpy._driver.ShardedArray",)
    install_hint = "pip install layoutcore"

    def __init__(self, num_devices: int | None = None) -> None:
        super().__init__()
        self._devices = [f"CPU:{i}" for i in range(num_devices or cpu_device_count())]

    def list_devices(self, device_type: str | None = None) -> list[str]:
        if device_type is not None and device_type.upper() != "CPU":
            return []
        return list(self._devices)

    def is_distributed(self, value: Any) -> bool:
        return isinstance(value, ShardedArray)

    def prepare_input(self, value: Any) -> Any:
        return np.asarray(value)

    def native_distribute(self, value: Any, layout: Layout, devices: tuple[str, ...]) -> ShardedArray:
        array = np.asarray(value)
        shape = tuple(array.shape)
        components = tuple(_readonly(_view(array, tuple(slice(a, b) for a, b in b_))) for b_ in _bounds(layout, shape))
        return ShardedArray(components, layout, shape, array.dtype, devices)

    def native_unpack(self, tensor: ShardedArray) -> list[Any]:
        return list(tensor.components)

    def native_pack(
        self, components: list[Any], layout: Layout, devices: tuple[str, ...], global_shape: tuple[int, ...]
    ) -> ShardedArray:
        arrays = tuple(_readonly(np.asarray(c)) for c in components)
        return ShardedArray(arrays, layout, global_shape, arrays[0].dtype, devices)

    def native_pack_owned(
        self, blocks: list[np.ndarray], layout: Layout, devices: tuple[str, ...], global_shape: tuple[int, ...]
    ) -> ShardedArray:
        """The handed-over blocks themselves, read-only (replicas share their one block)."""
        views: dict[int, np.ndarray] = {}
        arrays = tuple(views.setdefault(id(b), _readonly(b)) for b in blocks)
        return ShardedArray(arrays, layout, global_shape, blocks[0].dtype, devices)

    def native_fill(
        self, tensor: ShardedArray, blocks: list[np.ndarray], layout: Layout, devices: tuple[str, ...]
    ) -> ShardedArray:
        """Each component's memory written (docs/design.md: ``into`` is the one exception to "Whose
        memory"); a component whose memory is not writable (a view of read-only memory) is refused."""
        for index, (component, block) in enumerate(zip(tensor.components, blocks, strict=True)):
            writable = component.view()
            try:
                writable.flags.writeable = True
            except ValueError:
                raise LayoutError(
                    f"into: component {index} (device {devices[index]}) of the NumPy tensor views read-only memory "
                    "that cannot be written in place; load it with target= instead.",
                    value=index,
                ) from None
            np.copyto(writable, block, casting="no")
        return tensor

    def native_host_views(self, tensor: ShardedArray, layout: Layout, devices: tuple[str, ...]) -> list[Any] | None:
        """Writable views of the components' memory (``None`` for a strided or read-only one)."""
        out: list[Any] = []
        for component in tensor.components:
            view = component.view()
            try:
                view.flags.writeable = True
            except ValueError:
                return None
            out.append(view if view.flags.c_contiguous else None)
        return out

    def native_write_rows(self, tensor: ShardedArray, index: int, rows: tuple[int, int], staged: np.ndarray) -> None:
        """``np.copyto`` of the staged rows into component ``index``'s memory (as :meth:`native_fill`)."""
        component = tensor.components[index].view()
        try:
            component.flags.writeable = True
        except ValueError:
            raise LayoutError(
                f"into: component {index} of the NumPy tensor views read-only memory that cannot be written in "
                "place; load it with target= instead.",
                value=index,
            ) from None
        np.copyto(component[rows[0] : rows[1]] if component.ndim else component, staged, casting="no")

    def native_relayout(self, tensor: ShardedArray, layout: Layout, devices: tuple[str, ...]) -> ShardedArray:
        """Execute exactly :func:`layoutcore.relayout_plan`'s transfers.

        Each device keeps what it already holds of its new block (a view when that is all of it)
        and receives the rest as the plan's rectangles, each through :func:`_send`; devices are
        matched by name across meshes.
        """
        if tensor.layout == layout and tensor.devices == devices:
            # Already there (the target differs only in the front-end's record: a mesh name, or abstract
            # vs concrete): a new object over the same read-only components, so that each keeps its record.
            return ShardedArray(tensor.components, layout, tensor.shape, tensor.dtype, devices)
        shape = tensor.shape
        schedule = _relayout_schedule(tensor.layout, layout, shape, tensor.dtype.itemsize, tensor.devices, devices)
        held = tensor.components
        components = []
        for step in schedule:
            if step[0] == _KEEP_VIEW:  # all of the new block is held already: a view
                components.append(_readonly(_view(held[step[1]], step[2])))
            elif step[0] == _TAKE_PIECE:  # one received rectangle is the whole block (read-only, so shareable)
                components.append(_readonly(_send(_view(held[step[1]], step[2]))))
            else:
                _, block_shape, keep, receives = step
                out = np.empty(block_shape, dtype=tensor.dtype)
                if keep is not None:  # what the device keeps: a local copy, not a transfer
                    out[keep[1]] = _view(held[keep[0]], keep[2])
                for src, src_index, dst_index in receives:
                    out[dst_index] = _send(_view(held[src], src_index))
                components.append(_readonly(out))  # an empty block (chunk rule) lands here too, with its exact shape
        return ShardedArray(tuple(components), layout, shape, tensor.dtype, devices)

    def native_fetch_layout(self, tensor: ShardedArray) -> Layout:
        return tensor.layout

    def native_to_numpy(self, tensor: ShardedArray) -> np.ndarray:
        return _assemble(tensor)
