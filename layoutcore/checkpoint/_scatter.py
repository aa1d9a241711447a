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
tables of iovecs are kept too (:class:`TableCache`), so a load repeated into the same tensors builds none.
"""

from __future__ import annotations

import ctypes
import itertools
import math
import os
import threading
from collections.abc import Sequence
from typing import Any

import numpy as np

from .._errors import CheckpointError

__all__ = ["MIN_PART", "TABLE_ROWS_KEPT", "TableCache", "begin_reuse", "scatter_read"]

#: Parts smaller than this on average are copied out of a slab instead (an iovec costs more).
MIN_PART = 512
IOV_MAX = 1024
#: A table of more rows (16 bytes each) is not kept (:meth:`TableCache.put`).
TABLE_ROWS = 8192
#: Rows of the kept tables, at most (16 bytes each: 32 MiB, the tables of 4 GiB of blocks read in
#: 2 KiB parts; parts of 512 bytes, the smallest scattered, make it 1 GiB).
TABLE_ROWS_KEPT = 2 << 20


class TableCache:
    """The iovec tables kept for ``into=`` loads, by value (the piece's geometry, its destination
    boxes and their addresses: the table is a function of these alone, so a hit is correct
    whatever memory it points to), at most ``rows`` rows in all.

    A loop that loads into the same tensors every step builds each table once: building them (one
    iovec per 2 KiB row part) took 12% of the reader threads' time in a 1 GiB rows -> columns
    ``into=`` load (py-spy, 2 threads), and a load building them ran 0.70 of a ``preadv`` of the
    same bytes where one reusing them ran 0.89 (minima of 25 interleaved rounds).

    What is kept is decided per load (:func:`begin_reuse` numbers them), not by recency: a load
    reads its pieces in the same order every step, so a least-recently-used cache smaller than a
    step's tables drops each table just before its next use and reuses none (the 128-entry LRU
    this replaced did so for every model of more than 128 scattered pieces, and for two ``into=``
    targets loaded in turn). Here a table is admitted while there is room; when there is none, the
    tables not used in this load or the one before are dropped (their memory was freed, or is no
    longer loaded into), and a table that still does not fit is not kept. A loop over more tables
    than fit keeps and reuses those of its first :data:`TABLE_ROWS_KEPT` rows every step.
    Thread-safe: the reader threads of a load share it.
    """

    def __init__(self, rows: int) -> None:
        self.rows = rows
        self.kept_rows = 0
        self._data: dict[tuple[Any, ...], _Table] = {}
        self._lock = threading.Lock()
        self._swept = -1  # the load that last found the cache full and dropped what it could

    def __len__(self) -> int:
        return len(self._data)

    def get(self, key: tuple[Any, ...], load: int) -> _Table | None:
        """The table kept for ``key``, marked used by ``load``; else None."""
        table = self._data.get(key)  # a C call; a dict read is atomic under the GIL
        if table is not None:
            table.used = load
        return table

    def put(self, key: tuple[Any, ...], table: _Table, load: int) -> None:
        """Keep ``table`` for ``key`` (used by ``load``) if it fits, after dropping stale tables once per
        load; a table of more than :data:`TABLE_ROWS` rows, or more than the whole budget, is never kept."""
        need = len(table.iov)
        if need > min(TABLE_ROWS, self.rows):
            return
        with self._lock:
            if key in self._data:
                return
            if self.kept_rows + need > self.rows and self._swept != load:
                self._swept = load  # at most one sweep per load: a full cache of live tables stays as it is
                for k in [k for k, t in self._data.items() if t.used < load - 1]:
                    self.kept_rows -= len(self._data.pop(k).iov)
            if self.kept_rows + need <= self.rows:
                table.used = load
                self._data[key] = table
                self.kept_rows += need

    def clear(self) -> None:
        """Drop every table."""
        with self._lock:
            self._data.clear()
            self.kept_rows = 0


_TABLES = TableCache(TABLE_ROWS_KEPT)
_loads = itertools.count(1)


def begin_reuse() -> int:
    """A number for a load into memory its caller keeps (``into=``), in order: pass it to
    :func:`scatter_read` as ``reuse`` for every piece of that load."""
    return next(_loads)


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
    reuse: int | None = None,
) -> bool:
    """Read piece ``pr`` (whole, plus its stored checksum bytes, unchecked) straight into ``out``.

    ``bases``: a list the caller keeps across the pieces of one ``out`` (the blocks' addresses,
    filled on first use); default: taken afresh. ``reuse``: the load's :func:`begin_reuse` number
    when ``out`` is memory the caller keeps (``into=``), so the next load is likely to read the same
    parts into the same addresses: the piece's iovec table is kept (:class:`TableCache`, by value:
    geometry and addresses) and reused.

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
    if reuse is not None:
        used = sorted({b for b, _, _ in pr.copies})
        key = (piece.shape, piece.start, reads.tensor.shape, pr.copies, item, extra)
        key += tuple((reads.boxes[b], bases[b]) for b in used)
        table = _TABLES.get(key, reuse)
        if table is not None and all(out[b].flags.c_contiguous for b in used):
            _read_table(fd, table, piece.offset, where)
            return True
    iov = _tiles(pr, piece, reads, out, item, extra, bases)
    if iov is None:
        return False
    table = _Table(iov, extra)
    if key is not None and reuse is not None:  # key is set exactly when reuse is; both for mypy
        _TABLES.put(key, table, reuse)
    _read_table(fd, table, piece.offset, where)
    return True


class _Table:
    """A piece's iovec table ready to read with: chunks of at most ``IOV_MAX`` rows (views of the
    C-order table: contiguous), the bytes each reads, the buffer the stored checksum lands in, and
    the last load that used it (:class:`TableCache`)."""

    __slots__ = ("chunks", "iov", "tail", "used", "wants")

    def __init__(self, iov: np.ndarray, extra: int) -> None:
        self.iov, self.used = iov, 0
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
