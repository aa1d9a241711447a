"""The public surface of contract §1-3: names, error types, dispatch, and capability gating in
the Driver base class."""

from __future__ import annotations

import numpy as np
import pytest

import layoutcore
from layoutcore import (
    AmbiguousLayoutError,
    DriverNotFoundError,
    DriverUnavailableError,
    Layout,
    LayoutcoreError,
    LayoutError,
    LayoutMismatchError,
    Mesh,
    UnsupportedLayoutError,
    use_driver,
)
from layoutcore.driver import Capability, register_driver, required_capabilities
from layoutcore.numpy import NumpyDriver

# Every name the contract (docs/design.md) promises.
CONTRACT_NAMES = [
    "Mesh",
    "DeviceMesh",
    "create_mesh",
    "Layout",
    "TensorLayout",
    "UNSHARDED",
    "LayoutMap",
    "layout_map_scope",
    "get_driver",
    "available_drivers",
    "use_driver",
    "set_driver",
    "list_devices",
    "distribute_tensor",
    "unpack",
    "pack",
    "relayout",
    "fetch_layout",
    "copy_to_mesh",
    "to_numpy",
    "call_with_layout",
    "Variable",
    "DVariable",
    "LayoutcoreError",
    "LayoutError",
    "AmbiguousLayoutError",
    "LayoutMismatchError",
    "UnsupportedLayoutError",
    "DriverNotFoundError",
    "DriverUnavailableError",
]


def test_contract_names_are_exported() -> None:
    missing = [n for n in CONTRACT_NAMES if n not in layoutcore.__all__ or not hasattr(layoutcore, n)]
    assert missing == []
    assert all(hasattr(layoutcore, n) for n in layoutcore.__all__)
    assert layoutcore.UNSHARDED == "unsharded"
    assert layoutcore.DeviceMesh is layoutcore.Mesh and layoutcore.TensorLayout is layoutcore.Layout
    assert layoutcore.DVariable is layoutcore.Variable


@pytest.mark.parametrize(
    ("error", "bases"),
    [
        (LayoutError, (LayoutcoreError, ValueError)),
        (AmbiguousLayoutError, (LayoutError,)),
        (LayoutMismatchError, (LayoutError,)),
        (UnsupportedLayoutError, (LayoutcoreError, NotImplementedError)),
        (DriverNotFoundError, (LayoutcoreError,)),
        (DriverUnavailableError, (LayoutcoreError,)),
        (layoutcore.ConfigurationError, (LayoutcoreError, ValueError)),
        (layoutcore.NotDistributedError, (LayoutcoreError, TypeError)),
    ],
)
def test_error_hierarchy(error: type, bases: tuple[type, ...]) -> None:
    assert all(issubclass(error, b) for b in bases)


def test_errors_carry_the_value() -> None:
    with pytest.raises(LayoutError) as info:
        Mesh((0,), ("x",))
    assert info.value.value == (0,)


def test_public_functions_are_annotated() -> None:
    import inspect

    for name in CONTRACT_NAMES:
        obj = getattr(layoutcore, name)
        if inspect.isfunction(obj):
            signature = inspect.signature(obj)
            assert signature.return_annotation is not inspect.Signature.empty, name
            assert all(p.annotation is not inspect.Parameter.empty for p in signature.parameters.values()), name
            assert obj.__doc__, name


# -- capability gating in the inherited methods ---------------------------------------------------------
class EvenOnly(NumpyDriver):
    """A driver declaring no capability: the base class must refuse what it cannot express."""

    name = "evenonly"
    capabilities = frozenset()


MESH = Mesh((3, 2), ("x", "y"))


@pytest.mark.parametrize(
    ("axes", "shape", "feature"),
    [
        (("x", None), (5, 2), "uneven"),
        ((("x", "y"), None), (6, 2), "multi_axis"),
        ((("y", "x"), None), (6, 2), "multi_axis"),
        ((("x", "y"), None), (7, 2), "multi_axis"),
    ],
)
def test_missing_capability_raises_unsupported_naming_driver_and_feature(
    axes: tuple, shape: tuple[int, int], feature: str
) -> None:
    driver = EvenOnly()
    with pytest.raises(UnsupportedLayoutError) as info:
        layoutcore.distribute_tensor(np.zeros(shape), Layout(axes, MESH), driver=driver)
    assert info.value.driver == "evenonly" and info.value.feature == feature
    assert "evenonly" in str(info.value) and str(shape) in str(info.value)


def test_each_capability_is_checked_on_its_own() -> None:
    class MultiAxisOnly(NumpyDriver):
        name = "multionly"
        capabilities = frozenset({Capability.MULTI_AXIS, Capability.UNEVEN})

    driver = MultiAxisOnly()
    ok = layoutcore.distribute_tensor(np.zeros((6, 2)), Layout([("x", "y"), None], MESH), driver=driver)
    assert len(driver.unpack(ok)) == 6
    with pytest.raises(UnsupportedLayoutError) as info:
        driver.distribute_tensor(np.zeros((6, 2)), Layout([("y", "x"), None], MESH))
    assert info.value.feature == "multi_axis_any_order"
    with pytest.raises(UnsupportedLayoutError) as info:
        driver.distribute_tensor(np.zeros((7, 2)), Layout([("x", "y"), None], MESH))
    assert info.value.feature == "uneven_multi_axis"
    t = driver.distribute_tensor(np.zeros((6, 2)), Layout(["x", None], MESH))
    with pytest.raises(UnsupportedLayoutError) as info:
        driver.relayout(t, Layout(["a", None], Mesh((2,), ("a",))))
    assert info.value.feature == "relayout_across_meshes"
    uneven = [np.zeros((2, 2))] * 4 + [np.zeros((0, 2))] * 2  # 4 rows over 3: 2, 2, 0
    assert EvenOnly().name == "evenonly" and driver.pack(uneven, Layout(["x", None], MESH)).shape == (4, 2)
    with pytest.raises(UnsupportedLayoutError, match="uneven"):
        EvenOnly().pack(uneven, Layout(["x", None], MESH))


def test_required_capabilities() -> None:
    assert required_capabilities(Layout(["x", None], MESH), (6, 2)) == {}
    assert set(required_capabilities(Layout([("y", "x"), None], MESH), (7, 2))) == {
        Capability.MULTI_AXIS,
        Capability.MULTI_AXIS_ANY_ORDER,
        Capability.UNEVEN,
        Capability.UNEVEN_MULTI_AXIS,
    }
    assert str(Capability.UNEVEN) == "uneven" and Capability("multi_axis") is Capability.MULTI_AXIS


def test_module_functions_dispatch_to_the_active_driver() -> None:
    register_driver("evenonly", EvenOnly)
    layout = Layout(["x", None], MESH)
    with use_driver("evenonly"):
        with pytest.raises(UnsupportedLayoutError, match="evenonly"):
            layoutcore.distribute_tensor(np.zeros((5, 2)), layout)
        t = layoutcore.distribute_tensor(np.zeros((6, 2)), layout, driver="numpy")  # driver= wins
        assert layoutcore.to_numpy(t, driver="numpy").shape == (6, 2)
    assert layoutcore.to_numpy(layoutcore.distribute_tensor(np.zeros((5, 2)), layout)).shape == (5, 2)


def test_call_with_layout_refuses_a_driver_that_returns_another_layout() -> None:
    class Sloppy(NumpyDriver):
        name = "sloppy"

        def native_call_with_layout(self, fn, layout, devices, args, kwargs):  # type: ignore[no-untyped-def]
            return self.distribute_tensor(fn(*args, **kwargs), Layout([None] * layout.rank, layout.mesh))

    with pytest.raises(LayoutcoreError, match="sloppy"):
        layoutcore.call_with_layout(np.ones, Layout(["x", None], MESH), (6, 2), driver=Sloppy())
