"""The NumPy reference driver: virtual CPU devices, one real NumPy component per device.

It supports every layout of the contract (uneven and multi-axis included) and is strict:
it is the executable statement of layoutcore's semantics.

* ``distribute_tensor`` copies nothing: each component is a read-only *view* of the input
  (basic slicing), so distributing 1 GiB costs what distributing 1 KiB does. Mutating the
  input afterwards shows through, as with any zero-copy placement.
* ``relayout`` builds each distinct destination block once from the overlapping source
  blocks (a view where one source block covers it), never through a full gather; replicas
  share that block.
* ``to_numpy`` writes every byte of the result once, from one replica of each block.
"""

from __future__ import annotations

import functools
import itertools
from typing import Any

import numpy as np
from numpy.lib.mixins import NDArrayOperatorsMixin

from . import _spmd, geometry
from ._capabilities import Capability
from ._config import cpu_device_count
from ._frontend import Driver
from ._layout import Layout

__all__ = ["NumpyDriver", "ShardedArray"]


class ShardedArray(NDArrayOperatorsMixin):
    """The NumPy driver's distributed array: one read-only component per mesh device.

    It computes as SPMD (DESIGN §7, :mod:`layoutcore._spmd`): ufuncs and the arithmetic
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

    # -- SPMD operations (H8; the machinery is in _spmd) ---------------------------------------
    __hash__ = object.__hash__  # the operator mixin's elementwise __eq__ would drop it

    def __array_ufunc__(self, ufunc: np.ufunc, method: str, *inputs: Any, **kwargs: Any) -> Any:
        return _spmd.ufunc(ufunc, method, inputs, kwargs)

    def __array_function__(self, func: Any, types: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        return _spmd.array_function(func, args, kwargs)

    def sum(self, axis: Any = None, dtype: Any = None, keepdims: bool = False) -> ShardedArray:
        """Sum over ``axis`` (``None``: all), as ``np.sum``; sharded axes are all-reduced."""
        return _spmd.reduce_sum(self, axis, dtype, keepdims)  # type: ignore[no-any-return]

    def mean(self, axis: Any = None, dtype: Any = None, keepdims: bool = False) -> ShardedArray:
        """Mean over ``axis``, as ``np.mean`` (float64 for integer input)."""
        return _spmd.reduce_sum(self, axis, dtype, keepdims, mean=True)  # type: ignore[no-any-return]

    def transpose(self, *axes: Any) -> ShardedArray:
        """Axes permuted, as ``ndarray.transpose`` (no axes: reversed)."""
        order = axes[0] if len(axes) == 1 and (axes[0] is None or not isinstance(axes[0], int)) else axes or None
        return _spmd.transpose(self, order)  # type: ignore[no-any-return]

    @property
    def T(self) -> ShardedArray:
        """Axes reversed."""
        return self.transpose()


def _view(array: np.ndarray, index: tuple[slice, ...]) -> np.ndarray:
    """``array[index]`` as an array view (a trailing ``...`` keeps rank 0 an array, not a scalar copy)."""
    key: tuple[Any, ...] = (*index, Ellipsis)
    view: np.ndarray = array[key]
    return view


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
    native_types = ("layoutcore._numpy_driver.ShardedArray",)
    install_hint = "pip install layoutcore"
    conformance_adapter = "layoutcore_conformance.adapters:NumpyAdapter"

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

    def native_relayout(self, tensor: ShardedArray, layout: Layout, devices: tuple[str, ...]) -> ShardedArray:
        if tensor.layout == layout:
            return tensor
        shape = tensor.shape
        source_bounds = _bounds(tensor.layout, shape)
        source_first = _distinct_blocks(tensor.layout)
        source_counts = [tensor.layout.num_shards(d) for d in range(len(shape))]
        built: dict[tuple[int, ...], np.ndarray] = {}
        components = []
        for position, block in enumerate(layout.offset_to_shard()):
            if block not in built:
                target = _bounds(layout, shape)[position]
                built[block] = self._build_block(tensor, target, source_bounds, source_first, source_counts)
            components.append(built[block])
        return ShardedArray(tuple(components), layout, shape, tensor.dtype, devices)

    @staticmethod
    def _build_block(
        tensor: ShardedArray,
        target: tuple[tuple[int, int], ...],
        source_bounds: tuple[tuple[tuple[int, int], ...], ...],
        source_first: dict[tuple[int, ...], int],
        source_counts: list[int],
    ) -> np.ndarray:
        """One destination block from the source blocks overlapping ``target``."""
        shape = tensor.shape
        # Per axis, the source block indices whose chunk overlaps the target interval.
        candidates = []
        for (start, stop), size, count in zip(target, shape, source_counts, strict=True):
            chunk = -(-size // count) if count else 0
            if stop <= start or chunk == 0:
                candidates.append([0])
            else:
                candidates.append(list(range(start // chunk, (stop - 1) // chunk + 1)))
        pieces = []
        for block in itertools.product(*candidates):
            position = source_first[block]
            bounds = source_bounds[position]
            local = tuple(
                slice(max(a, sa) - sa, min(b, sb) - sa) for (a, b), (sa, sb) in zip(target, bounds, strict=True)
            )
            dest = tuple(slice(max(a, sa) - a, min(b, sb) - a) for (a, b), (sa, sb) in zip(target, bounds, strict=True))
            pieces.append((dest, _view(tensor.components[position], local)))
        if len(pieces) == 1:
            return pieces[0][1]  # one source block covers it: a view, no copy
        out = np.empty(tuple(b - a for a, b in target), dtype=tensor.dtype)
        for dest, piece in pieces:
            out[dest] = piece
        return _readonly(out)

    def native_fetch_layout(self, tensor: ShardedArray) -> Layout:
        return tensor.layout

    def native_to_numpy(self, tensor: ShardedArray) -> np.ndarray:
        return _assemble(tensor)
