"""Properties of layoutcore.geometry, the pure shard math every driver is checked against.

The oracles here are NumPy's own index functions (``np.unravel_index``, ``np.ravel_multi_index``)
and counting: they do not re-implement the module.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from layoutcore import LayoutcoreError, LayoutError, geometry


@st.composite
def cases(draw: st.DrawFn) -> tuple[tuple[int, ...], tuple[int, ...], tuple[tuple[int, ...], ...]]:
    """(global_shape, mesh_shape, dim_axes): rank <= 3, <= 8 devices, zero sizes included; each
    mesh axis shards at most one tensor dimension, in any order."""
    mesh_shape = tuple(draw(st.lists(st.integers(1, 4), min_size=1, max_size=3).filter(lambda s: math.prod(s) <= 8)))
    rank = draw(st.integers(0, 3))
    owner = [draw(st.integers(-1, rank - 1)) if rank else -1 for _ in mesh_shape]  # -1: unused mesh axis
    dim_axes = []
    for dim in range(rank):
        axes = [a for a, o in enumerate(owner) if o == dim]
        dim_axes.append(tuple(draw(st.permutations(axes))) if axes else ())
    global_shape = tuple(draw(st.lists(st.integers(0, 9), min_size=rank, max_size=rank)))
    return global_shape, mesh_shape, tuple(dim_axes)


@given(cases())
def test_each_replica_group_tiles_the_index_space_exactly_once(case: tuple) -> None:
    global_shape, mesh_shape, dim_axes = case
    used = {a for axes in dim_axes for a in axes}
    slices = geometry.device_slices(global_shape, mesh_shape, dim_axes)
    assert len(slices) == math.prod(mesh_shape)
    groups: dict[tuple[int, ...], np.ndarray] = {}
    for position, sl in enumerate(slices):
        coordinate = np.unravel_index(position, mesh_shape)
        replica = tuple(int(c) for a, c in enumerate(coordinate) if a not in used)
        counts = groups.setdefault(replica, np.zeros(global_shape, dtype=int))
        counts[sl] += 1
    assert len(groups) == math.prod(s for a, s in enumerate(mesh_shape) if a not in used)
    for counts in groups.values():
        assert (counts == 1).all()


@given(cases())
def test_block_of_a_device_is_the_row_major_index_of_its_coordinates(case: tuple) -> None:
    _, mesh_shape, dim_axes = case
    blocks = geometry.device_blocks(mesh_shape, dim_axes)
    for position, block in enumerate(blocks):
        coordinate = np.unravel_index(position, mesh_shape)
        assert geometry.mesh_coordinate(mesh_shape, position) == tuple(int(c) for c in coordinate)
        for axes, b in zip(dim_axes, block, strict=True):
            sizes = [mesh_shape[a] for a in axes]
            expected = int(np.ravel_multi_index([coordinate[a] for a in axes], sizes)) if axes else 0
            assert b == expected


@given(cases())
def test_replicas_hold_the_same_slices_and_distinct_blocks_are_disjoint(case: tuple) -> None:
    global_shape, mesh_shape, dim_axes = case
    blocks = geometry.device_blocks(mesh_shape, dim_axes)
    slices = geometry.device_slices(global_shape, mesh_shape, dim_axes)
    by_block: dict[tuple[int, ...], tuple[slice, ...]] = {}
    for block, sl in zip(blocks, slices, strict=True):
        assert by_block.setdefault(block, sl) == sl
    n_blocks = math.prod(geometry.num_blocks(mesh_shape, axes) for axes in dim_axes)
    assert len(by_block) == n_blocks


@given(st.integers(0, 50), st.integers(1, 12))
def test_chunk_sizes_are_ceil_then_remainder_then_empty(size: int, n: int) -> None:
    sizes = geometry.chunk_sizes(size, n)
    block = -(-size // n)
    full, rest = divmod(size, block) if block else (0, 0)
    assert sizes == (block,) * full + ((rest,) if rest else ()) + (0,) * (n - full - (1 if rest else 0))
    assert sum(sizes) == size
    bounds = [geometry.chunk_bounds(size, n, i) for i in range(n)]
    assert bounds[0][0] == 0 and bounds[-1][1] == size
    assert all(a[1] == b[0] for a, b in itertools.pairwise(bounds))  # contiguous, in order


@given(cases())
def test_local_shape_and_evenness_agree_with_the_slices(case: tuple) -> None:
    global_shape, mesh_shape, dim_axes = case
    slices = geometry.device_slices(global_shape, mesh_shape, dim_axes)
    shapes = [geometry.local_shape(global_shape, mesh_shape, dim_axes, p) for p in range(len(slices))]
    assert shapes == [np.zeros(global_shape)[sl].shape for sl in slices]
    even = geometry.is_evenly_divisible(global_shape, mesh_shape, dim_axes)
    assert even == all(
        size % geometry.num_blocks(mesh_shape, axes) == 0 for size, axes in zip(global_shape, dim_axes, strict=True)
    )
    if even:
        assert len(set(shapes)) <= 1


@pytest.mark.parametrize(("size", "n", "index"), [(5, 3, 3), (5, 3, -1), (5, 0, 0)])
def test_chunk_bounds_rejects_bad_index(size: int, n: int, index: int) -> None:
    with pytest.raises(ValueError, match=str(index)):
        geometry.chunk_bounds(size, n, index)


def test_documented_examples() -> None:
    assert geometry.chunk_sizes(5, 3) == (2, 2, 1)
    assert geometry.chunk_sizes(4, 3) == (2, 2, 0)
    assert geometry.chunk_sizes(2, 4) == (1, 1, 0, 0)
    assert geometry.mesh_coordinate((3, 2), 3) == (1, 1)
    assert geometry.num_blocks((3, 2), ()) == 1
    assert geometry.device_blocks((3, 2), ((0,), ())) == [(0, 0), (0, 0), (1, 0), (1, 0), (2, 0), (2, 0)]


# -- the public functions validate their inputs; errors are LayoutErrors (and ValueErrors) ---
BAD_CALLS = [
    ("mesh_coordinate wraps around", lambda: geometry.mesh_coordinate((3, 2), 7)),
    ("negative position", lambda: geometry.mesh_coordinate((3, 2), -1)),
    ("zero mesh size", lambda: geometry.mesh_coordinate((3, 0), 0)),
    ("negative mesh size", lambda: geometry.mesh_coordinate((-3, 2), 0)),
    ("float position", lambda: geometry.mesh_coordinate((3, 2), 1.0)),
    ("negative dim size", lambda: geometry.device_slices((-4,), (2,), ((0,),))),
    ("negative chunk dim", lambda: geometry.chunk_bounds(-4, 2, 0)),
    ("negative chunk sizes", lambda: geometry.chunk_sizes(-4, 2)),
    ("zero chunks", lambda: geometry.chunk_sizes(4, 0)),
    ("None shape", lambda: geometry.shard_bounds(None, (2,), ((0,),), 0)),
    ("None dim_axes", lambda: geometry.device_slices((4,), (2,), None)),
    ("rank mismatch", lambda: geometry.device_slices((4, 4), (2,), ((0,),))),
    ("axis out of range", lambda: geometry.device_slices((4,), (2,), ((1,),))),
    ("negative axis", lambda: geometry.num_blocks((2,), (-1,))),
    ("axis used twice", lambda: geometry.device_blocks((2, 2), ((0,), (0,)))),
    ("axis repeated in one dim", lambda: geometry.num_blocks((2, 2), (0, 0))),
    ("coordinate outside the mesh", lambda: geometry.block_index((3, 2), (0,), (3, 0))),
    ("coordinate of wrong rank", lambda: geometry.block_index((3, 2), (0,), (1,))),
    ("position out of range", lambda: geometry.local_shape((6,), (3,), ((0,),), 3)),
    ("bool size", lambda: geometry.is_evenly_divisible((True,), (2,), ((0,),))),
]


@pytest.mark.parametrize(("label", "call"), BAD_CALLS, ids=[label for label, _ in BAD_CALLS])
def test_geometry_rejects_bad_inputs_with_layout_error(label: str, call: Callable[[], object]) -> None:
    with pytest.raises(LayoutError) as info:
        call()
    assert isinstance(info.value, ValueError) and isinstance(info.value, LayoutcoreError), label


def test_geometry_accepts_numpy_ints_and_returns_python_ints() -> None:
    coordinate = geometry.mesh_coordinate((np.int64(3), np.int32(2)), np.int64(3))
    assert coordinate == (1, 1) and all(type(c) is int for c in coordinate)
    assert geometry.chunk_bounds(np.int64(5), np.int64(3), np.int64(2)) == (4, 5)


def test_device_slices_write_one_block_dims_as_slice_none() -> None:
    # As JAX's devices_indices_map: replicated dims and dims split over size-1 mesh axes.
    assert geometry.device_slices((6, 4), (3, 1), ((0,), (1,))) == [
        (slice(0, 2), slice(None)),
        (slice(2, 4), slice(None)),
        (slice(4, 6), slice(None)),
    ]
    assert geometry.shard_bounds((6, 4), (3, 1), ((0,), (1,)), 1) == ((2, 4), (0, 4))


@given(cases())
def test_device_slices_select_what_shard_bounds_say(case: tuple) -> None:
    global_shape, mesh_shape, dim_axes = case
    x = np.arange(math.prod(global_shape)).reshape(global_shape)
    for position, sl in enumerate(geometry.device_slices(global_shape, mesh_shape, dim_axes)):
        bounds = geometry.shard_bounds(global_shape, mesh_shape, dim_axes, position)
        assert np.array_equal(x[sl], x[tuple(slice(a, b) for a, b in bounds)])


@pytest.mark.parametrize(("dim", "n"), [(5, 3), (4, 3), (2, 4), (0, 3), (7, 1), (8, 8), (9, 2)])
def test_chunk_size_is_the_ceiling_and_the_chunk_bounds_block(dim: int, n: int) -> None:
    assert geometry.chunk_size(dim, n) == math.ceil(dim / n)
    assert geometry.chunk_bounds(dim, n, 0) == (0, min(dim, math.ceil(dim / n)))


@pytest.mark.parametrize(("dim", "n"), [(-1, 2), (4, 0), (4.0, 2), ("4", 2), (True, 2)])
def test_chunk_size_refuses_what_is_no_size(dim: Any, n: Any) -> None:
    with pytest.raises(LayoutError):
        geometry.chunk_size(dim, n)


def test_the_chunk_formula_is_written_once() -> None:
    """Every module computes the chunk rule's block size through geometry.chunk_size."""
    root = Path(__file__).resolve().parent.parent
    copies = [
        f"{path.relative_to(root)}:{number}"
        for folder in ("layoutcore", "drivers", "conformance")
        for path in sorted((root / folder).rglob("*.py"))
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
        if "-(-" in line.replace(" ", "") and path.name != "geometry.py"
    ]
    assert copies == []
