"""Bad inputs on the JAX driver: dtypes JAX cannot hold, big-endian data, and relayouts JAX answers with its input."""

from __future__ import annotations

import numpy as np
import pytest
from layoutcore_jax import JaxDriver

import layoutcore as lc
from layoutcore import Layout, Mesh


@pytest.fixture
def mesh42(driver: JaxDriver) -> Mesh:
    return Mesh((4, 2), ("x", "y"))


@pytest.mark.parametrize(
    "value",
    [
        np.array([["ab", "cd"]] * 8),
        np.array([[b"ab", b"cd"]] * 8),
        np.full((8, 2), object()),
        np.zeros((8, 2), dtype="datetime64[s]"),
        np.zeros((8, 2), dtype=[("a", "f4"), ("b", "i4")]),
        [["a", "b"]] * 8,
    ],
    ids=["str", "bytes", "object", "datetime", "record", "nested-list-of-str"],
)
def test_dtypes_jax_cannot_hold_are_refused_typed(driver: JaxDriver, mesh42: Mesh, value: object) -> None:
    layout = Layout(("x", None), mesh42)
    with pytest.raises(lc.LayoutcoreError) as info:  # never JAX's TypeError
        lc.distribute_tensor(value, layout, driver="jax")
    assert isinstance(info.value, lc.UnsupportedLayoutError | lc.LayoutError)
    array = np.asarray(value)
    with pytest.raises(lc.LayoutcoreError):
        lc.pack([array[s] for s in layout.device_slices(array.shape)], layout, driver="jax")
    with pytest.raises(lc.UnsupportedLayoutError) as refused:
        driver.prepare_input(array)
    assert refused.value.feature == "dtype" and refused.value.driver == "jax"


@pytest.mark.parametrize("dtype", [">f4", ">i4", ">u2", ">c8", ">f2"])
def test_big_endian_values_are_placed_with_the_same_numbers(driver: JaxDriver, mesh42: Mesh, dtype: str) -> None:
    x = (np.arange(16) * 3 + 1).astype(dtype).reshape(8, 2)
    layout = Layout(("x", "y"), mesh42)
    t = lc.distribute_tensor(x, layout, driver="jax")
    np.testing.assert_array_equal(np.asarray(t), x)  # JAX's own gather against the big-endian original
    packed = lc.pack([x[s] for s in layout.device_slices(x.shape)], layout, driver="jax")
    np.testing.assert_array_equal(np.asarray(packed), x)


@pytest.mark.parametrize("other", ["named", "concrete"])
def test_relayout_to_an_equal_sharding_returns_a_new_array_and_keeps_records(
    driver: JaxDriver, mesh42: Mesh, other: str
) -> None:
    x = np.arange(16.0, dtype=np.float32).reshape(8, 2)
    original = Layout(("x", None), mesh42)
    a = lc.distribute_tensor(x, original, driver="jax")
    if other == "named":
        target_mesh = Mesh((4, 2), ("x", "y"), name="other")
    else:
        target_mesh = mesh42.with_devices(driver.bind_mesh(mesh42))
    target = Layout(("x", None), target_mesh)
    b = lc.relayout(a, target, driver="jax")
    assert b is not a  # JAX's device_put hands back its input for an equal sharding
    assert lc.fetch_layout(a, driver="jax") == original
    assert lc.fetch_layout(b, driver="jax") == target
    np.testing.assert_array_equal(np.asarray(b), x)
    v = lc.Variable(a)  # the value chooses the jax driver
    v.assign(np.ones((8, 2), np.float32))  # no spurious LayoutMismatchError: a's record is intact
    assert v.layout == original


@pytest.mark.parametrize("axes", [(None, None), ("x", None), ("x", "y")])
def test_large_aligned_input_written_after_distribute_is_not_seen(driver: JaxDriver, mesh42: Mesh, axes: tuple) -> None:
    # 4 MiB, 64-byte aligned: JAX's device_put aliases such blocks zero-copy on CPU.
    raw = np.empty(4 * 2**20 + 64, dtype=np.uint8)
    start = -raw.ctypes.data % 64
    x = raw[start : start + 4 * 2**20].view(np.float32).reshape(1024, 1024)
    x[...] = np.arange(x.size, dtype=np.float32).reshape(x.shape)
    expected = x.copy()
    t = lc.distribute_tensor(x, Layout(axes, mesh42), driver="jax")
    x[...] = -1.0
    for shard in t.addressable_shards:  # JAX's own per-device data against the value at placement
        np.testing.assert_array_equal(np.asarray(shard.data), expected[shard.index])


def test_the_value_chooses_the_jax_driver(driver: JaxDriver, mesh42: Mesh) -> None:
    # No driver=, use_driver, set_driver or LAYOUTCORE_DRIVER (the root conftest clears them): a jax.Array
    # goes to the jax driver, recognised by its type's name (JaxDriver.native_types).
    layout = Layout(("x", None), mesh42)
    t = lc.distribute_tensor(np.ones((8, 2), np.float32), layout, driver="jax")
    assert lc.active_driver_name() == "numpy"
    assert lc.fetch_layout(t) == layout
    assert np.array_equal(lc.to_numpy(lc.relayout(t, Layout((None, "y"), mesh42))), np.ones((8, 2)))


def test_big_endian_64_bit_values_are_narrowed_exactly_or_refused_without_x64(driver: JaxDriver, mesh42: Mesh) -> None:
    """JAX with jax_enable_x64 off stores them in 32 bits: taken where every value fits (docs/dtypes.md)."""
    x = (np.arange(16) * 3 + 1).astype(">f8").reshape(8, 2)
    with pytest.warns(lc.DtypeNarrowingWarning, match="float64"):
        t = lc.distribute_tensor(x, Layout(("x", "y"), mesh42), driver="jax")
    assert t.dtype == np.float32 and lc.to_numpy(t).tolist() == x.tolist()
    with pytest.raises(lc.UnsupportedLayoutError, match="float64"):
        lc.distribute_tensor(x / 10, Layout(("x", "y"), mesh42), driver="jax")
