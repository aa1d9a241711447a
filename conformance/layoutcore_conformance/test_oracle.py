"""The oracle itself, pinned to the contract's chunk rule and to what the frameworks were measured
to do (FACTS §1-§3), so that a wrong oracle cannot pass a wrong driver; and the capability rule
the gating relies on, re-derived here."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given

import layoutcore as lc
from layoutcore import geometry

from ._oracle import Case, expected_capabilities
from ._strategies import cases

# (dimension size, number of blocks) -> block sizes, as the contract words the chunk rule.
CHUNKS = {
    (5, 3): (2, 2, 1),
    (4, 3): (2, 2, 0),
    (2, 4): (1, 1, 0, 0),
    (2, 3): (1, 1, 0),
    (7, 4): (2, 2, 2, 1),
    (5, 4): (2, 2, 1, 0),
    (6, 3): (2, 2, 2),
    (0, 3): (0, 0, 0),
}


@pytest.mark.parametrize(("size", "blocks"), list(CHUNKS), ids=[f"{d}over{n}" for d, n in CHUNKS])
def test_chunk_rule(size: int, blocks: int) -> None:
    assert geometry.chunk_sizes(size, blocks) == CHUNKS[size, blocks]


def _bounds(slices: list[tuple[slice, ...]]) -> list[tuple[tuple[int, int], ...]]:
    return [tuple((s.start, s.stop) for s in sl) for sl in slices]


# FACTS F1.1: G = arange(36).reshape(6, 6) on the 3x2 mesh (x, y); JAX, TF and torch all gave these.
MEASURED_6x6: dict[tuple[str | None, ...], list[tuple[tuple[int, int], ...]]] = {
    ("x", None): [
        ((0, 2), (0, 6)),
        ((0, 2), (0, 6)),
        ((2, 4), (0, 6)),
        ((2, 4), (0, 6)),
        ((4, 6), (0, 6)),
        ((4, 6), (0, 6)),
    ],
    (None, "y"): [
        ((0, 6), (0, 3)),
        ((0, 6), (3, 6)),
        ((0, 6), (0, 3)),
        ((0, 6), (3, 6)),
        ((0, 6), (0, 3)),
        ((0, 6), (3, 6)),
    ],
    ("y", "x"): [
        ((0, 3), (0, 2)),
        ((3, 6), (0, 2)),
        ((0, 3), (2, 4)),
        ((3, 6), (2, 4)),
        ((0, 3), (4, 6)),
        ((3, 6), (4, 6)),
    ],
    ("x", "y"): [
        ((0, 2), (0, 3)),
        ((0, 2), (3, 6)),
        ((2, 4), (0, 3)),
        ((2, 4), (3, 6)),
        ((4, 6), (0, 3)),
        ((4, 6), (3, 6)),
    ],
}
# FACTS F3.1: arange(12) over two mesh axes, major to minor in tuple order.
MEASURED_MULTI: dict[tuple[str, ...], list[tuple[tuple[int, int], ...]]] = {
    ("x", "y"): [((0, 2),), ((2, 4),), ((4, 6),), ((6, 8),), ((8, 10),), ((10, 12),)],
    ("y", "x"): [((0, 2),), ((6, 8),), ((2, 4),), ((8, 10),), ((4, 6),), ((10, 12),)],
}


def _id(spec: tuple[object, ...]) -> str:
    return ",".join(str(e) for e in spec)


@pytest.mark.parametrize("spec", list(MEASURED_6x6), ids=_id)
def test_oracle_matches_measured_frameworks(spec: tuple[str | None, ...]) -> None:
    case = Case((3, 2), ("x", "y"), spec, (6, 6))
    assert _bounds(case.slices()) == MEASURED_6x6[spec]


@pytest.mark.parametrize("names", list(MEASURED_MULTI), ids=_id)
def test_oracle_multi_axis_is_major_to_minor(names: tuple[str, str]) -> None:
    case = Case((3, 2), ("x", "y"), (names,), (12,))
    assert _bounds(case.slices()) == MEASURED_MULTI[names]


def test_oracle_uneven_multi_axis_is_a_flat_chunk() -> None:
    # The contract's choice (XLA tiling), not torch's nested chunking: 5 over 2x2 -> 2, 2, 1, 0.
    case = Case((2, 2), ("x", "y"), (("x", "y"),), (5,))
    assert _bounds(case.slices()) == [((0, 2),), ((2, 4),), ((4, 5),), ((5, 5),)]


@given(case=cases(max_rank=3))
def test_oracle_tiles_the_array(case: Case) -> None:
    """Every element is held by exactly as many devices as the mesh axes the layout leaves
    unused replicate it over: the distinct blocks tile the array, nothing lost or doubled."""
    counts = np.zeros(case.shape, dtype=np.int64)
    for sl in case.slices():
        counts[sl] += 1
    used = {a for axes in case.dim_axes for a in axes}
    replicas = int(np.prod([n for a, n in enumerate(case.mesh_shape) if a not in used], dtype=np.int64))
    assert np.all(counts == replicas), f"{case}: coverage {np.unique(counts)} != {replicas} replicas"


@given(case=cases(max_rank=3))
def test_required_capabilities_follow_the_definitions(case: Case) -> None:
    """The gating uses ``layoutcore.required_capabilities``; it must agree with the capability
    definitions (uneven: a remainder; multi-axis: several mesh axes; any order: not mesh order)."""
    got = {c.value for c in lc.required_capabilities(case.layout(), case.shape)}
    assert got == expected_capabilities(case)
