"""The JAX driver against layoutcore's shard math and the issue's requirements.

Per-device data is read with JAX's own calls (``addressable_shards``) and compared with
``Layout.device_slices`` (layoutcore.geometry), never with the driver's own output.
"""

from __future__ import annotations

import itertools
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import NamedSharding, PartitionSpec, SingleDeviceSharding
from layoutcore_jax import JaxDriver

import layoutcore as lc
from layoutcore import Layout, Mesh

G = np.arange(6 * 4, dtype=np.float32).reshape(6, 4)

# Every layout of a rank-2 tensor on a 3x2 mesh whose dims divide (6, 4): one-axis, multi-axis both orders.
LAYOUTS_6x4 = [
    (None, None),
    ("x", None),
    (None, "y"),
    ("x", "y"),
    ("y", None),
    (("x", "y"), None),
    (("y", "x"), None),
]


def raw_device_data(array: jax.Array) -> dict[str, np.ndarray]:
    """Canonical device name -> that device's data, through JAX only."""
    return {f"CPU:{s.device.id}": np.array(s.data) for s in array.addressable_shards}


def expected_device_data(layout: Layout, devices: tuple[str, ...], x: np.ndarray) -> dict[str, np.ndarray]:
    return {d: x[sl] for d, sl in zip(devices, layout.device_slices(x.shape), strict=True)}


def assert_laid_out(array: jax.Array, layout: Layout, devices: tuple[str, ...], x: np.ndarray) -> None:
    got = raw_device_data(array)
    want = expected_device_data(layout, devices, x)
    assert got.keys() == want.keys()
    for device, data in want.items():
        np.testing.assert_array_equal(got[device], data, err_msg=f"{layout} on {device}")


# -- Mesh -> jax.sharding.Mesh, Layout -> NamedSharding -------------------------------------------
def test_mesh_is_a_jax_mesh_over_the_bound_devices_in_row_major_order(driver: JaxDriver, mesh32: Mesh) -> None:
    sharding = driver.named_sharding(Layout(("x", None), mesh32))
    assert isinstance(sharding, NamedSharding)
    assert sharding.mesh.axis_names == ("x", "y")
    assert [[d.id for d in row] for row in sharding.mesh.devices] == [[0, 1], [2, 3], [4, 5]]
    assert sharding.mesh.axis_types == (jax.sharding.AxisType.Auto,) * 2
    assert sharding.spec == PartitionSpec("x", None)


def test_multi_axis_entry_is_a_tuple_in_the_partition_spec(driver: JaxDriver, mesh32: Mesh) -> None:
    assert driver.named_sharding(Layout((("y", "x"), None), mesh32)).spec == PartitionSpec(("y", "x"), None)


def test_conversions_are_cached_on_the_hashable_values(driver: JaxDriver, mesh32: Mesh) -> None:
    a = driver.named_sharding(Layout(("x", None), mesh32))
    b = driver.named_sharding(Layout(("x", None), Mesh((3, 2), ("x", "y"))))
    assert a is b


def test_explicit_axis_types_when_asked(mesh32: Mesh) -> None:
    drv = JaxDriver(axis_types="explicit")
    t = drv.distribute_tensor(G, Layout(("x", None), mesh32))
    assert t.sharding.mesh.axis_types == (jax.sharding.AxisType.Explicit,) * 2
    assert drv.fetch_layout(t) == Layout(("x", None), mesh32)
    with pytest.raises(lc.LayoutError, match="axis_types"):
        JaxDriver(axis_types="manual")  # type: ignore[arg-type]


def test_why_auto_axes_are_the_default(driver: JaxDriver, mesh32: Mesh) -> None:
    """docs/framework-facts.md#jax-axis-types: with Explicit axes, ordinary user code like ``a @ a.T`` on a sharded array fails to
    type-check; with Auto (the driver's default, as jax.sharding.Mesh and keras) the compiler propagates."""
    auto = driver.distribute_tensor(G, Layout(("x", None), mesh32))
    np.testing.assert_allclose(np.asarray(jax.jit(lambda a: a @ a.T)(auto)), G @ G.T)
    explicit = JaxDriver(axis_types="explicit").distribute_tensor(G, Layout(("x", None), mesh32))
    with pytest.raises(Exception, match="illegally sharded"):
        jax.jit(lambda a: a @ a.T)(explicit)


# -- distribute / unpack / pack ----------------------------------------------------------------------
@pytest.mark.parametrize("axes", LAYOUTS_6x4, ids=str)
def test_distribute_puts_each_devices_block_on_it(driver: JaxDriver, mesh32: Mesh, axes: Any) -> None:
    layout = Layout(axes, mesh32)
    t = lc.distribute_tensor(G, layout, driver="jax")
    assert isinstance(t, jax.Array) and t.shape == G.shape
    assert_laid_out(t, layout, driver.bind_mesh(mesh32), G)


@pytest.mark.parametrize("axes", LAYOUTS_6x4, ids=str)
def test_unpack_is_the_shards_in_mesh_order_and_pack_inverts_it(driver: JaxDriver, mesh32: Mesh, axes: Any) -> None:
    layout = Layout(axes, mesh32)
    t = driver.distribute_tensor(G, layout)
    components = driver.unpack(t)
    slices = layout.device_slices(G.shape)
    assert [c.devices() for c in components] == [{d} for d in t.sharding.mesh.devices.flat]
    for component, sl in zip(components, slices, strict=True):
        np.testing.assert_array_equal(np.asarray(component), G[sl])
    packed = driver.pack(components, layout)
    assert packed.sharding == t.sharding
    assert_laid_out(packed, layout, driver.bind_mesh(mesh32), G)
    # NumPy components are accepted too (placed on their devices).
    from_host = driver.pack([np.asarray(c) for c in components], layout)
    assert_laid_out(from_host, layout, driver.bind_mesh(mesh32), G)


def test_mesh_order_not_device_id_order(driver: JaxDriver) -> None:
    """A permuted device list: component i belongs to the i-th device of the mesh, whatever its id."""
    devices = ["CPU:5", "CPU:3", "CPU:1", "CPU:0", "CPU:2", "CPU:4"]
    mesh = Mesh((3, 2), ("x", "y"), devices)
    layout = Layout(("x", None), mesh)
    t = driver.distribute_tensor(G, layout)
    assert_laid_out(t, layout, tuple(devices), G)
    components = driver.unpack(t)
    assert [next(iter(c.devices())).id for c in components] == [5, 3, 1, 0, 2, 4]
    for component, sl in zip(components, layout.device_slices(G.shape), strict=True):
        np.testing.assert_array_equal(np.asarray(component), G[sl])


def test_pack_checks_before_jax_sees_the_components(driver: JaxDriver, mesh32: Mesh) -> None:
    layout = Layout(("x", None), mesh32)
    inconsistent = [np.full((2, 4), i, np.float32) for i in range(6)]  # y-replicas differ; JAX would accept
    with pytest.raises(lc.LayoutError, match=r"CPU:1"):
        driver.pack(inconsistent, layout)
    with pytest.raises(lc.LayoutError, match="6 components"):
        driver.pack([np.zeros((2, 4), np.float32)] * 5, layout)
    with pytest.raises(lc.LayoutError, match=r"\(3, 4\)"):
        driver.pack([np.zeros((3, 4), np.float32)] * 6, layout, global_shape=(6, 4))


# -- relayout ------------------------------------------------------------------------------------------
def test_relayout_every_pair_device_to_device(driver: JaxDriver, mesh32: Mesh) -> None:
    devices = driver.bind_mesh(mesh32)
    for src, dst in itertools.product(LAYOUTS_6x4, repeat=2):
        t = driver.distribute_tensor(G, Layout(src, mesh32))
        # A host round trip would be a device-to-host transfer, which the guard turns into an error.
        with jax.transfer_guard_device_to_host("disallow"), jax.transfer_guard_host_to_device("disallow"):
            moved = driver.relayout(t, Layout(dst, mesh32))
        assert_laid_out(moved, Layout(dst, mesh32), devices, G)
        assert driver.fetch_layout(moved) == Layout(dst, mesh32)


def test_relayout_across_meshes(driver: JaxDriver, mesh32: Mesh) -> None:
    t = driver.distribute_tensor(G, Layout(("x", None), mesh32))
    other = Mesh((2, 4), ("a", "b"), [f"CPU:{i}" for i in (7, 6, 5, 4, 3, 2, 1, 0)])
    moved = driver.relayout(t, Layout(("a", "b"), other))
    assert_laid_out(moved, Layout(("a", "b"), other), other.devices, G)  # type: ignore[arg-type]


# -- uneven dimensions: refused by layoutcore, before JAX ---------------------------------------------------
@pytest.fixture
def jax_must_not_run(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Make the JAX calls that would see an uneven layout fail loudly if they are reached."""
    reached: list[str] = []
    for name in ("device_put", "make_array_from_single_device_arrays", "jit"):

        def trap(*args: Any, _name: str = name, **kwargs: Any) -> Any:
            reached.append(_name)
            raise AssertionError(f"jax.{_name} was called with an uneven layout")

        monkeypatch.setattr(jax, name, trap)
    return reached


def _assert_names_axis_size_and_shards(exc: lc.UnsupportedLayoutError, axis: int, size: int, shards: int) -> None:
    message = str(exc)
    assert f"tensor axis {axis}" in message and f"size {size}" in message and f"{shards} shards" in message, message
    assert exc.driver == "jax" and exc.feature == "uneven"


def test_uneven_distribute_is_refused_before_jax(driver: JaxDriver, mesh32: Mesh, jax_must_not_run: list[str]) -> None:
    with pytest.raises(lc.UnsupportedLayoutError) as info:
        driver.distribute_tensor(np.zeros((6, 5), np.float32), Layout((None, "y"), mesh32))
    _assert_names_axis_size_and_shards(info.value, 1, 5, 2)
    with pytest.raises(lc.UnsupportedLayoutError) as info:
        driver.distribute_tensor(np.zeros((4,), np.float32), Layout([("x", "y")], mesh32))
    _assert_names_axis_size_and_shards(info.value, 0, 4, 6)
    assert info.value.feature == "uneven" and "uneven_multi_axis" not in driver.capabilities
    assert jax_must_not_run == []


def test_uneven_relayout_pack_and_call_are_refused_before_jax(driver: JaxDriver, mesh32: Mesh) -> None:
    t = driver.distribute_tensor(np.zeros((5, 4), np.float32), Layout((None, "y"), mesh32))
    # The chunk rule's pieces of (5, 4) over x=3 (2, 2, 1 rows), so only the unevenness is refused.
    pieces = [np.zeros((rows, 4), np.float32) for rows in (2, 2, 2, 2, 1, 1)]
    with pytest.MonkeyPatch.context() as mp:
        for name in ("device_put", "make_array_from_single_device_arrays", "jit"):
            mp.setattr(jax, name, lambda *a, _n=name, **k: pytest.fail(f"jax.{_n} reached"))
        with pytest.raises(lc.UnsupportedLayoutError) as info:
            driver.relayout(t, Layout(("x", None), mesh32))
        _assert_names_axis_size_and_shards(info.value, 0, 5, 3)
        with pytest.raises(lc.UnsupportedLayoutError) as info:
            driver.pack(pieces, Layout(("x", None), mesh32), global_shape=(5, 4))
        _assert_names_axis_size_and_shards(info.value, 0, 5, 3)
        with pytest.raises(lc.UnsupportedLayoutError) as info:
            driver.call_with_layout(jnp.zeros, Layout(("x", None), mesh32), (7, 4))
        _assert_names_axis_size_and_shards(info.value, 0, 7, 3)


# -- fetch_layout ---------------------------------------------------------------------------------------------
def test_fetch_layout_returns_the_layout_it_was_made_with(driver: JaxDriver) -> None:
    abstract = Mesh((3, 2), ("x", "y"))
    concrete = Mesh((3, 2), ("x", "y"), [f"CPU:{i}" for i in range(6)])
    named = Mesh((3, 2), ("x", "y"), name="model")
    # The three meshes map to one jax.sharding.Mesh; each array still reports its own.
    made = [
        (driver.distribute_tensor(G, Layout(("x", None), m)), Layout(("x", None), m))
        for m in (abstract, concrete, named)
    ]
    for array, layout in made:
        assert driver.fetch_layout(array) == layout
    assert driver.fetch_layout(driver.relayout(made[0][0], Layout((None, "y"), named))) == Layout((None, "y"), named)


def test_fetch_layout_of_a_jax_computation_converts_its_sharding(driver: JaxDriver, mesh32: Mesh) -> None:
    t = driver.distribute_tensor(G, Layout(("x", "y"), mesh32))
    doubled = jax.jit(lambda a: a * 2)(t)  # a new array JAX made, on the same NamedSharding
    assert driver.fetch_layout(doubled) == Layout(("x", "y"), mesh32)
    raw = jax.device_put(G, NamedSharding(t.sharding.mesh, PartitionSpec("y")))  # spec shorter than the rank
    assert driver.fetch_layout(raw) == Layout(("y", None), mesh32)


def test_single_device_arrays_are_plain_values(driver: JaxDriver, mesh32: Mesh) -> None:
    plain = jnp.asarray(G)
    assert isinstance(plain.sharding, SingleDeviceSharding)
    assert not driver.is_distributed(plain)
    with pytest.raises(lc.NotDistributedError, match="fetch_layout"):
        driver.fetch_layout(plain)
    placed = driver.distribute_tensor(plain, Layout(("x", None), mesh32))  # placed like a NumPy value
    assert_laid_out(placed, Layout(("x", None), mesh32), driver.bind_mesh(mesh32), G)


# -- to_numpy, call_with_layout, Variable ------------------------------------------------------------------------
@pytest.mark.parametrize("axes", LAYOUTS_6x4, ids=str)
def test_to_numpy_is_a_new_writeable_array(driver: JaxDriver, mesh32: Mesh, axes: Any) -> None:
    t = driver.distribute_tensor(G, Layout(axes, mesh32))
    out = driver.to_numpy(t)
    np.testing.assert_array_equal(out, G)
    assert out.dtype == np.float32 and out.flags.writeable
    out[0, 0] = -1  # must not change the array
    assert float(np.asarray(t)[0, 0]) == 0.0


def test_call_with_layout_builds_only_shards(driver: JaxDriver, mesh32: Mesh, monkeypatch: pytest.MonkeyPatch) -> None:
    compiled: list[Any] = []
    real_jit = jax.jit

    def recording_jit(fn: Any, **kwargs: Any) -> Any:
        compiled.append((real_jit(fn, **kwargs), kwargs))
        return compiled[-1][0]

    monkeypatch.setattr(jax, "jit", recording_jit)
    layout = Layout(("x", "y"), mesh32)
    t = driver.call_with_layout(jnp.ones, layout, (600, 400), dtype=jnp.float32)
    assert_laid_out(t, layout, driver.bind_mesh(mesh32), np.ones((600, 400), np.float32))
    ((jitted, kwargs),) = compiled
    assert kwargs["out_shardings"] == driver.named_sharding(layout)
    # The SPMD-partitioned program makes one 200x200 block per device and never the 600x400 value.
    hlo = jitted.lower().compile().as_text()
    assert "f32[200,200]" in hlo and "f32[600,400]" not in hlo
    # Same function and static arguments: the compiled function is reused.
    driver.call_with_layout(jnp.ones, layout, (600, 400), dtype=jnp.float32)
    assert len(compiled) == 1


def test_call_with_layout_traces_array_arguments(driver: JaxDriver, mesh32: Mesh) -> None:
    layout = Layout((None, "y"), mesh32)
    out = driver.call_with_layout(jnp.multiply, layout, G, 3.0)
    np.testing.assert_array_equal(driver.to_numpy(out), G * 3)
    with pytest.raises(lc.LayoutError, match="one array"):
        driver.call_with_layout(lambda: (jnp.ones(6), jnp.ones(6)), Layout(["x"], mesh32))
    with pytest.raises(lc.LayoutError, match="rank"):
        driver.call_with_layout(jnp.ones, layout, (6,))


def test_variable_keeps_its_layout(driver: JaxDriver, mesh32: Mesh) -> None:
    layout = Layout(("x", None), mesh32)
    v = lc.Variable(G, layout, driver="jax")
    v.assign(driver.distribute_tensor(G + 1, layout))
    np.testing.assert_array_equal(v.numpy(), G + 1)
    assert driver.fetch_layout(v.value) == layout
    with pytest.raises(lc.LayoutMismatchError):
        v.assign(driver.distribute_tensor(G, Layout((None, "y"), mesh32)))


@pytest.mark.parametrize("name", ["", "named"])
def test_assigning_an_op_output_read_back_on_an_equal_mesh(driver: JaxDriver, name: str) -> None:
    """``v.assign(v.value + 1)`` where a concrete mesh over the same devices was bound before the
    variable's abstract (or named) one: JAX's output is read back on that first mesh, and is accepted
    (relaid out, no data moved); the same blocks on other devices are still refused."""
    devices = driver.list_devices()[:8]
    axis = f"assign_{name or 'plain'}"  # a mesh no other test of this process has bound
    x = np.arange(16, dtype=np.float32).reshape(8, 2)
    lc.distribute_tensor(x, Layout((axis, None), Mesh((8,), (axis,), devices=devices)), driver=driver)
    layout = Layout((axis, None), Mesh((8,), (axis,), name=name))
    v = lc.Variable(x, layout, driver="jax")
    out = v.value + 1
    assert driver.fetch_layout(out) != layout  # read back on the earlier mesh: the case under test
    v.assign(out)
    np.testing.assert_array_equal(v.numpy(), x + 1)
    assert driver.fetch_layout(v.value) == layout
    reversed_mesh = Mesh((8,), (axis,), devices=devices[::-1])
    with pytest.raises(lc.LayoutMismatchError):
        v.assign(driver.distribute_tensor(x, Layout((axis, None), reversed_mesh)))


def test_list_devices(driver: JaxDriver) -> None:
    assert driver.list_devices() == [f"CPU:{d.id}" for d in jax.devices()]
    assert driver.list_devices("cpu") == driver.list_devices()
    assert driver.list_devices("GPU") == []
