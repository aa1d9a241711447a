"""The staged save path (layoutcore.checkpoint._save_stream), on the CPU, through a fake device driver.

The NumPy driver is turned into a "device" driver: its components are staged
(``native_staged_save``), and ``native_read_rows`` copies **lazily** -- the rows land in the
staging buffer only when the save calls the waiter, as a GPU's DMA completes only later. The
ring's buffers start as garbage, so a save that read a buffer before waiting for its copy would
write garbage; a copy landing in a buffer a writer is still reading is recorded as a violation.
The oracle is the save's own whole-block path (``write_shard`` from the block in host memory),
whose files are compared byte for byte with the staged save's, and NumPy itself (a load).
"""

from __future__ import annotations

import itertools
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import layoutcore as lc
from layoutcore import CheckpointError, Layout, Mesh, checkpoint
from layoutcore.checkpoint import _save_stream, _staging

MESH = Mesh((4,), ("x",))


class FakeDevice:
    """Records what the save asked of the hooks; copies land when the save waits for them."""

    def __init__(self) -> None:
        self.buffers: list[int] = []
        self.reads: list[tuple[int, tuple[int, int]]] = []  # (the component's address, rows)
        self.pending: list[Callable[[], None]] = []
        self.host_copies = 0
        self.writing: dict[int, tuple[int, int]] = {}  # thread id -> the address range a writer reads
        self.violations: list[str] = []
        self.events: list[str] = []  # "read" (a copy issued) and "put" (a band handed to the file), in order
        self.lock = threading.Lock()

    def install(self, monkeypatch: pytest.MonkeyPatch) -> None:
        drv = type(lc.get_driver("numpy"))
        fake = self
        to_host = drv.component_to_host

        def staging_buffer(self: Any, nbytes: int, tensor: Any) -> np.ndarray:
            fake.buffers.append(nbytes)
            return np.full(nbytes, 0xAB, dtype=np.uint8)  # garbage until a copy lands

        def read_rows(self: Any, component: Any, rows: tuple[int, int], staged: np.ndarray) -> Any:
            fake.reads.append((_address(component), rows))
            fake.events.append("read")
            src = component[rows[0] : rows[1]] if component.ndim else component

            def complete() -> None:  # the "DMA": writes the staging buffer only now
                lo = staged.ctypes.data
                with fake.lock:
                    for a, b in fake.writing.values():
                        if lo < b and a < lo + staged.nbytes:
                            fake.violations.append(f"copy of rows {rows} into a buffer a writer reads")
                np.copyto(staged, src, casting="no")
                fake.pending.remove(complete)

            fake.pending.append(complete)
            return complete

        def host(self: Any, component: Any) -> np.ndarray:
            fake.host_copies += 1
            return to_host(self, component)

        real_put = _save_stream.ShardStream.put

        def put(stream: Any, lo: int, hi: int, data: np.ndarray) -> None:
            with fake.lock:
                fake.events.append("put")
                fake.writing[threading.get_ident()] = (data.ctypes.data, data.ctypes.data + data.nbytes)
            try:
                time.sleep(0.0005)  # widen the window a too-early reuse of the buffer would fall into
                real_put(stream, lo, hi, data)
            finally:
                with fake.lock:
                    del fake.writing[threading.get_ident()]

        monkeypatch.setattr(drv, "native_staged_save", lambda self, c: True)
        monkeypatch.setattr(drv, "native_read_rows", read_rows)
        monkeypatch.setattr(drv, "native_staging_buffer", staging_buffer)
        monkeypatch.setattr(drv, "component_to_host", host)
        monkeypatch.setattr(_save_stream.ShardStream, "put", put)


def _address(component: Any) -> int:
    return int(np.asarray(component).__array_interface__["data"][0])


@pytest.fixture
def small_bands(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_staging, "BAND_BYTES", 1000)  # several bands per block, ending inside chunks
    monkeypatch.setattr(_staging, "RING_BYTES", 3000)


def _tree() -> tuple[dict[str, Any], dict[str, Layout]]:
    """Values and their read layouts: uneven blocks, edge chunks, chunks smaller than a shard,
    chunks cutting the trailing axes (not staged), bfloat16, rank 1, 3 and 0."""
    rng = np.random.default_rng(7)
    bf16 = lc.driver.numpy_dtype("bfloat16")
    values = {
        "uneven": (rng.standard_normal((50, 24)).astype(np.float32), Layout(("x", None), MESH)),
        "refined": (rng.standard_normal((64, 40)).astype(np.float32), Layout(("x", None), MESH)),
        "gaps": (rng.standard_normal((49, 1024)).astype(np.float32), Layout(("x", None), MESH)),
        "cols": (rng.integers(-9, 9, (16, 30)).astype(np.int64), Layout((None, "x"), MESH)),
        "bf16": (rng.standard_normal(1000).astype(bf16), Layout(("x",), MESH)),
        "cube": (rng.integers(-999, 999, (7, 5, 130)).astype(np.int16), Layout(("x", None, None), MESH)),
        "rep": (rng.standard_normal((9, 33)).astype(np.float64), Layout((None, None), MESH)),
        "scalar": (np.float32(1.5) * np.ones((), np.float32), Layout((), MESH)),
    }
    tree = {k: lc.distribute_tensor(v, lay, driver="numpy") for k, (v, lay) in values.items()}
    eight = Mesh((8,), ("y",))
    read = {
        "refined": Layout(("y", None), eight),  # 8-row chunks in 16-row shards
        "bf16": Layout(("y",), eight),
        "gaps": Layout(("z", None), Mesh((2,), ("z",))),  # one-row chunks; the last shard's last 3 missing
        "cube": Layout((None, None, "x"), MESH),  # chunks cut the trailing axis: the whole-block path
    }
    return tree, read


def _files(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


@pytest.mark.parametrize("threads", ["1", "3"])
def test_staged_save_writes_the_same_bytes_through_a_bounded_reused_ring(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, small_bands: None, threads: str
) -> None:
    monkeypatch.setenv("LAYOUTCORE_CHECKPOINT_THREADS", threads)
    tree, read = _tree()
    checkpoint.save(tmp_path / "host", tree, read_layouts=read)  # today's path: the oracle
    fake = FakeDevice()
    fake.install(monkeypatch)
    checkpoint.save(tmp_path / "staged", tree, read_layouts=read)
    want, got = _files(tmp_path / "host"), _files(tmp_path / "staged")
    assert sorted(got) == sorted(want)
    for name in want:
        assert got[name] == want[name], name
    assert not fake.pending and not fake.violations
    if threads == "1":  # overlap: band k + 1's copy is issued before band k is checksummed and written
        puts = [i for i, e in enumerate(fake.events) if e == "put"]
        reads = len(fake.reads)
        assert [fake.events[:i].count("read") for i in puts] == [min(k + 2, reads) for k in range(len(puts))]
    # which blocks went through the ring: every block but those whose chunks cut the trailing axes
    # ("cube") or that end short of their shard on a trailing axis (the last block of "cols")
    staged = {c for c, _ in fake.reads}
    comps = {k: lc.unpack(t) for k, t in tree.items()}
    assert not staged & {_address(c) for c in comps["cube"]}
    assert [_address(c) in staged for c in comps["cols"]] == [True, True, True, False]
    assert all(_address(c) in staged for k in ("uneven", "refined", "gaps", "bf16", "scalar") for c in comps[k])
    assert fake.host_copies == 4 + 1  # the cube's blocks and the last of cols
    # the ring: a few buffers, made once and reused for every band (no fresh memory per band)
    assert 2 <= len(fake.buffers) <= 4 and len(set(fake.buffers)) == 1
    assert len(fake.reads) > 3 * len(fake.buffers)
    # the bands of each block cover its rows in order
    uneven = comps["uneven"][3]
    rows = [r for c, r in fake.reads if c == _address(uneven)]
    assert rows[0][0] == 0 and rows[-1][1] == uneven.shape[0] and len(rows) > 1
    assert all(a[1] == b[0] for a, b in itertools.pairwise(rows))
    out = checkpoint.load(tmp_path / "staged")
    for k, t in tree.items():
        assert lc.to_numpy(out[k]).tobytes() == lc.to_numpy(t).tobytes(), k


def test_a_writer_error_fails_the_save_and_commits_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, small_bands: None
) -> None:
    monkeypatch.setenv("LAYOUTCORE_CHECKPOINT_THREADS", "2")
    tree, _ = _tree()
    fake = FakeDevice()
    fake.install(monkeypatch)
    real_put, calls = _save_stream.ShardStream.put, [0]

    def failing(stream: Any, lo: int, hi: int, data: np.ndarray) -> None:
        calls[0] += 1
        if calls[0] == 5:
            raise OSError(28, "No space left on device")
        real_put(stream, lo, hi, data)

    monkeypatch.setattr(_save_stream.ShardStream, "put", failing)
    with pytest.raises(OSError, match="No space left"):
        checkpoint.save(tmp_path / "c", tree)
    assert not (tmp_path / "c").exists() and not list(tmp_path.glob(".c.tmp-*"))
    assert not fake.pending  # no copy left in flight into a buffer the save gave up


def test_a_failed_device_copy_names_tensor_and_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, small_bands: None
) -> None:
    tree, _ = _tree()
    fake = FakeDevice()
    fake.install(monkeypatch)
    drv = type(lc.get_driver("numpy"))
    lazy = drv.native_read_rows

    def broken(self: Any, component: Any, rows: tuple[int, int], staged: np.ndarray) -> Any:
        if component.shape == (16, 40) and rows[0] > 0:
            raise RuntimeError("device lost")
        return lazy(self, component, rows, staged)

    monkeypatch.setattr(drv, "native_read_rows", broken)
    with pytest.raises(CheckpointError, match=r"failed to copy rows \d+\.\.\d+ of a component of 'refined'") as info:
        checkpoint.save(tmp_path / "c", {"refined": tree["refined"]})
    assert info.value.tensor == "refined" and info.value.file == "refined/c/0/0"
    assert "device lost" in str(info.value)
    assert not (tmp_path / "c").exists() and not fake.pending


@pytest.mark.parametrize("shape", [(50, 24), (13, 24), (7,), ()])
def test_shard_stream_bands_of_any_size_match_write_shard(tmp_path: Path, shape: tuple[int, ...]) -> None:
    """A block put in uneven bands (ending inside chunks, one row each, all at once) gives write_shard's bytes."""
    from layoutcore.checkpoint._format import ArrayStorage, write_shard

    block = np.arange(int(np.prod(shape)), dtype=np.int32).reshape(shape) * 7 + 1
    full = (52, 24) if len(shape) == 2 else (8,) if shape else ()
    chunk = (4, 24) if len(shape) == 2 else (2,) if shape else ()
    storage = ArrayStorage("t", shape, "int32", full, chunk)
    write_shard(str(tmp_path / "a"), storage, (0,) * len(shape), block)
    want = (tmp_path / "a" / storage.shard_file((0,) * len(shape))).read_bytes()
    rows = shape[0] if shape else 1
    for step in (1, 3, rows):
        root = tmp_path / f"b{step}"
        stream = _save_stream.ShardStream(str(root), storage, (0,) * len(shape))
        for lo in range(0, rows, step):
            hi = min(lo + step, rows)
            stream.put(lo, hi, np.ascontiguousarray(block[lo:hi] if shape else block))
        assert (root / storage.shard_file((0,) * len(shape))).read_bytes() == want, step


@pytest.mark.parametrize("dtype", ["float32", "bfloat16", "float8_e4m3fn"])
def test_torch_tensors_forced_through_the_ring_write_the_same_bytes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, small_bands: None, dtype: str
) -> None:
    """The torch driver's own ``native_read_rows`` (CPU tensors forced onto the staged path; on a GPU
    the same code copies asynchronously into pinned buffers -- not run here: no GPU)."""
    pytest.importorskip("torch.distributed.tensor")
    x = (np.arange(60 * 24, dtype=np.uint32) * 2654435761 % 251).astype(np.uint8)
    x = x.view(lc.driver.numpy_dtype(dtype)) if dtype != "float32" else x.astype(np.float32)
    x = np.ascontiguousarray(x[: 60 * 12].reshape(60, 12))
    mesh = Mesh((2,), ("x",))
    tree = {"w": lc.distribute_tensor(x, Layout(("x", None), mesh), driver="torch")}
    tree["s"] = lc.distribute_tensor(x[:1, :1].reshape(()), Layout((), mesh), driver="torch")
    tree["plain"] = _torch_plain(x[5:9])  # a plain (undistributed) tensor
    tdriver = lc.get_driver("torch")
    assert not tdriver.native_staged_save(lc.unpack(tree["w"])[0])  # CPU: the host path
    for t in (tree["w"], tree["plain"]):  # a DTensor's ring, and a plain tensor's: plain memory off a GPU
        buf = tdriver.native_staging_buffer(24, t)
        assert isinstance(buf, np.ndarray) and buf.dtype == np.uint8 and buf.nbytes == 24
    checkpoint.save(tmp_path / "host", tree)
    drv = type(lc.get_driver("torch"))
    reads: list[tuple[int, int]] = []
    real = drv.native_read_rows

    def counted(self: Any, component: Any, rows: tuple[int, int], staged: np.ndarray) -> Any:
        reads.append(rows)
        return real(self, component, rows, staged)

    monkeypatch.setattr(drv, "native_staged_save", lambda self, c: True)
    monkeypatch.setattr(drv, "native_read_rows", counted)
    checkpoint.save(tmp_path / "staged", tree)
    assert _files(tmp_path / "staged") == _files(tmp_path / "host")
    assert len(reads) > 2 and (0, 1) in reads
    assert (0, 4) in reads  # the plain tensor: one band of its 4 rows


def _torch_plain(x: np.ndarray) -> Any:
    from layoutcore_torch import _convert

    return _convert.from_numpy(np.ascontiguousarray(x))


def test_cuda_tensors_staged_write_the_bytes_of_a_whole_host_copy(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, small_bands: None
) -> None:
    """On a GPU (skipped without one; no GPU ran it this round): plain CUDA tensors go through the
    pinned ring (asynchronous ``copy_`` + CUDA event) and give the bytes of ``.cpu()`` per tensor."""
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device")
    rng = np.random.default_rng(11)
    tree = {
        "w": torch.from_numpy(rng.standard_normal((37, 300)).astype(np.float32)).cuda(),
        "h": torch.from_numpy(rng.standard_normal(999).astype(np.float32)).cuda().to(torch.bfloat16),
        "s": torch.tensor(3.5, device="cuda"),
    }
    drv = type(lc.get_driver("torch"))
    assert all(lc.get_driver("torch").native_staged_save(t) for t in tree.values())
    reads: list[tuple[int, int]] = []
    real = drv.native_read_rows

    def counted(self: Any, component: Any, rows: tuple[int, int], staged: np.ndarray) -> Any:
        reads.append(rows)
        return real(self, component, rows, staged)

    monkeypatch.setattr(drv, "native_read_rows", counted)
    checkpoint.save(tmp_path / "staged", tree)
    assert len(reads) > 3
    monkeypatch.setattr(drv, "native_staged_save", lambda self, c: False)
    checkpoint.save(tmp_path / "host", tree)
    assert _files(tmp_path / "staged") == _files(tmp_path / "host")
