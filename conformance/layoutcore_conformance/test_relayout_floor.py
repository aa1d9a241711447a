"""Relayout at the physical floor: a driver declaring ``Capability.RELAYOUT_AT_FLOOR`` moves exactly
``relayout_plan``'s ``floor_bytes`` between devices, and its data equals NumPy's.

The bytes are counted by the adapter (:meth:`ConformanceAdapter.relayout_bytes`) with the
framework's own means: the collectives' arguments (torch), the compiled programs' collectives (JAX),
the reference driver's simulated wire (NumPy). An adapter that cannot count skips these tests for a
driver that does not declare the capability, and fails them for one that does. Cases: the
benchmark's (``benchmarks/bench_relayout_bytes.py``, on 8 devices) and hypothesis-generated layout
pairs on the same mesh and across meshes.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import layoutcore as lc

from ._oracle import Case, assert_device_data, concrete, missing_capabilities, needs_cross_mesh
from ._strategies import cases, other_layouts
from .adapter import ConformanceAdapter

FLOOR = lc.driver.Capability.RELAYOUT_AT_FLOOR
_GRID = ((4, 2), ("x", "y"))
_LINE = ((8,), ("x",))
_FLAT = ((8,), ("z",))

#: The benchmark's cases: name -> (source, target); 512x512 there, 64x64 here (same geometry, 8 devices).
BENCH_CASES: dict[str, tuple[Case, Case]] = {
    "x -> None": (Case(*_LINE, ("x", None), (64, 64)), Case(*_LINE, (None, None), (64, 64))),
    "None -> x": (Case(*_LINE, (None, None), (64, 64)), Case(*_LINE, ("x", None), (64, 64))),
    "S0 -> S1": (Case(*_LINE, ("x", None), (64, 64)), Case(*_LINE, (None, "x"), (64, 64))),
    "(x,y) -> (y,x) on 4x2": (Case(*_GRID, ("x", "y"), (64, 64)), Case(*_GRID, ("y", "x"), (64, 64))),
    "uneven S0 -> S1": (Case(*_LINE, ("x", None), (60, 60)), Case(*_LINE, (None, "x"), (60, 60))),
    "((x,y),None) -> (None,(x,y))": (
        Case(*_GRID, (("x", "y"), None), (64, 64)),
        Case(*_GRID, (None, ("x", "y")), (64, 64)),
    ),
    "(x,y) -> (None,(x,y))": (Case(*_GRID, ("x", "y"), (64, 64)), Case(*_GRID, (None, ("x", "y")), (64, 64))),
    "cross-mesh 4x2 (x,None) -> 8 (None,z)": (
        Case(*_GRID, ("x", None), (64, 64)),
        Case(*_FLAT, (None, "z"), (64, 64)),
    ),
}


def _counted(driver: lc.driver.Driver, adapter: ConformanceAdapter, relayout: Any) -> tuple[Any, int]:
    counted = adapter.relayout_bytes(relayout)
    if counted is None:
        if FLOOR in driver.capabilities:
            pytest.fail(
                f"driver {driver.name!r} declares {FLOOR.value!r}, but its adapter {type(adapter).__name__} cannot "
                "count the bytes a relayout moves: implement ConformanceAdapter.relayout_bytes."
            )
        pytest.skip(f"{type(adapter).__name__} cannot count relayout bytes ({driver.name} does not declare it)")
    return counted


def _supported(driver: lc.driver.Driver, source: Case, target: Case) -> bool:
    missing = missing_capabilities(driver, source.layout(), source.shape)
    missing |= missing_capabilities(driver, target.layout(), target.shape)
    if (
        needs_cross_mesh(driver, source, target)
        and lc.driver.Capability.RELAYOUT_ACROSS_MESHES not in driver.capabilities
    ):
        missing.add(lc.driver.Capability.RELAYOUT_ACROSS_MESHES.value)
    return not missing  # refusals are test_capabilities' and test_properties' business


def check_floor(driver: lc.driver.Driver, adapter: ConformanceAdapter, source: Case, target: Case) -> None:
    """``relayout`` from ``source`` to ``target``: the counted bytes are the floor, the data NumPy's."""
    x = source.values()
    tensor = lc.distribute_tensor(x, source.layout())
    moved, counted = _counted(driver, adapter, lambda: lc.relayout(tensor, target.layout()))
    floor = lc.relayout_plan(
        concrete(driver, source.layout()), concrete(driver, target.layout()), source.shape, x.dtype
    ).floor_bytes
    assert_device_data(adapter, moved, x, target, what=f"relayout {source} -> {target}")
    if FLOOR in driver.capabilities:
        assert counted == floor, (
            f"{driver.name} declares {FLOOR.value!r} but moved {counted} bytes for a relayout whose floor is {floor} "
            f"bytes: {source} -> {target}"
        )
    else:  # informative only: a driver without the capability may move more
        assert counted >= floor, f"{driver.name} moved {counted} bytes, less than the floor {floor}: the count is wrong"


@pytest.mark.parametrize("case", list(BENCH_CASES))
def test_benchmark_cases_move_the_floor(driver: lc.driver.Driver, adapter: ConformanceAdapter, case: str) -> None:
    source, target = BENCH_CASES[case]
    if len(driver.list_devices()) < source.size:
        pytest.skip(f"the benchmark's cases need {source.size} devices; {driver.name} has {len(driver.list_devices())}")
    if not _supported(driver, source, target):
        pytest.skip(f"{driver.name} refuses {case} (a typed refusal, checked by test_capabilities)")
    check_floor(driver, adapter, source, target)


@given(data=st.data(), other_mesh=st.booleans())
def test_random_relayouts_move_the_floor(
    driver: lc.driver.Driver, adapter: ConformanceAdapter, data: st.DataObject, other_mesh: bool
) -> None:
    source = data.draw(cases(adapter.dtypes), label="source")
    target = data.draw(other_layouts(source, other_mesh=other_mesh), label="target")
    if _supported(driver, source, target):
        check_floor(driver, adapter, source, target)


def test_a_value_that_is_already_there_moves_nothing(driver: lc.driver.Driver, adapter: ConformanceAdapter) -> None:
    source = Case((2,), ("x",), ("x", None), (4, 6))
    x = source.values()
    tensor = lc.distribute_tensor(x, source.layout())
    moved, counted = _counted(driver, adapter, lambda: lc.relayout(tensor, source.layout()))
    assert counted == 0
    assert np.array_equal(lc.to_numpy(moved), x)
