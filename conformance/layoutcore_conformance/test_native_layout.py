"""The driver's own reading of a tensor's layout, ``native_fetch_layout``, checked against the layout the
tensor was meant to have, for every creating path and for the output of a framework operation.

``layoutcore.fetch_layout`` answers from the layout the front-end recorded when a layoutcore call made the
tensor; only a tensor no layoutcore call made (what every framework operation returns) is read natively.
So a driver whose ``native_fetch_layout`` lies would pass every ``fetch_layout`` round trip. These tests
call the hook itself and compare it with the intended layout on the concrete mesh the tensor lives on
(the mesh's name, and whether the user gave it abstract, are the front-end's business and set aside). The
output of a framework op (``adapter.identity_op``, e.g. ``t + 0``) must also hold the oracle's data and
read back through the public ``fetch_layout``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
from hypothesis import assume, given
from hypothesis import strategies as st

import layoutcore as lc

from ._oracle import Case, assert_device_data, assert_native_layout, concrete, missing_capabilities
from ._strategies import cases, other_layouts
from .adapter import ConformanceAdapter

#: Creating paths, each ``(driver, adapter, case, x) -> tensor`` made by ``case.layout()``.
Maker = Callable[[lc.driver.Driver, ConformanceAdapter, Case, np.ndarray], Any]


def _relayout(driver: lc.driver.Driver, adapter: ConformanceAdapter, case: Case, x: np.ndarray) -> Any:
    # From the replicated layout on the same mesh (every driver holds it), so the hook must see the move.
    source = lc.distribute_tensor(x, lc.Layout.replicated(case.mesh(), len(case.shape)))
    return lc.relayout(source, case.layout())


MAKERS: dict[str, Maker] = {
    "distribute_tensor": lambda d, a, c, x: lc.distribute_tensor(x, c.layout()),
    "distribute_framework_tensor": lambda d, a, c, x: lc.distribute_tensor(a.from_numpy(x), c.layout()),
    "pack": lambda d, a, c, x: lc.pack([a.from_numpy(np.array(x[sl])) for sl in c.slices()], c.layout()),
    "relayout": _relayout,
    "call_with_layout": lambda d, a, c, x: lc.call_with_layout(a.ones_fn(), c.layout(), c.shape),
    "Variable": lambda d, a, c, x: lc.Variable(x, c.layout()).value,
}


def assert_public_layout(driver: lc.driver.Driver, tensor: Any, layout: lc.Layout, what: str) -> None:
    """``layoutcore.fetch_layout(tensor)`` is ``layout`` up to the mesh's name and abstractness (a tensor
    no layoutcore call made cannot tell which of several equal meshes the user meant)."""
    got = lc.fetch_layout(tensor)
    assert concrete(driver, got) == concrete(driver, layout), f"{what}: fetch_layout gave {got!r}, expected {layout!r}"


def assert_reading_matches_data(
    driver: lc.driver.Driver, adapter: ConformanceAdapter, tensor: Any, x: np.ndarray, case: Case, what: str
) -> None:
    """Whatever layout ``native_fetch_layout`` reads, the devices hold exactly that layout's oracle slices."""
    got = driver.native_fetch_layout(tensor)
    assert got.mesh is not None, f"{what}: native_fetch_layout returned {got!r} without a mesh"
    read = Case(got.mesh.shape, got.mesh.axis_names, tuple(got.axes), case.shape, case.dtype, got.mesh.devices)
    assert_device_data(adapter, tensor, x, read, what=f"{what}, as native_fetch_layout reads it ({got!r})")


@pytest.mark.parametrize("path", list(MAKERS))
@given(data=st.data())
def test_native_fetch_layout_of_every_creating_path(
    driver: lc.driver.Driver, adapter: ConformanceAdapter, path: str, data: st.DataObject
) -> None:
    case = data.draw(cases(("float32",)), label="case")
    layout = case.layout()
    # The refusals are test_properties' and test_capabilities' business: draw another case, so that a
    # small example budget still checks laid-out tensors on a driver with few capabilities.
    assume(not missing_capabilities(driver, layout, case.shape))
    tensor = MAKERS[path](driver, adapter, case, case.values())
    assert_native_layout(driver, tensor, layout, f"{path} {case}")


@given(data=st.data())
def test_copy_to_mesh_native_layout(driver: lc.driver.Driver, adapter: ConformanceAdapter, data: st.DataObject) -> None:
    case = data.draw(cases(("float32",)), label="case")
    layout = lc.Layout.replicated(case.mesh(), len(case.shape))
    tensor = lc.copy_to_mesh(case.values(), layout)
    assert_native_layout(driver, tensor, layout, f"copy_to_mesh {case}")
    assert_device_data(adapter, tensor, case.values(), case.with_spec((None,) * len(case.shape)), what="copy_to_mesh")


@given(data=st.data())
def test_framework_op_output(driver: lc.driver.Driver, adapter: ConformanceAdapter, data: st.DataObject) -> None:
    """``t + 0`` by the framework: its native layout, its data and the public ``fetch_layout`` of it."""
    case = data.draw(cases(("float32",)), label="case")
    layout = case.layout()
    assume(not missing_capabilities(driver, layout, case.shape))  # draw another (see above)
    x = case.values()
    out = adapter.identity_op(lc.distribute_tensor(x, layout))
    assert driver.is_distributed(out), f"{case}: the framework's t + 0 is not a distributed tensor: {type(out)}"
    assert_reading_matches_data(driver, adapter, out, x, case, "t + 0")
    if x.size:  # JAX and TF lay out an op's empty result as they like (replicated); its data cannot tell
        assert_native_layout(driver, out, layout, f"t + 0 {case}")
        assert_public_layout(driver, out, layout, f"t + 0 {case}")
        assert_device_data(adapter, out, x, case, what="t + 0")


@given(data=st.data())
def test_framework_op_output_after_relayout(
    driver: lc.driver.Driver, adapter: ConformanceAdapter, data: st.DataObject
) -> None:
    """A framework op on a relaid-out tensor keeps the new layout, as the driver reads it."""
    source = data.draw(cases(("float32",)), label="source")
    target = data.draw(other_layouts(source, other_mesh=False), label="target")
    assume(
        not missing_capabilities(driver, source.layout(), source.shape)
        and not missing_capabilities(driver, target.layout(), target.shape)
    )
    x = source.values()
    out = adapter.identity_op(lc.relayout(lc.distribute_tensor(x, source.layout()), target.layout()))
    assert_reading_matches_data(driver, adapter, out, x, target, "t + 0 after relayout")
    if x.size:  # an empty result: see test_framework_op_output
        assert_native_layout(driver, out, target.layout(), f"t + 0 after relayout {source} -> {target}")
        assert_device_data(adapter, out, x, target, what="t + 0 after relayout")
