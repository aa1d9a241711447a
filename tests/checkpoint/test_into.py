"""``checkpoint.open`` / ``Source`` and ``load(into=...)`` (docs/design.md#checkpoints).

Oracle: NumPy arrays sliced by the layouts' pure shard math; on the frameworks, their own
per-device data (the worker). Each driver runs in its own process, as the 16-pair matrix does.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import numpy as np
import pytest
from test_matrix import _python

import layoutcore as lc
from layoutcore import CheckpointError, Layout, LayoutError, LayoutMismatchError, Mesh, checkpoint

WORKER = Path(__file__).with_name("_into_worker.py")
MATRIX = Path(__file__).with_name("_matrix_worker.py")
MESH = Mesh((2, 2), ("x", "y"))


def _tree() -> dict[str, np.ndarray]:
    rng = np.random.default_rng(7)
    return {
        "a": rng.standard_normal((8, 6)).astype(np.float32),
        "b": rng.integers(-9, 9, size=(4, 10)).astype(np.int32),
        "c": rng.standard_normal((6,)).astype(np.float64),
    }


@pytest.fixture
def saved(tmp_path: Path) -> tuple[Path, dict[str, np.ndarray]]:
    values = _tree()
    path = tmp_path / "ck"
    checkpoint.save(
        path,
        {
            k: lc.distribute_tensor(v, Layout(("x",) + (None,) * (v.ndim - 1), MESH), driver="numpy")
            for k, v in values.items()
        },
    )
    return path, values


def _zeros(values: dict[str, np.ndarray], layout_of: dict[str, Layout]) -> dict[str, object]:
    return {k: lc.distribute_tensor(np.zeros_like(values[k]), layout_of[k], driver="numpy") for k in layout_of}


# -- Source ------------------------------------------------------------------------------------
def test_open_is_a_source_that_load_inspect_and_read_plan_go_through(saved: tuple[Path, dict[str, np.ndarray]]) -> None:
    path, values = saved
    target = {"a": Layout((None, "y"), MESH)}
    with checkpoint.open(path) as src:
        assert src.format == "layoutcore"
        assert src.specs == checkpoint.inspect(path).tensors
        assert src.read_plan(target, driver="numpy") == checkpoint.read_plan(path, target, driver="numpy")
        out = src.load(target, driver="numpy")
        again = src.load(driver="numpy")  # a Source loads as often as asked
    for k, v in values.items():
        np.testing.assert_array_equal(lc.to_numpy(out[k]), v)
        np.testing.assert_array_equal(lc.to_numpy(again[k]), v)
    assert lc.fetch_layout(out["a"]) == target["a"]
    with pytest.raises(CheckpointError, match="closed"):
        src.load(driver="numpy")
    with pytest.raises(CheckpointError, match="closed"):
        _ = src.specs
    src.close()  # idempotent


def _fds() -> int:
    return len(os.listdir("/proc/self/fd"))


@pytest.mark.skipif(not os.path.isdir("/proc/self/fd"), reason="counts descriptors through /proc")
def test_open_leaks_no_descriptors(saved: tuple[Path, dict[str, np.ndarray]], tmp_path: Path) -> None:
    path, _values = saved
    checkpoint.export_safetensors(path, tmp_path / "st")
    single = tmp_path / "st"
    for p in (path, single):
        checkpoint.load(p, driver="numpy")  # warm: imports, thread pools
        start = _fds()
        for _ in range(20):
            with checkpoint.open(p) as src:
                src.load(driver="numpy")
            src = checkpoint.open(p)
            src.read_plan(driver="numpy")
            src.close()
        assert _fds() == start, p


# -- into: errors and guarantees ---------------------------------------------------------------
def test_into_fills_numpy_components_in_place_and_reads_only_the_subset(
    saved: tuple[Path, dict[str, np.ndarray]],
) -> None:
    path, values = saved
    layout_of = {"a": Layout((None, "y"), MESH), "c": Layout(("y",), MESH)}
    into = _zeros(values, layout_of)
    memory = {k: [np.asarray(c) for c in lc.unpack(v)] for k, v in into.items()}
    (path / "b" / "c").rename(path / "b" / "gone")  # "b" is not in into: never read
    out = checkpoint.load(path, into=into)
    assert set(out) == {"a", "c"}
    for k in layout_of:
        assert out[k] is into[k]
        np.testing.assert_array_equal(lc.to_numpy(out[k]), values[k])
        for before, after in zip(memory[k], lc.unpack(out[k]), strict=True):
            assert np.shares_memory(before, np.asarray(after))


def test_into_keeps_nested_structure(saved: tuple[Path, dict[str, np.ndarray]], tmp_path: Path) -> None:
    _path, values = saved
    nested = tmp_path / "nested"
    checkpoint.save(nested, {"m": {"w": lc.distribute_tensor(values["a"], Layout(("x", None), MESH), driver="numpy")}})
    into = {"m": {"w": lc.distribute_tensor(np.zeros((8, 6), np.float32), Layout((None, None), MESH), driver="numpy")}}
    out = checkpoint.load(nested, into=into)
    assert out["m"]["w"] is into["m"]["w"]
    np.testing.assert_array_equal(lc.to_numpy(into["m"]["w"]), values["a"])


def test_target_and_into_are_exclusive(saved: tuple[Path, dict[str, np.ndarray]]) -> None:
    path, values = saved
    into = _zeros(values, {"a": Layout(("x", None), MESH)})
    with pytest.raises(TypeError, match="not both"):
        checkpoint.load(path, {"a": Layout(("x", None), MESH)}, into=into)


def test_an_unknown_into_path_is_named(saved: tuple[Path, dict[str, np.ndarray]]) -> None:
    path, _values = saved
    into = {"zz": lc.distribute_tensor(np.zeros(3), Layout((None,), MESH), driver="numpy")}
    with pytest.raises(LayoutError, match="'zz'"):
        checkpoint.load(path, into=into)


@pytest.mark.parametrize(("shape", "dtype"), [((8, 5), np.float32), ((8, 6), np.float64)])
def test_a_mismatch_is_refused_before_any_read_or_write(
    saved: tuple[Path, dict[str, np.ndarray]], shape: tuple[int, ...], dtype: type
) -> None:
    path, _values = saved
    good = lc.distribute_tensor(np.zeros((4, 10), np.int32), Layout(("x", None), MESH), driver="numpy")
    bad = lc.distribute_tensor(np.zeros(shape, dtype), Layout(("x", None), MESH), driver="numpy")
    for chunk in (path / "a" / "c").rglob("*"):  # any read of the data would fail with CheckpointError
        if chunk.is_file():
            chunk.write_bytes(b"")
    with pytest.raises(LayoutMismatchError, match="'a'"):
        checkpoint.load(path, into={"b": good, "a": bad})
    assert not lc.to_numpy(good).any()  # "b" comes first, and was not written


def test_a_failure_after_reading_began_names_tensor_file_and_partial_writes(
    saved: tuple[Path, dict[str, np.ndarray]],
) -> None:
    path, values = saved
    into = _zeros(values, {"a": Layout(("x", None), MESH), "b": Layout(("x", None), MESH)})
    shard = next(p for p in sorted((path / "b" / "c").rglob("*")) if p.is_file())
    data = bytearray(shard.read_bytes())
    data[3] ^= 0x40
    shard.write_bytes(bytes(data))
    with pytest.raises(CheckpointError) as info:
        checkpoint.load(path, into=into)
    err = info.value
    assert err.tensor == "b" and err.file is not None and "checksum" in str(err)
    assert isinstance(err.__cause__, CheckpointError)
    # NumPy components are read into straight from the files (no host copy of the tensor): "b",
    # whose read failed, is listed as partly written; every tensor the message does not list as
    # partly written holds all its new values (listed as such) or all its old ones
    partly, new = _listed(str(err))
    assert "b" in partly
    for name in ("a", "b"):
        got = lc.to_numpy(into[name])
        if name in new:
            np.testing.assert_array_equal(got, values[name])
        elif name not in partly:
            assert not got.any(), name


def _listed(message: str) -> tuple[list[str], list[str]]:
    """The tensors a load(into=...) error lists as partly written and as holding their new values."""
    import ast
    import re

    partly = re.search(r"partly written: (\[[^\]]*\])", message)
    new = re.search(r"hold their new values \((\[[^\]]*\])\)", message)
    return (ast.literal_eval(partly[1]) if partly else []), (ast.literal_eval(new[1]) if new else [])


@pytest.mark.parametrize("hook", ["native_fill", "native_write_rows"])
def test_a_failure_while_writing_lists_the_partly_written_tensor(
    saved: tuple[Path, dict[str, np.ndarray]], monkeypatch: pytest.MonkeyPatch, hook: str
) -> None:
    """The driver fails while writing: from host blocks (``native_fill``) or staged rows
    (``native_write_rows``, the path of device memory); the tensor is named, with the file."""
    from layoutcore.driver import DriverHooks

    path, values = saved
    into = _zeros(values, {"a": Layout(("x", None), MESH)})
    drv = type(lc.get_driver("numpy"))

    def broken(self, *args):  # type: ignore[no-untyped-def]
        raise RuntimeError("device lost")

    monkeypatch.setattr(drv, "native_host_views", lambda self, *a: None)  # not host memory
    if hook == "native_fill":
        monkeypatch.setattr(drv, "native_write_rows", DriverHooks.native_write_rows)  # writes no rows
    monkeypatch.setattr(drv, hook, broken)
    with pytest.raises(CheckpointError, match=r"partly written: \['a'\]") as info:
        checkpoint.load(path, into=into)
    assert info.value.tensor == "a" and isinstance(
        info.value.__cause__, RuntimeError if hook == "native_fill" else CheckpointError
    )
    if hook == "native_write_rows":
        assert info.value.file is not None and "device lost" in str(info.value)


# -- into on every driver ----------------------------------------------------------------------
@pytest.fixture(scope="module")
def matrix_checkpoint(tmp_path_factory: pytest.TempPathFactory) -> str:
    path = str(tmp_path_factory.mktemp("into") / "numpy")
    env = dict(os.environ, LAYOUTCORE_CPU_DEVICES="8")
    out = subprocess.run(
        [_python("numpy") or "python", str(MATRIX), "save", "numpy", path],
        env=env,
        capture_output=True,
        text=True,
        timeout=400,
    )
    assert out.returncode == 0, out.stderr[-4000:]
    return path


@pytest.mark.parametrize("driver", ["numpy", "jax", "torch", "tensorflow"])
def test_into_on_every_driver(matrix_checkpoint: str, driver: str) -> None:
    python = _python(driver)
    if python is None:
        pytest.skip(f"no interpreter with {driver} installed")
    env = dict(os.environ, LAYOUTCORE_CPU_DEVICES="8", TF_CPP_MIN_LOG_LEVEL="3")
    out = subprocess.run(
        [python, str(WORKER), driver, matrix_checkpoint], capture_output=True, text=True, env=env, timeout=400
    )
    assert out.returncode == 0, f"{driver}:\n{out.stderr[-4000:]}"
    result = json.loads(out.stdout.strip().splitlines()[-1])
    kinds = set(result["kinds"].values())
    assert kinds == ({"replaced"} if driver in ("jax", "tensorflow") else {"same"}), result
    if driver == "tensorflow":
        assert result["variables"] == {"rows_to_columns": "assigned"}


def test_a_driver_refusal_names_the_tensor_before_any_read(saved: tuple[Path, dict[str, np.ndarray]]) -> None:
    path, _ = saved
    for chunk in (path / "b" / "c").rglob("*"):  # a read would raise CheckpointError instead
        if chunk.is_file():
            chunk.write_bytes(b"")
    sixteen = Mesh((16,), ("x",))  # the NumPy driver has 8 devices here
    with pytest.raises(lc.LayoutcoreError, match="tensor 'b'"):
        checkpoint.load(path, {"b": Layout(("x", None), sixteen)}, driver="numpy")


def test_a_saved_python_int_is_int64_and_a_narrower_spec_is_refused_naming_the_rule(tmp_path: Path) -> None:
    checkpoint.save(tmp_path / "c", {"step": 7})
    assert checkpoint.inspect(tmp_path / "c").tensors["step"].dtype == "int64"
    out = checkpoint.load(tmp_path / "c", driver="numpy")
    assert lc.to_numpy(out["step"]).dtype == np.int64 and lc.to_numpy(out["step"]) == 7
    narrow = lc.TensorSpec((), "int32", Layout((), MESH))
    with pytest.raises(LayoutMismatchError, match=r"'step'.*never casts: ask for the saved dtype"):
        checkpoint.load(tmp_path / "c", {"step": narrow}, driver="numpy")


X64_OFF = """
import sys, warnings
import numpy as np
import layoutcore as lc
from layoutcore import checkpoint
path = sys.argv[1]
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    out = checkpoint.load(path + "/small", driver="jax")  # through pack: the exact narrowing applies
assert out["step"].dtype == np.int32 and int(out["step"]) == 7, out["step"]
assert any("int64" in str(w.message) for w in caught), [str(w.message) for w in caught]
try:
    checkpoint.load(path + "/big", driver="jax")
except lc.UnsupportedLayoutError as err:
    assert "'big'" in str(err) and err.feature == "dtype", err
else:
    raise AssertionError("2**40 loaded into int32")
print("OK")
"""


def test_jax_without_x64_narrows_a_loaded_int_exactly_or_refuses_naming_it(tmp_path: Path) -> None:
    python = _python("jax")
    if python is None:
        pytest.skip("no interpreter with jax installed")
    checkpoint.save(tmp_path / "small", {"step": 7})
    checkpoint.save(tmp_path / "big", {"big": np.array([2**40], np.int64)})
    env = dict(os.environ, LAYOUTCORE_CPU_DEVICES="8")
    out = subprocess.run([python, "-c", X64_OFF, str(tmp_path)], capture_output=True, text=True, env=env, timeout=300)
    assert out.returncode == 0 and out.stdout.strip().endswith("OK"), out.stderr[-3000:]
