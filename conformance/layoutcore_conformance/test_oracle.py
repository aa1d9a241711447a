"""The oracle itself, pinned to the contract's chunk rule and to what the frameworks were measured
to do (docs/framework-facts.md#shard-order, #uneven-dimensions and #multi-axis), so that a wrong oracle cannot pass a wrong driver; and the capability rule
the gating relies on, re-derived here."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given

import layoutcore as lc
from layoutcore import geometry

from ._oracle import Case, expected_capabilities
from ._strategies import cases
from .facts import CHUNKS, MEASURED_MULTI, MEASURED_6x6, bounds


@pytest.mark.parametrize(("size", "blocks"), list(CHUNKS), ids=[f"{d}over{n}" for d, n in CHUNKS])
def test_chunk_rule(size: int, blocks: int) -> None:
    assert geometry.chunk_sizes(size, blocks) == CHUNKS[size, blocks]


def _id(spec: tuple[object, ...]) -> str:
    return ",".join(str(e) for e in spec)


@pytest.mark.parametrize("spec", list(MEASURED_6x6), ids=_id)
def test_oracle_matches_measured_frameworks(spec: tuple[str | None, ...]) -> None:
    case = Case((3, 2), ("x", "y"), spec, (6, 6))
    assert bounds(case.slices()) == MEASURED_6x6[spec]


@pytest.mark.parametrize("names", list(MEASURED_MULTI), ids=_id)
def test_oracle_multi_axis_is_major_to_minor(names: tuple[str, str]) -> None:
    case = Case((3, 2), ("x", "y"), (names,), (12,))
    assert bounds(case.slices()) == MEASURED_MULTI[names]


def test_oracle_uneven_multi_axis_is_a_flat_chunk() -> None:
    # The contract's choice (XLA tiling), not torch's nested chunking: 5 over 2x2 -> 2, 2, 1, 0.
    case = Case((2, 2), ("x", "y"), (("x", "y"),), (5,))
    assert bounds(case.slices()) == [((0, 2),), ((2, 4),), ((4, 5),), ((5, 5),)]


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
    """The gating uses ``layoutcore.driver.required_capabilities``; it must agree with the capability
    definitions (uneven: a remainder; multi-axis: several mesh axes; any order: not mesh order)."""
    got = {c.value for c in lc.driver.required_capabilities(case.layout(), case.shape)}
    assert got == expected_capabilities(case)
