"""The front-end's own mechanisms (layoutcore.driver._frontend), on drivers that read layouts back natively."""

from __future__ import annotations

import concurrent.futures
import gc
from typing import Any

import numpy as np
import pytest

import layoutcore as lc
from layoutcore.driver import _frontend
from layoutcore.numpy import NumpyDriver


class ConcreteOnlyDriver(NumpyDriver):
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
        capabilities = NumpyDriver.capabilities - {lc.driver.Capability.RELAYOUT_ACROSS_MESHES}

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
        type("Bending", (NumpyDriver,), {method: lambda self, *a, **k: None})


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
    needed = lc.driver.required_capabilities(layout, (5,))
    assert lc.driver.Capability.UNEVEN in needed
    with pytest.raises(AttributeError):
        needed.clear()  # type: ignore[attr-defined]
    with pytest.raises(TypeError):
        needed[lc.driver.Capability.UNEVEN] = "x"  # type: ignore[index]
    with pytest.raises(TypeError):
        del needed[lc.driver.Capability.UNEVEN]  # type: ignore[attr-defined]
    assert lc.driver.Capability.UNEVEN in lc.driver.required_capabilities(layout, (5,))

    class EvenOnly(NumpyDriver):
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
    assert len(driver._lc_bound) == 0 and len(driver._lc_origin) == 0


# -- relayout targets remembered as checked and bound ------------------------------------------------------
class EvenOnlyDriver(ConcreteOnlyDriver):
    capabilities = NumpyDriver.capabilities - {lc.driver.Capability.UNEVEN, lc.driver.Capability.UNEVEN_MULTI_AXIS}


def test_a_remembered_target_still_refuses_what_it_does_not_fit() -> None:
    """relayout remembers a target it checked and bound, per (layout, shape, capabilities): the same layout
    for another shape, and any other target, is checked again; a refusal is never remembered."""
    driver = EvenOnlyDriver(num_devices=4)
    mesh = lc.Mesh((4,), ("x",))
    source, target = lc.Layout([None, None], mesh), lc.Layout(["x", None], mesh)
    x = np.arange(32).reshape(8, 4)
    even = driver.distribute_tensor(x, source)
    for _ in range(2):  # the second call passes on the remembered check
        out = driver.relayout(even, target)
        assert np.array_equal(lc.to_numpy(out, driver=driver), x) and driver.fetch_layout(out) == target
        assert [np.array_equal(c, x[2 * i : 2 * i + 2]) for i, c in enumerate(driver.unpack(out))] == [True] * 4
    uneven = driver.distribute_tensor(np.arange(24).reshape(6, 4), source)  # 6 rows: 4 shards do not divide them
    rank3 = driver.distribute_tensor(np.ones((8, 4, 2)), lc.Layout([None] * 3, mesh))
    for _ in range(2):
        with pytest.raises(lc.UnsupportedLayoutError) as info:
            driver.relayout(uneven, target)
        assert info.value.feature == "uneven" and "shape (6, 4)" in str(info.value)
        with pytest.raises(lc.LayoutError):
            driver.relayout(rank3, target)
        for bad in (["x", None], lc.Layout(["x", None])):  # not a Layout; a Layout without a mesh
            with pytest.raises(lc.LayoutError):
                driver.relayout(even, bad)  # type: ignore[arg-type]
        far = lc.Layout(["x", None], lc.Mesh((4,), ("x",), [f"CPU:{i}" for i in range(4, 8)]))
        with pytest.raises(lc.LayoutError, match="CPU:4"):  # devices this driver does not have: binding refuses
            driver.relayout(even, far)


def test_a_remembered_target_is_checked_again_under_other_capabilities() -> None:
    driver = ConcreteOnlyDriver(num_devices=4)  # every capability, uneven too
    mesh = lc.Mesh((4,), ("x",))
    x = np.arange(24).reshape(6, 4)
    t = driver.distribute_tensor(x, lc.Layout([None, None], mesh))
    target = lc.Layout(["x", None], mesh)
    assert np.array_equal(lc.to_numpy(driver.relayout(t, target), driver=driver), x)
    # per instance, as the JAX driver drops a capability across processes
    driver.capabilities = driver.capabilities - {lc.driver.Capability.UNEVEN}  # type: ignore[misc]
    with pytest.raises(lc.UnsupportedLayoutError) as info:
        driver.relayout(t, target)
    assert info.value.feature == "uneven"


def test_forget_meshes_forgets_the_remembered_targets_with_their_devices() -> None:
    class Regrouped(ConcreteOnlyDriver):  # its devices change, as a torch driver's do with a new process group
        def regroup(self, devices: list[str]) -> None:
            self._devices = devices
            self.forget_meshes()

    driver = Regrouped(num_devices=4)
    mesh = lc.Mesh((2,), ("x",))  # abstract: it takes the driver's first two devices
    t = driver.distribute_tensor(np.arange(4), lc.Layout([None], mesh))
    assert driver.relayout(t, lc.Layout(["x"], mesh)).devices == ("CPU:0", "CPU:1")
    driver.regroup(["CPU:2", "CPU:3", "CPU:0", "CPU:1"])
    assert len(driver._lc_targets) == 0 and len(driver._lc_bound) == 0
    t = driver.distribute_tensor(np.arange(4), lc.Layout([None], mesh))
    moved = driver.relayout(t, lc.Layout(["x"], mesh))
    assert moved.devices == tuple(driver.list_devices()[:2]) == ("CPU:2", "CPU:3")


def test_the_remembered_targets_stay_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_frontend, "TARGET_TABLE_SIZE", 8)
    driver = ConcreteOnlyDriver(num_devices=4)
    mesh = lc.Mesh((2,), ("x",))
    for n in range(1, 30):
        t = driver.distribute_tensor(np.arange(2 * n), lc.Layout([None], mesh))
        assert np.array_equal(lc.to_numpy(driver.relayout(t, lc.Layout(["x"], mesh)), driver=driver), np.arange(2 * n))
    assert len(driver._lc_targets) == 8


def test_records_stay_right_under_threads(driver: ConcreteOnlyDriver) -> None:
    """Records are written without a lock: under threads every tensor still reads back the layout it was made
    with (a lost record would read back the mesh without its name), and none outlives its tensor."""
    mesh = lc.Mesh((2,), ("x",), name="named")
    layouts = [lc.Layout(["x"], mesh), lc.Layout([None], mesh)]
    gc.collect()
    before = len(driver._lc_records)

    def work(seed: int) -> None:
        kept: list[Any] = []
        for i in range(300):
            first, second = layouts[(seed + i) % 2], layouts[(seed + i + 1) % 2]
            t = driver.distribute_tensor(np.arange(4), first)
            moved = driver.relayout(t, second)
            assert driver.fetch_layout(t) == first and driver.fetch_layout(moved) == second
            kept = [*kept[-20:], t, moved]
        assert all(driver.fetch_layout(k).mesh == mesh for k in kept)

    with concurrent.futures.ThreadPoolExecutor(4) as pool:
        list(pool.map(work, range(4)))  # re-raises a worker's failure here
    gc.collect()
    assert len(driver._lc_records) == before


def test_the_move_handed_to_the_hook_reads_source_and_dtype_when_asked(driver: ConcreteOnlyDriver) -> None:
    mesh = lc.Mesh((2,), ("x",), name="m")
    t = driver.distribute_tensor(np.arange(4, dtype=np.float32), lc.Layout(["x"], mesh))
    devices = driver.bind_mesh(mesh)
    move = driver.relayout_move(t, lc.Layout([None], mesh), devices)
    concrete = mesh.with_devices(devices)
    assert move.source == lc.Layout(["x"], concrete) and move.target == lc.Layout([None], concrete)
    assert move.dtype == "float32" and move.shape == (4,) and move.devices == devices
    bits = move.retyped("int32")
    assert bits.dtype == "int32" and bits.source == move.source and bits.target == move.target
    assert move.reversed().target == move.source and move.reversed().source == move.target
    unrecorded = driver.native_distribute(np.arange(4, dtype=np.int8), lc.Layout(["x"], concrete), devices)
    native = lc.Layout(["x"], lc.Mesh((2,), ("x",), devices))  # what this driver reads back: no mesh name
    assert driver.relayout_move(unrecorded, lc.Layout([None], mesh), devices).source == native
    assert driver.relayout_move(unrecorded, lc.Layout([None], mesh), devices).dtype == "int8"
    with pytest.raises(lc.LayoutError, match="bound to a mesh"):
        driver.relayout_move(t, lc.Layout([None]), devices)


# -- records are checked against the native truth ---------------------------------------------------------
class LyingDriver(NumpyDriver):
    """Its native_fetch_layout reports every tensor as replicated (a lie the records used to hide)."""

    name = "lying"

    def native_fetch_layout(self, tensor: Any) -> lc.Layout:
        layout: lc.Layout = tensor.layout
        return lc.Layout.replicated(layout.mesh.with_devices(tensor.devices), layout.rank)


def test_fetch_layout_catches_a_lying_native_fetch_layout() -> None:
    driver = LyingDriver(num_devices=4)
    t = driver.distribute_tensor(np.arange(4), lc.Layout(["x"], lc.Mesh((2,), ("x",))))
    with pytest.raises(lc.LayoutcoreError, match="native_fetch_layout"):
        driver.fetch_layout(t)
    # A replicated tensor reads back truthfully, so the same driver answers for it.
    r = driver.distribute_tensor(np.arange(4), lc.Layout([None], lc.Mesh((2,), ("x",))))
    assert driver.fetch_layout(r) == lc.Layout([None], lc.Mesh((2,), ("x",)))


def test_the_call_with_layout_guard_asks_the_tensor_not_the_record() -> None:
    class Sloppy(NumpyDriver):
        name = "sloppy"

        def native_call_with_layout(self, fn, layout, devices, args, kwargs):  # type: ignore[no-untyped-def]
            # Recorded as replicated by the inner distribute_tensor; the guard must still see it.
            return self.distribute_tensor(fn(*args, **kwargs), lc.Layout([None] * layout.rank, layout.mesh))

    with pytest.raises(lc.LayoutcoreError, match="sloppy"):
        Sloppy(num_devices=4).call_with_layout(np.ones, lc.Layout(["x"], lc.Mesh((2,), ("x",))), (4,))


def test_size_one_mesh_axes_agree_with_unsharded() -> None:
    class Unsharding(ConcreteOnlyDriver):  # reads a size-1 axis back as unsharded, as TF does
        def native_fetch_layout(self, tensor: Any) -> lc.Layout:
            layout = super().native_fetch_layout(tensor)
            return lc.Layout([None if a == "x" else a for a in layout.axes], layout.mesh)

    driver = Unsharding(num_devices=4)
    layout = lc.Layout(["x", "y"], lc.Mesh((1, 2), ("x", "y")))
    assert driver.fetch_layout(driver.distribute_tensor(np.ones((2, 2)), layout)) == layout


def test_a_hook_that_returns_its_input_for_a_renamed_mesh_is_refused() -> None:
    class Aliasing(ConcreteOnlyDriver):  # as jax.device_put does for an equal sharding
        def native_relayout(self, tensor: Any, layout: lc.Layout, devices: tuple[str, ...]) -> Any:
            if tensor.layout.axes == layout.axes:
                return tensor
            return super().native_relayout(tensor, layout, devices)

    driver = Aliasing(num_devices=4)
    a_layout = lc.Layout(["x"], lc.Mesh((2,), ("x",), name="a"))
    a = driver.distribute_tensor(np.arange(4), a_layout)
    with pytest.raises(lc.LayoutcoreError, match="new tensor object"):
        driver.relayout(a, lc.Layout(["x"], lc.Mesh((2,), ("x",), name="b")))
    assert driver.fetch_layout(a) == a_layout  # the first handle's answer did not change
    assert driver.relayout(a, a_layout) is a  # the very same layout: the same object is fine


# -- traced values -------------------------------------------------------------------------------------------
class Tracer:
    """A stand-in for a compiler's symbolic value."""

    shape = (4,)
    dtype = np.dtype("float32")


class TracingDriver(NumpyDriver):
    name = "tracing"
    capabilities = NumpyDriver.capabilities - {lc.driver.Capability.TRACED}

    def is_traced(self, value: Any) -> bool:
        return isinstance(value, Tracer)


def test_traced_values_need_the_capability() -> None:
    driver = TracingDriver(num_devices=4)
    layout = lc.Layout(["x"], lc.Mesh((2,), ("x",)))
    for call in (
        lambda: driver.distribute_tensor(Tracer(), layout),
        lambda: driver.relayout(Tracer(), layout),
        lambda: driver.fetch_layout(Tracer()),
    ):
        with pytest.raises(lc.UnsupportedLayoutError) as info:
            call()
        assert info.value.feature == "traced" and info.value.driver == "tracing"


def test_host_reads_of_traced_values_are_refused_even_with_the_capability() -> None:
    class Traces(TracingDriver):
        capabilities = NumpyDriver.capabilities

    for call in (Traces(num_devices=4).to_numpy, Traces(num_devices=4).unpack):
        with pytest.raises(lc.UnsupportedLayoutError) as info:
            call(Tracer())
        assert info.value.feature == "traced"


def test_traced_values_reach_the_hooks_unrecorded_with_the_capability() -> None:
    seen: list[Any] = []

    class Traces(TracingDriver):
        capabilities = NumpyDriver.capabilities

        def native_distribute(self, value: Any, layout: lc.Layout, devices: tuple[str, ...]) -> Any:
            seen.append(value)
            return value  # a sharding constraint gives back a traced value

    driver = Traces(num_devices=4)
    tracer = Tracer()
    assert driver.distribute_tensor(tracer, lc.Layout(["x"], lc.Mesh((2,), ("x",)))) is tracer
    assert seen == [tracer] and driver.recorded_layout(tracer) is None


class CompiledFactory(TracingDriver):
    """A driver whose ``call_with_layout`` hook gives back a traced value (as inside ``jax.jit``); the
    layout its ``native_fetch_layout`` reads there is ``read`` (``None``: not known while tracing)."""

    capabilities = NumpyDriver.capabilities
    read: lc.Layout | None = None

    def native_call_with_layout(
        self, fn: Any, layout: lc.Layout, devices: tuple[str, ...], args: Any, kwargs: Any
    ) -> Any:
        return Tracer()

    def native_fetch_layout(self, tensor: Any) -> lc.Layout:
        if not isinstance(tensor, Tracer):
            return super().native_fetch_layout(tensor)
        if self.read is None:
            raise lc.UnsupportedLayoutError("chosen when it compiles", driver=self.name, feature="traced")
        return self.read


def test_call_with_layout_checks_a_traced_result_and_records_nothing() -> None:
    layout = lc.Layout(["x"], lc.Mesh((2,), ("x",)))
    driver = CompiledFactory(num_devices=4)
    driver.read = layout.with_mesh(layout.mesh.with_devices(driver.bind_mesh(layout.mesh)))  # type: ignore[union-attr]
    out = driver.call_with_layout(np.ones, layout, (4,))
    assert isinstance(out, Tracer) and driver.recorded_layout(out) is None
    driver.read = lc.Layout([None], driver.read.mesh)  # the framework reads another layout: a driver defect
    with pytest.raises(lc.LayoutcoreError, match="produced"):
        driver.call_with_layout(np.ones, layout, (4,))
    driver.read = None  # not known while tracing: the hook's constraint stands
    assert isinstance(driver.call_with_layout(np.ones, layout, (4,)), Tracer)


def test_call_with_layout_refuses_a_traced_result_without_the_capability() -> None:
    class NoTraced(CompiledFactory):
        capabilities = CompiledFactory.capabilities - {lc.driver.Capability.TRACED}

    with pytest.raises(lc.UnsupportedLayoutError) as info:
        NoTraced(num_devices=4).call_with_layout(np.ones, lc.Layout(["x"], lc.Mesh((2,), ("x",))), (4,))
    assert info.value.feature == "traced" and info.value.driver == "tracing"


# -- input validation ----------------------------------------------------------------------------------------
LAYOUT = lc.Layout(["x", None], lc.Mesh((2,), ("x",)))


@pytest.mark.parametrize("bad", [{"a": 1}, None, "text", [[1, 2], [3]]], ids=["dict", "None", "str", "ragged"])
def test_distribute_tensor_refuses_what_is_no_array_naming_it(bad: Any) -> None:
    with pytest.raises(lc.LayoutError) as info:
        lc.distribute_tensor(bad, LAYOUT)
    assert info.value.value is bad


@pytest.mark.parametrize("bad", [None, 3, "ab", {"a": 1}])
def test_pack_refuses_components_that_are_no_sequence(bad: Any) -> None:
    with pytest.raises(lc.LayoutError) as info:
        lc.pack(bad, LAYOUT)
    assert info.value.value is bad and repr(bad)[:10] in str(info.value)


@pytest.mark.parametrize("bad", [5, "ab", (2.5, 2), (-1, 2)])
def test_pack_refuses_a_global_shape_that_is_no_shape(bad: Any) -> None:
    pieces = [np.zeros((2, 2)), np.zeros((2, 2))]
    with pytest.raises(lc.LayoutError) as info:
        lc.pack(pieces, LAYOUT, global_shape=bad)
    assert info.value.value == bad


def test_pack_names_a_component_of_the_wrong_shape_before_any_capability_question() -> None:
    class EvenOnly(NumpyDriver):
        capabilities = frozenset()

    with pytest.raises(lc.LayoutError) as info:  # (2, 4) then (3, 4): no chunk rule gives these
        EvenOnly(num_devices=2).pack([np.zeros((2, 4)), np.zeros((3, 4))], LAYOUT)
    assert not isinstance(info.value, lc.UnsupportedLayoutError)
    assert "Component 0" in str(info.value) and info.value.value == (2, 4)


class TFLikeDType:
    """A framework dtype object NumPy cannot read directly (as TF's, with ``as_numpy_dtype``)."""

    as_numpy_dtype = np.float32

    def __str__(self) -> str:
        return "<dtype: 'float32'>"


class FrameworkTensor:
    """A framework tensor whose dtype is spelled the framework's way."""

    def __init__(self, array: np.ndarray) -> None:
        self._array = array
        self.shape = array.shape
        self.dtype = TFLikeDType()

    def __array__(self, dtype: Any = None, copy: bool | None = None) -> np.ndarray:
        return self._array


def test_pack_mixes_framework_and_numpy_components_of_one_dtype() -> None:
    layout = lc.Layout([None], lc.Mesh((2,), ("x",)))
    t = lc.pack([FrameworkTensor(np.ones(3, np.float32)), np.ones(3, np.float32)], layout)
    assert lc.to_numpy(t).tolist() == [1, 1, 1]
    with pytest.raises(lc.LayoutError, match="one dtype"):
        lc.pack([FrameworkTensor(np.ones(3, np.float32)), np.ones(3, np.float64)], layout)


def test_dtype_names_follow_numpy() -> None:
    import ml_dtypes

    assert _frontend.dtype_name(TFLikeDType()) == "float32"
    assert _frontend.dtype_name(np.float16) == "float16"
    assert _frontend.dtype_name(ml_dtypes.bfloat16) == "bfloat16"
    assert _frontend.dtype_name("torch.bfloat16") == "bfloat16"  # NumPy has no name for it: the framework's


@pytest.mark.parametrize("dtype", ["float16", "float32", "float64", "complex64", "bfloat16", "float8_e4m3fn"])
def test_replicas_holding_nan_pack(dtype: str) -> None:
    import ml_dtypes

    np_dtype = np.dtype(getattr(ml_dtypes, dtype, dtype))
    data = np.array([np.nan, 1.0, 2.0]).astype(np_dtype)
    layout = lc.Layout([None], lc.Mesh((2,), ("x",)))
    t = lc.pack([data, data.copy()], layout)
    wide = np.complex128 if np_dtype.kind == "c" else np.float64
    assert np.array_equal(lc.to_numpy(t).astype(wide), data.astype(wide), equal_nan=True)
    other = data.copy()
    other[1] = 3.0
    with pytest.raises(lc.LayoutError, match="differ"):
        lc.pack([data, other], layout)


def test_relayout_places_a_plain_value_as_distribute_tensor_does() -> None:
    value = np.arange(8).reshape(4, 2)
    placed = lc.relayout(value, LAYOUT)
    assert lc.fetch_layout(placed) == LAYOUT
    assert [c.tolist() for c in lc.unpack(placed)] == [
        c.tolist() for c in lc.unpack(lc.distribute_tensor(value, LAYOUT))
    ]
    assert lc.to_numpy(lc.relayout([[1, 2], [3, 4]], LAYOUT)).tolist() == [[1, 2], [3, 4]]


# -- threads ---------------------------------------------------------------------------------------------------
def test_records_and_bindings_hold_under_threads() -> None:
    from concurrent.futures import ThreadPoolExecutor

    driver = ConcreteOnlyDriver(num_devices=4)

    def work(i: int) -> bool:
        mesh = lc.Mesh((2,), ("x",), name=f"t{i % 7}")
        layout = lc.Layout(["x"], mesh)
        ok = True
        for _ in range(50):
            t = driver.distribute_tensor(np.arange(4) + i, layout)
            r = driver.relayout(t, lc.Layout([None], mesh))
            ok &= driver.fetch_layout(t) == layout and driver.fetch_layout(r) == lc.Layout([None], mesh)
            ok &= driver.to_numpy(r).tolist() == (np.arange(4) + i).tolist()
        return ok

    with ThreadPoolExecutor(8) as pool:
        assert all(pool.map(work, range(32), timeout=120))


@pytest.mark.parametrize("bad", [(True,), (4.0,), [4.5], (-1,), ("4",)])
def test_required_capabilities_validates_shapes_that_hash_like_a_cached_one(bad: Any) -> None:
    layout = lc.Layout(["x"], lc.Mesh((2,), ("x",)))
    assert lc.driver.required_capabilities(layout, (4,)) == {}  # cached for (4,)
    assert lc.driver.required_capabilities(layout, [4]) == {}  # a list is validated, not looked up
    with pytest.raises(lc.LayoutError):
        lc.driver.required_capabilities(layout, bad)


def test_a_driver_that_forgets_super_init_still_works() -> None:
    class Forgetful(NumpyDriver):
        def __init__(self) -> None:  # no super().__init__(): the front-end's tables exist anyway
            self._devices = ["CPU:0", "CPU:1"]

    driver = Forgetful()
    t = driver.distribute_tensor(np.arange(4), lc.Layout(["x"], lc.Mesh((2,), ("x",))))
    assert driver.fetch_layout(t) == lc.Layout(["x"], lc.Mesh((2,), ("x",)))
