"""Whole stored pieces scattered into several blocks, slab by slab; the read core's byte I/O helpers.

A piece read whole and copied into several destination blocks (a layout cutting across the saved
blocks, with the piece's checksum checked, or parts too small for :mod:`._scatter`) is read in
slabs of whole rows of its first axis (:data:`SLAB_BYTES`) into a reused buffer: each slab's
checksum is extended and its parts copied out while the slab is in the CPU cache. The checksum
is computed over the very bytes that are copied out, so a file changing under the load cannot
pass the check with bytes other than the ones delivered.

Measured alternatives (1 GiB rows -> columns with checksums, 2 shared cores, CPU seconds; the
bound, ``preadv`` into preallocated memory + CRC-32C, 0.17-0.21): slabs of 1-2 MiB 0.21-0.25;
256 KiB slabs 0.34 (a Python call per part per slab cost more than the cache saved); copying out
of a ``mmap`` of the page cache instead of a read buffer 0.27 (the checksum and the copy read the
mapping slower than they read the buffer the kernel had just filled, why was not found; and a file
changing between the checksum and the copy would go unseen). Wall time, 1 GiB, interleaved, with
the slab buffer at the file offset's phase (:func:`phased`): 4 MiB slabs 0.118 s, 1 MiB 0.146 s,
8-16 MiB 0.127-0.131 s (L2 is 1 MiB a core, L3 32 MiB).

The helpers below (``preadv`` that resumes after short reads, the errors naming tensor and file)
are shared with :mod:`._read_plan`.
"""

from __future__ import annotations

import math
import os
from collections.abc import Sequence
from operator import sub
from typing import Any

import numpy as np

from .._crc import crc32c
from .._errors import CheckpointError

__all__ = [
    "COPY_ALIGN",
    "CRC_BYTES",
    "SLAB_BYTES",
    "crc_mismatch",
    "kernel_copy_misaligned",
    "phased",
    "preadv_all",
    "read_whole_in_slabs",
    "short_read",
    "slabbed",
    "strides_of",
]

#: Bytes of the little-endian CRC-32C stored after a checksummed piece.
CRC_BYTES = 4
#: A slab's bytes (whole rows of the piece's first axis; one row if a row is larger).
SLAB_BYTES = 4 << 20
#: The alignment, in bytes, of a read's destination relative to its file offset at which the
#: kernel's copy out of the page cache runs at full speed.
#:
#: The kernel copies page by page, from the page cache page (page-aligned but for the first) to
#: the destination, so what decides is ``(destination address - file offset) mod 64``. Measured
#: (64 x 8 MiB warm reads, AMD EPYC, 2 cores): 0.036 s at 0, 0.039 s at 32, 0.059-0.082 s at 16
#: or 48. NumPy's own arrays start 16 bytes past a page (``np.zeros`` of 8 MiB: address = 16 mod
#: 64), so a read of a chunk stored at offset 0 straight into a NumPy array ran 2.3x slower than
#: into a 64-byte aligned one; through a cache-resident slab at the right phase and a copy out
#: (``np.copyto``, which takes misaligned destinations at full speed) it ran 1.6x faster than
#: straight in (0.052 s).
COPY_ALIGN = 32
_PHASE = 64  # buffers are placed at the file offset's phase modulo a cache line


def kernel_copy_misaligned(address: int, offset: int) -> bool:
    """Whether a read of file ``offset`` into memory at ``address`` is slow (:data:`COPY_ALIGN`)."""
    return (address - offset) % COPY_ALIGN != 0


def phased(scratch: list[np.ndarray[Any, Any]], nbytes: int, offset: int) -> np.ndarray[Any, Any]:
    """``nbytes`` of the reused buffer ``scratch[0]`` (grown as needed), starting at an address
    congruent to file ``offset`` modulo 64, so a read of ``offset`` into it runs at full speed."""
    if scratch[0].nbytes < nbytes + _PHASE:
        scratch[0] = np.empty(nbytes + _PHASE, dtype=np.uint8)
    skip = (offset - scratch[0].ctypes.data) % _PHASE
    return scratch[0][skip : skip + nbytes]


def slabbed(pr: Any, piece: Any, item: int) -> bool:
    """Whether piece read ``pr`` reads ``piece`` as one range (data, then its checksum if any) larger than a slab."""
    if not pr.whole or len(pr.runs) != 1 or not piece.shape:
        return False
    nbytes = math.prod(piece.shape) * item
    if piece.crc32c_at is not None and piece.crc32c_at != piece.offset + nbytes:
        return False
    return bool(nbytes > SLAB_BYTES)


#: A copy plan: its destination (the box's rows, trailing axes cut), its rows ``[lo, hi)`` in piece
#: coordinates, its first row in the box, and the cut of the piece's trailing axes it takes.
_Plan = tuple[np.ndarray[Any, Any], int, int, int, tuple[slice, ...]]
_ALL_ROWS = (slice(None),)


def _copy_plans(pr: Any, piece: Any, boxes: Sequence[Any], out: Sequence[np.ndarray[Any, Any]]) -> list[_Plan]:
    """Per copy of ``pr``: a :data:`_Plan`.

    Built once per piece on the reader threads while the other readers wait for the GIL, so the
    per-axis arithmetic runs in C (``map`` over ``operator.sub``): 13 us a piece of 8 copies
    against 33 us with generator expressions, which cost a 1 GiB rows -> columns load on two
    threads 5-9% of its wall time (interleaved, 31 rounds).
    """
    plans = []
    p0, rest = piece.start[0], piece.start[1:]
    for b, a, z in pr.copies:
        off = boxes[b][0]
        a1, z1 = a[1:], z[1:]
        dst = out[b][_ALL_ROWS + tuple(map(slice, map(sub, a1, off[1:]), map(sub, z1, off[1:])))]
        plans.append(
            (dst, a[0] - p0, z[0] - p0, a[0] - off[0], tuple(map(slice, map(sub, a1, rest), map(sub, z1, rest))))
        )
    return plans


def read_whole_in_slabs(
    fd: int,
    pr: Any,
    piece: Any,
    boxes: Sequence[Any],
    out: Sequence[np.ndarray[Any, Any]],
    dtype: np.dtype[Any],
    scratch: list[np.ndarray[Any, Any]],
    verify: bool,
    where: tuple[str, str, str],
) -> None:
    """Read piece ``pr`` (of ``piece``, whole) into its copies' parts of ``out``, slab by slab (rows of
    its first axis): extend the checksum, copy out.

    ``boxes`` are the needed boxes ``pr.copies`` index; ``scratch`` (a one-element list holding a
    uint8 array) is the reused slab buffer; ``where`` is (checkpoint,
    file, tensor) for errors. The checksum is compared after the last slab; on a mismatch the
    caller's output arrays are discarded with the error, so no unverified byte reaches the user.

    Raises:
        CheckpointError: a short read (naming the file), a checksum mismatch.
    """
    row, n_rows = math.prod(piece.shape[1:]) * dtype.itemsize, piece.shape[0]
    has_crc = piece.crc32c_at is not None
    plans = _copy_plans(pr, piece, boxes, out)
    per = max(1, SLAB_BYTES // row)
    tail = np.empty(CRC_BYTES, dtype=np.uint8)
    state = 0
    for r0 in range(0, n_rows, per):
        r1 = min(r0 + per, n_rows)
        buf = phased(scratch, (r1 - r0) * row, piece.offset + r0 * row)
        last = r1 == n_rows and has_crc
        preadv_all(fd, [buf, tail] if last else [buf], piece.offset + r0 * row, buf.nbytes + CRC_BYTES * last, *where)
        if has_crc and verify:
            state = crc32c(buf, state)
        _copy_out(plans, buf.view(dtype).reshape((r1 - r0, *piece.shape[1:])), r0, r1)
    if has_crc and verify and state != int.from_bytes(bytes(tail), "little"):
        raise crc_mismatch(*where)


def _copy_out(plans: list[_Plan], rows: np.ndarray[Any, Any], r0: int, r1: int) -> None:
    """Copy rows ``[r0, r1)`` of the piece (``rows``, the slab as an array of them) into every
    destination part they hold."""
    for dst, lo, hi, dst0, cut in plans:
        a0, z0 = max(lo, r0), min(hi, r1)
        if a0 < z0:
            d0 = dst0 + a0 - lo
            np.copyto(dst[d0 : d0 + z0 - a0], rows[(slice(a0 - r0, z0 - r0), *cut)], casting="no")


def strides_of(shape: Sequence[int], item: int) -> tuple[int, ...]:
    """C-order byte strides of ``shape``."""
    strides = [item] * len(shape)
    for d in range(len(shape) - 2, -1, -1):
        strides[d] = strides[d + 1] * shape[d + 1]
    return tuple(strides)


def short_read(name: str, file: str, tensor: str, offset: int, want: int, got: int) -> CheckpointError:
    """The error for a file that ends before ``want`` bytes at ``offset`` were read."""
    return CheckpointError(
        f"Checkpoint {name}: tensor {tensor!r}: file {file!r} is truncated (wanted {want} bytes at offset "
        f"{offset}, got {got}).",
        path=name,
        file=file,
        tensor=tensor,
    )


def crc_mismatch(name: str, file: str, tensor: str) -> CheckpointError:
    """The error for a piece whose bytes do not match their stored CRC-32C."""
    return CheckpointError(
        f"Checkpoint {name}: tensor {tensor!r}: checksum mismatch in file {file!r}; the data is corrupt.",
        path=name,
        file=file,
        tensor=tensor,
    )


def preadv_all(
    fd: int, views: list[np.ndarray[Any, Any]], offset: int, want: int, name: str, file: str, tensor: str
) -> None:
    """``preadv`` ``want`` bytes at ``offset`` into ``views``, resuming after short reads.

    Raises:
        CheckpointError: the file ends first (:func:`short_read`).
    """
    done = os.preadv(fd, views, offset)  # type: ignore[arg-type]  # ndarrays are buffers; stubs miss it
    if done == want:  # the usual case: no buffer views built
        return
    mvs = [memoryview(v).cast("B") for v in views]  # type: ignore[arg-type]  # ndarrays are buffers; stubs miss it
    while done < want:
        # skip the buffers already filled by a short read
        skip, bufs = done, []
        for mv in mvs:
            if skip >= len(mv):
                skip -= len(mv)
                continue
            bufs.append(mv[skip:])
            skip = 0
        got = os.preadv(fd, bufs, offset + done)
        if got == 0:
            raise short_read(name, file, tensor, offset, want, done)
        done += got
