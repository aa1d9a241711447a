"""The front-end's own mechanisms (layoutcore._frontend), on drivers that read layouts back natively."""

from __future__ import annotations

import gc
from typing import Any

import numpy as np
import pytest

import layoutcore as lc
from layoutcore import _frontend


class ConcreteOnlyDriver(lc.NumpyDriver):
    """Like a framework driver: its native layout knows only the concrete devices, not the mesh's
    name or abstractness."""

    name = "concrete-only"

    def native_fetch_layout(self, tensor: Any) -> lc.Layout:
        layout: lc.Layout = tensor.layout
        mesh = lc.Mesh(layout.mesh.shape, layout.mesh.axis_names, devices=tensor.devices)  # name dropped
        return layout.with_mesh(mesh)


@pytest.fixture
def driver() -> ConcreteOnlyDriver:
    return ConcreteOnlyDriver(num_devices=4)


def test_every_hook_result_is_recorded_without_the_driver_asking(driver: ConcreteOnlyDriver) -> None:
    abstract = lc.Layout(["x"], lc.Mesh((2,), ("x",), name="m"))
    concrete = lc.Layout(["x"], lc.Mesh((2,), ("x",), devices=["CPU:0", "CPU:1"]))
    a = driver.distribute_tensor(np.arange(4), abstract)
    c = driver.distribute_tensor(np.arange(4), concrete)
    assert driver.fetch_layout(a) == abstract
    assert driver.fetch_layout(c) == concrete
    assert driver.fetch_layout(a) != driver.fetch_layout(c)
    packed = driver.pack(driver.unpack(a), abstract)
    moved = driver.relayout(a, lc.Layout([None], abstract.mesh))
    made = driver.call_with_layout(np.arange, abstract, 4)
    assert [driver.recorded_layout(t) for t in (packed, moved, made)] == [abstract, moved.layout, abstract]


def test_without_a_record_the_native_layout_is_mapped_to_the_first_bound_mesh(driver: ConcreteOnlyDriver) -> None:
    abstract = lc.Layout(["x"], lc.Mesh((2,), ("x",)))
    devices = driver.bind_mesh(abstract.mesh)  # type: ignore[arg-type]
    t = driver.native_distribute(np.arange(4), abstract, devices)  # as a framework operation makes one: no record
    assert driver.recorded_layout(t) is None
    assert driver.fetch_layout(t) == abstract


def test_a_record_lives_as_long_as_its_tensor(driver: ConcreteOnlyDriver) -> None:
    layout = lc.Layout(["x"], lc.Mesh((2,), ("x",)))
    gc.collect()
    before = len(driver._lc_records)
    t = driver.distribute_tensor(np.arange(4), layout)
    assert driver.recorded_layout(t) == layout
    assert len(driver._lc_records) == before + 1
    del t
    gc.collect()
    assert len(driver._lc_records) == before


def test_objects_that_cannot_be_weakly_referenced_are_not_recorded(driver: ConcreteOnlyDriver) -> None:
    layout = lc.Layout([None], lc.Mesh((2,), ("x",)))
    value = (1, 2)  # tuples take no weak references
    assert driver._record(value, layout) is value
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


@pytest.mark.parametrize("method", sorted(_frontend._FINAL_METHODS))
def test_no_driver_can_override_a_front_end_method(method: str) -> None:
    with pytest.raises(TypeError, match=method):
        type("Bending", (lc.NumpyDriver,), {method: lambda self, *a, **k: None})


def test_the_front_end_methods_are_final() -> None:
    public = {
        "bind_mesh",
        "call_with_layout",
        "check_layout",
        "copy_to_mesh",
        "distribute_tensor",
        "fetch_layout",
        "pack",
        "recorded_layout",
        "relayout",
        "require_distributed",
        "to_numpy",
        "unpack",
    }
    assert public <= _frontend._FINAL_METHODS
    assert not {name for name in _frontend._FINAL_METHODS if name.startswith("native_")}


def test_required_capabilities_cannot_be_changed_by_a_caller() -> None:
    mesh = lc.Mesh((3,), ("x",))
    layout = lc.Layout(["x"], mesh)
    needed = lc.required_capabilities(layout, (5,))
    assert lc.Capability.UNEVEN in needed
    with pytest.raises(AttributeError):
        needed.clear()  # type: ignore[attr-defined]
    with pytest.raises(TypeError):
        needed[lc.Capability.UNEVEN] = "x"  # type: ignore[index]
    with pytest.raises(TypeError):
        del needed[lc.Capability.UNEVEN]  # type: ignore[attr-defined]
    assert lc.Capability.UNEVEN in lc.required_capabilities(layout, (5,))

    class EvenOnly(lc.NumpyDriver):
        capabilities = frozenset()

    with pytest.raises(lc.UnsupportedLayoutError) as info:
        EvenOnly(num_devices=3).distribute_tensor(np.arange(5), layout)
    assert info.value.feature == "uneven"


def test_mesh_tables_stay_bounded_over_thousands_of_meshes(driver: ConcreteOnlyDriver) -> None:
    for i in range(_frontend.MESH_TABLE_SIZE * 3):
        mesh = lc.Mesh((2,), ("x",), name=f"m{i}")
        t = driver.distribute_tensor(np.arange(4), lc.Layout(["x"], mesh))
        assert driver.fetch_layout(t).mesh == mesh
    assert len(driver._lc_bound) <= _frontend.MESH_TABLE_SIZE
    assert len(driver._lc_origin) <= _frontend.MESH_TABLE_SIZE
    # An evicted binding is recomputed on use.
    first = lc.Mesh((2,), ("x",), name="m0")
    assert driver.bind_mesh(first) == ("CPU:0", "CPU:1")


def test_forget_meshes_drops_every_binding(driver: ConcreteOnlyDriver) -> None:
    driver.bind_mesh(lc.Mesh((2,), ("x",)))
    driver.forget_meshes()
    assert driver._lc_bound == {} and driver._lc_origin == {}
