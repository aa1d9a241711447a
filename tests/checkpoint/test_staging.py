"""The staged load path (layoutcore.checkpoint._staging), on the CPU, through a fake device driver.

The NumPy driver is turned into a "device" driver for these tests: its tensors are not host
memory the loader may read into (``native_host_views`` -> None), new tensors are made empty
(``native_empty``), and each staged band is copied **asynchronously**: the copy happens only when
the loader calls the waiter that ``native_write_rows`` returned, as a GPU's DMA completes only
later. A loader that reused a staging buffer before waiting for its copy would copy the wrong
bytes, and the bit-exact comparison against the NumPy oracle (the saved arrays sliced by the
layouts' pure shard math) would fail.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import layoutcore as lc
from layoutcore import CheckpointError, Layout, Mesh, checkpoint
from layoutcore.checkpoint import _staging
from layoutcore.numpy._driver import ShardedArray

MESH = Mesh((4,), ("x",))
ROWS, COLS = Layout(("x", None), MESH), Layout((None, "x"), MESH)
REP = Layout((None, None), MESH)


class FakeDevice:
    """Records what the loader asked of the hooks; copies happen when the loader waits."""

    def __init__(self) -> None:
        self.buffers: list[int] = []
        self.writes: list[tuple[int, int, tuple[int, int]]] = []  # (id(tensor), index, rows)
        self.pending: list[Callable[[], None]] = []

    def install(self, monkeypatch: pytest.MonkeyPatch) -> None:
        drv = type(lc.get_driver("numpy"))
        fake = self

        def staging_buffer(self: Any, nbytes: int, tensor: Any) -> np.ndarray:
            fake.buffers.append(nbytes)
            return np.empty(nbytes, dtype=np.uint8)

        def write_rows(self: Any, tensor: Any, index: int, rows: tuple[int, int], staged: np.ndarray) -> Any:
            fake.writes.append((id(tensor), index, rows))
            component = tensor.components[index].view()
            component.flags.writeable = True
            dst = component[rows[0] : rows[1]] if component.ndim else component

            def complete() -> None:  # the "DMA": reads the staging buffer only now
                np.copyto(dst, staged)
                fake.pending.remove(complete)

            fake.pending.append(complete)
            return complete

        def empty(self: Any, layout: Layout, devices: Any, shape: tuple[int, ...], dtype: Any) -> Any:
            blocks = [np.full(s, 7, dtype=dtype) for s in layout.local_shapes(shape)]  # garbage, not zeros
            return ShardedArray(tuple(blocks), layout, shape, np.dtype(dtype), devices)

        monkeypatch.setattr(drv, "native_host_views", lambda self, *a: None)
        monkeypatch.setattr(drv, "native_staging_buffer", staging_buffer)
        monkeypatch.setattr(drv, "native_write_rows", write_rows)
        monkeypatch.setattr(drv, "native_empty", empty)


@pytest.fixture
def small_bands(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_staging, "BAND_BYTES", 16 << 10)  # many bands per tensor at test sizes
    monkeypatch.setattr(_staging, "RING_BYTES", 64 << 10)


@pytest.fixture
def device(monkeypatch: pytest.MonkeyPatch, small_bands: None) -> FakeDevice:
    """The NumPy driver turned into the fake device driver, with small bands."""
    fake = FakeDevice()
    fake.install(monkeypatch)
    return fake


def _values() -> dict[str, np.ndarray]:
    rng = np.random.default_rng(3)
    return {
        "w": rng.standard_normal((256, 96)).astype(np.float32),  # 96 KiB: several bands
        "b": rng.integers(-99, 99, size=(64,)).astype(np.int16),
        "s": np.float64(2.5) * np.ones(()),
    }


def _save(tmp_path: Path, declared: bool) -> tuple[Path, dict[str, np.ndarray]]:
    values = _values()
    saved = {2: ROWS, 1: Layout(("x",), MESH), 0: Layout((), MESH)}
    tree = {k: lc.distribute_tensor(v, saved[v.ndim], driver="numpy") for k, v in values.items()}
    path = tmp_path / "ck"
    checkpoint.save(path, tree, read_layouts={"w": COLS} if declared else None)
    return path, values


def _check_blocks(tensor: Any, value: np.ndarray, layout: Layout) -> None:
    for comp, sl in zip(lc.unpack(tensor), layout.device_slices(value.shape), strict=True):
        assert np.asarray(comp).tobytes() == value[sl].tobytes()


@pytest.mark.parametrize("threads", ["1", "2"])
@pytest.mark.parametrize("declared", [False, True])
@pytest.mark.parametrize("layout", [ROWS, COLS, REP], ids=["rows", "cols", "replicated"])
def test_into_through_the_ring_is_bit_exact_bounded_and_ordered(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, device: FakeDevice, threads: str, declared: bool, layout: Layout
) -> None:
    monkeypatch.setenv("LAYOUTCORE_CHECKPOINT_THREADS", threads)
    path, values = _save(tmp_path, declared)
    fake = device
    into = {
        "w": lc.distribute_tensor(np.zeros_like(values["w"]), layout, driver="numpy"),
        "b": lc.distribute_tensor(np.zeros_like(values["b"]), Layout(("x",), MESH), driver="numpy"),
        "s": lc.distribute_tensor(np.zeros(()), Layout((), MESH), driver="numpy"),
    }
    out = checkpoint.load(path, into=into)
    assert all(out[k] is into[k] for k in into)
    _check_blocks(out["w"], values["w"], layout)
    _check_blocks(out["b"], values["b"], Layout(("x",), MESH))
    assert float(lc.to_numpy(out["s"])) == 2.5
    assert not fake.pending  # every copy completed before the load returned
    # the ring: a few buffers, allocated once and reused for every band (no fresh memory per band)
    assert 2 <= len(fake.buffers) <= 4 and sum(fake.buffers) <= max(64 << 10, 2 * max(fake.buffers))
    bands_w = [w for w in fake.writes if w[0] == id(into["w"])]
    assert len(bands_w) > len(fake.buffers)  # more bands than buffers: the buffers were reused
    # ordering: each local block's rows arrive in order, once each, covering the block
    shapes = layout.local_shapes(values["w"].shape)
    for index, shape in enumerate(shapes):
        rows = [r for _, i, r in bands_w if i == index]
        assert rows[0][0] == 0 and rows[-1][1] == shape[0]
        assert all(a[1] == b[0] for a, b in itertools.pairwise(rows))


def test_new_tensors_on_a_device_go_through_the_ring(tmp_path: Path, device: FakeDevice) -> None:
    path, values = _save(tmp_path, declared=False)
    fake = device
    out = checkpoint.load(path, {"w": COLS, "b": Layout((None,), MESH), "s": Layout((), MESH)}, driver="numpy")
    assert lc.fetch_layout(out["w"]) == COLS
    _check_blocks(out["w"], values["w"], COLS)
    _check_blocks(out["b"], values["b"], Layout((None,), MESH))
    assert fake.writes and not fake.pending


def test_bands_respect_checksummed_pieces_and_the_budget(tmp_path: Path, small_bands: None) -> None:
    """A band never splits a stored chunk whose checksum is checked; otherwise bands stay in budget."""
    from layoutcore.checkpoint._planner import plan, positions_of

    path, _ = _save(tmp_path, declared=True)
    with checkpoint.open(path) as src:
        (tl,) = plan(src, {"w": COLS}, lambda _, lay: positions_of(lay, None, None), only=["w"])
        reads = tl.geometry.reads
        assert reads is not None
        for verify in (True, False):
            got = _staging.bands(tl, verify)
            assert got[0].lo == 0 and got[-1].hi == 256
            assert all(a.hi == b.lo for a, b in itertools.pairwise(got))
            edges = {b.lo for b in got}
            for pr in reads.pieces:
                piece = reads.tensor.pieces[pr.piece]
                inside = [e for e in edges if piece.start[0] < e < piece.start[0] + piece.shape[0]]
                if verify and pr.whole:
                    assert not inside, (piece, edges)
            if not verify:
                assert max(b.nbytes for b in got) <= _staging.BAND_BYTES


def test_a_corrupt_chunk_mid_stream_names_tensor_and_file(tmp_path: Path, device: FakeDevice) -> None:
    path, values = _save(tmp_path, declared=False)
    fake = device
    shard = sorted(p for p in (path / "w" / "c").rglob("*") if p.is_file())[2]  # a chunk in the middle
    data = bytearray(shard.read_bytes())
    data[10] ^= 0x01
    shard.write_bytes(bytes(data))
    into = {"w": lc.distribute_tensor(np.zeros_like(values["w"]), COLS, driver="numpy")}
    with pytest.raises(CheckpointError) as info:
        checkpoint.load(path, into=into)
    err = info.value
    assert err.tensor == "w" and err.file is not None and "c/2" in err.file and "checksum" in str(err)
    assert "partly written: ['w']" in str(err)  # bands before the corrupt chunk were handed over
    assert not fake.pending  # no copy left in flight from a buffer the loader gave up
    # with verify=False the same bytes load (the flipped bit included), through the same ring
    out = checkpoint.load(path, into=into, verify=False)
    got = lc.to_numpy(out["w"])
    assert (got != values["w"]).sum() == 1


@pytest.mark.parametrize("layout", [ROWS, COLS], ids=["rows", "cols"])
def test_direct_into_reads_into_the_components_on_reader_threads(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, layout: Layout
) -> None:
    """C-contiguous NumPy components are filled in place by the reader threads, several tensors
    read ahead of the one handed back (no fake driver: the NumPy driver's own host views)."""
    from layoutcore.checkpoint import _reader, _threads

    monkeypatch.setenv("LAYOUTCORE_CHECKPOINT_THREADS", "2")
    monkeypatch.setattr(_reader, "INLINE_BYTES", 0)  # every tensor on the reader threads
    monkeypatch.setattr(
        _threads, "AHEAD_BYTES", 9 << 10
    )  # one tensor read ahead: reads start as others are handed back
    rng = np.random.default_rng(5)
    values = {f"t{i}": rng.standard_normal((64, 32)).astype(np.float32) for i in range(5)}
    path = tmp_path / "ck"
    checkpoint.save(path, {k: lc.distribute_tensor(v, ROWS, driver="numpy") for k, v in values.items()})
    shapes = layout.local_shapes((64, 32))
    into = {k: lc.pack([np.zeros(s, np.float32) for s in shapes], layout, global_shape=(64, 32)) for k in values}
    before = {k: [np.asarray(c).ctypes.data for c in lc.unpack(t)] for k, t in into.items()}
    out = checkpoint.load(path, into=into)
    for k, v in values.items():
        assert out[k] is into[k] and [np.asarray(c).ctypes.data for c in lc.unpack(out[k])] == before[k]
        _check_blocks(out[k], v, layout)
