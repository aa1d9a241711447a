"""Checkpoint I/O threads: a load's readers and a save's writers give the same data and files as
one thread, errors surface (in order, for a load), a bad setting is refused.

The tensors here are small, so the thresholds that keep small tensors on the calling thread and
bound the read-ahead are lowered to put every tensor, split into several piece tasks, on the pool.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import layoutcore as lc
from layoutcore import CheckpointError, ConfigurationError, Layout, Mesh, checkpoint
from layoutcore._dtypes import as_bits, numpy_dtype
from layoutcore.checkpoint import _reader, _save, _threads
from layoutcore.driver import ALIGN, HUGE_PAGE, aligned_empty

MESH8 = Mesh((8,), ("x",))
MESH42 = Mesh((4, 2), ("a", "b"))


def _value(shape: tuple[int, ...], dtype: str, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    dt = numpy_dtype(dtype)
    return rng.integers(0, 256, size=int(np.prod(shape)) * dt.itemsize, dtype=np.uint8).view(dt).reshape(shape)


@pytest.fixture
def on_the_pool(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_reader, "INLINE_BYTES", 0)  # every tensor goes to the reader threads
    monkeypatch.setattr(_reader, "TASK_BYTES", 3000)  # a few stored pieces per task
    monkeypatch.setattr(_threads, "AHEAD_BYTES", 20_000)  # a few tensors read ahead, blocks queued
    monkeypatch.setenv("LAYOUTCORE_CHECKPOINT_THREADS", "3")


@pytest.fixture
def saved(tmp_path: Path) -> tuple[Path, dict[str, np.ndarray]]:
    oracle, tree = {}, {}
    layouts = [Layout(("x", None), MESH8), Layout(("a", "b"), MESH42), Layout((None, ("a", "b")), MESH42)]
    for i in range(12):
        dtype = ("float32", "bfloat16", "int64")[i % 3]
        oracle[f"t{i}"] = v = _value((48 + 8 * i, 40), dtype, i)
        tree[f"t{i}"] = lc.distribute_tensor(v, layouts[i % 3])
    path = tmp_path / "ckpt"
    checkpoint.save(path, tree, read_layouts={"t0": Layout((None, "x"), MESH8)})
    return path, oracle


TARGETS = {
    "columns": Layout((None, "x"), MESH8),  # t0's declared layout: chunks read straight into blocks
    "rows over two axes": Layout((("b", "a"), None), MESH42),
    "uneven": Layout(("b", "a"), Mesh((2, 3), ("a", "b"))),
}


@pytest.mark.parametrize("target", TARGETS)
def test_threads_load_the_same_bits_as_the_oracle(
    saved: tuple[Path, dict[str, np.ndarray]], on_the_pool: None, target: str
) -> None:
    path, oracle = saved
    layout = TARGETS[target]
    out = checkpoint.load(path, {k: layout for k in oracle})
    assert list(out) == list(oracle)  # tensors handed back in order
    for k, v in oracle.items():
        assert out[k].layout == layout
        assert np.array_equal(as_bits(lc.to_numpy(out[k])), as_bits(v)), k
        for block, index in zip(lc.unpack(out[k]), layout.device_slices(v.shape), strict=True):
            assert np.array_equal(as_bits(np.asarray(block)), as_bits(v[index])), k


def test_a_corrupt_piece_read_by_a_thread_raises_naming_it(
    saved: tuple[Path, dict[str, np.ndarray]], on_the_pool: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    path, oracle = saved
    shard = path / "t7" / "c" / "3" / "1"  # t7: (104, 40) on 4x2, its block (3, 1)
    data = bytearray(shard.read_bytes())
    data[7] ^= 0x01
    shard.write_bytes(bytes(data))
    packed: list[str] = []
    pack = lc.get_driver().native_pack_owned  # the loader hands its blocks over through this hook

    def recording_pack(blocks, layout, devices, global_shape):  # type: ignore[no-untyped-def]
        packed.append(str(global_shape))
        return pack(blocks, layout, devices, global_shape)

    monkeypatch.setattr(type(lc.get_driver()), "native_pack_owned", lambda self, *a: recording_pack(*a))
    with pytest.raises(CheckpointError, match=r"checksum mismatch.*t7/c/3/1") as info:
        checkpoint.load(path, {k: Layout((None, "x"), MESH8) for k in oracle})
    assert info.value.tensor == "t7"
    order = list(checkpoint.inspect(path).tensors)  # the order a load reads and hands tensors over
    before = order[: order.index("t7")]
    assert packed == [str(oracle[k].shape) for k in before]  # nothing after the corrupt tensor


@pytest.mark.parametrize("raw", ["0", "-2", "two", "1.5"])
def test_a_bad_thread_count_is_refused(
    saved: tuple[Path, dict[str, np.ndarray]], monkeypatch: pytest.MonkeyPatch, raw: str
) -> None:
    monkeypatch.setenv("LAYOUTCORE_CHECKPOINT_THREADS", raw)
    with pytest.raises(ConfigurationError, match="LAYOUTCORE_CHECKPOINT_THREADS") as info:
        checkpoint.load(saved[0])
    assert info.value.value == raw


def test_one_thread_reads_on_the_caller(
    saved: tuple[Path, dict[str, np.ndarray]], monkeypatch: pytest.MonkeyPatch
) -> None:
    def no_pool(*args: object, **kwargs: object) -> None:
        raise AssertionError("a pool was started")

    monkeypatch.setenv("LAYOUTCORE_CHECKPOINT_THREADS", "1")
    monkeypatch.setattr(_reader, "INLINE_BYTES", 0)
    monkeypatch.setattr(_threads, "ThreadPoolExecutor", no_pool)
    out = checkpoint.load(saved[0])
    for k, v in saved[1].items():
        assert np.array_equal(as_bits(lc.to_numpy(out[k])), as_bits(v))


def _files(root: Path) -> dict[str, bytes]:
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def test_writer_threads_write_the_same_files_as_one_thread(
    saved: tuple[Path, dict[str, np.ndarray]], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The fixture saved on the default threads; the same tree saved on one thread and on 3 with a
    small queue gives byte-identical files (every shard, checksum and metadata)."""
    path = saved[0]
    tree = checkpoint.load(path)
    read_layouts = {"t0": Layout((None, "x"), MESH8)}
    monkeypatch.setenv("LAYOUTCORE_CHECKPOINT_THREADS", "1")
    checkpoint.save(tmp_path / "one", tree, read_layouts=read_layouts)
    monkeypatch.setenv("LAYOUTCORE_CHECKPOINT_THREADS", "3")
    monkeypatch.setattr(_threads, "AHEAD_BYTES", 5000)
    checkpoint.save(tmp_path / "three", tree, read_layouts=read_layouts)
    one, three = _files(tmp_path / "one"), _files(tmp_path / "three")
    assert len(one) > 12 * 8 and one.keys() == three.keys()
    assert [k for k in one if one[k] != three[k]] == []


def test_a_failing_writer_thread_fails_the_save_and_commits_nothing(
    saved: tuple[Path, dict[str, np.ndarray]], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import threading

    tree = checkpoint.load(saved[0])
    write_shard = _save.write_shard
    where: list[str] = []

    def failing(root, storage, index, block, scratch):  # type: ignore[no-untyped-def]
        if storage.node == "t4" and tuple(index) == (2, 0):  # t4: rows over a, columns over b
            where.append(threading.current_thread().name)
            raise OSError(28, "No space left on device")
        return write_shard(root, storage, index, block, scratch)

    monkeypatch.setenv("LAYOUTCORE_CHECKPOINT_THREADS", "2")
    monkeypatch.setattr(_save, "write_shard", failing)
    out = tmp_path / "out"
    out.mkdir()
    with pytest.raises(OSError, match="No space left"):
        checkpoint.save(out / "ckpt", tree)
    assert where and where[0].startswith("layoutcore-save")  # it failed on a writer thread
    assert list(out.iterdir()) == []  # no checkpoint, no temporary directory left


def _mapping(address: int) -> tuple[int, int, set[str]]:
    """The start, end and ``VmFlags`` of the mapping holding ``address`` (``/proc/self/smaps``)."""
    lo = hi = -1
    for line in Path("/proc/self/smaps").read_text().splitlines():
        head = line.split(" ", 1)[0]
        if "-" in head and ":" not in head:
            lo, hi = (int(x, 16) for x in head.split("-"))
        elif lo <= address < hi and line.startswith("VmFlags:"):
            return lo, hi, set(line.split()[1:])
    raise AssertionError(f"no mapping holds {address:#x}")


@pytest.mark.skipif(not Path("/proc/self/smaps").exists(), reason="needs Linux's /proc/self/smaps")
@pytest.mark.parametrize("nbytes", [HUGE_PAGE, 5 * HUGE_PAGE // 2 + 100])
def test_large_host_blocks_start_on_a_huge_page_and_keep_small_pages_past_their_end(nbytes: int) -> None:
    block = aligned_empty((nbytes,))
    assert block.nbytes == nbytes and block.dtype == np.uint8 and block.flags.writeable
    start, end = block.ctypes.data, block.ctypes.data + nbytes
    assert start % HUGE_PAGE == 0
    block[...] = 7
    assert "hg" in _mapping(start)[2]  # its whole huge pages are offered to transparent huge pages
    page = 4096
    slack_end = (block.base.ctypes.data + block.base.nbytes) // page * page
    if nbytes % HUGE_PAGE and -(-end // page) * page < slack_end:
        # no huge page may cover bytes past the array: the mapping holding its last byte ends at its
        # last page, and the slack after it is on small pages
        _, hi, flags = _mapping(end - 1)
        assert "hg" not in flags or hi == -(-end // page) * page
        assert "nh" in _mapping(-(-end // page) * page)[2]
    small = aligned_empty((1000,))
    assert small.ctypes.data % ALIGN == 0 and small.nbytes == 1000


def test_new_arrays_in_huge_page_blocks_hold_the_saved_bits(tmp_path: Path) -> None:
    value = _value((1024, 1536), "float32", 3)  # 6 MiB: blocks of 3 MiB (rows) and 768 KiB-wide columns
    path = tmp_path / "ckpt"
    checkpoint.save(path, {"w": lc.distribute_tensor(value, Layout(("x", None), Mesh((2,), ("x",))))})
    for layout in (Layout(("x", None), Mesh((2,), ("x",))), Layout((None, "x"), Mesh((2,), ("x",)))):
        out = checkpoint.load(path, {"w": layout}, driver="numpy")
        assert np.array_equal(as_bits(lc.to_numpy(out["w"])), as_bits(value))
