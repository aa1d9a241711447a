"""The host's own bounds for a resharding read: the same row parts moved without layoutcore.

A rows -> columns load cuts every stored row (16 KiB in ``bench_device_load``'s state) into one
part per column block (2 KiB each over 8 blocks). A contiguous ``preadv`` of the same bytes is a
bound no reshard reaches: its destination is one run, the reshard's is thousands of small ones.
These are the least a reader can do for the reshard itself, written here from the file layout
alone (no layoutcore code), on the same threads, into the same kind of preallocated memory:

* :func:`scatter` -- libc ``preadv`` with one ``iovec`` per row part, pointing into its block
  (the kernel scatters: one copy), the iovecs built before the clock starts;
* :func:`slab_gather` -- ``preadv`` of a slab of whole rows (4 MiB, at the file offset's phase
  modulo 64 so the kernel's copy runs at full speed), CRC-32C of the slab, ``np.copyto`` of each
  block's columns out of it (what a reader that checks the checksum over the bytes it delivers
  must do), the checksum compared at the end.

Both are checked against the arrays before they are timed (:func:`check`).

For a load of new tensors whose framework needs each device's block dense in its own memory
(JAX, torch) the bound is :func:`fresh_scatter`: each safetensors tensor read into new column
blocks (one 64-byte aligned allocation per tensor, as a loader hands a framework), one ``iovec``
per row part, the tables built on every call (the addresses are new) with a few NumPy calls.
"""

from __future__ import annotations

import ctypes
import json
import os
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np

IOV_MAX = 1024
SLAB = 4 << 20
CRC = 4

_libc = ctypes.CDLL(None, use_errno=True)
_preadv = _libc.preadv
_preadv.argtypes = [ctypes.c_int, ctypes.c_void_p, ctypes.c_int, ctypes.c_longlong]
_preadv.restype = ctypes.c_ssize_t


class Job:
    """One stored row block (a file holding rows ``[row0, row0 + rows)`` of a tensor, then its CRC)
    and the column blocks it is read into."""

    def __init__(self, fd: int, rows: int, row0: int, blocks: Sequence[np.ndarray]) -> None:
        self.fd, self.rows, self.row0, self.blocks = fd, rows, row0, list(blocks)
        self.width = blocks[0].shape[1]
        self.row_bytes = self.width * len(blocks) * blocks[0].itemsize
        self.tail = np.empty(CRC, np.uint8)
        part = self.width * blocks[0].itemsize
        iov = np.empty((rows, len(blocks), 2), np.uint64)
        for b, blk in enumerate(blocks):
            assert blk.flags.c_contiguous and blk.shape[1] * blk.itemsize == part
            iov[:, b, 0] = blk.ctypes.data + (row0 + np.arange(rows, dtype=np.uint64)) * part
            iov[:, b, 1] = part
        flat = np.concatenate([iov.reshape(-1, 2), np.array([[self.tail.ctypes.data, CRC]], np.uint64)])
        self.calls = [np.ascontiguousarray(flat[i : i + IOV_MAX]) for i in range(0, len(flat), IOV_MAX)]
        self.call_bytes = [int(c[:, 1].sum()) for c in self.calls]


def jobs(root: Path, reads: Sequence[tuple[str, int, int]], into: dict[str, Sequence[np.ndarray]]) -> list[Job]:
    """A job per read of the saved layout's read plan (``<tensor>/c/<i>/0``: row block ``i``, data at
    offset 0, then its CRC), into the column blocks ``into[tensor]``; the files stay open."""
    out = []
    for name, offset, length in reads:
        tensor, c, index, _ = name.split("/")
        assert c == "c" and offset == 0
        blocks = into[tensor]
        row_bytes = sum(b.shape[1] for b in blocks) * blocks[0].itemsize
        rows, rest = divmod(length - CRC, row_bytes)
        assert rest == 0, (name, length)
        out.append(Job(os.open(root / name, os.O_RDONLY), rows, int(index) * rows, blocks))
    return out


def _pool(threads: int, fn: Callable[[Job], None], work: list[Job]) -> None:
    with ThreadPoolExecutor(threads) as pool:
        list(pool.map(fn, work))


def _scatter_one(job: Job) -> None:
    offset = 0
    for chunk, want in zip(job.calls, job.call_bytes, strict=True):
        got = _preadv(job.fd, chunk.ctypes.data, len(chunk), offset)
        assert got == want, (got, want, ctypes.get_errno())  # the state's files are whole: no short reads
        offset += want


def scatter(work: list[Job], threads: int) -> Callable[[], None]:
    """Every job's row parts ``preadv``-ed straight into their blocks on ``threads`` threads."""
    return lambda: _pool(threads, _scatter_one, work)


def slab_gather(work: list[Job], threads: int, crc32c: Callable[..., int]) -> Callable[[], None]:
    """Every job read slab by slab into a per-thread buffer, checksummed, its parts copied out."""
    local = threading.local()

    def one(job: Job) -> None:
        if not hasattr(local, "raw"):
            local.raw = np.empty(SLAB + 64, np.uint8)
        skip = -local.raw.ctypes.data % 64  # file offsets of the slabs are multiples of 64 here
        per = max(1, SLAB // job.row_bytes)
        state = 0
        for r0 in range(0, job.rows, per):
            n = min(per, job.rows - r0)
            buf = local.raw[skip : skip + n * job.row_bytes]
            last = r0 + n == job.rows
            got = os.preadv(job.fd, [buf, job.tail] if last else [buf], r0 * job.row_bytes)
            assert got == buf.nbytes + CRC * last
            state = crc32c(buf, state)
            src = buf.view(job.blocks[0].dtype).reshape(n, -1)
            for b, blk in enumerate(job.blocks):
                np.copyto(blk[job.row0 + r0 : job.row0 + r0 + n], src[:, b * job.width : (b + 1) * job.width])
        assert state == int.from_bytes(bytes(job.tail), "little"), "checksum mismatch"

    return lambda: _pool(threads, one, work)


def safetensors_tensors(file: Path) -> list[tuple[str, int, tuple[int, ...], str]]:
    """``(name, data offset in the file, shape, dtype)`` of every tensor of a safetensors file, from its header."""
    with open(file, "rb") as f:
        n = int.from_bytes(f.read(8), "little")
        header = json.loads(f.read(n))
    header.pop("__metadata__", None)
    types = {"F32": "float32", "F16": "float16", "BF16": "bfloat16", "F64": "float64"}
    return [(k, 8 + n + v["data_offsets"][0], tuple(v["shape"]), types[v["dtype"]]) for k, v in header.items()]


def fresh_scatter(file: Path, fd: int, parts: int, threads: int) -> Callable[[], dict[str, list[np.ndarray]]]:
    """Every 2-D float32 tensor of the safetensors ``file`` (open as ``fd``) read into ``parts`` new
    column blocks (views of one 64-byte aligned allocation per tensor, each block C-contiguous), one
    ``iovec`` per row part, on ``threads`` threads; returns the blocks by tensor name."""
    tensors = safetensors_tensors(file)

    def one(job: tuple[str, int, tuple[int, ...], str]) -> tuple[str, list[np.ndarray]]:
        name, offset, (rows, cols), dtype = job
        assert dtype == "float32" and cols % parts == 0
        width = cols // parts
        block = rows * width * 4
        raw = np.empty(block * parts + 64, np.uint8)
        base = raw.ctypes.data + (-raw.ctypes.data % 64)
        skip = base - raw.ctypes.data
        blocks = [
            raw[skip + b * block : skip + (b + 1) * block].view(np.float32).reshape(rows, width) for b in range(parts)
        ]
        iov = np.empty((rows, parts, 2), np.uint64)
        np.add.outer(
            np.arange(rows, dtype=np.uint64) * np.uint64(width * 4),
            np.arange(parts, dtype=np.uint64) * np.uint64(block) + np.uint64(base),
            out=iov[:, :, 0],
        )
        iov[:, :, 1] = width * 4
        flat = iov.reshape(-1, 2)
        at = offset
        for i in range(0, len(flat), IOV_MAX):
            chunk = flat[i : i + IOV_MAX]
            want = int(chunk[:, 1].sum())
            got = _preadv(fd, chunk.ctypes.data, len(chunk), at)
            assert got == want, (got, want, ctypes.get_errno())  # the file is whole: no short reads
            at += want
        return name, blocks

    def run() -> dict[str, list[np.ndarray]]:
        with ThreadPoolExecutor(threads) as pool:
            return dict(pool.map(one, tensors))

    return run


def check(into: dict[str, Sequence[np.ndarray]], arrays: dict[str, np.ndarray]) -> None:
    """Assert the blocks hold the arrays' columns (after a run of either bound)."""
    for k, blocks in into.items():
        np.testing.assert_array_equal(np.concatenate(list(blocks), axis=1), arrays[k])
        for b in blocks:
            b.fill(0)


def close(work: list[Job]) -> None:
    for fd in {j.fd for j in work}:
        os.close(fd)
