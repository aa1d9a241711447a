"""Shard geometry as pure functions on plain ints: the oracle every driver is checked against.

Vocabulary (all plain ints and tuples, no Mesh or Layout objects):

* ``mesh_shape``: sizes of the mesh axes, e.g. ``(3, 2)``.
* ``dim_axes``: for each tensor dimension, the tuple of mesh-axis *indices* it is split over,
  major to minor; ``()`` means replicated. ``P("x", None)`` on mesh ``(x, y)`` is ``((0,), ())``.
* ``position``: a device's row-major index in the mesh (0 .. prod(mesh_shape) - 1).

The chunk rule: a dimension of size ``d`` split into ``n`` blocks has blocks of size
``ceil(d / n)``; the last non-empty block takes the remainder and trailing blocks may be empty.
For ``d=5, n=3`` the blocks are 2, 2, 1; ``d=4, n=3`` gives 2, 2, 0; ``d=2, n=4`` gives 1, 1, 0, 0.
A dimension split over several mesh axes is chunked once over their product (flat), and the
device at coordinate ``c`` takes block ``row_major(c[a1], ..., c[ak])``.

Example: ``arange(6).reshape(3, 2)`` on mesh ``(3, 2)`` with ``dim_axes=((0,), ())``::

    position  coordinate  block   slices
    0         (0, 0)      (0, 0)  [0:1, 0:2]
    1         (0, 1)      (0, 0)  [0:1, 0:2]
    2         (1, 0)      (1, 0)  [1:2, 0:2]
    ...
"""

from __future__ import annotations

import math
from collections.abc import Sequence

__all__ = [
    "block_index",
    "chunk_bounds",
    "chunk_sizes",
    "device_blocks",
    "device_slices",
    "is_evenly_divisible",
    "local_shape",
    "mesh_coordinate",
    "num_blocks",
    "shard_bounds",
]

DimAxes = Sequence[Sequence[int]]


def chunk_bounds(dim_size: int, num_chunks: int, index: int) -> tuple[int, int]:
    """``(start, stop)`` of chunk ``index`` when ``dim_size`` is split into ``num_chunks``.

    Block size is ``ceil(dim_size / num_chunks)``; chunks past the end are empty ``(d, d)``.
    """
    if num_chunks <= 0 or not 0 <= index < num_chunks:
        raise ValueError(f"chunk index {index} out of range for {num_chunks} chunks")
    size = -(-dim_size // num_chunks)
    start = min(index * size, dim_size)
    return start, min(start + size, dim_size)


def chunk_sizes(dim_size: int, num_chunks: int) -> tuple[int, ...]:
    """Sizes of all chunks, e.g. ``chunk_sizes(4, 3) == (2, 2, 0)``."""
    return tuple(b - a for a, b in (chunk_bounds(dim_size, num_chunks, i) for i in range(num_chunks)))


def mesh_coordinate(mesh_shape: Sequence[int], position: int) -> tuple[int, ...]:
    """Row-major coordinate of device ``position``: ``mesh_coordinate((3, 2), 3) == (1, 1)``."""
    coordinate = []
    for size in reversed(mesh_shape):
        position, rest = divmod(position, size)
        coordinate.append(rest)
    return tuple(reversed(coordinate))


def num_blocks(mesh_shape: Sequence[int], axes: Sequence[int]) -> int:
    """How many blocks a dimension split over mesh axes ``axes`` has (1 when ``axes == ()``)."""
    return math.prod(mesh_shape[a] for a in axes)


def block_index(mesh_shape: Sequence[int], axes: Sequence[int], coordinate: Sequence[int]) -> int:
    """Block held on one dimension: the row-major index of ``coordinate`` over ``axes``."""
    index = 0
    for a in axes:
        index = index * mesh_shape[a] + coordinate[a]
    return index


def device_blocks(mesh_shape: Sequence[int], dim_axes: DimAxes) -> list[tuple[int, ...]]:
    """Per device (row-major), the block index on every tensor dimension.

    This is TF DTensor's ``Layout.offset_to_shard()``.
    """
    positions = range(math.prod(mesh_shape))
    coordinates = [mesh_coordinate(mesh_shape, p) for p in positions]
    return [tuple(block_index(mesh_shape, axes, c) for axes in dim_axes) for c in coordinates]


def shard_bounds(
    global_shape: Sequence[int], mesh_shape: Sequence[int], dim_axes: DimAxes, position: int
) -> tuple[tuple[int, int], ...]:
    """``(start, stop)`` per dimension of the shard held by device ``position``."""
    coordinate = mesh_coordinate(mesh_shape, position)
    return tuple(
        chunk_bounds(size, num_blocks(mesh_shape, axes), block_index(mesh_shape, axes, coordinate))
        for size, axes in zip(global_shape, dim_axes, strict=True)
    )


def device_slices(global_shape: Sequence[int], mesh_shape: Sequence[int], dim_axes: DimAxes) -> list[tuple[slice, ...]]:
    """One tuple of ``slice`` per device, in row-major mesh order."""
    return [
        tuple(slice(a, b) for a, b in shard_bounds(global_shape, mesh_shape, dim_axes, p))
        for p in range(math.prod(mesh_shape))
    ]


def local_shape(
    global_shape: Sequence[int], mesh_shape: Sequence[int], dim_axes: DimAxes, position: int
) -> tuple[int, ...]:
    """Shape of the shard held by device ``position`` (uneven shards differ per device)."""
    return tuple(b - a for a, b in shard_bounds(global_shape, mesh_shape, dim_axes, position))


def is_evenly_divisible(global_shape: Sequence[int], mesh_shape: Sequence[int], dim_axes: DimAxes) -> bool:
    """Whether every dimension divides evenly into its blocks (no chunk-rule remainder)."""
    return all(size % num_blocks(mesh_shape, axes) == 0 for size, axes in zip(global_shape, dim_axes, strict=True))
