"""The TensorFlow driver's data functions, checked against layoutcore's shard geometry through raw DTensor calls."""

from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf
from _tf_helpers import FULL, run_python
from layoutcore_tensorflow import TensorFlowDriver, to_tensorflow_layout
from layoutcore_tensorflow._driver import PACK_MAX_BYTES
from tensorflow.experimental import dtensor

import layoutcore as lc

LAYOUTS_42 = [(None, None), ("x", None), (None, "y"), ("x", "y"), ("y", "x"), ("y", None), (None, "x")]


def raw_components(tensor: object) -> list[tuple[str, np.ndarray]]:
    """(device, data) per component, read with DTensor's own calls (not the driver's)."""
    return [(c.device, c.numpy()) for c in dtensor.unpack(tensor)]


def assert_placed(tensor: object, x: np.ndarray, layout: lc.Layout, devices: list[str]) -> None:
    """Component p lives on devices[p] and holds the geometry oracle's slice p."""
    got = raw_components(tensor)
    slices = layout.device_slices(x.shape)
    assert len(got) == len(slices)
    for p, ((device, data), sl) in enumerate(zip(got, slices, strict=True)):
        assert device == FULL(int(devices[p].split(":")[1])), (p, device)
        np.testing.assert_array_equal(data, x[sl], err_msg=f"component {p} of {layout}")


def test_lazy_import_and_registration() -> None:
    proc = run_python(
        "import sys, layoutcore, layoutcore_tensorflow\n"
        "assert 'tensorflow' not in sys.modules, 'importing the driver package imported TF'\n"
        "info = {i.name: i for i in layoutcore.driver.driver_infos()}['tensorflow']\n"
        "assert 'tensorflow' not in sys.modules\n"
        "print(info.installed, sorted(c.value for c in info.capabilities))\n"
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == ["True", "['relayout_across_meshes',", "'traced']"]


def test_devices_are_tf_logical_cpus(driver: TensorFlowDriver) -> None:
    logical = [d.name for d in tf.config.list_logical_devices("CPU")]
    assert logical == [f"/device:CPU:{i}" for i in range(len(logical))]
    assert driver.list_devices() == [f"CPU:{i}" for i in range(len(logical))]
    assert driver.list_devices("cpu") == driver.list_devices()
    assert driver.list_devices("GPU") == []
    assert not driver.multi_client


def test_cpu_devices_env_configures_tf_before_it_starts() -> None:
    proc = run_python(
        "import warnings; warnings.simplefilter('error')\n"
        "import layoutcore as lc, tensorflow as tf\n"
        "print(lc.list_devices(driver='tensorflow'), len(tf.config.list_logical_devices('CPU')))\n",
        env={"LAYOUTCORE_CPU_DEVICES": "3"},
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "['CPU:0', 'CPU:1', 'CPU:2'] 3"


def test_tf_started_first_keeps_its_devices_and_warns_once() -> None:
    proc = run_python(
        "import warnings, tensorflow as tf\n"
        "tf.constant(1.0) + 1  # TF's runtime starts with its default single CPU\n"
        "import layoutcore as lc\n"
        "from layoutcore.driver import _registry\n"
        "with warnings.catch_warnings(record=True) as caught:\n"
        "    warnings.simplefilter('always')\n"
        "    devices = lc.list_devices(driver='tensorflow')\n"
        "    _registry._instances.clear()  # a second driver instance must not warn again\n"
        "    lc.list_devices(driver='tensorflow')\n"
        "print(devices)\n"
        "for w in caught: print(w.category.__name__, w.message)\n",
        env={"LAYOUTCORE_CPU_DEVICES": "4"},
    )
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.strip().splitlines()
    assert lines[0] == "['CPU:0']"
    assert len(lines) == 2, lines
    assert (
        lines[1].startswith("RuntimeWarning") and "LAYOUTCORE_CPU_DEVICES=4" in lines[1] and "1 logical CPU" in lines[1]
    )


@pytest.mark.parametrize("axes", LAYOUTS_42)
@pytest.mark.parametrize("size", ["small", "large"])
def test_distribute_places_oracle_slices(driver: TensorFlowDriver, mesh42: lc.Mesh, axes: tuple, size: str) -> None:
    # "large" crosses PACK_MAX_BYTES, so both placement paths (pack / copy_to_mesh+relayout) are checked.
    rows = 8 if size == "small" else 1024
    cols = 8 if size == "small" else PACK_MAX_BYTES // (4 * rows) + 8
    x = np.arange(rows * cols, dtype=np.float32).reshape(rows, cols)
    layout = lc.Layout(axes, mesh42)
    for value in (x, tf.constant(x)):
        t = lc.distribute_tensor(value, layout)
        assert dtensor.is_dtensor(t)
        assert dtensor.fetch_layout(t) == to_tensorflow_layout(layout)
        assert lc.fetch_layout(t) == layout
        assert_placed(t, x, layout, driver.list_devices())


@pytest.mark.parametrize(
    ("shape", "axes", "dtype"),
    [
        ((), (), np.float32),
        ((4, 0), ("x", None), np.float32),
        ((0,), ("y",), np.int32),
        ((4, 2, 6), ("x", "y", None), np.int64),
        ((2, 4, 3), (None, "x", None), np.bool_),
        ((4, 2), ("x", "y"), np.float16),
    ],
)
def test_ranks_dtypes_and_empty(
    driver: TensorFlowDriver, mesh42: lc.Mesh, shape: tuple, axes: tuple, dtype: type
) -> None:
    x = (np.arange(int(np.prod(shape))) % 3).astype(dtype).reshape(shape)
    layout = lc.Layout(axes, mesh42)
    t = lc.distribute_tensor(x, layout)
    assert_placed(t, x, layout, driver.list_devices())
    got = lc.to_numpy(t)
    assert got.dtype == x.dtype and got.shape == x.shape
    np.testing.assert_array_equal(got, x)
    np.testing.assert_array_equal(lc.to_numpy(lc.pack(lc.unpack(t), layout)), x)


def test_permuted_devices_follow_mesh_order(driver: TensorFlowDriver) -> None:
    devices = ["CPU:5", "CPU:3", "CPU:1", "CPU:0", "CPU:2", "CPU:4"]
    mesh = lc.Mesh((3, 2), ("x", "y"), devices)
    x = np.arange(36, dtype=np.float32).reshape(6, 6)
    for axes in [("x", None), ("y", "x")]:
        layout = lc.Layout(axes, mesh)
        t = lc.distribute_tensor(x, layout)
        assert_placed(t, x, layout, devices)
        np.testing.assert_array_equal(lc.to_numpy(t), x)


def test_dtensor_guide_components(driver: TensorFlowDriver, mesh32: lc.Mesh) -> None:
    x = np.arange(6).reshape(3, 2)
    t = lc.distribute_tensor(x, lc.Layout(["x", lc.UNSHARDED], mesh32))
    assert [c.tolist() for _, c in raw_components(t)] == [[[0, 1]], [[0, 1]], [[2, 3]], [[2, 3]], [[4, 5]], [[4, 5]]]


def test_pack_checks_before_tf(driver: TensorFlowDriver, mesh42: lc.Mesh) -> None:
    layout = lc.Layout(("x", None), mesh42)
    x = np.arange(32, dtype=np.float32).reshape(8, 4)
    comps = lc.unpack(lc.distribute_tensor(x, layout))
    np.testing.assert_array_equal(lc.to_numpy(lc.pack(comps, layout)), x)
    np.testing.assert_array_equal(lc.to_numpy(lc.pack([c.numpy() for c in comps], layout)), x)
    with pytest.raises(lc.LayoutError, match="needs 8 components"):
        lc.pack(comps[:7], layout)
    # TF's pack accepts (3, 4) pieces and makes a (12, 4) tensor; with global_shape=(8, 4) we refuse.
    with pytest.raises(lc.LayoutError, match=r"shape \(3, 4\)"):
        lc.pack([np.zeros((3, 4), np.float32)] * 8, layout, global_shape=(8, 4))
    # TF's pack keeps differing replicas silently; we name the devices.
    bad = [np.full((2, 4), p, np.float32) for p in range(8)]
    with pytest.raises(lc.LayoutError, match=r"CPU:1") as info:
        lc.pack(bad, layout)
    assert info.value.value == ["CPU:1"] or "CPU:1" in info.value.value
    with pytest.raises(lc.LayoutError, match="rank"):
        lc.pack([np.zeros((2,), np.float32)] * 8, layout)


@pytest.mark.parametrize("source", LAYOUTS_42)
def test_relayout_all_pairs(driver: TensorFlowDriver, mesh42: lc.Mesh, source: tuple) -> None:
    x = np.arange(64, dtype=np.int32).reshape(8, 8)
    t = lc.distribute_tensor(x, lc.Layout(source, mesh42))
    for target in LAYOUTS_42:
        layout = lc.Layout(target, mesh42)
        moved = lc.relayout(t, layout)
        assert lc.fetch_layout(moved) == layout
        assert dtensor.fetch_layout(moved) == to_tensorflow_layout(layout)
        assert_placed(moved, x, layout, driver.list_devices())
    assert_placed(t, x, lc.Layout(source, mesh42), driver.list_devices())  # the source is untouched


def test_relayout_to_own_layout_is_free(driver: TensorFlowDriver, mesh42: lc.Mesh) -> None:
    layout = lc.Layout(("x", None), mesh42)
    t = lc.distribute_tensor(np.ones((8, 8), np.float32), layout)
    assert lc.relayout(t, layout) is t
    # The same devices under a concrete mesh: another layoutcore layout, so another tensor object.
    concrete = lc.Layout(("x", None), mesh42.with_devices(driver.list_devices()))
    moved = lc.relayout(t, concrete)
    assert moved is not t and lc.fetch_layout(moved) == concrete and lc.fetch_layout(t) == layout


def test_relayout_across_meshes_through_host(driver: TensorFlowDriver) -> None:
    source_mesh = lc.Mesh((2, 2), ("x", "y"), ["CPU:0", "CPU:1", "CPU:2", "CPU:3"])
    target_mesh = lc.Mesh((4,), ("w",), ["CPU:7", "CPU:6", "CPU:5", "CPU:4"])
    x = np.arange(32, dtype=np.float32).reshape(4, 8)
    t = lc.distribute_tensor(x, lc.Layout(("x", "y"), source_mesh))
    for axes in [(None, "w"), ("w", None), (None, None)]:
        layout = lc.Layout(axes, target_mesh)
        moved = lc.relayout(t, layout)
        assert lc.fetch_layout(moved) == layout
        assert_placed(moved, x, layout, list(target_mesh.devices or ()))


def test_to_numpy_any_layout_where_tf_refuses(driver: TensorFlowDriver) -> None:
    # Sharded over a size-1 axis: TF counts it as sharded and .numpy() refuses it.
    mesh = lc.Mesh((1, 8), ("a", "b"))
    x = np.arange(16, dtype=np.float32).reshape(2, 8)
    t = lc.distribute_tensor(x, lc.Layout(("a", "b"), mesh))
    with pytest.raises(tf.errors.UnimplementedError):
        t.numpy()
    got = lc.to_numpy(t)
    np.testing.assert_array_equal(got, x)
    got[0, 0] = -1  # a fresh array: the tensor is untouched
    np.testing.assert_array_equal(lc.to_numpy(t), x)
    replicated = lc.distribute_tensor(x, lc.Layout((None, None), mesh))
    out = lc.to_numpy(replicated)
    out[0, 0] = -1
    np.testing.assert_array_equal(lc.to_numpy(replicated), x)


def test_unsupported_layouts_refused_before_tf(driver: TensorFlowDriver, mesh42: lc.Mesh) -> None:
    uneven = lc.Layout(("x", None), mesh42)
    with pytest.raises(lc.UnsupportedLayoutError) as info:
        lc.distribute_tensor(np.zeros((6, 2), np.float32), uneven)
    assert info.value.feature == "uneven" and info.value.driver == "tensorflow"
    multi = lc.Layout((("x", "y"), None), mesh42)
    with pytest.raises(lc.UnsupportedLayoutError) as info:
        lc.distribute_tensor(np.zeros((8, 2), np.float32), multi)
    assert info.value.feature == "multi_axis"
    t = lc.distribute_tensor(np.zeros((8, 2), np.float32), lc.Layout((None, None), mesh42))
    with pytest.raises(lc.UnsupportedLayoutError):
        lc.relayout(t, multi)
    with pytest.raises(lc.UnsupportedLayoutError):
        lc.call_with_layout(tf.zeros, uneven, (6, 2))
    with pytest.raises(lc.UnsupportedLayoutError):
        lc.call_with_layout(tf.zeros, multi, (8, 2))
    with pytest.raises(lc.LayoutError, match="rank"):
        lc.call_with_layout(tf.zeros, uneven, (8, 2, 1))
    with pytest.raises(lc.NotDistributedError):
        lc.to_numpy(np.zeros(3), driver="tensorflow")


def test_call_with_layout_creates_shards_in_place(driver: TensorFlowDriver, mesh42: lc.Mesh) -> None:
    layout = lc.Layout(("x", "y"), mesh42)
    traces: list[tuple[int, ...]] = []

    def affine(shape: tuple[int, ...]) -> tf.Tensor:
        traces.append(shape)  # runs while tracing only
        return tf.ones(shape) * 2.0 + tf.range(shape[1], dtype=tf.float32)

    for _ in range(3):
        t = lc.call_with_layout(affine, layout, (8, 4))
        assert dtensor.fetch_layout(t) == to_tensorflow_layout(layout)
        expected = np.ones((8, 4), np.float32) * 2 + np.arange(4, dtype=np.float32)
        assert_placed(t, expected, layout, driver.list_devices())
    assert 1 <= len(traces) <= 2, traces  # the tf.function wrapper is reused, not retraced per call
    ones = lc.call_with_layout(tf.ones, layout, (8, 4), dtype=tf.int32)
    assert [c.shape for _, c in raw_components(ones)] == [(2, 2)] * 8
    with pytest.raises(lc.LayoutError, match="one tensor"):
        lc.call_with_layout(lambda: (tf.ones((8, 4)), tf.ones((8, 4))), layout)


def test_variables_are_dvariables(driver: TensorFlowDriver, mesh42: lc.Mesh) -> None:
    layout = lc.Layout(("x", None), mesh42)
    x = np.arange(16, dtype=np.float32).reshape(8, 2)
    v = lc.Variable(x, layout)
    assert isinstance(v.handle, dtensor.DVariable)
    assert dtensor.fetch_layout(v.handle) == to_tensorflow_layout(layout)
    assert lc.fetch_layout(v.value) == layout
    v.assign(x + 1)
    np.testing.assert_array_equal(v.numpy(), x + 1)
    v.assign(lc.distribute_tensor(x * 2, layout))
    np.testing.assert_array_equal(lc.to_numpy(v), x * 2)
    with pytest.raises(lc.LayoutMismatchError):
        v.assign(lc.distribute_tensor(x, lc.Layout((None, None), mesh42)))
    with pytest.raises(lc.LayoutError, match="shape"):
        v.assign(np.zeros((4, 2), np.float32))


def test_layout_map_scope_makes_mapped_dvariables(driver: TensorFlowDriver, mesh42: lc.Mesh) -> None:
    # The seed: tf.keras.dtensor.experimental.layout_map_scope.
    layout_map = lc.LayoutMap(mesh42)
    layout_map["dense.*kernel"] = (None, "y")
    layout_map["dense.*bias"] = ("x",)
    with lc.layout_map_scope(layout_map):
        kernel = lc.Variable(np.ones((8, 4), np.float32), path="model/dense_1/kernel")
        bias = lc.Variable(np.zeros((8,), np.float32), path="model/dense_1/bias")
        other = lc.Variable(np.ones((3, 5), np.float32), path="model/conv2d/kernel")
    expected = {
        kernel: lc.Layout((None, "y"), mesh42),
        bias: lc.Layout(("x",), mesh42),
        other: lc.Layout((None, None), mesh42),  # unmatched: fully replicated on the map's mesh
    }
    for variable, layout in expected.items():
        assert isinstance(variable.handle, dtensor.DVariable)
        assert variable.layout == layout
        assert dtensor.fetch_layout(variable.handle) == to_tensorflow_layout(layout)
        assert_placed(variable.value, variable.numpy(), layout, driver.list_devices())


def test_raw_dvariable_and_dtensor_inputs(driver: TensorFlowDriver, mesh42: lc.Mesh) -> None:
    layout = lc.Layout((None, "y"), mesh42)
    x = np.arange(16, dtype=np.float32).reshape(4, 4)
    raw = dtensor.DVariable(
        dtensor.relayout(
            dtensor.copy_to_mesh(x, to_tensorflow_layout(lc.Layout((None, None), mesh42))), to_tensorflow_layout(layout)
        )
    )
    assert driver.is_distributed(raw)
    assert lc.fetch_layout(raw) == layout  # mapped back to the mesh the user bound to these devices
    np.testing.assert_array_equal(lc.to_numpy(raw), x)
    assert len(lc.unpack(raw)) == 8
    assert not driver.is_distributed(tf.constant(x)) and not driver.is_distributed(x)


def test_the_value_chooses_the_driver(monkeypatch: pytest.MonkeyPatch) -> None:
    # No driver chosen: a DTensor goes to the TF driver (native_types names EagerTensor and DVariable,
    # is_distributed tells a DTensor by its device); a plain eager tensor is not claimed.
    monkeypatch.delenv(lc.driver.DRIVER_ENV, raising=False)
    lc.set_driver(None)
    assert lc.active_driver_name() == "numpy"
    mesh = lc.Mesh((2,), ("x",))
    layout = lc.Layout(("x",), mesh)
    t = lc.distribute_tensor(np.arange(4.0, dtype=np.float32), layout, driver="tensorflow")
    v = lc.Variable(t)
    assert lc.fetch_layout(t) == layout and lc.fetch_layout(v.handle) == layout
    np.testing.assert_array_equal(lc.to_numpy(t), np.arange(4.0))
    with pytest.raises(lc.NotDistributedError, match="numpy driver"):
        lc.to_numpy(tf.constant([1.0, 2.0]))


def test_pack_mixes_tf_and_numpy_components(driver: TensorFlowDriver) -> None:
    layout = lc.Layout(("x",), lc.Mesh((4,), ("x",)))
    pieces = [np.full(2, i, np.float32) for i in range(4)]
    mixed = [tf.constant(p) if i % 2 else p for i, p in enumerate(pieces)]
    t = lc.pack(mixed, layout)
    assert [c.numpy().tolist() for c in dtensor.unpack(t)] == [p.tolist() for p in pieces]
    with pytest.raises(lc.LayoutError, match="one dtype"):
        lc.pack([tf.constant(pieces[0]), *(p.astype(np.float64) for p in pieces[1:])], layout)
