"""Capability gating, case by case: one fixed layout per capability, through every entry point.

Where the driver declares what the case needs, the data must equal the oracle; where it does not,
``distribute_tensor``, ``relayout``, ``pack``, ``call_with_layout`` and ``Variable`` must each raise
``UnsupportedLayoutError`` with ``.driver`` and ``.feature`` set. The property tests cover the same
ground at random; these name the capability in the test id, so a report says which one is broken.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

import layoutcore as lc

from ._oracle import Case, assert_device_data, assert_refused, missing_capabilities
from .adapter import ConformanceAdapter

MESH = ((3, 2), ("x", "y"))

# name -> (layout spec on the 3x2 mesh, global shape); the name is the capability it needs first.
CASES: dict[str, tuple[tuple[Any, ...], tuple[int, ...]]] = {
    "even": (("x", "y"), (6, 4)),
    "uneven": (("x", None), (5, 4)),
    "uneven_empty_block": (("x",), (4,)),  # chunk rule 2, 2, 0: the last device holds nothing
    "uneven_fewer_rows_than_devices": ((None, "x"), (3, 2)),  # 1, 1, 0
    "multi_axis": ((("x", "y"),), (12,)),
    "multi_axis_any_order": ((("y", "x"), None), (12, 2)),
    "uneven_multi_axis": ((("x", "y"),), (5,)),
}
OPS = ["distribute_tensor", "relayout", "pack", "call_with_layout", "Variable"]


def _case(name: str, dtype: str = "float32") -> Case:
    spec, shape = CASES[name]
    return Case(MESH[0], MESH[1], spec, shape, dtype)


def _call(op: str, case: Case, adapter: ConformanceAdapter) -> Callable[[], Any]:
    x = case.values()
    layout = case.layout()
    if op == "distribute_tensor":
        return lambda: lc.distribute_tensor(x, layout)
    if op == "relayout":
        # The source is replicated on the same mesh, which every driver holds.
        source = lc.distribute_tensor(x, lc.Layout.replicated(layout.require_mesh(), layout.rank))
        return lambda: lc.relayout(source, layout)
    if op == "pack":
        pieces = [adapter.from_numpy(np.array(x[sl])) for sl in case.slices()]
        return lambda: lc.pack(pieces, layout, global_shape=case.shape)
    if op == "call_with_layout":
        return lambda: lc.call_with_layout(adapter.ones_fn(), layout, case.shape)
    if op == "Variable":
        return lambda: lc.Variable(x, layout).value
    raise AssertionError(op)


@pytest.mark.parametrize("op", OPS)
@pytest.mark.parametrize("name", list(CASES))
def test_capability_gate(driver: lc.driver.Driver, adapter: ConformanceAdapter, name: str, op: str) -> None:
    case = _case(name)
    missing = missing_capabilities(driver, case.layout(), case.shape)
    call = _call(op, case, adapter)
    if missing:
        assert_refused(driver, missing, call, f"{op} {case}")
        return
    tensor = call()
    expected = case.values()
    if op == "call_with_layout":  # the framework's ones, in its default float dtype
        expected = np.ones(case.shape, dtype=adapter.device_data(tensor)[0][1].dtype)
    assert_device_data(adapter, tensor, expected, case, what=op)


def test_case_names_match_what_they_need() -> None:
    """Each case needs the capability it is named after (and 'even' needs none)."""
    for name in CASES:
        case = _case(name)
        needed = {c.value for c in lc.driver.required_capabilities(case.layout(), case.shape)}
        if name == "even":
            assert needed == set()
        else:
            assert name.split("_empty")[0].split("_fewer")[0] in needed, (name, needed)


@pytest.mark.parametrize("op", ["relayout", "Variable.assign"])
def test_relayout_across_meshes(driver: lc.driver.Driver, adapter: ConformanceAdapter, op: str) -> None:
    """Moving a tensor from the 3x2 mesh to a 1-D mesh over the same six devices."""
    source = Case((3, 2), ("x", "y"), ("x", None), (6, 4))
    target = Case((6,), ("x",), ("x", None), (6, 4))
    x = source.values()
    tensor = lc.distribute_tensor(x, source.layout())
    if op == "Variable.assign":
        # Not a capability question: a Variable never changes layout, whatever the driver.
        variable = lc.Variable(x, target.layout())
        with pytest.raises(lc.LayoutMismatchError):
            variable.assign(tensor)
        return
    feature = lc.driver.Capability.RELAYOUT_ACROSS_MESHES
    if feature not in driver.capabilities:
        assert_refused(driver, {feature.value}, lambda: lc.relayout(tensor, target.layout()), "relayout across meshes")
        return
    moved = lc.relayout(tensor, target.layout())
    assert_device_data(adapter, moved, x, target, what="relayout across meshes")
    assert lc.fetch_layout(moved) == target.layout()
