"""Cross-framework checkpoint interchange, each framework in its own process.

torch saves with ``torch.distributed.checkpoint.save`` (2 gloo processes, placements Shard(0),
Shard(1), uneven Shard(0), [Shard(0), Shard(1)] on a 2x1 mesh, Replicate) and layoutcore loads
that into JAX, TF DTensor and NumPy under other layouts; JAX saves with Orbax and layoutcore
loads that into torch, TF and NumPy; each load's ``export_safetensors`` output loads back into
the same driver. Every check (load_worker.py) is bit for bit against the NumPy oracle, global
value and per-device components.

The Python of each framework is ``sys.executable`` where it has the framework (the tox env that
runs this directory has them all), else ``LAYOUTCORE_<TORCH|JAX|TENSORFLOW>_PYTHON``, else its
venv under /work/venvs. A missing framework fails the test; it is never skipped.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import socket
import subprocess
import sys
from pathlib import Path

import pytest

import layoutcore as lc
import layoutcore.checkpoint as ckpt

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[2]


_MODULES = {"numpy": "numpy", "jax": "jax", "torch": "torch", "tensorflow": "tensorflow"}
_VENVS = {"numpy": "np", "jax": "jax", "torch": "torch", "tensorflow": "tf"}


def python_for(framework: str) -> str:
    """This interpreter where it has the framework, else ``LAYOUTCORE_<NAME>_PYTHON``, else the
    framework's venv under /work/venvs; else this interpreter, and the test fails on the import."""
    if importlib.util.find_spec(_MODULES[framework]) is not None:
        return sys.executable
    named = os.environ.get(f"LAYOUTCORE_{framework.upper()}_PYTHON")
    if named:
        return named
    candidate = Path("/work/venvs") / _VENVS[framework] / "bin" / "python"
    return str(candidate) if candidate.exists() else sys.executable


def _pythonpath() -> str:
    """This directory (the workers' helpers), then the caller's path: a worktree's checkout under test
    comes before the layoutcore installed in the environment."""
    return os.pathsep.join(p for p in (str(HERE), os.environ.get("PYTHONPATH", "")) if p)


def run(framework: str, *args: str, timeout: int = 240) -> str:
    env = {**os.environ, "LAYOUTCORE_CPU_DEVICES": "8", "PYTHONPATH": _pythonpath()}
    proc = subprocess.run(
        [python_for(framework), *args], cwd=HERE, env=env, capture_output=True, text=True, timeout=timeout
    )
    assert proc.returncode == 0, (
        f"{framework} {args}: rc={proc.returncode}\n{proc.stdout[-3000:]}\n{proc.stderr[-6000:]}"
    )
    return proc.stdout


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _dcp_save(out: Path, *flags: str) -> Path:
    port = str(_port())
    env = {**os.environ, "PYTHONPATH": _pythonpath()}
    cmd = [python_for("torch"), "torch_dcp_save.py"]
    procs = [
        subprocess.Popen(
            [*cmd, str(r), port, str(out), *flags],
            cwd=HERE,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        for r in (0, 1)
    ]
    logs = [p.communicate(timeout=180)[0] for p in procs]
    assert all(p.returncode == 0 for p in procs), "\n".join(logs)[-6000:]
    return out


@pytest.fixture(scope="module")
def dcp_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return _dcp_save(tmp_path_factory.mktemp("dcp") / "ckpt")


@pytest.fixture(scope="module")
def orbax_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("orbax") / "ckpt"
    run("jax", "jax_orbax_save.py", str(out))
    return out


@pytest.mark.parametrize("driver", ["jax", "tensorflow", "numpy"])
def test_dcp_loads_into(driver: str, dcp_dir: Path, tmp_path: Path) -> None:
    out = run(
        driver if driver != "numpy" else "numpy", "load_worker.py", driver, "dcp", str(dcp_dir), str(tmp_path / "st")
    )
    assert f"OK {driver} dcp" in out


def test_dcp_safetensors_serialisation_loads(tmp_path: Path) -> None:
    """DCP's SAFETENSORS serialisation (2 gloo ranks), which torch 2.13 cannot read back, loads bit-exact."""
    saved = _dcp_save(tmp_path / "dcp_st", "--safetensors")
    out = run("numpy", "load_worker.py", "numpy", "dcp", str(saved), str(tmp_path / "st"))
    assert "OK numpy dcp" in out


@pytest.mark.parametrize("driver", ["torch", "tensorflow", "numpy"])
def test_orbax_loads_into(driver: str, orbax_dir: Path, tmp_path: Path) -> None:
    out = run(driver, "load_worker.py", driver, "orbax", str(orbax_dir), str(tmp_path / "st"))
    assert f"OK {driver} orbax" in out


def test_dcp_inspect_infers_the_saved_blocks(dcp_dir: Path) -> None:
    """DCP records boxes only: inspect gives the smallest layout with exactly those blocks."""
    info = ckpt.inspect(dcp_dir)
    assert info.format == "torch-dcp 1.0.0" and info.values == {"step": 7}
    axes = {p: s.layout.axes for p, s in info.tensors.items()}
    assert axes == {
        "model/w_rows": ("d0", None),
        "model/w_cols": (None, "d1"),
        "model/uneven": ("d0", None),
        "model/emb": ("d0", None),  # [Shard(0), Shard(1)] on 2x1: the size-1 axis splits nothing
        "model/ids": (None, None),
        "rep": (None,),
    }
    assert info.boxes["model/uneven"] == (((0, 0), (3, 4)), ((3, 0), (2, 4)))
    assert not any(info.layout_known.values())
    plan = ckpt.read_plan(dcp_dir, {"model/w_rows": lc.Layout(("x", None), lc.Mesh((2,), ("x",)))}, process_devices=[1])
    assert plan.exact and plan.amplification == 1.0


def test_orbax_inspect_reads_the_saved_layouts(orbax_dir: Path) -> None:
    info = ckpt.inspect(orbax_dir)
    mesh = lc.Mesh((2, 4), ("x", "y"))
    assert info.format == "orbax zarr+ocdbt" and info.values == {"step": 11}
    assert info.tensors["params/dense/kernel"].layout == lc.Layout(("x", "y"), mesh)
    assert info.tensors["params/dense/bias"].layout == lc.Layout((("y", "x"),), mesh)
    assert info.tensors["rep"].layout == lc.Layout((None, None), mesh)
    assert all(info.layout_known.values())
    # Orbax's chunk is one device's (4, 3) block: rows 0:2 of all columns touch 4 chunks, twice the rows
    kernel = {"params/dense/kernel": lc.Layout(("y", None), mesh)}
    plan = ckpt.read_plan(orbax_dir, kernel, process_devices=[0])
    kernel_reads = [r for r in plan.reads if "params.dense.kernel" in r[0]]
    assert not plan.exact and len(kernel_reads) == 4
    assert sum(r[2] for r in kernel_reads) == 2 * (2 * 12 * 4)


def test_orbax_missing_sharding(orbax_dir: Path, tmp_path: Path) -> None:
    bad = tmp_path / "nosharding"
    shutil.copytree(orbax_dir, bad)
    (bad / "_sharding").unlink()
    with pytest.raises(lc.CheckpointError, match="_sharding") as err:
        ckpt.load(bad)
    assert err.value.file == str(bad / "_sharding")


@pytest.mark.parametrize("framework", ["jax", "torch", "tensorflow"])
def test_tensor_spec_conversions_against_the_framework(framework: str) -> None:
    """TensorSpec <-> NamedSharding/ShapeDtypeStruct (+ Orbax's own _sharding reader), torch
    placements incl. _StridedShard (data placed by torch under LocalTensorMode), TF layout
    strings (data placed by TF): round trips or typed refusals, per random spec."""
    out = run(framework, "conversions_worker.py", framework, "40")
    assert f"OK {framework}" in out


def test_orbax_restore_target_from_tensor_specs(orbax_dir: Path) -> None:
    assert "OK restore 11" in run("jax", "orbax_restore_worker.py", str(orbax_dir))


def test_dcp_storage_reader_fills_dtensors(tmp_path: Path) -> None:
    """torch.distributed.checkpoint.load(state_dict, storage_reader=LayoutcoreStorageReader(path))
    on 2 gloo processes fills DTensors of other placements (uneven included) from a layoutcore
    checkpoint, each local shard equal to the oracle's block, reading less than the whole."""
    from oracle import dcp_arrays

    g = dcp_arrays()
    mesh = lc.Mesh((2,), ("x",))
    model = {
        k.split("/")[1]: lc.distribute_tensor(v, lc.Layout(("x",) + (None,) * (v.ndim - 1), mesh), driver="numpy")
        for k, v in g.items()
        if k.startswith("model/")
    }
    ckpt.save(tmp_path / "lc", {"model": model, "rep": g["rep"]})
    port = str(_port())
    env = {**os.environ, "PYTHONPATH": _pythonpath()}
    cmd = [python_for("torch"), "torch_dcp_reader_worker.py"]
    procs = [
        subprocess.Popen(
            [*cmd, str(r), port, str(tmp_path / "lc")],
            cwd=HERE,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        for r in (0, 1)
    ]
    logs = [p.communicate(timeout=180)[0] for p in procs]
    assert all(p.returncode == 0 for p in procs), "\n".join(logs)[-6000:]
    total = sum(a.nbytes for a in g.values())
    for log in logs:
        line = next(x for x in log.splitlines() if x.startswith("LOADED"))
        _, _, read, whole = line.split()
        assert int(whole) == total and int(read) < total


def run_jax_pair(file: Path, kind: str) -> list[dict[str, int]]:
    """Two JAX processes (4 CPU devices each) load ``file`` under rows/columns over 8; their reports."""
    import json

    port = str(_port())
    env = {**os.environ, "PYTHONPATH": _pythonpath()}
    env.pop("LAYOUTCORE_CPU_DEVICES", None)
    cmd = [python_for("jax"), "jax_mp_load_worker.py"]
    procs = [
        subprocess.Popen(
            [*cmd, str(p), port, str(file), kind],
            cwd=HERE,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        for p in (0, 1)
    ]
    logs = [p.communicate(timeout=200)[0] for p in procs]
    assert all(p.returncode == 0 for p in procs), "\n".join(logs)[-6000:]
    return [json.loads(next(x for x in log.splitlines() if x.startswith("{"))) for log in logs]


@pytest.mark.parametrize("kind", ["rows", "cols"])
def test_two_jax_processes_read_their_floor_of_safetensors(kind: str, tmp_path: Path) -> None:
    """Each of 2 processes reads (rchar of /proc/self/io, cache dropped) <= 1.05x its floor."""
    import numpy as np
    import safetensors.numpy as stn

    file = tmp_path / "w.safetensors"
    stn.save_file({"w": np.arange(1024 * 512, dtype=np.float32).reshape(1024, 512)}, str(file))
    for report in run_jax_pair(file, kind):
        assert report["floor_bytes"] == 1024 * 512 * 4 // 2
        assert report["plan_read_bytes"] == report["floor_bytes"]
        assert report["rchar"] <= 1.05 * report["floor_bytes"], report


def test_orbax_storage_variants(tmp_path: Path) -> None:
    """zarr v2 / zarr v3, with and without OCDBT: each opens, keeps its layout, loads bit-exact."""
    import numpy as np

    run("jax", "jax_orbax_variants.py", str(tmp_path / "ov"))
    expected = {"a": np.arange(96, dtype=np.float32).reshape(8, 12), "n": np.arange(5, dtype=np.int16)}
    for suffix, version in (("00", "orbax zarr"), ("01", "orbax zarr3"), ("11", "orbax zarr3+ocdbt")):
        path = tmp_path / f"ov_{suffix}"
        info = ckpt.inspect(path)
        assert info.format == version
        assert info.tensors["a"].layout == lc.Layout(("x", "y"), lc.Mesh((2, 4), ("x", "y")))
        assert info.layout_known == {"a": True, "n": False}
        out = ckpt.load(path, {"a": lc.Layout((None, "x"), lc.Mesh((4,), ("x",)))}, driver="numpy")
        for key, value in expected.items():
            got = lc.to_numpy(out[key])
            assert got.dtype == value.dtype and np.array_equal(got, value)


def test_target_forms_on_a_foreign_checkpoint(orbax_dir: Path) -> None:
    """A tree of the saved structure, a LayoutMap, and TensorSpecs: the layoutcore format's forms."""
    import numpy as np
    from oracle import orbax_arrays

    g = orbax_arrays()
    mesh = lc.Mesh((4,), ("m",))
    tree = {"params": {"dense": {"kernel": lc.Layout(("m", None), mesh)}}}
    out = ckpt.load(orbax_dir, tree, driver="numpy")
    assert lc.fetch_layout(out["params"]["dense"]["kernel"]) == lc.Layout(("m", None), mesh)
    assert np.array_equal(lc.to_numpy(out["params"]["dense"]["kernel"]), g["params/dense/kernel"])
    lm = lc.LayoutMap(mesh)
    lm["emb"] = (None, "m")
    out = ckpt.load(orbax_dir, lm, driver="numpy")
    assert lc.fetch_layout(out["params"]["emb"]).axes == (None, "m")
    assert lc.fetch_layout(out["rep"]) == lc.Layout((None, None), mesh)  # unmatched: replicated (on_missing)
    wrong = lc.TensorSpec((8, 12), "bfloat16", lc.Layout((None, None), mesh))
    with pytest.raises(lc.LayoutMismatchError, match="params/dense/kernel"):
        ckpt.load(orbax_dir, {"params/dense/kernel": wrong}, driver="numpy")


def test_orbax_malformed_metadata(orbax_dir: Path, tmp_path: Path) -> None:
    bad = tmp_path / "bad"
    shutil.copytree(orbax_dir, bad)
    (bad / "_METADATA").write_text('{"tree_metadata": {"x": {"value_metadata": {}}}}')
    with pytest.raises(lc.CheckpointError, match="_METADATA"):
        ckpt.inspect(bad)
    (bad / "_METADATA").write_text("{not json")
    with pytest.raises(lc.CheckpointError, match="_METADATA"):
        ckpt.load(bad)


def test_orbax_checkpoint_manager_step_and_short_partition_spec(tmp_path: Path) -> None:
    """A CheckpointManager step directory (one item) opens; P("x") on a rank-2 array is ("x", None)."""
    import numpy as np

    run("jax", "jax_orbax_manager.py", str(tmp_path / "mgr"))
    step = tmp_path / "mgr" / "3"
    info = ckpt.inspect(step)
    assert info.tensors["w"].layout == lc.Layout(("x", None), lc.Mesh((8,), ("x",)))
    out = ckpt.load(step, {"w": lc.Layout((None, "x"), lc.Mesh((2,), ("x",)))}, driver="numpy")
    assert np.array_equal(lc.to_numpy(out["w"]), np.arange(16.0, dtype=np.float32).reshape(8, 2))
