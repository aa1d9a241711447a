"""Scatter reads: one stored piece read by the kernel straight into the parts of several blocks.

A layout that cuts across the saved blocks (rows saved, columns loaded; any column-split
safetensors tensor) needs each stored row split between several destination blocks. Read into a
buffer and copied out, every byte is copied twice on the host. Here each row part gets its own
``iovec`` pointing into its destination block, and ``preadv(2)`` (libc's, through :mod:`ctypes`,
which releases the GIL; up to ``IOV_MAX`` parts a call) fills them all: one copy, by the kernel.

Used where no checksum is checked over the piece (``verify=False``, or a format without
checksums: safetensors, torch DCP): a checksum computed over thousands of small parts would
cost more than the copy it saves, so a checked piece keeps the slab path of :mod:`._read_plan`.
The piece must be read whole and tile exactly into the destination parts (its first two axes
split among the blocks, its trailing axes whole), each part at least :data:`MIN_PART` bytes
on average; otherwise the caller's slab path runs. For memory the caller keeps (``into=``), the
tables of iovecs are kept too (:data:`_TABLES`), so a load repeated into the same tensors builds none.
"""

from __future__ import annotations

import ctypes
import itertools
import math
import os
from collections.abc import Sequence
from typing import Any

import numpy as np

from .._errors import CheckpointError
from ..driver._cache import LRUCache

__all__ = ["MIN_PART", "scatter_read"]

#: Parts smaller than this on average are copied out of a slab instead (an iovec costs more).
MIN_PART = 512
IOV_MAX = 1024
#: Iovec tables of at most this many rows (16 bytes each) are kept for ``into=`` loads.
TABLE_ROWS = 8192
#: The kept tables, by value (the piece's geometry, its destination boxes and their addresses: the
#: table is a function of these alone, so a hit is correct whatever memory it points to). A loop
#: that loads into the same tensors every step builds each table once: building it (one iovec per
#: 2 KiB row part) took 12% of the reader threads' time in a 1 GiB rows -> columns ``into=`` load
#: (py-spy, 2 threads). At most 128 x 128 KiB.
_TABLES: LRUCache[tuple[Any, ...], _Table] = LRUCache(128)

_libc: Any
try:
    _libc = ctypes.CDLL(None, use_errno=True)
    _preadv = _libc.preadv
    _preadv.argtypes = [ctypes.c_int, ctypes.c_void_p, ctypes.c_int, ctypes.c_longlong]
    _preadv.restype = ctypes.c_ssize_t
except (OSError, AttributeError):  # pragma: no cover - a libc without preadv: the slab path runs
    _preadv = None


def _tiles(
    pr: Any, piece: Any, reads: Any, out: Sequence[np.ndarray], item: int, extra: int, bases: Sequence[int]
) -> np.ndarray | None:
    """The ``(address, length)`` uint64 rows of the piece's bytes in file order, then one row for
    ``extra`` bytes read after them (left for the caller to fill; none if ``extra`` is 0), or None.
    ``bases`` are the addresses of ``out``.

    Built in one allocation with a few NumPy calls per group of copies sharing rows: the table
    is rebuilt for every piece of every load, on the reader threads, and its Python time holds
    the GIL the other readers need when their ``preadv`` returns (at 47 us a piece, a 1 GiB
    rows -> columns load into aligned blocks spent 26 ms of thread time beyond its system calls).
    """
    shape, rank = piece.shape, len(piece.shape)
    if rank < 2 or any(p + s > t for p, s, t in zip(piece.start, shape, reads.tensor.shape, strict=True)):
        return None  # an edge piece's padding has no destination
    inner = math.prod(shape[2:]) * item
    p0, p1 = piece.start[0], piece.start[1]
    trailing = tuple(shape[2:])
    groups: dict[tuple[int, int], list[tuple[int, int, int, int]]] = {}
    volume = 0
    for b, a, z in pr.copies:
        (o0, o1, *_), box_sizes = reads.boxes[b]
        dst = out[b]
        if not dst.flags.c_contiguous:
            return None
        if rank > 2 and (
            tuple(box_sizes[2:]) != trailing
            or any(a[d] != piece.start[d] or z[d] != piece.start[d] + shape[d] for d in range(2, rank))
        ):
            return None
        row = box_sizes[1] * inner
        addr = bases[b] + (a[0] - o0) * row + (a[1] - o1) * inner
        r0, r1 = a[0] - p0, z[0] - p0
        groups.setdefault((r0, r1), []).append((a[1] - p1, z[1] - p1, addr, row))
        volume += (r1 - r0) * (z[1] - a[1])
    if volume != shape[0] * shape[1]:
        return None
    n_parts = sum((r1 - r0) * len(c) for (r0, r1), c in groups.items())
    if math.prod(shape) * item < MIN_PART * n_parts:
        return None
    iov = np.empty((n_parts + (1 if extra else 0), 2), dtype=np.uint64)
    at = row_at = 0
    for (r0, r1), copies in sorted(groups.items()):
        copies.sort()
        if r0 != row_at or copies[0][0] != 0 or copies[-1][1] != shape[1]:
            return None
        if any(x[1] != y[0] for x, y in itertools.pairwise(copies)):
            return None
        row_at = r1
        k, n = len(copies), r1 - r0
        block = iov[at : at + n * k].reshape(n, k, 2)
        addrs = np.array([c[2] for c in copies], dtype=np.uint64)
        strides = {c[3] for c in copies}
        if len(strides) == 1:  # blocks of one width (the usual case): one outer sum
            (stride,) = strides
            np.add.outer(np.arange(0, n * stride, stride, dtype=np.uint64), addrs, out=block[:, :, 0])
        else:
            row_strides = np.array([c[3] for c in copies], dtype=np.uint64)
            np.multiply(np.arange(n, dtype=np.uint64)[:, None], row_strides, out=block[:, :, 0])
            block[:, :, 0] += addrs
        block[:, :, 1] = [(c[1] - c[0]) * inner for c in copies]
        at += n * k
    if row_at != shape[0]:
        return None
    if extra:
        iov[-1, 1] = extra
    return iov


def scatter_read(
    fd: int,
    pr: Any,
    piece: Any,
    reads: Any,
    out: Sequence[np.ndarray],
    item: int,
    where: tuple[str, str, str],
    bases: list[int] | None = None,
    reuse: bool = False,
) -> bool:
    """Read piece ``pr`` (whole, plus its stored checksum bytes, unchecked) straight into ``out``.

    ``bases``: a list the caller keeps across the pieces of one ``out`` (the blocks' addresses,
    filled on first use); default: taken afresh. ``reuse``: ``out`` is memory the caller keeps
    (``into=``), so the next load is likely to read the same parts into the same addresses: the
    piece's iovec table is kept (:data:`_TABLES`, by value: geometry and addresses) and reused.

    Returns:
        False where the piece does not qualify (nothing was read: the caller reads it otherwise).

    Raises:
        CheckpointError: a short or failed read (``where``: checkpoint, file, tensor).
    """
    if _preadv is None or not pr.whole or pr.zero_padded or len(pr.runs) != 1:
        return False
    bases = [] if bases is None else bases
    if not bases:
        bases.extend(o.ctypes.data for o in out)
    extra = int(pr.runs[0, 1]) - math.prod(piece.shape) * item  # the stored checksum, read as planned
    key = None
    if reuse:
        used = sorted({b for b, _, _ in pr.copies})
        key = (piece.shape, piece.start, reads.tensor.shape, pr.copies, item, extra)
        key += tuple((reads.boxes[b], bases[b]) for b in used)
        table = _TABLES.peek(key)
        if table is not None and all(out[b].flags.c_contiguous for b in used):
            _read_table(fd, table, piece.offset, where)
            return True
    iov = _tiles(pr, piece, reads, out, item, extra, bases)
    if iov is None:
        return False
    table = _Table(iov, extra)
    if key is not None and len(iov) <= TABLE_ROWS:
        _TABLES.put(key, table)
    _read_table(fd, table, piece.offset, where)
    return True


class _Table:
    """A piece's iovec table ready to read with: chunks of at most ``IOV_MAX`` rows (views of the
    C-order table: contiguous), the bytes each reads, and the buffer the stored checksum lands in."""

    __slots__ = ("chunks", "tail", "wants")

    def __init__(self, iov: np.ndarray, extra: int) -> None:
        self.tail = np.empty(extra, dtype=np.uint8)  # read, never checked: the caller passed verify=False
        if extra:
            iov[-1, 0] = self.tail.ctypes.data
        ends = np.cumsum(iov[:, 1], dtype=np.int64)
        self.chunks = [iov[i : i + IOV_MAX] for i in range(0, len(iov), IOV_MAX)]
        bounds = [0, *(int(ends[min(i + IOV_MAX, len(iov)) - 1]) for i in range(0, len(iov), IOV_MAX))]
        self.wants = [b - a for a, b in itertools.pairwise(bounds)]


def _read_table(fd: int, table: _Table, offset: int, where: tuple[str, str, str]) -> None:
    for chunk, want in zip(table.chunks, table.wants, strict=True):
        _read_chunk(fd, chunk, offset, want, where)
        offset += want


def _read_chunk(fd: int, chunk: np.ndarray, offset: int, want: int, where: tuple[str, str, str]) -> None:
    """``preadv`` the ``want`` bytes of every iovec of ``chunk`` at ``offset``, resuming after short reads."""
    done = 0
    while done < want:
        got = _preadv(fd, chunk.ctypes.data, len(chunk), offset + done)
        if got <= 0:
            name, file, tensor = where
            err = ctypes.get_errno()
            why = os.strerror(err) if got < 0 else f"wanted {want} bytes at offset {offset}, got {done}"
            raise CheckpointError(
                f"Checkpoint {name}: tensor {tensor!r}: file {file!r} is truncated or unreadable ({why}).",
                path=name,
                file=file,
                tensor=tensor,
            )
        done += got
        if done < want:  # resume inside the iovec the read stopped in
            ends = np.cumsum(chunk[:, 1].astype(np.int64))
            k = int(np.searchsorted(ends, got, side="right"))
            chunk = chunk[k:].copy()
            used = got - (int(ends[k - 1]) if k else 0)
            chunk[0, 0] += np.uint64(used)
            chunk[0, 1] -= np.uint64(used)
