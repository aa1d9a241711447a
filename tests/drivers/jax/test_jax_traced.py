"""Traced values: layoutcore's data functions inside ``jax.jit`` (docs/design.md#data-functions-made-precise).

Oracles: JAX's own ``NamedSharding`` of the expected PartitionSpec, per-device data read through
``addressable_shards`` against the shard geometry, and the HLO JAX lowers for its own
``with_sharding_constraint``.
"""

from __future__ import annotations

import re
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import NamedSharding, PartitionSpec
from layoutcore_jax import JaxDriver

import layoutcore as lc
from layoutcore import Layout, Mesh

X = np.arange(8 * 8, dtype=np.float32).reshape(8, 8)


@pytest.fixture
def mesh42(driver: JaxDriver) -> Mesh:
    return Mesh((4, 2), ("batch", "model"))


def _assert_data(array: jax.Array, layout: Layout, x: np.ndarray, driver: JaxDriver) -> None:
    """Each device holds ``x[slice]`` of the geometry, read through JAX."""
    devices = driver.bind_mesh(layout.mesh)  # type: ignore[arg-type]
    got = {f"CPU:{s.device.id}": np.asarray(s.data) for s in array.addressable_shards}
    for device, sl in zip(devices, layout.device_slices(x.shape), strict=True):
        np.testing.assert_array_equal(got[device], x[sl], err_msg=device)


def test_jax_driver_declares_traced_and_its_native_types(driver: JaxDriver) -> None:
    assert lc.driver.Capability.TRACED in driver.capabilities
    array = jnp.ones(3)
    assert f"{type(array).__module__}.{type(array).__qualname__}" in driver.native_types
    seen: list[bool] = []
    jax.jit(lambda v: seen.append(driver.is_traced(v)) or v)(array)
    assert seen == [True] and not driver.is_traced(array) and not driver.is_traced(np.ones(3))


def test_distribute_tensor_inside_jit_gives_the_layout(driver: JaxDriver, mesh42: Mesh) -> None:
    layout = Layout(("batch", None), mesh42)
    fetched: list[Layout] = []

    def f(v: jax.Array) -> jax.Array:
        out = lc.distribute_tensor(v, layout, driver="jax")
        fetched.append(lc.fetch_layout(out, driver="jax"))
        return out * 2

    out = jax.jit(f)(X)
    want = NamedSharding(driver.named_sharding(layout).mesh, PartitionSpec("batch", None))
    assert out.sharding.is_equivalent_to(want, 2), out.sharding  # jit output spec reads P('batch',)
    assert fetched == [layout]
    assert lc.fetch_layout(out, driver="jax") == layout
    _assert_data(out, layout, X * 2, driver)


@pytest.mark.parametrize("axes", [(None, "model"), (("batch", "model"), None), ("model", "batch"), (None, None)])
def test_relayout_inside_jit(driver: JaxDriver, mesh42: Mesh, axes: tuple[Any, ...]) -> None:
    source = lc.distribute_tensor(X, Layout(("batch", None), mesh42), driver="jax")
    target = Layout(axes, mesh42)
    out = jax.jit(lambda v: lc.relayout(v, target, driver="jax"))(source)
    assert lc.fetch_layout(out, driver="jax") == target
    _assert_data(out, target, X, driver)


def test_fetch_layout_of_a_tracer_jax_has_not_fixed_is_refused_typed(driver: JaxDriver, mesh42: Mesh) -> None:
    source = lc.distribute_tensor(X, Layout(("batch", None), mesh42), driver="jax")

    def f(v: jax.Array) -> jax.Array:
        lc.fetch_layout(v + 1, driver="jax")  # Auto axes: XLA picks this sharding when it compiles
        return v

    with pytest.raises(lc.UnsupportedLayoutError) as info:
        jax.jit(f)(source)
    assert info.value.feature == "traced" and info.value.driver == "jax"


def test_fetch_layout_inside_jit_on_explicit_axes_reads_jax_types(mesh42: Mesh) -> None:
    driver = JaxDriver(axis_types="explicit")
    layout = Layout(("batch", None), mesh42)
    source = driver.distribute_tensor(X, layout)
    seen: list[Layout] = []

    def f(v: jax.Array) -> jax.Array:
        seen.append(driver.fetch_layout(v + 1))
        return v

    with jax.set_mesh(source.sharding.mesh):
        jax.jit(f)(source)
    # JAX's type carries the spec on an abstract mesh of the same shape and names.
    assert seen == [Layout(("batch", None), Mesh((4, 2), ("batch", "model")))]


def test_explicit_axes_inside_jit_need_a_mesh_and_say_so(mesh42: Mesh) -> None:
    from layoutcore_jax import to_jax_mesh

    driver = JaxDriver(axis_types="explicit")
    layout = Layout((None, "model"), mesh42)
    with pytest.raises(lc.UnsupportedLayoutError, match=r"jax\.set_mesh") as info:
        jax.jit(lambda v: driver.distribute_tensor(v, layout))(X)  # a NumPy input: no mesh anywhere
    assert info.value.feature == "traced"
    with jax.set_mesh(to_jax_mesh(mesh42, axis_types="explicit")):
        out = jax.jit(lambda v: driver.distribute_tensor(v, layout))(X)
    assert driver.fetch_layout(out) == layout
    _assert_data(out, layout, X, driver)


@pytest.mark.parametrize("axes", [(None, "model"), ("batch", "model"), (("model", "batch"), None), (None, None)])
def test_call_with_layout_inside_jit(driver: JaxDriver, mesh42: Mesh, axes: tuple[Any, ...]) -> None:
    # docs/design.md#data-functions-made-precise: the driver's hook constrains the traced result (a nested jit with out_shardings); the
    # front-end checks the layout it reads there and hands the tracer back unrecorded.
    layout = Layout(axes, mesh42)
    want = NamedSharding(driver.named_sharding(layout).mesh, PartitionSpec(*axes))
    fetched: list[Layout] = []

    def make() -> jax.Array:
        out = lc.call_with_layout(jnp.ones, layout, (8, 4), driver="jax")
        fetched.append(lc.fetch_layout(out, driver="jax"))
        assert driver.recorded_layout(out) is None  # a tracer: no host-side record
        return out

    ones = jax.jit(make)()
    assert ones.sharding.is_equivalent_to(want, 2), ones.sharding
    assert fetched == [layout] and lc.fetch_layout(ones, driver="jax") == layout
    _assert_data(ones, layout, np.ones((8, 4), np.float32), driver)
    scaled = jax.jit(lambda v: lc.call_with_layout(lambda a: a * 3, layout, v, driver="jax"))(X)
    assert scaled.sharding.is_equivalent_to(want, 2), scaled.sharding
    _assert_data(scaled, layout, X * 3, driver)


def test_call_with_layout_inside_jit_on_explicit_axes(mesh42: Mesh) -> None:
    from layoutcore_jax import to_jax_mesh

    # Explicit axes: the layout is part of JAX's type while tracing, which the front-end checks (a nested
    # jit's out_shardings alone came back replicated there, jax 0.10.2).
    driver = JaxDriver(axis_types="explicit")
    layout = Layout((None, "model"), mesh42)
    source = driver.distribute_tensor(X, Layout(("batch", None), mesh42))
    with jax.set_mesh(to_jax_mesh(mesh42, axis_types="explicit")):
        ones = jax.jit(lambda: driver.call_with_layout(jnp.ones, layout, (8, 4)))()
        scaled = jax.jit(lambda v: driver.call_with_layout(lambda a: a * 2, layout, v))(source)
    want = PartitionSpec(None, "model")
    for out, expected in ((ones, np.ones((8, 4), np.float32)), (scaled, X * 2)):
        assert out.sharding.spec == want and driver.fetch_layout(out) == layout
        _assert_data(out, layout, expected, driver)


def test_call_with_layout_inside_jit_checks_the_layout_jax_reads(mesh42: Mesh) -> None:
    class Wrong(JaxDriver):  # a defective hook: constrains the traced result by another layout
        def native_call_with_layout(self, fn: Any, layout: Layout, devices: Any, args: Any, kwargs: Any) -> Any:
            other = Layout(tuple(reversed(layout.axes)), layout.mesh)
            return super().native_call_with_layout(fn, other, devices, args, kwargs)

    driver = Wrong()
    with pytest.raises(lc.LayoutcoreError, match="call_with_layout produced"):
        jax.jit(lambda: driver.call_with_layout(jnp.ones, Layout(("batch", "model"), mesh42), (8, 4)))()


def test_uneven_layout_inside_jit_is_refused_typed(driver: JaxDriver, mesh42: Mesh) -> None:
    with pytest.raises(lc.UnsupportedLayoutError) as info:
        jax.jit(lambda v: lc.distribute_tensor(v, Layout(("batch", None), mesh42), driver="jax"))(np.ones((6, 2)))
    assert info.value.feature == "uneven"


def _hlo(fn: Any, x: Any) -> str:
    """The lowered StableHLO module text without the function's name and source locations."""
    text = jax.jit(fn).lower(x).as_text()
    return re.sub(r"@jit_\w+|loc\(.*?\)", "", text)


def test_traced_relayout_adds_nothing_beyond_jax_sharding_constraint(driver: JaxDriver, mesh42: Mesh) -> None:
    layout = Layout((None, "model"), mesh42)
    sharding = driver.named_sharding(layout)
    source = lc.distribute_tensor(X, Layout(("batch", None), mesh42), driver="jax")
    ours = _hlo(lambda v: lc.relayout(v, layout, driver="jax") + 1, source)
    theirs = _hlo(lambda v: jax.lax.with_sharding_constraint(v, sharding) + 1, source)
    assert "sharding_constraint" in theirs
    assert ours == theirs
