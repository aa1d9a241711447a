"""Every dtype on the TF driver, bit for bit, and typed refusals where TF raised its own errors.

DTensor's relayout collectives move int32 and int64 exactly and nothing else: float kinds lose -0.0
(blocks are gathered by summing zero-filled tensors), float8 has no Fill kernel, uint64 no
CollectiveReduceV2, and 1-2 byte integers fail some all-to-alls. The driver moves everything else as
bits (docs/dtypes.md); these tests read every component with TF's own ``.numpy()``.
"""

from __future__ import annotations

import importlib.util
import re
import subprocess
import sys
import time
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest
import tensorflow as tf
from _tf_helpers import child_env, free_ports
from layoutcore_tensorflow import TensorFlowDriver, from_str, serialized_string
from layoutcore_tensorflow import _driver as tf_driver_module

import layoutcore as lc
from layoutcore import Layout
from layoutcore._dtypes import random_values
from layoutcore.driver import ALL_DTYPES, Limitation, numpy_dtype

# Loaded from its file, not by putting tests/drivers on sys.path: there, the folder tests/drivers/tensorflow
# would pass for the `tensorflow` package (keras then imports it, half there, on the JAX backend).
_spec = importlib.util.spec_from_file_location(
    "_dtype_checks", Path(__file__).resolve().parents[1] / "_dtype_checks.py"
)
assert _spec is not None and _spec.loader is not None
checks = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(checks)


def read(component: tf.Tensor) -> np.ndarray:
    """TF's own host copy of one component (ml_dtypes arrays for bfloat16/float8)."""
    return np.asarray(component.numpy())


HELD = [n for n in ALL_DTYPES if n != "float8_e8m0fnu"]


def test_every_dtype_tf_has_is_declared(driver: TensorFlowDriver) -> None:
    assert driver.supported_dtypes() == frozenset(HELD)
    assert checks.documented_dtypes("TensorFlow") == driver.supported_dtypes(), "run python docs/gen_dtype_table.py"
    with pytest.raises(TypeError):  # TF 2.21 has no dtype for MX block scales
        tf.as_dtype(numpy_dtype("float8_e8m0fnu"))


def test_float8_e8m0fnu_is_refused_by_name(driver: TensorFlowDriver) -> None:
    error = checks.check_refused("tensorflow", "float8_e8m0fnu")
    assert "has no float8_e8m0fnu dtype" in str(error)
    x = random_values("float8_e8m0fnu", checks.SHAPE, seed=2)
    with pytest.raises(lc.UnsupportedLayoutError, match="float8_e8m0fnu") as info:
        lc.call_with_layout(lambda: x.copy(), checks.LAYOUTS[0])
    assert info.value.feature == Limitation.DTYPE


@pytest.mark.parametrize("name", HELD)
def test_every_data_function_moves_every_bit(driver: TensorFlowDriver, name: str) -> None:
    checks.check_every_data_function("tensorflow", name, read)


@pytest.mark.parametrize("name", ["uint64", "float8_e4m3fn", "float32", "bool"])
def test_relayouts_between_every_pair_of_layouts_keep_the_bits(driver: TensorFlowDriver, name: str) -> None:
    """All 12 moves among four layouts, the ones DTensor's collectives get wrong included."""
    x = random_values(name, checks.SHAPE, seed=7)
    for source in checks.LAYOUTS:
        t = lc.distribute_tensor(x, source)
        for target in checks.LAYOUTS:
            if target != source:
                checks.assert_placed("tensorflow", lc.relayout(t, target), target, x, read)


@pytest.mark.parametrize("shape", [checks.SHAPE, (8, 64)])
@pytest.mark.parametrize("name", [n for n in HELD if not n.startswith("float8")])
def test_large_relayouts_move_integer_views_made_on_the_devices(
    driver: TensorFlowDriver, name: str, shape: tuple[int, int], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Above PACK_MAX_BYTES a relayout runs DTensor's collectives on an integer view: int64 words made
    block by block where every block's last axis holds whole words (all of (8, 64)'s layouts, some of
    (8, 4)'s), else a bitcast (or widened) view; the threshold is lowered so that the small test values
    take that path."""
    monkeypatch.setattr(tf_driver_module, "PACK_MAX_BYTES", 0)
    words = driver._words_relayout
    used: list[bool] = []
    monkeypatch.setattr(driver, "_words_relayout", lambda *a: used.append(words(*a) is not None) or words(*a))
    x = random_values(name, shape, seed=11)
    for source in checks.LAYOUTS:
        t = lc.distribute_tensor(x, source)
        for target in checks.LAYOUTS:
            if target != source:
                checks.assert_placed("tensorflow", lc.relayout(t, target), target, x, read)
    if shape == (8, 64):  # int64 words for every move, but of int64 itself and of what TF cannot view
        viewable = name not in ("bool", "int64", "complex128")
        assert used and all(used) == viewable and any(used) == viewable, used


@pytest.mark.parametrize("name", ["uint64", "float8_e5m2", "float32", "complex128", "int16"])
def test_the_multi_client_path_moves_integer_bits_through_dtensor(driver: TensorFlowDriver, name: str) -> None:
    """What a multi-client relayout runs (components viewed as int32/int64, DTensor's own relayout),
    run here on one client against the NumPy oracle."""
    x = random_values(name, checks.SHAPE, seed=3)
    source, target = checks.LAYOUTS[0], checks.LAYOUTS[1]
    t = lc.distribute_tensor(x, source)
    native = driver._native(target, driver.bind_mesh(target.mesh))  # type: ignore[arg-type]
    moved = driver._relayout_bits(t, native)
    checks.assert_placed("tensorflow", moved, target, x, read)


def test_a_large_float8_value_is_placed_and_moved(driver: TensorFlowDriver) -> None:
    """Above the pack threshold distribute_tensor takes DTensor's copy_to_mesh + relayout path."""
    x = random_values("float8_e4m3fn", (2048, 2056), seed=1)  # ~4.1 MB > PACK_MAX_BYTES
    layout = Layout(("x", "y"), checks.MESH)
    t = lc.distribute_tensor(x, layout)
    checks.assert_bits(lc.to_numpy(t), x, "large float8")
    checks.assert_bits(lc.to_numpy(lc.relayout(t, Layout(("y", None), checks.MESH))), x, "large float8 relayout")


@pytest.mark.parametrize("name", ["bfloat16", "float8_e4m3fn", "float8_e5m2", "float16"])
def test_native_low_precision_tensors_round_trip_as_ml_dtypes(driver: TensorFlowDriver, name: str) -> None:
    native = tf.constant(np.arange(32).reshape(checks.SHAPE).astype(numpy_dtype(name)))  # TF casts no int to float8
    assert native.dtype == tf.as_dtype(numpy_dtype(name))
    t = lc.distribute_tensor(native, checks.LAYOUTS[0])
    out = lc.to_numpy(t)
    assert out.dtype == np.dtype(getattr(ml_dtypes, name, name))
    checks.assert_bits(out, native.numpy(), "native round trip")


def test_call_with_layout_keeps_the_dtype(driver: TensorFlowDriver) -> None:
    made = lc.call_with_layout(tf.ones, checks.LAYOUTS[1], checks.SHAPE, dtype=tf.bfloat16)
    checks.assert_placed("tensorflow", made, checks.LAYOUTS[1], np.ones(checks.SHAPE, ml_dtypes.bfloat16), read)


def test_mixed_dtypes_in_pack_are_refused(driver: TensorFlowDriver) -> None:
    checks.check_mixed_pack_refused("tensorflow")


@pytest.mark.parametrize("name", ["bfloat16", "float8_e4m3fn", "float32"])
def test_replicas_are_compared_by_bits(driver: TensorFlowDriver, name: str) -> None:
    checks.check_replicas_compared_by_bits("tensorflow", name)


@pytest.mark.parametrize(
    "value",
    [
        np.zeros(checks.SHAPE, "datetime64[s]"),
        np.zeros(checks.SHAPE, "timedelta64[s]"),
        np.zeros(checks.SHAPE, "f4,i4"),
    ],
    ids=["datetime", "timedelta", "record"],
)
def test_dtypes_tf_has_no_tensor_of_are_refused_typed(driver: TensorFlowDriver, value: np.ndarray) -> None:
    layout = checks.LAYOUTS[0]
    for call in (
        lambda: lc.distribute_tensor(value, layout),
        lambda: lc.pack([value[s] for s in layout.device_slices(value.shape)], layout),
    ):
        with pytest.raises(lc.UnsupportedLayoutError, match=re.escape(str(value.dtype))) as info:
            call()
        assert info.value.feature == Limitation.DTYPE


def test_from_str_of_a_corrupted_proto_raises_layout_error(driver: TensorFlowDriver) -> None:
    good = serialized_string(Layout(("x", None), checks.MESH))
    assert from_str(good) == Layout(("x", None), checks.MESH).with_mesh(from_str(good).mesh)  # type: ignore[arg-type]
    with pytest.raises(lc.LayoutError, match="un7harded"):
        from_str(good.replace(b"unsharded", b"un7harded"))


@pytest.mark.parametrize("name", HELD)
def test_relayout_and_fetch_layout_of_a_dtensor_captured_by_a_tf_function(driver: TensorFlowDriver, name: str) -> None:
    """Inside tf.function a captured DTensor is an eager tensor: TF's fetch_layout refuses it there.
    The Relayout op moves every dtype's bits there too."""
    x = random_values(name, checks.SHAPE, seed=5)
    source, target = checks.LAYOUTS[0], checks.LAYOUTS[1]
    t = lc.distribute_tensor(x, source)

    # autograph=False: autograph re-raises an error raised while tracing as its StagingError unless
    # the error's class takes a message alone
    @tf.function(autograph=False)
    def relaid() -> tf.Tensor:
        return lc.relayout(t, target)

    if name == "float8_e5m2":  # no TF op moves its bits in a graph; a cast changes NaN payloads
        with pytest.raises(lc.UnsupportedLayoutError, match="float8_e5m2") as info:
            relaid()
        assert info.value.feature == Limitation.DTYPE
        return

    @tf.function
    def fetched() -> tf.Tensor:
        assert lc.fetch_layout(t) == source  # a Python-level check while tracing
        return tf.identity(t)

    out = relaid()
    assert lc.fetch_layout(out) == target
    checks.assert_bits(lc.to_numpy(out), x, "relayout in tf.function")
    checks.assert_bits(lc.to_numpy(fetched()), x, "fetch_layout in tf.function")


def test_two_clients_move_every_bit_across_clients() -> None:
    """Multi-client relayouts and to_numpy's gather move int32/int64 views through DTensor."""
    ports = ",".join(str(p) for p in free_ports(2))
    worker = Path(__file__).with_name("tf_mc_dtypes_worker.py")
    procs = [
        subprocess.Popen(
            [sys.executable, str(worker), str(cid), ports],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=child_env(),
        )
        for cid in (0, 1)
    ]
    deadline = time.monotonic() + 150
    try:
        for cid, proc in enumerate(procs):
            out, err = proc.communicate(timeout=max(1.0, deadline - time.monotonic()))
            assert proc.returncode == 0 and f"client {cid} ok" in out, f"client {cid}\n{out}\n{err[-3000:]}"
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()  # SIGKILL: a DTensor client stuck in its rendezvous ignores SIGTERM
                proc.communicate()


def test_all_negative_zero_float32_replicated_variable_is_refused_typed() -> None:
    """TF 2.21 stores a fully replicated float32 DVariable written with all -0.0 as +0.0: refused."""
    import layoutcore as lc
    from layoutcore.driver import Limitation

    mesh = lc.create_mesh([("x", 2), ("y", 2)])
    zeros = np.full((4, 2), -0.0, np.float32)
    with pytest.raises(lc.UnsupportedLayoutError) as caught:
        lc.Variable(zeros, lc.Layout([None, None], mesh), driver="tensorflow")
    assert caught.value.feature is Limitation.NEGATIVE_ZERO
    kept = lc.Variable(np.full((4, 2), 1.0, np.float32), lc.Layout([None, None], mesh), driver="tensorflow")
    with pytest.raises(lc.UnsupportedLayoutError):
        kept.assign(zeros)
    assert (lc.to_numpy(kept.value) == 1.0).all()  # the refused write left the variable as it was
    # A sharded layout, or a value that is not all -0.0, keeps every sign bit.
    sharded = lc.Variable(zeros, lc.Layout(["x", None], mesh), driver="tensorflow")
    assert np.signbit(lc.to_numpy(sharded.value)).all()
    mixed = np.array([[-0.0, 1.0]] * 4, np.float32)
    replicated = lc.Variable(mixed, lc.Layout([None, None], mesh), driver="tensorflow")
    assert np.array_equal(np.signbit(lc.to_numpy(replicated.value)), np.signbit(mixed))


def test_rank0_bfloat16_components_pack() -> None:
    import ml_dtypes

    import layoutcore as lc

    mesh = lc.create_mesh([("x", 2)])
    x = np.array(1.5, ml_dtypes.bfloat16)
    t = lc.distribute_tensor(x, lc.Layout([], mesh), driver="tensorflow")
    again = lc.pack(lc.unpack(t), lc.Layout([], mesh), driver="tensorflow")
    got = lc.to_numpy(again)
    assert got.dtype == x.dtype and got.view(np.uint16) == x.view(np.uint16)


#: Dtypes whose components the driver reads where TF keeps them (DLPack; bfloat16 through a uint16 bitcast).
#: float8 has neither a NumPy DLPack code nor a TF bitcast: ``.numpy()`` copies it.
READ_IN_PLACE = [n for n in HELD if not n.startswith("float8")]


@pytest.mark.parametrize("name", HELD)
def test_component_to_numpy_reads_tf_memory_without_a_copy(driver: TensorFlowDriver, name: str) -> None:
    x = random_values(name, checks.SHAPE, seed=3)
    for component in lc.unpack(lc.distribute_tensor(x, checks.LAYOUTS[0])):
        first, again, copy = driver.component_to_numpy(component), driver.component_to_numpy(component), read(component)
        assert first.dtype == copy.dtype and np.array_equal(first.view(np.uint8), copy.view(np.uint8))
        if name in READ_IN_PLACE:  # one buffer, TF's own, read-only (.numpy() makes a new copy on every call)
            assert first.ctypes.data == again.ctypes.data and not first.flags.writeable


def test_component_to_numpy_falls_back_for_text_and_rank_0_bfloat16(driver: TensorFlowDriver, mesh42: lc.Mesh) -> None:
    scalar = lc.distribute_tensor(np.array(1.5, ml_dtypes.bfloat16), Layout((), mesh42))
    assert [float(driver.component_to_numpy(c)) for c in lc.unpack(scalar)] == [1.5] * 8
    text = lc.distribute_tensor(np.array([["ab", "c"]] * 4), Layout(("x", None), mesh42))
    assert driver.component_to_numpy(lc.unpack(text)[0]).tolist() == [[b"ab", b"c"]]
