"""Save and load on the NumPy driver: every dtype bit for bit, layouts changing in between."""

from __future__ import annotations

import collections
import math
import os
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import layoutcore as lc
from layoutcore import (
    CheckpointError,
    Layout,
    LayoutError,
    LayoutMap,
    LayoutMismatchError,
    Mesh,
    TensorSpec,
    checkpoint,
)
from layoutcore._dtypes import ALL_DTYPES, as_bits, numpy_dtype

MESH8 = Mesh((8,), ("x",))
MESH24 = Mesh((2, 4), ("a", "b"))
MESH22 = Mesh((2, 2), ("p", "q"))


def _random(shape: tuple[int, ...], dtype: str, seed: int = 0) -> np.ndarray:
    """Random bits of ``dtype`` (NaN payloads and -0.0 included for floats)."""
    rng = np.random.default_rng(seed)
    dt = numpy_dtype(dtype)
    raw = rng.integers(0, 256, size=math.prod(shape) * dt.itemsize, dtype=np.uint8)
    if dtype == "bool":
        raw = raw % 2
    return raw.view(dt).reshape(shape)


def _same_bits(a: np.ndarray, b: np.ndarray) -> bool:
    return a.dtype == b.dtype and a.shape == b.shape and np.array_equal(as_bits(a), as_bits(b))


@pytest.mark.parametrize("dtype", ALL_DTYPES)
def test_every_dtype_round_trips_bit_for_bit(tmp_path: Path, dtype: str) -> None:
    value = _random((16, 6), dtype)
    t = lc.distribute_tensor(value, Layout(("x", None), MESH8))
    checkpoint.save(tmp_path / "c", {"t": t})
    out = checkpoint.load(tmp_path / "c", {"t": Layout((None, "b"), Mesh((2, 3), ("a", "b")))})
    got = lc.to_numpy(out["t"])
    assert _same_bits(got, value), dtype
    assert lc.fetch_layout(out["t"]) == Layout((None, "b"), Mesh((2, 3), ("a", "b")))
    assert checkpoint.inspect(tmp_path / "c").tensors["t"].dtype == dtype


CASES = {
    "rows_to_columns": (Layout(("x", None), MESH8), Layout((None, "x"), MESH8), (32, 24)),
    "one_axis_to_two": (Layout(("x", None), MESH8), Layout((("a", "b"), None), MESH24), (32, 24)),
    "8_devices_to_2x2": (Layout((None, "x"), MESH8), Layout(("p", "q"), MESH22), (32, 24)),
    "even_to_uneven": (Layout(("x", None), MESH8), Layout(("a", "b"), MESH24), (33, 7)),
    "uneven_to_even": (Layout(("x", "y"), Mesh((3, 2), ("x", "y"))), Layout(("x", None), MESH8), (40, 5)),
    "replicated": (Layout((None, None), MESH8), Layout(("p", None), MESH22), (6, 5)),
}


@pytest.mark.parametrize("case", sorted(CASES))
@pytest.mark.parametrize("declared", [False, True])
def test_layout_changes_between_save_and_load(tmp_path: Path, case: str, declared: bool) -> None:
    src, dst, shape = CASES[case]
    value = _random(shape, "float32", seed=1)
    tree = {"w": lc.distribute_tensor(value, src), "scalar": 2.5, "plain": np.arange(7, dtype=np.int16)}
    checkpoint.save(tmp_path / "c", tree, read_layouts={"w": dst} if declared else None)
    target = {"w": dst, "scalar": Layout((), MESH22), "plain": Layout(("p",), MESH22)}
    plan = checkpoint.read_plan(tmp_path / "c", target)
    out = checkpoint.load(tmp_path / "c", target)
    assert _same_bits(lc.to_numpy(out["w"]), value)
    assert lc.fetch_layout(out["w"]) == dst
    assert lc.to_numpy(out["scalar"]) == np.float64(2.5) and lc.fetch_layout(out["scalar"]) == Layout((), MESH22)
    assert np.array_equal(lc.to_numpy(out["plain"]), np.arange(7, dtype=np.int16))
    # floor: each distinct element the devices need, once (oracle: the layouts' device slices)
    floor = sum(
        math.prod(len(range(n)[s]) for n, s in zip(shp, sl, strict=True)) * item
        for lay, shp, item in ((dst, shape, 4), (Layout((), MESH22), (), 8), (Layout(("p",), MESH22), (7,), 2))
        for sl in {tuple((x.start, x.stop) for x in s): s for s in lay.device_slices(shp)}.values()
    )
    assert plan.floor_bytes == floor
    if declared:  # inner chunks refine the declared layout: reads are the floor plus chunk checksums
        w_read, w_floor = plan.tensors["w"]
        assert w_read <= 1.05 * w_floor


def test_declared_layout_reads_whole_chunks_and_undeclared_is_predicted(tmp_path: Path) -> None:
    value = _random((1024, 1024), "float32")
    rows = lc.distribute_tensor(value, Layout(("x", None), MESH8))
    cols = Layout((None, "x"), MESH8)
    checkpoint.save(tmp_path / "undeclared", {"w": rows})
    checkpoint.save(tmp_path / "declared", {"w": rows}, read_layouts=[{"w": cols}])
    exact_u = checkpoint.read_plan(tmp_path / "undeclared", {"w": cols})
    exact_d = checkpoint.read_plan(tmp_path / "declared", {"w": cols})
    whole_u = checkpoint.read_plan(tmp_path / "undeclared", {"w": cols}, granularity="piece")
    whole_d = checkpoint.read_plan(tmp_path / "declared", {"w": cols}, granularity="piece")
    assert exact_u.floor_bytes == exact_d.floor_bytes == value.nbytes
    # one process holding all 8 devices needs every byte: each shard is read whole, once, with its CRC
    assert exact_u.read_bytes == value.nbytes + 4 * 8 and len(exact_u.reads) == 8
    assert exact_d.read_bytes == value.nbytes + 4 * 64 and len(exact_d.reads) == 8  # 64 chunks, each with its CRC
    assert whole_u.amplification == pytest.approx(1.0 + 4 * 8 / value.nbytes)  # one process reads everything once
    assert whole_d.amplification < 1.001
    # one device of 8 (process_devices): whole-chunk readers read 8x on the undeclared checkpoint
    one_u = checkpoint.read_plan(tmp_path / "undeclared", {"w": cols}, process_devices=[3], granularity="piece")
    one_d = checkpoint.read_plan(tmp_path / "declared", {"w": cols}, process_devices=[3], granularity="piece")
    assert one_u.amplification == pytest.approx(8.0, rel=1e-3)
    assert one_d.amplification < 1.001
    exact_one = checkpoint.read_plan(tmp_path / "undeclared", {"w": cols}, process_devices=[3])
    assert exact_one.read_bytes == exact_one.floor_bytes == value.nbytes // 8  # exact runs, no checksum
    assert len(exact_one.reads) == 1024  # ... one run per row: what read_layouts avoids
    exact_one_d = checkpoint.read_plan(tmp_path / "declared", {"w": cols}, process_devices=["CPU:3"])
    assert exact_one_d.read_bytes == value.nbytes // 8 + 4 * 8 and len(exact_one_d.reads) == 8
    for p in ("undeclared", "declared"):
        assert _same_bits(lc.to_numpy(checkpoint.load(tmp_path / p, {"w": cols})["w"]), value)


def test_tree_structure_target_forms_and_variables(tmp_path: Path) -> None:
    Pair = collections.namedtuple("Pair", ["left", "right"])
    value = _random((8, 4), "int32")
    var = lc.Variable(lc.distribute_tensor(value, Layout(("x", None), MESH8)))
    tree = {"a": [var, None, (np.float32(1.5), 7)], "b": Pair(np.ones(3, np.bool_), {"c": np.zeros((2, 2))})}
    checkpoint.save(tmp_path / "c", tree)
    info = checkpoint.inspect(tmp_path / "c")
    assert sorted(info.tensors) == ["a/0", "a/2/0", "a/2/1", "b/left", "b/right/c"]
    assert info.tensors["a/0"] == TensorSpec((8, 4), "int32", Layout(("x", None), MESH8))
    assert info.total_bytes == 8 * 4 * 4 + 4 + 8 + 3 + 32
    out = checkpoint.load(tmp_path / "c")  # saved layouts
    assert isinstance(out["a"], list) and out["a"][1] is None and isinstance(out["a"][2], tuple)
    assert type(out["b"]).__name__ == "Pair" and out["b"]._fields == ("left", "right")
    assert lc.fetch_layout(out["a"][0]) == Layout(("x", None), MESH8)
    assert np.array_equal(lc.to_numpy(out["a"][0]), value)
    assert lc.to_numpy(out["a"][2][1]) == 7 and lc.to_numpy(out["a"][2][1]).dtype == np.int64
    # target as a LayoutMap, as a tree of TensorSpecs / distributed tensors
    lm = LayoutMap(MESH22)
    lm["a/0"] = ("p", "q")
    out2 = checkpoint.load(tmp_path / "c", lm)
    assert lc.fetch_layout(out2["a"][0]) == Layout(("p", "q"), MESH22)
    assert lc.fetch_layout(out2["b"].right["c"]) == Layout((None, None), MESH22)  # on_missing="replicate"
    like = lc.distribute_tensor(np.zeros((8, 4), np.int32), Layout((None, "p"), MESH22))
    out3 = checkpoint.load(tmp_path / "c", {"a": [like, None, (None, None)]})
    assert lc.fetch_layout(out3["a"][0]) == Layout((None, "p"), MESH22)
    assert np.array_equal(lc.to_numpy(like), np.zeros((8, 4), np.int32))  # targets are never modified


def test_wrong_target_spec_raises_layout_mismatch_naming_path(tmp_path: Path) -> None:
    checkpoint.save(tmp_path / "c", {"layer": {"w": np.zeros((4, 4), np.float32)}})
    for spec in (
        TensorSpec((4, 5), "float32", Layout((None, None), MESH22)),
        TensorSpec((4, 4), "bfloat16", Layout((None, None), MESH22)),
    ):
        with pytest.raises(LayoutMismatchError, match="layer/w"):
            checkpoint.load(tmp_path / "c", {"layer/w": spec})
        with pytest.raises(LayoutMismatchError, match="layer/w"):
            checkpoint.read_plan(tmp_path / "c", {"layer": {"w": spec}})


def test_target_naming_unknown_paths_is_refused(tmp_path: Path) -> None:
    checkpoint.save(tmp_path / "c", {"layer": {"w": np.zeros((4, 4), np.float32)}})
    with pytest.raises(LayoutError, match="layer/W"):
        checkpoint.load(tmp_path / "c", {"layer/W": Layout((None, None), MESH22)})


def test_exists_and_overwrite(tmp_path: Path) -> None:
    checkpoint.save(tmp_path / "c", {"v": np.arange(3)})
    with pytest.raises(CheckpointError, match="already exists"):
        checkpoint.save(tmp_path / "c", {"v": np.arange(4)})
    checkpoint.save(tmp_path / "c", {"v": np.arange(5)}, overwrite=True)
    assert np.array_equal(lc.to_numpy(checkpoint.load(tmp_path / "c")["v"]), np.arange(5))
    assert sorted(os.listdir(tmp_path)) == ["c"]  # no temporary or old directory left behind


def test_not_a_checkpoint_and_bad_leaves(tmp_path: Path) -> None:
    with pytest.raises(CheckpointError, match="does not exist"):
        checkpoint.load(tmp_path / "missing")
    (tmp_path / "empty").mkdir()
    with pytest.raises(CheckpointError, match=r"layoutcore\.json"):
        checkpoint.inspect(tmp_path / "empty")
    with pytest.raises(CheckpointError, match="'name'"):
        checkpoint.save(tmp_path / "s", {"name": "text"})
    assert not (tmp_path / "s").exists()


@settings(max_examples=25, deadline=None)
@given(st.data())
def test_random_layouts_round_trip(tmp_path_factory: pytest.TempPathFactory, data: st.DataObject) -> None:
    meshes = [MESH8, MESH24, MESH22, Mesh((3, 2), ("x", "y"))]
    rank = data.draw(st.integers(1, 3))
    shape = tuple(data.draw(st.lists(st.integers(0, 11), min_size=rank, max_size=rank)))

    def layout() -> Layout:
        mesh = data.draw(st.sampled_from(meshes))
        names = list(data.draw(st.permutations(mesh.axis_names)))
        axes: list[object] = []
        for _ in range(rank):
            k = data.draw(st.integers(0, len(names)))
            used, names[:] = names[:k], names[k:]
            axes.append(tuple(used) if used else None)
        return Layout(axes, mesh)

    src, dst = layout(), layout()
    dtype = data.draw(st.sampled_from(["float32", "bfloat16", "int8", "complex128"]))
    value = _random(shape, dtype, seed=data.draw(st.integers(0, 9)))
    path = tmp_path_factory.mktemp("ck") / "c"
    read_layouts = [{"w": dst}] if data.draw(st.booleans()) else None
    checkpoint.save(path, {"w": lc.distribute_tensor(value, src)}, read_layouts=read_layouts)
    out = checkpoint.load(path, {"w": dst})["w"]
    assert _same_bits(lc.to_numpy(out), value)
    assert lc.fetch_layout(out) == dst
    # each device's component equals the oracle's block
    for comp, sl in zip(lc.unpack(out), dst.device_slices(shape), strict=True):
        assert _same_bits(np.asarray(comp), value[sl])


def test_multi_client_tensorflow_process_group_and_its_bounded_barrier(monkeypatch: pytest.MonkeyPatch) -> None:
    """Several TF DTensor clients: rank and size from DTensor through the driver's hook; a barrier that
    hangs ends in bounded time, one that fails names TF's error; the save's engine wraps both."""
    import time

    pytest.importorskip("tensorflow.experimental.dtensor")  # TF itself, not another test's stand-in
    from layoutcore_tensorflow._barrier import DTensorBarrier

    from layoutcore import ConfigurationError
    from layoutcore.checkpoint._engine import Engine, engine_for
    from layoutcore.driver import ProcessGroup

    drv = lc.get_driver("tensorflow")
    assert drv.process_group().size == 1  # one client
    monkeypatch.setattr(drv._dtensor, "num_clients", lambda: 2)  # type: ignore[attr-defined]
    monkeypatch.setattr(drv._dtensor, "client_id", lambda: 1)  # type: ignore[attr-defined]
    group = drv.process_group()
    assert (group.name, group.rank, group.size) == ("tensorflow", 1, 2)
    assert isinstance(group.barrier, DTensorBarrier)
    monkeypatch.setenv("LAYOUTCORE_CHECKPOINT_BARRIER_TIMEOUT", "0.5")
    assert engine_for(drv).timeout_s == 0.5
    monkeypatch.setenv("LAYOUTCORE_CHECKPOINT_BARRIER_TIMEOUT", "soon")
    with pytest.raises(ConfigurationError, match="LAYOUTCORE_CHECKPOINT_BARRIER_TIMEOUT"):
        engine_for(drv)
    # a collective that never returns (a hung peer): CheckpointError after the timeout
    hung = Engine(ProcessGroup(0, 2, DTensorBarrier(lambda: time.sleep(30)), "tensorflow"), 0.5)
    start = time.monotonic()
    with pytest.raises(CheckpointError, match=r"nothing was committed.*within 0\.5 s"):
        hung.barrier("t", path="/ck")
    assert time.monotonic() - start < 10

    # a collective that fails (TF's error when a peer died): CheckpointError naming it
    def fail() -> None:
        raise RuntimeError("Collective ops is aborted")

    with pytest.raises(CheckpointError, match="Collective ops is aborted"):
        Engine(ProcessGroup(0, 2, DTensorBarrier(fail), "tensorflow"), 5).barrier("t", path="/ck")
    Engine(ProcessGroup(0, 2, DTensorBarrier(lambda: None), "tensorflow"), 5).barrier("t", path="/ck")


def test_process_group_refuses_nonsense_and_defaults_to_one_process() -> None:
    from layoutcore.driver import SINGLE_PROCESS, ProcessGroup

    with pytest.raises(ValueError, match="rank 2 is outside"):
        ProcessGroup(2, 2, lambda tag, t: None)
    with pytest.raises(ValueError, match="need a barrier"):
        ProcessGroup(0, 2)
    assert lc.get_driver("numpy").process_group() == SINGLE_PROCESS
