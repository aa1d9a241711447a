"""Threads, per-mesh tables and whose memory, on the TF driver, and its pure protos."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from _tf_helpers import run_python
from layoutcore_tensorflow import (
    MeshLimitError,
    TensorFlowDriver,
    _convert,
    as_proto,
    from_proto,
    mesh_proto,
    to_tensorflow_layout,
    to_tensorflow_mesh,
)
from tensorflow.experimental import dtensor

import layoutcore as lc

# Two threads that each relayout to a replicated layout and read it back on one mesh deadlocked
# for good (TF 2.21). A child process bounds the wait, so a deadlock fails instead of hanging.
_THREADS = """
import threading, numpy as np, layoutcore as lc
mesh = lc.Mesh((4, 2), ("x", "y"))
x = np.arange(64, dtype=np.float32).reshape(8, 8)
errors = []
def work(i):
    try:
        for _ in range(20):
            t = lc.distribute_tensor(x + i, lc.Layout(("x", "y"), mesh))
            r = lc.relayout(t, lc.Layout.replicated(mesh, 2))
            assert (lc.to_numpy(r) == x + i).all()
            assert (lc.to_numpy(t) == x + i).all()
    except BaseException as exc:
        errors.append(repr(exc))
threads = [threading.Thread(target=work, args=(i,)) for i in range(2)]
for t in threads: t.start()
for t in threads: t.join()
print("errors", errors)
"""


def test_two_threads_relayout_and_read_back_without_deadlock() -> None:
    proc = run_python(_THREADS, env={"LAYOUTCORE_DRIVER": "tensorflow"}, timeout=180)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.split() == ["errors", "[]"]


# The loop over 5 000 distinct meshes: TF's threads per mesh aborted the process near 4 000.
_MESH_LOOP = """
import os, numpy as np, layoutcore as lc
from layoutcore_tensorflow import MAX_NATIVE_MESHES, MeshLimitError
threads = lambda: len(os.listdir("/proc/self/task"))
x = np.ones((8, 8), np.float32)
for i in range(5000):
    try:
        lc.to_numpy(lc.distribute_tensor(x, lc.Layout(("x", "y"), lc.Mesh((4, 2), ("x", "y"), name=f"m{i}"))))
    except MeshLimitError:
        break
held = threads()
for _ in range(5000):  # equal meshes share one native mesh: no new threads
    lc.to_numpy(lc.distribute_tensor(x, lc.Layout(("x", None), lc.Mesh((4, 2), ("x", "y"), name="m3"))))
print(i, MAX_NATIVE_MESHES, held, threads())
"""


def test_a_loop_over_distinct_meshes_stops_with_a_typed_error_not_an_abort() -> None:
    proc = run_python(_MESH_LOOP, env={"LAYOUTCORE_DRIVER": "tensorflow"}, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    stopped, limit, held, after = (int(v) for v in proc.stdout.split())
    assert stopped == limit  # meshes 0..limit-1 ran; the next one was refused
    assert after == held < 20 * limit  # bounded threads, and reuse adds none


def test_equal_meshes_share_one_native_mesh(driver: TensorFlowDriver) -> None:
    abstract = lc.Mesh((4, 2), ("x", "y"), name="shared")
    concrete = abstract.with_devices(driver.list_devices()[:8])
    assert to_tensorflow_mesh(abstract) is to_tensorflow_mesh(concrete)
    assert to_tensorflow_layout(lc.Layout(("x", None), abstract)) == to_tensorflow_layout(
        lc.Layout(("x", None), concrete)
    )


def test_distinct_meshes_are_bounded_with_a_typed_error(
    driver: TensorFlowDriver, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(_convert, "MAX_NATIVE_MESHES", _convert.native_mesh_count() + 2)
    for i in range(2):
        to_tensorflow_mesh(lc.Mesh((2,), ("d",), name=f"bounded{i}"))
    to_tensorflow_mesh(lc.Mesh((2,), ("d",), name="bounded0"))  # an equal mesh is reused, not counted
    with pytest.raises(MeshLimitError, match="OS threads") as info:
        to_tensorflow_mesh(lc.Mesh((2,), ("d",), name="bounded2"))
    assert isinstance(info.value, lc.LayoutcoreError)


def _input(kind: str, x: np.ndarray, tmp_path: Path) -> np.ndarray:
    if kind == "aligned64":
        buffer = np.empty(x.nbytes + 64, np.uint8)
        offset = (-buffer.ctypes.data) % 64
        aligned = buffer[offset : offset + x.nbytes].view(x.dtype).reshape(x.shape)
        aligned[...] = x
        assert aligned.ctypes.data % 64 == 0
        return aligned
    mapped = np.memmap(tmp_path / "input.bin", dtype=x.dtype, mode="w+", shape=x.shape)
    mapped[...] = x
    return mapped


@pytest.mark.parametrize("kind", ["aligned64", "memmap"])
@pytest.mark.parametrize("spec", [(None, None), ("x", None), ("x", "y")])
def test_distribute_tensor_takes_a_snapshot(
    driver: TensorFlowDriver, tmp_path: Path, kind: str, spec: tuple[str | None, ...]
) -> None:
    assert driver.input_aliasing == "snapshot"
    x = np.arange(8 * 16, dtype=np.float32).reshape(8, 16)
    source = _input(kind, x, tmp_path)
    layout = lc.Layout(spec, lc.Mesh((2, 2), ("x", "y")))
    t = lc.distribute_tensor(source, layout)
    source[...] = -1.0  # a data loader refilling its buffer
    for p, sl in enumerate(layout.device_slices(x.shape)):
        np.testing.assert_array_equal(dtensor.unpack(t)[p].numpy(), x[sl])


def test_protos_are_pure_value_conversions(driver: TensorFlowDriver) -> None:
    local = lc.Mesh((4, 2), ("x", "y"), name="m").with_devices(driver.list_devices()[:8])
    assert as_proto(local) == to_tensorflow_mesh(local).as_proto()  # TF's own proto is the oracle
    layout = lc.Layout(("x", None), local)
    assert as_proto(layout) == to_tensorflow_layout(layout).as_proto()
    # A TPU mesh on this CPU host: written from its fields, as TF's Mesh.from_string(...).as_proto() does.
    tpu = lc.Mesh((2, 2), ("x", "y"), devices=[f"TPU:{i}" for i in range(4)])
    native = dtensor.Mesh.from_string(tpu.to_string())
    assert as_proto(tpu) == native.as_proto()
    tpu_layout = lc.Layout((None, "y"), tpu)
    assert mesh_proto(tpu_layout) == native.as_proto()
    assert as_proto(tpu_layout) == dtensor.Layout([dtensor.UNSHARDED, "y"], native).as_proto()
    assert from_proto(as_proto(tpu)) == tpu
    assert from_proto(as_proto(tpu_layout)) == tpu_layout


def test_unicode_text_comes_back_as_the_dtype_put_in(driver: TensorFlowDriver) -> None:
    mesh = lc.Mesh((2, 2), ("x", "y"))
    text = np.array([["ab", "é", "ñu", ""], ["x", "yy", "zzz", "🙂"]])  # <U3; TF holds UTF-8 bytes
    t = lc.distribute_tensor(text, lc.Layout((None, "y"), mesh))
    assert dtensor.unpack(t)[1].numpy().tolist() == [[b"\xc3\xb1u", b""], [b"zzz", "🙂".encode()]]  # TF's own view
    for got in (
        lc.to_numpy(t),
        lc.to_numpy(lc.relayout(t, lc.Layout(("x", None), mesh))),
        lc.Variable(t).numpy(),
    ):
        assert got.dtype == text.dtype
        np.testing.assert_array_equal(got, text)
    raw = np.array([b"ab", b"c"])
    got = lc.to_numpy(lc.distribute_tensor(raw, lc.Layout(("x",), mesh)))
    assert got.dtype == raw.dtype and got.tolist() == [b"ab", b"c"]  # bytes in, bytes out
