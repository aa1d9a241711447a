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

``device_slices`` writes a dimension that has one block (replicated, or split over size-1 mesh
axes) as ``slice(None)``, as JAX's ``devices_indices_map`` does; ``shard_bounds`` always gives
``(start, stop)`` ints.

Every public function validates its inputs (sizes are ints, mesh sizes positive, positions and
coordinates in range, axis indices valid and used once) and raises
:class:`~layoutcore.LayoutError` (also a ``ValueError``) naming the bad value. The functions
that list one entry per device or chunk refuse more than ``2**22`` entries rather than exhaust
memory on a huge abstract mesh.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from ._checks import MAX_SIZE, check_listed, checked_int, int_sequence, short_repr
from ._errors import LayoutError

__all__ = [
    "block_index",
    "chunk_bounds",
    "chunk_size",
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


# -- input checks (public functions validate, then call the unchecked helpers) -------------------
def _mesh_shape(mesh_shape: Sequence[int]) -> tuple[int, ...]:
    mesh = int_sequence(mesh_shape, "mesh_shape", minimum=1)
    total = 1
    for size in mesh:  # stop early: the full product of huge sizes is slow to compute
        total *= size
        if total > MAX_SIZE:
            raise LayoutError(
                f"A mesh holds at most 2**63 - 1 devices. Received: mesh_shape={short_repr(mesh)}", value=mesh_shape
            )
    return mesh


def _global_shape(global_shape: Sequence[int]) -> tuple[int, ...]:
    return int_sequence(global_shape, "global_shape", minimum=0)


def _axes(mesh: tuple[int, ...], axes: Sequence[int], used: set[int] | None = None) -> tuple[int, ...]:
    checked = int_sequence(axes, "mesh axes", minimum=0)
    for a in checked:
        if a >= len(mesh):
            raise LayoutError(f"Mesh axis index {a} is out of range for mesh_shape {mesh}", value=axes)
        if used is not None:
            if a in used:
                raise LayoutError(f"Mesh axis {a} is used more than once in dim_axes", value=axes)
            used.add(a)
    if used is None and len(set(checked)) != len(checked):
        raise LayoutError(f"Mesh axes must be distinct. Received: {short_repr(axes)}", value=axes)
    return checked


def _dim_axes(mesh: tuple[int, ...], dim_axes: DimAxes, rank: int | None = None) -> tuple[tuple[int, ...], ...]:
    if isinstance(dim_axes, (str, bytes)) or not isinstance(dim_axes, Sequence):
        raise LayoutError(
            f"dim_axes must be a sequence of axis-index sequences. Received: {short_repr(dim_axes)}", value=dim_axes
        )
    used: set[int] = set()
    checked = tuple(_axes(mesh, axes, used) for axes in dim_axes)
    if rank is not None and len(checked) != rank:
        raise LayoutError(
            f"dim_axes has {len(checked)} entries for a global_shape of rank {rank}. Received: {short_repr(dim_axes)}",
            value=dim_axes,
        )
    return checked


def _position(mesh: tuple[int, ...], position: int) -> int:
    return checked_int(position, f"A device position in mesh_shape {mesh}", minimum=0, maximum=math.prod(mesh) - 1)


# -- unchecked helpers ---------------------------------------------------------------------------
def _bounds(dim_size: int, num_chunks: int, index: int) -> tuple[int, int]:
    size = chunk_size(dim_size, num_chunks)
    start = min(index * size, dim_size)
    return start, min(start + size, dim_size)


def _coordinate(mesh: Sequence[int], position: int) -> tuple[int, ...]:
    coordinate = []
    for size in reversed(mesh):
        position, rest = divmod(position, size)
        coordinate.append(rest)
    return tuple(reversed(coordinate))


def _block(mesh: Sequence[int], axes: Sequence[int], coordinate: Sequence[int]) -> int:
    index = 0
    for a in axes:
        index = index * mesh[a] + coordinate[a]
    return index


def _num_blocks(mesh: Sequence[int], axes: Sequence[int]) -> int:
    return math.prod(mesh[a] for a in axes)


def _shard_bounds(
    shape: Sequence[int], mesh: Sequence[int], dim_axes: DimAxes, position: int
) -> tuple[tuple[int, int], ...]:
    coordinate = _coordinate(mesh, position)
    return tuple(
        _bounds(size, _num_blocks(mesh, axes), _block(mesh, axes, coordinate))
        for size, axes in zip(shape, dim_axes, strict=True)
    )


# -- public functions ----------------------------------------------------------------------------
def chunk_size(dim_size: int, num_chunks: int) -> int:
    """The block size of the chunk rule: ``ceil(dim_size / num_chunks)`` (the one place it is written).

    Every block but the trailing ones has this size; the last non-empty block takes the remainder.
    ``chunk_size(5, 3) == 2``, ``chunk_size(2, 4) == 1``, ``chunk_size(0, 3) == 0``.

    Raises:
        LayoutError: ``dim_size`` is not an int ``>= 0`` or ``num_chunks`` not an int ``>= 1``.
    """
    if type(dim_size) is not int or type(num_chunks) is not int or dim_size < 0 or num_chunks < 1:
        dim_size = checked_int(dim_size, "dim_size", minimum=0)
        num_chunks = checked_int(num_chunks, "num_chunks", minimum=1)
    return -(-dim_size // num_chunks)


def chunk_bounds(dim_size: int, num_chunks: int, index: int) -> tuple[int, int]:
    """``(start, stop)`` of chunk ``index`` when ``dim_size`` is split into ``num_chunks``.

    Block size is ``ceil(dim_size / num_chunks)``; chunks past the end are empty ``(d, d)``.

    Raises:
        LayoutError: ``dim_size < 0``, ``num_chunks < 1`` or ``index`` outside ``0 .. num_chunks-1``.
    """
    dim_size = checked_int(dim_size, "dim_size", minimum=0)
    num_chunks = checked_int(num_chunks, "num_chunks", minimum=1)
    index = checked_int(index, f"A chunk index for {num_chunks} chunks", minimum=0, maximum=num_chunks - 1)
    return _bounds(dim_size, num_chunks, index)


def chunk_sizes(dim_size: int, num_chunks: int) -> tuple[int, ...]:
    """Sizes of all chunks, e.g. ``chunk_sizes(4, 3) == (2, 2, 0)``.

    Raises:
        LayoutError: ``dim_size < 0`` or ``num_chunks < 1``.
    """
    dim_size = checked_int(dim_size, "dim_size", minimum=0)
    num_chunks = checked_int(num_chunks, "num_chunks", minimum=1)
    check_listed(num_chunks, "chunk_sizes", num_chunks)
    return tuple(b - a for a, b in (_bounds(dim_size, num_chunks, i) for i in range(num_chunks)))


def mesh_coordinate(mesh_shape: Sequence[int], position: int) -> tuple[int, ...]:
    """Row-major coordinate of device ``position``: ``mesh_coordinate((3, 2), 3) == (1, 1)``.

    Raises:
        LayoutError: a mesh size below 1, or ``position`` outside ``0 .. prod(mesh_shape)-1``.
    """
    mesh = _mesh_shape(mesh_shape)
    return _coordinate(mesh, _position(mesh, position))


def num_blocks(mesh_shape: Sequence[int], axes: Sequence[int]) -> int:
    """How many blocks a dimension split over mesh axes ``axes`` has (1 when ``axes == ()``).

    Raises:
        LayoutError: a mesh size below 1, or an axis index out of range or repeated.
    """
    mesh = _mesh_shape(mesh_shape)
    return _num_blocks(mesh, _axes(mesh, axes))


def block_index(mesh_shape: Sequence[int], axes: Sequence[int], coordinate: Sequence[int]) -> int:
    """Block held on one dimension: the row-major index of ``coordinate`` over ``axes``.

    Raises:
        LayoutError: bad ``mesh_shape`` or ``axes``, or a ``coordinate`` that is not a point of the mesh.
    """
    mesh = _mesh_shape(mesh_shape)
    checked_axes = _axes(mesh, axes)
    point = int_sequence(coordinate, "coordinate", minimum=0)
    if len(point) != len(mesh) or any(c >= s for c, s in zip(point, mesh, strict=True)):
        raise LayoutError(f"Coordinate {point} is not a point of mesh_shape {mesh}", value=coordinate)
    return _block(mesh, checked_axes, point)


def device_blocks(mesh_shape: Sequence[int], dim_axes: DimAxes) -> list[tuple[int, ...]]:
    """Per device (row-major), the block index on every tensor dimension.

    This is TF DTensor's ``Layout.offset_to_shard()``.

    Raises:
        LayoutError: bad ``mesh_shape`` or ``dim_axes`` (a mesh axis used on two dimensions included).
    """
    mesh = _mesh_shape(mesh_shape)
    checked = _dim_axes(mesh, dim_axes)
    check_listed(math.prod(mesh), "device_blocks", mesh_shape)
    return [
        tuple(_block(mesh, axes, c) for axes in checked) for c in (_coordinate(mesh, p) for p in range(math.prod(mesh)))
    ]


def shard_bounds(
    global_shape: Sequence[int], mesh_shape: Sequence[int], dim_axes: DimAxes, position: int
) -> tuple[tuple[int, int], ...]:
    """``(start, stop)`` per dimension of the shard held by device ``position``.

    Raises:
        LayoutError: a negative size, bad ``mesh_shape``/``dim_axes``, ``dim_axes`` of another
            rank than ``global_shape``, or ``position`` out of range.
    """
    shape = _global_shape(global_shape)
    mesh = _mesh_shape(mesh_shape)
    checked = _dim_axes(mesh, dim_axes, len(shape))
    return _shard_bounds(shape, mesh, checked, _position(mesh, position))


def device_slices(global_shape: Sequence[int], mesh_shape: Sequence[int], dim_axes: DimAxes) -> list[tuple[slice, ...]]:
    """One tuple of ``slice`` per device, in row-major mesh order.

    A dimension with one block (replicated, or split over size-1 mesh axes) is ``slice(None)``,
    as in JAX's ``devices_indices_map``, so the two maps compare equal.

    Raises:
        LayoutError: as :func:`shard_bounds`.
    """
    shape = _global_shape(global_shape)
    mesh = _mesh_shape(mesh_shape)
    checked = _dim_axes(mesh, dim_axes, len(shape))
    check_listed(math.prod(mesh), "device_slices", mesh_shape)
    whole = tuple(_num_blocks(mesh, axes) == 1 for axes in checked)
    return [
        tuple(
            slice(None) if w else slice(a, b)
            for w, (a, b) in zip(whole, _shard_bounds(shape, mesh, checked, p), strict=True)
        )
        for p in range(math.prod(mesh))
    ]


def local_shape(
    global_shape: Sequence[int], mesh_shape: Sequence[int], dim_axes: DimAxes, position: int
) -> tuple[int, ...]:
    """Shape of the shard held by device ``position`` (uneven shards differ per device).

    Raises:
        LayoutError: as :func:`shard_bounds`.
    """
    return tuple(b - a for a, b in shard_bounds(global_shape, mesh_shape, dim_axes, position))


def is_evenly_divisible(global_shape: Sequence[int], mesh_shape: Sequence[int], dim_axes: DimAxes) -> bool:
    """Whether every dimension divides evenly into its blocks (no chunk-rule remainder).

    Raises:
        LayoutError: as :func:`shard_bounds` (without ``position``).
    """
    shape = _global_shape(global_shape)
    mesh = _mesh_shape(mesh_shape)
    checked = _dim_axes(mesh, dim_axes, len(shape))
    return all(size % _num_blocks(mesh, axes) == 0 for size, axes in zip(shape, checked, strict=True))
