"""Reads whose destination is misaligned to the file offset (``_slabs.COPY_ALIGN``) go through a
buffer at the file's phase and a copy out instead of the kernel's slow copy straight in.

Oracle: the array written to the file, compared byte for byte; the checksum written with
google-crc32c's own ``value`` (not layoutcore's CRC helper)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import google_crc32c
import numpy as np
import pytest

import layoutcore as lc
from layoutcore import CheckpointError, Layout, Mesh, checkpoint
from layoutcore.checkpoint._read_plan import MISALIGNED_MIN_BYTES, StoredPiece, StoredTensor, plan_tensor, read_boxes
from layoutcore.checkpoint._slabs import SLAB_BYTES, kernel_copy_misaligned, phased
from layoutcore.driver import ALIGN, HUGE_PAGE, aligned_empty

# (rows, columns) of float32: one read below the misaligned threshold, one between it and a slab,
# one of several slabs (the slab path)
SHAPES = [(8, 1024), (40, 1024), (1200, 1024)]


def _stored(tmp_path: Path, value: np.ndarray, pad: int) -> StoredTensor:
    """``value`` written at file offset ``pad``, its CRC-32C (little-endian) right after it."""
    data = value.tobytes()
    (tmp_path / "f.bin").write_bytes(
        b"\xa5" * pad + data + google_crc32c.value(data).to_bytes(4, "little") + b"\x5a" * 7
    )
    piece = StoredPiece("f.bin", pad, (0,) * value.ndim, value.shape, pad + len(data))
    return StoredTensor("w", value.shape, "float32", (piece,))


def _destination(shape: tuple[int, ...], phase: int) -> np.ndarray:
    """A float32 array of ``shape`` whose first byte is at ``phase`` modulo 64."""
    nbytes = int(np.prod(shape)) * 4
    raw = np.empty(nbytes + 128, dtype=np.uint8)
    skip = (phase - raw.ctypes.data) % 64
    out = raw[skip : skip + nbytes].view(np.float32).reshape(shape)
    assert out.ctypes.data % 64 == phase
    return out


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("pad", [0, 4, 40])
@pytest.mark.parametrize("phase", [0, 4, 16, 32, 48])
@pytest.mark.parametrize("verify", [True, False])
@pytest.mark.parametrize("bounce", [True, False])
def test_every_phase_of_file_and_destination_reads_bit_exact(
    tmp_path: Path, shape: tuple[int, int], pad: int, phase: int, verify: bool, bounce: bool
) -> None:
    value = np.random.default_rng(pad + phase).standard_normal(shape).astype(np.float32)
    tensor = _stored(tmp_path, value, pad)
    reads = plan_tensor(tensor, [((0, 0), shape)])
    out = _destination(shape, phase)
    out[...] = np.nan
    read_boxes(str(tmp_path), reads, [out], checkpoint="ck", verify=verify, bounce=bounce)
    assert out.tobytes() == value.tobytes()


@pytest.mark.parametrize("shape", SHAPES[1:])
@pytest.mark.parametrize("pad", [0, 4])
def test_a_corrupt_piece_read_through_the_phased_buffer_is_refused(
    tmp_path: Path, shape: tuple[int, int], pad: int
) -> None:
    value = np.arange(np.prod(shape), dtype=np.float32).reshape(shape)
    tensor = _stored(tmp_path, value, pad)
    raw = bytearray((tmp_path / "f.bin").read_bytes())
    raw[pad + value.nbytes - 3] ^= 0x01  # a flipped bit in the last slab
    (tmp_path / "f.bin").write_bytes(bytes(raw))
    out = _destination(shape, 16)
    assert kernel_copy_misaligned(out.ctypes.data, pad)  # the path under test
    with pytest.raises(CheckpointError, match="checksum mismatch") as err:
        read_boxes(str(tmp_path), plan_tensor(tensor, [((0, 0), shape)]), [out], checkpoint="ck", bounce=True)
    assert "f.bin" in str(err.value)
    read_boxes(str(tmp_path), plan_tensor(tensor, [((0, 0), shape)]), [out], checkpoint="ck", verify=False, bounce=True)
    flipped = value.copy()
    flipped.reshape(-1).view(np.uint8)[-3] ^= 0x01
    assert out.tobytes() == flipped.tobytes()  # verify=False delivers the file's bytes, unchecked


def test_thresholds_cover_the_three_paths() -> None:
    sizes = [r * c * 4 for r, c in SHAPES]
    assert sizes[0] < MISALIGNED_MIN_BYTES <= sizes[1] <= SLAB_BYTES < sizes[2]


@pytest.mark.parametrize("offset", [0, 4, 40, 63, 4096 + 24])
def test_phased_buffers_start_at_the_file_offsets_phase_and_are_reused(offset: int) -> None:
    scratch: list[Any] = [np.empty(0, dtype=np.uint8)]
    buf = phased(scratch, 1000, offset)
    assert buf.nbytes == 1000 and (buf.ctypes.data - offset) % 64 == 0
    again = phased(scratch, 500, offset + 1)
    assert (again.ctypes.data - offset - 1) % 64 == 0
    assert np.shares_memory(again, scratch[0]) and np.shares_memory(buf, scratch[0])


@pytest.mark.parametrize("nbytes", [1000, 3 * HUGE_PAGE])
@pytest.mark.parametrize("phase", [0, 8, 40])
def test_aligned_empty_places_data_at_the_phase(nbytes: int, phase: int) -> None:
    block = aligned_empty((nbytes // 8,), np.float64, phase=phase)
    boundary = HUGE_PAGE if nbytes >= HUGE_PAGE else ALIGN
    assert (block.ctypes.data - phase) % boundary == 0 and block.flags.writeable and block.flags.aligned
    block[...] = 1.5  # the whole block is ours to write
    assert float(block.sum()) == 1.5 * block.size


@pytest.mark.parametrize(("dtype", "phase"), [(np.float64, 4), (np.float32, 64), (np.uint8, -1)])
def test_aligned_empty_refuses_a_phase_the_dtype_cannot_start_at(dtype: Any, phase: int) -> None:
    with pytest.raises(ValueError, match=f"phase {phase}"):
        aligned_empty((10,), dtype, phase=phase)


def test_safetensors_tensors_read_whole_onto_numpy_start_at_their_file_offsets_phase(tmp_path: Path) -> None:
    safetensors_numpy = pytest.importorskip("safetensors.numpy")
    rng = np.random.default_rng(5)
    values = {"a": rng.standard_normal((64, 256)).astype(np.float32), "b": np.arange(6, dtype=np.float32)}
    file = tmp_path / "m.safetensors"
    safetensors_numpy.save_file({"b": values["b"], "a": values["a"]}, str(file))
    header = json.loads(file.read_bytes()[8 : 8 + int.from_bytes(file.read_bytes()[:8], "little")])
    start = 8 + int.from_bytes(file.read_bytes()[:8], "little") + header["a"]["data_offsets"][0]
    assert start % ALIGN, "the case needs a tensor off a 64-byte boundary"
    layout = Layout((None, "x"), Mesh((4,), ("x",)))
    out = checkpoint.load(file, {"a": layout, "b": Layout((None,), Mesh((4,), ("x",)))}, driver="numpy")
    blocks = lc.unpack(out["a"])
    assert blocks[0].ctypes.data % ALIGN == start % ALIGN  # the first column block starts the whole array
    for block, sl in zip(blocks, layout.device_slices(values["a"].shape), strict=True):
        assert np.asarray(block).tobytes() == values["a"][sl].tobytes()
    assert lc.to_numpy(out["b"]).tobytes() == values["b"].tobytes()


@pytest.mark.parametrize("phase", [0, 16, 32])
@pytest.mark.parametrize("bounce", [True, False])
def test_row_parts_scattered_into_blocks_at_every_phase_are_bit_exact(
    tmp_path: Path, spy: list[bool], phase: int, bounce: bool
) -> None:
    shape = (64, 1024)  # 4 column blocks of 1 KiB row parts
    value = np.random.default_rng(phase).standard_normal(shape).astype(np.float32)
    tensor = _stored(tmp_path, value, 0)
    boxes = [((0, c), (64, 256)) for c in range(0, 1024, 256)]
    outs = [_destination((64, 256), phase) for _ in boxes]
    read_boxes(str(tmp_path), plan_tensor(tensor, boxes), outs, checkpoint="ck", verify=False, bounce=bounce)
    for out, (start, size) in zip(outs, boxes, strict=True):
        assert out.tobytes() == value[:, start[1] : start[1] + size[1]].tobytes()
    assert spy == [True]  # scattered at every phase: through a buffer measured no faster for 2 KiB parts
