"""``Driver.pack``'s checks: the components against the layout, one another and the global shape."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol

import numpy as np

from .._checks import short_repr
from .._dtypes import as_bits
from .._errors import LayoutError
from .._layout import BoundLayout, Layout
from .._mesh import Mesh
from ._dtype_names import dtype_name, known_dtype_name

__all__ = ["checked_pack"]


class _Packer(Protocol):
    """What ``checked_pack`` uses of a :class:`~layoutcore.driver.Driver` (a protocol: ``_frontend`` imports this module)."""

    @property
    def _lc_traces(self) -> bool: ...
    def check_layout(self, layout: Any, global_shape: Sequence[int]) -> BoundLayout: ...
    def bind_mesh(self, mesh: Mesh) -> tuple[str, ...]: ...
    def local_positions(self, mesh: Mesh, devices: tuple[str, ...]) -> Sequence[int]: ...
    def shape_of(self, value: Any) -> tuple[int, ...]: ...
    def is_traced(self, value: Any) -> bool: ...
    def component_to_numpy(self, component: Any) -> np.ndarray: ...
    def _global_value(self, value: Any, what: str) -> Any: ...
    def _held_dtype(self, value: Any, what: str) -> Any: ...


def checked_pack(
    driver: _Packer, components: Sequence[Any], layout: Layout, global_shape: Sequence[int] | None
) -> tuple[list[Any], BoundLayout, tuple[str, ...], tuple[int, ...]]:
    """``driver.pack``'s arguments checked: (components as held values, bound layout, devices, global shape).

    Raises:
        LayoutError: a wrong component count, a component whose rank or shape does not fit
            the layout, mixed dtypes, or replicas holding different data (naming the devices).
    """
    if not isinstance(layout, Layout) or layout.mesh is None:
        driver.check_layout(layout, ())
    if (
        components is None
        or isinstance(components, dict | set | str | bytes)
        or not hasattr(components, "__len__")
        or getattr(components, "ndim", None) == 0  # a 0-d array has __len__ but cannot be iterated
    ):
        raise LayoutError(
            f"pack needs a sequence of per-device components. Received: {short_repr(components, 80)} "
            f"({type(components).__name__})",
            value=components,
        )
    given_shape = None if global_shape is None else _shape_argument(global_shape)
    mesh = layout.require_mesh()
    devices = driver.bind_mesh(mesh)
    positions = list(driver.local_positions(mesh, devices))
    # Nested lists and scalars become NumPy arrays; arrays and framework tensors pass unchanged.
    components = [
        c if hasattr(c, "shape") and hasattr(c, "dtype") else driver._global_value(c, "pack") for c in components
    ]
    if len(components) != len(positions):
        raise LayoutError(
            f"pack needs {len(positions)} components for {layout} (one per local device). Received {len(components)}.",
            value=components,
        )
    shapes = [driver.shape_of(c) for c in components]
    for device_pos, shape in zip(positions, shapes, strict=True):
        if len(shape) != layout.rank:
            raise LayoutError(
                f"Component for device {devices[device_pos]} has rank {len(shape)} (shape {shape}), "
                f"but {layout} has rank {layout.rank}.",
                value=shape,
            )
    # Framework and NumPy components mix: compare dtypes by NumPy's name for them.
    dtypes = {dtype_name(getattr(c, "dtype", None)) for c in components}
    if len(dtypes) > 1:
        raise LayoutError(f"pack needs components of one dtype. Received dtypes {sorted(dtypes)}.", value=components)
    components = [driver._held_dtype(c, f"component {i}") for i, c in enumerate(components)]
    shape = _infer_global_shape(layout, positions, shapes) if given_shape is None else given_shape
    layout.check_shape(shape)
    # Each component against the chunk rule first: a component of the wrong shape is the
    # user's error to name, before any capability question about the (wrong) global shape.
    expected = layout.local_shapes(shape)
    for index, (device_pos, got) in enumerate(zip(positions, shapes, strict=True)):
        if got != expected[device_pos]:
            raise LayoutError(
                f"Component {index} (device {devices[device_pos]}) has shape {got}; {layout} with global shape "
                f"{shape} gives it shape {expected[device_pos]}.",
                value=got,
            )
    layout = driver.check_layout(layout, shape)
    if not (driver._lc_traces and any(driver.is_traced(c) for c in components)):
        _check_replicas(driver, components, layout, positions, devices)
    return components, layout, devices, shape


def _check_replicas(
    driver: _Packer, components: list[Any], layout: Layout, positions: list[int], devices: tuple[str, ...]
) -> None:
    """Refuse components that stand for the same block of ``layout`` but hold different data.

    Raises:
        LayoutError: naming the block, the differing devices and the device they differ from.
    """
    blocks = layout.offset_to_shard()
    groups: dict[tuple[int, ...], list[int]] = {}
    for index, device_pos in enumerate(positions):
        groups.setdefault(blocks[device_pos], []).append(index)
    for block, members in groups.items():
        if len(members) < 2:
            continue
        first = driver.component_to_numpy(components[members[0]])
        differing = [
            devices[positions[i]]
            for i in members[1:]
            if not _same_data(first, driver.component_to_numpy(components[i]))
        ]
        if differing:
            raise LayoutError(
                f"Replicas of block {block} under {layout} hold different data: device(s) {differing} differ "
                f"from device {devices[positions[members[0]]]}. Replicated components must be equal.",
                value=differing,
            )


def _same_data(a: np.ndarray, b: np.ndarray) -> bool:
    """Replica equality: equal shapes, and the same bits for the 18 dtypes (so a NaN equals the same
    NaN, and -0.0 differs from 0.0, in every float kind, ml_dtypes' bfloat16 and float8 included);
    equal values, a NaN equal to a NaN, for other dtypes."""
    if a.shape != b.shape or a.dtype != b.dtype:
        return False
    if known_dtype_name(a.dtype) is not None:
        return bool(np.array_equal(as_bits(a), as_bits(b)))
    try:
        return bool(np.array_equal(a, b, equal_nan=True))
    except TypeError:  # no NaN in this dtype (integers, bools, strings, structured): plain equality
        return bool(np.array_equal(a, b))


def _shape_argument(global_shape: Any) -> tuple[int, ...]:
    """``global_shape=`` as a tuple of ints.

    Raises:
        LayoutError: not a sequence of non-negative integers (naming it).
    """
    try:
        shape = tuple(global_shape)
        if all(isinstance(s, int | np.integer) and not isinstance(s, bool) and s >= 0 for s in shape):
            return tuple(int(s) for s in shape)
    except Exception:  # not iterable, or an iteration that fails: a bad value either way
        pass
    raise LayoutError(
        f"global_shape must be a sequence of non-negative ints. Received: {short_repr(global_shape, 80)}",
        value=global_shape,
    )


def _infer_global_shape(layout: Layout, positions: list[int], shapes: list[tuple[int, ...]]) -> tuple[int, ...]:
    """Global shape from local component shapes: the sum of the distinct blocks per axis.

    Where some blocks are not local (multi-process), the axis is assumed even; ``pack``
    then validates every shape against the chunk rule.
    """
    blocks = layout.offset_to_shard()
    result = []
    for dim in range(layout.rank):
        sizes: dict[int, int] = {}
        for device_pos, shape in zip(positions, shapes, strict=True):
            sizes.setdefault(blocks[device_pos][dim], shape[dim])
        n = layout.num_shards(dim)
        result.append(sum(sizes.values()) if len(sizes) == n else max(sizes.values(), default=0) * n)
    return tuple(result)
