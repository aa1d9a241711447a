"""Streaming loads: file bytes straight into a tensor's own memory, or through a small reused staging ring.

Two ways a load avoids fresh host pages and extra host copies (docs/checkpoints.md#speed):

* **direct** -- the destination's blocks are host memory the loader may write
  (:meth:`~layoutcore.driver.DriverHooks.native_host_views`: NumPy components, torch CPU local
  tensors): the reader fills them as it fills fresh blocks (``preadv`` straight into the block
  where a stored run is contiguous there), so each byte is copied once, by the kernel.
* **staged** -- the destination is not host memory the reader can fill in place (a GPU, or a
  strided view): the tensor is cut into **bands** of whole rows of its first axis, each band's
  part of every needed block is read into a buffer of a small ring
  (:meth:`~layoutcore.driver.DriverHooks.native_staging_buffer`: pinned memory for a GPU), and
  handed to :meth:`~layoutcore.driver.DriverHooks.native_write_rows`, which may copy
  asynchronously. Reader threads fill the next buffers while the calling thread hands the
  previous ones over, and a buffer is reused only once its copy has completed (the waiter the hook
  returned), so reads, checksums and copies overlap and host memory stays at the ring's size.

Band boundaries fall on the stored pieces' row boundaries where a piece carries a checksum (a
piece read whole in one band is checked as it is read); a band is at most :data:`BAND_BYTES`
unless one stored piece's rows are larger. The ring holds :data:`RING_BYTES` (at least two bands).
This module imports no framework: the drivers' hooks do the framework's part.
"""

from __future__ import annotations

import contextlib
import itertools
import math
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from .._dtypes import numpy_dtype
from .._errors import CheckpointError
from ..driver._hooks import DriverHooks
from ._planner import TensorLoad
from ._read_plan import Box, TensorReads, direct_slots, plan_tensor, read_boxes

__all__ = ["BAND_BYTES", "RING_BYTES", "Band", "Sink", "Stage", "bands", "host_views", "writes_rows"]

#: A band's bytes (all its blocks' parts), at most, unless one checksummed stored piece is larger.
BAND_BYTES = 8 << 20
#: The staging ring's bytes, at most, unless two bands are larger.
RING_BYTES = 32 << 20


def writes_rows(driver: Any) -> bool:
    """Whether ``driver`` writes staged rows into its tensors (overrides ``native_write_rows``)."""
    return getattr(type(driver), "native_write_rows", None) is not DriverHooks.native_write_rows


def host_views(driver: Any, tensor: Any, layout: Any, devices: tuple[str, ...]) -> list[np.ndarray] | None:
    """The driver's writable C-contiguous host views of ``tensor``'s local blocks, or ``None``
    unless every block has one (of the tensor's dtype and block shape)."""
    views = driver.native_host_views(tensor, layout, devices)
    if views is None or any(v is None for v in views):
        return None
    for v in views:
        if not (isinstance(v, np.ndarray) and v.flags.c_contiguous and v.flags.writeable):
            return None
    return list(views)


@dataclass(slots=True)
class Sink:
    """Where the staged bands of one tensor go.

    Attributes:
        path: the tensor's path (named in errors).
        driver: the driver whose hooks write and wait.
        tensor: the destination distributed tensor.
        result: what the load hands back for it (``tensor``, or the Variable holding it).
        written: whether any row was handed to the driver yet (a failure then leaves it partly written).
    """

    path: str
    driver: Any
    tensor: Any
    result: Any
    written: bool = False

    def write(self, index: int, rows: tuple[int, int], staged: np.ndarray) -> Callable[[], None] | None:
        self.written = True
        waiter: Callable[[], None] | None = self.driver.native_write_rows(self.tensor, index, rows, staged)
        return waiter

    def done(self) -> Any:
        self.driver.native_write_done(self.tensor)
        return self.result


@dataclass(frozen=True, slots=True)
class Band:
    """Rows ``[lo, hi)`` of a tensor's first axis: the parts of its needed blocks there.

    Attributes:
        parts: per part, ``(box index, its rows in the box (lo, hi), the part as a Box)``.
        reads: the reads that fill the parts (``None``: a format that decodes chunks).
        direct: :func:`direct_slots` of ``reads``.
        nbytes: the parts' bytes (the staging buffer they need).
    """

    lo: int
    hi: int
    parts: tuple[tuple[int, tuple[int, int], Box], ...]
    reads: TensorReads | None
    direct: tuple[tuple[int, int, int] | None, ...] | None
    nbytes: int


def _cuts(tl: TensorLoad, verify: bool) -> list[int]:
    """Row boundaries no band may cross: the boxes' first-axis edges, and, where a stored piece
    carries a checksum that is checked, its row edges (so it is read whole within one band)."""
    rows = tl.saved.shape[0]
    cuts = {0, rows}
    for start, sizes in tl.geometry.boxes:
        cuts.update((start[0], start[0] + sizes[0]))
    reads = tl.geometry.reads
    if reads is not None:
        for pr in reads.pieces:
            piece = reads.tensor.pieces[pr.piece]
            if verify and piece.crc32c_at is not None and (pr.whole or pr.zero_padded):
                cuts.update((min(rows, piece.start[0]), min(rows, piece.start[0] + piece.shape[0])))
    return sorted(c for c in cuts if 0 <= c <= rows)


def _row_bytes(tl: TensorLoad, lo: int) -> int:
    """Bytes per row, at row ``lo``, of every distinct needed block holding that row."""
    item = numpy_dtype(tl.saved.dtype).itemsize
    total = 0
    for start, sizes in tl.geometry.boxes:
        if start[0] <= lo < start[0] + sizes[0]:
            total += math.prod(sizes[1:]) * item
    return total


def _band(tl: TensorLoad, lo: int, hi: int) -> Band:
    parts = []
    nbytes = 0
    item = numpy_dtype(tl.saved.dtype).itemsize
    for b, (start, sizes) in enumerate(tl.geometry.boxes):
        a, z = max(lo, start[0]), min(hi, start[0] + sizes[0])
        if a >= z or not math.prod(sizes[1:]):
            continue
        box = ((a, *start[1:]), (z - a, *sizes[1:]))
        parts.append((b, (a - start[0], z - start[0]), box))
        nbytes += math.prod(box[1]) * item
    reads = tl.geometry.reads
    band_reads = None if reads is None else plan_tensor(reads.tensor, [p[2] for p in parts])
    direct = None if band_reads is None else direct_slots(band_reads)
    return Band(lo, hi, tuple(parts), band_reads, direct, nbytes)


def bands(tl: TensorLoad, verify: bool) -> list[Band]:
    """The tensor's needed blocks cut into bands of whole first-axis rows (rank 0: one band).

    Each band is at most :data:`BAND_BYTES` unless rows between two cuts (:func:`_cuts`) are
    larger; bands with no part (rows no block needs) are left out.
    """
    if not tl.saved.shape:
        item = numpy_dtype(tl.saved.dtype).itemsize
        reads = tl.geometry.reads
        parts = tuple((b, (0, 1), box) for b, box in enumerate(tl.geometry.boxes))
        return [Band(0, 1, parts, reads, None if reads is None else tl.geometry.direct, item * len(parts))]
    out: list[Band] = []
    cuts = _cuts(tl, verify)
    lo = 0
    for c0, c1 in itertools.pairwise(cuts):
        per_row = _row_bytes(tl, c0)
        if not per_row:
            if lo < c0:
                out.append(_band(tl, lo, c0))
            lo = c1
            continue
        if lo < c0 and (c1 - lo) * per_row > BAND_BYTES:  # close the open band at the cut
            out.append(_band(tl, lo, c0))
            lo = c0
        split = not verify or not _checked_inside(tl, c0, c1)
        step = max(1, BAND_BYTES // per_row) if split else c1 - c0
        while c1 - lo > step and (c1 - lo) * per_row > BAND_BYTES:
            out.append(_band(tl, lo, lo + step))
            lo += step
    if lo < tl.saved.shape[0]:
        out.append(_band(tl, lo, tl.saved.shape[0]))
    return [b for b in out if b.parts]


def _checked_inside(tl: TensorLoad, c0: int, c1: int) -> bool:
    """Whether a checksummed piece read whole spans rows ``[c0, c1)`` (splitting would skip its check)."""
    reads = tl.geometry.reads
    if reads is None:
        return False
    for pr in reads.pieces:
        piece = reads.tensor.pieces[pr.piece]
        checked = piece.crc32c_at is not None and (pr.whole or pr.zero_padded)
        if checked and piece.start[0] <= c0 and c1 <= piece.start[0] + piece.shape[0]:
            return True
    return False


@dataclass
class Stage:
    """The staging ring and pipeline of one load (see the module docstring).

    Args:
        readers: the load's :class:`~._reader.Readers` (its pool, per-thread state, source, verify).
        alloc: ``nbytes -> uint8 host buffer`` (a driver's :meth:`native_staging_buffer`).

    Attributes:
        allocated: bytes of staging buffers allocated (the ring; bounded, reused for every band).
        buffers: how many buffers were allocated.
    """

    readers: Any
    alloc: Callable[[int], np.ndarray]
    allocated: int = 0
    buffers: int = 0
    _ring: list[np.ndarray] = field(default_factory=list)
    _pending: list[Callable[[], None] | None] = field(default_factory=list)

    def _make_ring(self, largest: int) -> None:
        count = max(2, min(4, RING_BYTES // max(1, largest)))
        size = max(largest, 1)
        if self._ring and self._ring[0].nbytes >= size:
            return
        self.wait()
        self._ring = [self.alloc(size) for _ in range(count)]
        self._pending = [None] * count
        self.allocated += size * count
        self.buffers += count

    def wait(self) -> None:
        """Wait for every copy still in flight from the ring."""
        for i, waiter in enumerate(self._pending):
            if waiter is not None:
                self._pending[i] = None
                waiter()

    def _take(self, slot: int) -> np.ndarray:
        waiter = self._pending[slot]
        if waiter is not None:  # the buffer's previous copy must have completed before it is overwritten
            self._pending[slot] = None
            waiter()
        return self._ring[slot]

    def _read(self, tl: TensorLoad, band: Band, buf: np.ndarray) -> list[np.ndarray]:
        dtype = numpy_dtype(tl.saved.dtype)
        views, at = [], 0
        for _, _, (_, sizes) in band.parts:
            n = math.prod(sizes) * dtype.itemsize
            views.append(buf[at : at + n].view(dtype).reshape(sizes))
            at += n
        source = self.readers.source
        if band.reads is None:
            source.decode(tl.path, [p[2] for p in band.parts], views)
            return views
        fds, scratch = self.readers.state()
        read_boxes(
            source.root,
            band.reads,
            views,
            checkpoint=source.path,
            fds=fds,
            tensor_path=tl.path,
            node=tl.node,
            scratch=scratch,
            verify=self.readers.verify,
            direct=band.direct,
        )
        return views

    def _hand_over(self, tl: TensorLoad, sink: Sink, band: Band, views: list[np.ndarray]) -> list[Any]:
        waiters = []
        for (b, rows, _), view in zip(band.parts, views, strict=True):
            for index, box in enumerate(tl.geometry.box_of):
                if box == b:
                    try:
                        waiter = sink.write(index, rows, view)
                    except Exception as err:
                        raise _write_error(self.readers.source.path, tl, band, err) from err
                    if waiter is not None:
                        waiters.append(waiter)
        return waiters

    def run(self, work: Sequence[tuple[TensorLoad, Sink]]) -> Iterator[tuple[TensorLoad, Any]]:
        """Stream every tensor of ``work`` into its sink, in order; yield ``(tensor, result)`` as each completes.

        Raises:
            CheckpointError: a read (naming the tensor and file) or a driver's write (naming the
                tensor and the band's file) failed; bands after it are not handed over.
        """
        verify = self.readers.verify
        jobs = [(tl, sink, band) for tl, sink in work for band in bands(tl, verify)]
        remaining = {id(sink): 0 for _, sink in work}
        for _, sink, _ in jobs:
            remaining[id(sink)] += 1
        if jobs:
            self._make_ring(max(band.nbytes for _, _, band in jobs))
        pool = self.readers.pool
        inflight: deque[tuple[int, int, Any]] = deque()  # (job, slot, future or views)
        nxt = 0

        def submit(slot: int) -> None:
            nonlocal nxt
            tl, _, band = jobs[nxt]
            buf = self._take(slot)
            task = pool.submit(self._read, tl, band, buf) if pool is not None else None
            inflight.append((nxt, slot, task))
            nxt += 1

        for slot in range(min(len(self._ring), len(jobs))):
            submit(slot)
        finished = 0
        try:
            while inflight:
                j, slot, task = inflight.popleft()
                tl, sink, band = jobs[j]
                views = task.result() if task is not None else self._read(tl, band, self._ring[slot])
                waiters = self._hand_over(tl, sink, band, views)
                self._pending[slot] = _all(waiters)
                remaining[id(sink)] -= 1
                if nxt < len(jobs):
                    submit(slot)
                while finished < len(work) and remaining[id(work[finished][1])] == 0:
                    done_tl, done_sink = work[finished]
                    self.wait()
                    yield done_tl, done_sink.done()
                    finished += 1
            while finished < len(work):  # tensors with no band (nothing needed here)
                yield work[finished][0], work[finished][1].done()
                finished += 1
        finally:
            for _, _, task in inflight:
                if task is not None:
                    task.cancel()
            for _, _, task in inflight:
                if task is not None and not task.cancelled():
                    with contextlib.suppress(Exception):  # the first error is already propagating
                        task.result()  # no reader may still write into the ring once we return
            self.wait()


def _all(waiters: list[Callable[[], None]]) -> Callable[[], None] | None:
    if not waiters:
        return None

    def wait() -> None:
        for w in waiters:
            w()

    return wait


def _write_error(path: str, tl: TensorLoad, band: Band, err: Exception) -> CheckpointError:
    file = None
    if band.reads is not None and band.reads.pieces:
        piece = band.reads.tensor.pieces[band.reads.pieces[0].piece]
        file = f"{tl.node}/{piece.file}" if tl.node else piece.file
    return CheckpointError(
        f"Checkpoint {path}: tensor {tl.path!r}: the driver failed to write rows {band.lo}..{band.hi} into its memory "
        f"({type(err).__name__}: {err})",
        path=path,
        file=file,
        tensor=tl.path,
    )
