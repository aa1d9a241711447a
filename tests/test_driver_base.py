"""The Driver base class's own mechanisms, on a driver that reads layouts back natively."""

from __future__ import annotations

import gc
from typing import Any

import numpy as np
import pytest

import layoutcore as lc


class ConcreteOnlyDriver(lc.NumpyDriver):
    """Like a framework driver: its native layout knows only the concrete devices."""

    name = "concrete-only"

    def native_fetch_layout(self, tensor: Any) -> lc.Layout:
        layout: lc.Layout = tensor.layout
        return layout.with_mesh(layout.mesh.with_devices(tensor.devices))

    fetch_layout = lc.Driver.fetch_layout  # the base's, not the NumPy driver's exact shortcut


@pytest.fixture
def driver() -> ConcreteOnlyDriver:
    return ConcreteOnlyDriver(num_devices=4)


def test_fetch_layout_gives_back_the_abstract_mesh_it_was_made_with(driver: ConcreteOnlyDriver) -> None:
    abstract = lc.Layout(["x"], lc.Mesh((2,), ("x",)))
    concrete = lc.Layout(["x"], lc.Mesh((2,), ("x",), devices=["CPU:0", "CPU:1"]))
    a = driver.remember_layout(driver.distribute_tensor(np.arange(4), abstract), abstract)
    c = driver.remember_layout(driver.distribute_tensor(np.arange(4), concrete), concrete)
    assert driver.fetch_layout(a) == abstract
    assert driver.fetch_layout(c) == concrete
    assert driver.fetch_layout(a) != driver.fetch_layout(c)


def test_without_a_record_the_native_layout_is_mapped_to_the_first_bound_mesh(driver: ConcreteOnlyDriver) -> None:
    abstract = lc.Layout(["x"], lc.Mesh((2,), ("x",)))
    t = driver.distribute_tensor(np.arange(4), abstract)  # nothing recorded
    assert driver.recorded_layout(t) is None
    assert driver.fetch_layout(t) == abstract


def test_a_record_lives_as_long_as_its_tensor(driver: ConcreteOnlyDriver) -> None:
    layout = lc.Layout(["x"], lc.Mesh((2,), ("x",)))
    t = driver.remember_layout(driver.distribute_tensor(np.arange(4), layout), layout)
    assert driver.recorded_layout(t) == layout
    del t
    gc.collect()
    assert driver._made_with == {}


def test_objects_that_cannot_be_weakly_referenced_are_not_recorded(driver: ConcreteOnlyDriver) -> None:
    layout = lc.Layout([None], lc.Mesh((2,), ("x",)))
    value = (1, 2)  # tuples take no weak references
    assert driver.remember_layout(value, layout) is value
    assert driver.recorded_layout(value) is None


def test_relayout_within_one_mesh_only_without_the_capability(driver: ConcreteOnlyDriver) -> None:
    class OneMeshDriver(ConcreteOnlyDriver):
        capabilities = lc.NumpyDriver.capabilities - {lc.Capability.RELAYOUT_ACROSS_MESHES}

    one = OneMeshDriver(num_devices=4)
    mesh = lc.Mesh((2,), ("x",))
    t = one.distribute_tensor(np.arange(4), lc.Layout(["x"], mesh))
    assert lc.to_numpy(one.relayout(t, lc.Layout([None], mesh)), driver=one).tolist() == [0, 1, 2, 3]
    for other in (
        lc.Mesh((2,), ("y",)),
        lc.Mesh((2,), ("x",), name="other"),
        lc.Mesh((2,), ("x",), ["CPU:2", "CPU:3"]),
    ):
        with pytest.raises(lc.UnsupportedLayoutError) as info:
            one.relayout(t, lc.Layout([None], other))
        assert info.value.feature == "relayout_across_meshes"
        assert info.value.driver == "concrete-only"
