"""Property tests over random meshes (rank <= 3, <= 8 devices), layouts (multi-axis in any
order, uneven, replicated) and shapes (zero-size included), in several dtypes.

Every test first asks whether the driver declares the capabilities the case needs
(``layoutcore.driver.required_capabilities`` vs ``driver.capabilities``). If it does, the data must
equal the oracle; if it does not, the same call must raise ``UnsupportedLayoutError`` naming the
driver and the capability. No case is skipped: an unsupported case is a test of the refusal.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import layoutcore as lc

from ._oracle import (
    Case,
    assert_device_data,
    assert_refused,
    missing_capabilities,
    needs_cross_mesh,
)
from ._strategies import cases, other_layouts
from .adapter import ConformanceAdapter


def distribute_or_refuse(driver: lc.driver.Driver, value: Any, case: Case, what: str = "distribute_tensor") -> Any:
    """``distribute_tensor(value, layout)``, or ``None`` once its refusal has been checked."""
    layout = case.layout()
    missing = missing_capabilities(driver, layout, case.shape)
    if missing:
        assert_refused(driver, missing, lambda: lc.distribute_tensor(value, layout), f"{what} {case}")
        return None
    return lc.distribute_tensor(value, layout)


@given(data=st.data())
def test_device_data_matches_oracle(driver: lc.driver.Driver, adapter: ConformanceAdapter, data: st.DataObject) -> None:
    case = data.draw(cases(adapter.dtypes), label="case")
    x = case.values()
    tensor = distribute_or_refuse(driver, x, case)
    if tensor is not None:
        assert_device_data(adapter, tensor, x, case)


@given(data=st.data())
def test_framework_input_matches_oracle(
    driver: lc.driver.Driver, adapter: ConformanceAdapter, data: st.DataObject
) -> None:
    """Distributing a framework-native (undistributed) tensor, not a NumPy array."""
    case = data.draw(cases(adapter.dtypes), label="case")
    x = case.values()
    tensor = distribute_or_refuse(driver, adapter.from_numpy(x), case)
    if tensor is not None:
        assert_device_data(adapter, tensor, x, case)


@given(data=st.data())
def test_to_numpy_round_trip(driver: lc.driver.Driver, adapter: ConformanceAdapter, data: st.DataObject) -> None:
    case = data.draw(cases(adapter.dtypes), label="case")
    x = case.values()
    tensor = distribute_or_refuse(driver, x, case)
    if tensor is not None:
        out = lc.to_numpy(tensor)
        assert isinstance(out, np.ndarray), type(out)
        assert out.shape == x.shape and out.dtype == x.dtype, (out.shape, out.dtype)
        assert np.array_equal(out, x), f"{case}: to_numpy gave\n{out}\nexpected\n{x}"


@given(data=st.data())
def test_fetch_layout_round_trip(driver: lc.driver.Driver, adapter: ConformanceAdapter, data: st.DataObject) -> None:
    case = data.draw(cases(adapter.dtypes), label="case")
    tensor = distribute_or_refuse(driver, case.values(), case)
    if tensor is not None:
        layout = case.layout()
        got = lc.fetch_layout(tensor)
        assert got == layout, f"fetch_layout gave {got!r}, made with {layout!r}"
        assert hash(got) == hash(layout)
        assert got.mesh == case.mesh()  # the user's mesh, abstract or concrete, name included


@given(data=st.data())
def test_pack_unpack_identity(driver: lc.driver.Driver, adapter: ConformanceAdapter, data: st.DataObject) -> None:
    case = data.draw(cases(adapter.dtypes), label="case")
    x = case.values()
    layout = case.layout()
    missing = missing_capabilities(driver, layout, case.shape)
    # Components built from the oracle slices, as framework tensors: what a user packs.
    pieces = [adapter.from_numpy(np.array(x[sl])) for sl in case.slices()]
    if missing:
        assert_refused(driver, missing, lambda: lc.pack(pieces, layout, global_shape=case.shape), f"pack {case}")
        assert_refused(driver, missing, lambda: lc.distribute_tensor(x, layout), f"distribute_tensor {case}")
        return
    packed = lc.pack(pieces, layout, global_shape=case.shape)
    assert_device_data(adapter, packed, x, case, what="pack(oracle pieces)")
    assert lc.fetch_layout(packed) == layout

    tensor = lc.distribute_tensor(x, layout)
    components = lc.unpack(tensor)
    assert len(components) == case.size, f"unpack gave {len(components)} components for {case.size} devices"
    for (start, stop), component in zip(_bounds(case), components, strict=True):
        got = driver.component_to_numpy(component)
        want = x[tuple(slice(a, b) for a, b in zip(start, stop, strict=True))]
        assert got.shape == want.shape and np.array_equal(got, want), f"{case}: unpack component {got} != {want}"
    repacked = lc.pack(components, layout)  # global shape inferred from the components
    assert_device_data(adapter, repacked, x, case, what="pack(unpack(t))")
    assert lc.fetch_layout(repacked) == layout
    assert np.array_equal(lc.to_numpy(repacked), x)


def _bounds(case: Case) -> list[tuple[tuple[int, ...], tuple[int, ...]]]:
    return [(tuple(s.start for s in sl), tuple(s.stop for s in sl)) for sl in case.slices()]


@given(data=st.data(), other_mesh=st.booleans())
def test_relayout_there_and_back(
    driver: lc.driver.Driver, adapter: ConformanceAdapter, data: st.DataObject, other_mesh: bool
) -> None:
    source = data.draw(cases(adapter.dtypes), label="source")
    target = data.draw(other_layouts(source, other_mesh=other_mesh), label="target")
    x = source.values()
    tensor = distribute_or_refuse(driver, x, source)
    if tensor is None:
        return
    missing = missing_capabilities(driver, target.layout(), target.shape)
    if (
        needs_cross_mesh(driver, source, target)
        and lc.driver.Capability.RELAYOUT_ACROSS_MESHES not in driver.capabilities
    ):
        missing.add(lc.driver.Capability.RELAYOUT_ACROSS_MESHES.value)
    if missing:
        assert_refused(driver, missing, lambda: lc.relayout(tensor, target.layout()), f"relayout {source} -> {target}")
        return
    moved = lc.relayout(tensor, target.layout())
    assert_device_data(adapter, moved, x, target, what="relayout there")
    assert lc.fetch_layout(moved) == target.layout()
    back = lc.relayout(moved, source.layout())
    assert_device_data(adapter, back, x, source, what="relayout back")
    assert lc.fetch_layout(back) == source.layout()
    # The source is untouched by relayout.
    assert_device_data(adapter, tensor, x, source, what="source after relayout")


@given(data=st.data())
def test_call_with_layout(driver: lc.driver.Driver, adapter: ConformanceAdapter, data: st.DataObject) -> None:
    """``call_with_layout(ones, layout, shape)``: every device holds ones of its chunk-rule shape.

    The function is the framework's own ``ones`` (``adapter.ones_fn()``), called with the shape
    as its one positional argument, as ``dtensor.call_with_layout(tf.ones, layout, shape)``.
    Uniform values cannot show a swapped block, but uneven layouts show wrong shapes; placement
    itself is checked by the other properties.
    """
    case = data.draw(cases(adapter.dtypes), label="case")
    layout = case.layout()
    ones = adapter.ones_fn()
    missing = missing_capabilities(driver, layout, case.shape)
    if missing:
        assert_refused(
            driver, missing, lambda: lc.call_with_layout(ones, layout, case.shape), f"call_with_layout {case}"
        )
        return
    tensor = lc.call_with_layout(ones, layout, case.shape)
    assert lc.fetch_layout(tensor) == layout
    raw = adapter.device_data(tensor)
    dtype = raw[0][1].dtype if raw else np.dtype("float32")
    assert_device_data(adapter, tensor, np.ones(case.shape, dtype=dtype), case, what="call_with_layout(ones)")


@given(data=st.data())
def test_variable(driver: lc.driver.Driver, adapter: ConformanceAdapter, data: st.DataObject) -> None:
    case = data.draw(cases(adapter.dtypes), label="case")
    other = data.draw(other_layouts(case, other_mesh=False), label="other layout")
    layout = case.layout()
    x = case.values()
    missing = missing_capabilities(driver, layout, case.shape)
    if missing:
        assert_refused(driver, missing, lambda: lc.Variable(x, layout), f"Variable {case}")
        return
    variable = lc.Variable(x, layout)
    assert variable.layout == layout and lc.fetch_layout(variable) == layout
    assert variable.shape == case.shape
    assert_device_data(adapter, variable.value, x, case, what="Variable")

    y = x[::-1].copy() if x.ndim else x.copy()
    variable.assign(adapter.from_numpy(y))
    assert_device_data(adapter, variable.value, y, case, what="Variable.assign(plain value)")
    variable.assign(lc.distribute_tensor(x, layout))
    assert_device_data(adapter, variable.value, x, case, what="Variable.assign(same layout)")

    other_layout = other.layout()
    if other_layout != layout and not missing_capabilities(driver, other_layout, case.shape):
        with pytest.raises(lc.LayoutMismatchError):
            variable.assign(lc.distribute_tensor(y, other_layout))
        assert variable.layout == layout
        assert_device_data(adapter, variable.value, x, case, what="Variable after a refused assign")
