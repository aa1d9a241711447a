"""Staged saves: device blocks streamed to their shard files through a small reused staging ring.

Where a driver says a local component is device memory (:meth:`~layoutcore.driver.DriverHooks.native_staged_save`:
a CUDA tensor) and the shard's inner chunks span the block's trailing axes (so a band of rows is a
contiguous run of the shard file's chunk bytes), :func:`save_staged` copies the block to host band
by band -- :meth:`~layoutcore.driver.DriverHooks.native_read_rows` into a buffer of a ring of a few
(:meth:`~layoutcore.driver.DriverHooks.native_staging_buffer`: pinned memory for a GPU) -- instead
of one whole fresh host copy (``component_to_host``). The calling thread issues the copy of band
``k + 1`` before it waits for band ``k``'s and hands band ``k`` to a writer thread, which extends
the chunk's CRC-32C over it and appends it to the file; a buffer is reused only after its band
was written. So device→host copies overlap checksums and writes, and host memory stays at the
ring's size (:data:`~._staging.RING_BYTES`, bands of at most :data:`~._staging.BAND_BYTES`)
whatever the block's size.

The bytes are those of :func:`~._format.write_shard`: each chunk's rows, zero rows padding the
last chunk where the array ends inside it, the chunk's CRC-32C (carried from band to band, as a
band may end inside a chunk), then the index and its CRC. The bands of one file are written in
order (each band's task waits for the one before it); files are written in parallel. Other chunk
shapes (chunks that cut the trailing axes, an edge block shorter than its shard on a trailing
axis) keep the whole host copy. This module imports no framework: the drivers' hooks do that part.
"""

from __future__ import annotations

import contextlib
import math
import os
from collections import deque
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from .._crc import crc32c
from .._dtypes import numpy_dtype
from .._errors import CheckpointError
from ..driver._hooks import DriverHooks
from . import _staging
from ._format import MISSING, ArrayStorage, _writev_all
from ._slabs import CRC_BYTES

__all__ = [
    "SaveStage",
    "ShardStream",
    "StagedBlock",
    "band_rows",
    "bandable",
    "block_shape",
    "reads_rows",
    "save_staged",
    "stages",
]


def reads_rows(driver: Any) -> bool:
    """Whether ``driver`` copies rows of its components into staging buffers (overrides ``native_read_rows``)."""
    return getattr(type(driver), "native_read_rows", None) is not DriverHooks.native_read_rows


def block_shape(storage: ArrayStorage, index: Sequence[int]) -> tuple[int, ...]:
    """The in-array part of shard ``index``: ``min(shard, shape - start)`` per axis."""
    start = storage.shard_start(index)
    return tuple(min(s, n - a) for s, n, a in zip(storage.shard, storage.shape, start, strict=True))


def bandable(storage: ArrayStorage, index: Sequence[int]) -> bool:
    """Whether shard ``index`` can be written band by band: a rank-0 value, or inner chunks spanning
    the block's whole trailing axes (a band of rows is then a contiguous run of the file's bytes)."""
    if not storage.shape:
        return True
    trailing = storage.chunk[1:]
    return trailing == storage.shard[1:] and trailing == block_shape(storage, index)[1:]


def band_rows(storage: ArrayStorage, index: Sequence[int]) -> list[tuple[int, int]]:
    """Shard ``index``'s block cut into bands of whole rows, each at most :data:`~._staging.BAND_BYTES`
    unless one row is larger (rank 0: one band ``(0, 1)``)."""
    if not storage.shape:
        return [(0, 1)]
    shape = block_shape(storage, index)
    per_row = math.prod(shape[1:]) * storage.item
    step = max(1, _staging.BAND_BYTES // max(1, per_row))
    return [(lo, min(lo + step, shape[0])) for lo in range(0, shape[0], step)]


class ShardStream:
    """One shard file (``root/storage.shard_file(index)``) written band by band, in row order.

    :meth:`put` appends rows ``[lo, hi)`` of the block (``lo`` where the last band ended),
    closing each chunk with its CRC-32C (and zero rows where the array ends inside it); the call
    with the block's last row also writes the index and closes the file. Not thread-safe: the
    caller runs one :meth:`put` at a time, in order.
    """

    def __init__(self, root: str, storage: ArrayStorage, index: Sequence[int]) -> None:
        self.file = os.path.join(root, storage.shard_file(index))
        self.storage = storage
        self.index = tuple(index)
        shape = block_shape(storage, index)
        self.rows = shape[0] if shape else 1
        self.row_bytes = math.prod(shape[1:]) * storage.item if shape else storage.item
        self.chunk_rows = storage.chunk[0] if shape else 1
        self.row = 0  # rows written so far
        self._crc = 0  # CRC-32C of the current chunk's rows written so far
        self._fd: int | None = None

    def put(self, lo: int, hi: int, data: np.ndarray) -> None:
        """Append rows ``[lo, hi)``, ``data`` their C-contiguous bytes (any dtype).

        Raises:
            OSError: the file could not be created or written.
        """
        if lo != self.row or not lo < hi <= self.rows or data.nbytes != (hi - lo) * self.row_bytes:
            raise ValueError(f"{self.file}: rows {lo}..{hi} after row {self.row} of {self.rows}")  # a caller's bug
        flat = data.reshape(-1).view(np.uint8)
        buffers: list[Any] = []
        row = lo
        while row < hi:
            end = (row // self.chunk_rows + 1) * self.chunk_rows  # where the chunk holding `row` ends
            stop = min(hi, end)
            part = flat[(row - lo) * self.row_bytes : (stop - lo) * self.row_bytes]
            self._crc = crc32c(part, self._crc)
            buffers.append(part)
            row = stop
            if row == self.rows and row < end:  # the array ends inside this chunk: zero rows pad it
                pad = np.zeros((end - row) * self.row_bytes, dtype=np.uint8)
                self._crc = crc32c(pad, self._crc)
                buffers.append(pad)
                row = end
            if row == end:
                buffers.append(self._crc.to_bytes(4, "little"))
                self._crc = 0
        self.row = min(row, self.rows)
        if self.row == self.rows:
            buffers += self._index()
        if self._fd is None:
            os.makedirs(os.path.dirname(self.file), exist_ok=True)
            self._fd = os.open(self.file, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        _writev_all(self._fd, [memoryview(b).cast("B") for b in buffers])
        if self.row == self.rows:
            self.close()

    def _index(self) -> list[bytes]:
        """The shard index (present chunks first, in C order: only the first axis has several) and its CRC."""
        storage = self.storage
        if not storage.shape:
            return []
        entry = math.prod(storage.chunk) * storage.item + CRC_BYTES
        index = np.full((math.prod(storage.chunks_per_shard), 2), MISSING, dtype="<u8")
        present = (self.rows + self.chunk_rows - 1) // self.chunk_rows  # chunks holding any of the rows
        index[:present, 0] = np.arange(present, dtype="<u8") * entry
        index[:present, 1] = entry
        data = index.tobytes()
        return [data, crc32c(data).to_bytes(4, "little")]

    def close(self) -> None:
        """Close the file (idempotent)."""
        fd, self._fd = self._fd, None
        if fd is not None:
            os.close(fd)


@dataclass(frozen=True, slots=True)
class StagedBlock:
    """One block a save streams: local ``component`` of ``tensor`` (tensor path ``path``) as shard ``index``."""

    path: str
    driver: Any
    tensor: Any
    component: Any
    storage: ArrayStorage
    index: tuple[int, ...]


@dataclass(slots=True)
class _Job:
    block: StagedBlock
    stream: ShardStream
    rows: tuple[int, int]
    nbytes: int


@dataclass
class SaveStage:
    """The ring and pipeline of one save's staged blocks (see the module docstring).

    Attributes:
        allocated: bytes of staging buffers allocated (the ring; reused for every band).
        bands: bands copied through the ring.
    """

    pool: ThreadPoolExecutor | None
    target: str
    allocated: int = 0
    bands: int = 0
    _ring: list[np.ndarray] = field(default_factory=list)
    _writes: list[Future[None] | None] = field(default_factory=list)  # per slot: the write reading it
    _last: dict[int, Future[None]] = field(default_factory=dict)  # per stream: its latest write

    def run(self, blocks: Sequence[StagedBlock], root: str) -> None:
        """Write every block of ``blocks`` to its shard file under ``root``; return once all are written.

        Raises:
            CheckpointError: a driver's copy failed (naming the tensor and its shard file).
            OSError: a writer failed (the first error; the save then commits nothing).
        """
        jobs = [
            _Job(b, stream, rows, (rows[1] - rows[0]) * stream.row_bytes)
            for b in blocks
            for stream in [ShardStream(root, b.storage, b.index)]
            for rows in band_rows(b.storage, b.index)
        ]
        if not jobs:
            return
        self._make_ring(blocks[0], max(j.nbytes for j in jobs))
        copying: deque[tuple[_Job, int, np.ndarray, Callable[[], None] | None]] = deque()
        try:
            for n, job in enumerate(jobs):
                slot = n % len(self._ring)
                self._free(slot)
                view = self._view(job, slot)
                copying.append((job, slot, view, self._copy(job, view)))
                if len(copying) > 1:  # band n's copy is issued: hand band n - 1 over meanwhile
                    self._hand_over(*copying.popleft())
            while copying:
                self._hand_over(*copying.popleft())
            for slot in range(len(self._ring)):
                self._free(slot)
        finally:
            self._abort(copying, {id(j.stream): j.stream for j in jobs}.values())

    def _make_ring(self, first: StagedBlock, largest: int) -> None:
        count = max(2, min(4, _staging.RING_BYTES // max(1, largest)))
        self._ring = [first.driver.native_staging_buffer(largest, first.tensor) for _ in range(count)]
        self._writes = [None] * count
        self.allocated += largest * count

    def _free(self, slot: int) -> None:
        """Wait until the band last written from ``slot`` is written (re-raising the writer's error)."""
        future, self._writes[slot] = self._writes[slot], None
        if future is not None:
            future.result()

    def _view(self, job: _Job, slot: int) -> np.ndarray:
        storage = job.block.storage
        shape = (job.rows[1] - job.rows[0], *block_shape(storage, job.block.index)[1:]) if storage.shape else ()
        return self._ring[slot][: job.nbytes].view(numpy_dtype(storage.dtype)).reshape(shape)

    def _copy(self, job: _Job, view: np.ndarray) -> Callable[[], None] | None:
        try:
            waiter: Callable[[], None] | None = job.block.driver.native_read_rows(job.block.component, job.rows, view)
        except Exception as err:
            raise self._copy_error(job, err) from err
        self.bands += 1
        return waiter

    def _hand_over(self, job: _Job, slot: int, view: np.ndarray, waiter: Callable[[], None] | None) -> None:
        if waiter is not None:
            try:
                waiter()
            except Exception as err:
                raise self._copy_error(job, err) from err
        prev = self._last.get(id(job.stream))
        stream, (lo, hi) = job.stream, job.rows

        def write() -> None:
            if prev is not None:
                prev.result()  # the band before it in the file (submitted, hence started, earlier)
            stream.put(lo, hi, view)

        if self.pool is None:
            future: Future[None] = Future()
            write()
            future.set_result(None)
        else:
            future = self.pool.submit(write)
        self._writes[slot] = self._last[id(stream)] = future

    def _abort(self, copying: Any, streams: Any) -> None:
        """No copy in flight into the ring, no writer running, every file closed (after an error, too)."""
        for _, _, _, waiter in copying:
            if waiter is not None:
                with contextlib.suppress(Exception):  # the first error is already propagating
                    waiter()
        # every write not yet waited for is in a slot (a slot is reused only after its write was waited for)
        for future in self._writes:
            if future is not None:
                future.cancel()
        for future in self._writes:
            if future is not None:
                with contextlib.suppress(BaseException):
                    future.exception()  # waits for a running one; a cancelled one returns at once
        for stream in streams:
            stream.close()

    def _copy_error(self, job: _Job, err: Exception) -> CheckpointError:
        lo, hi = job.rows
        return CheckpointError(
            f"checkpoint.save({self.target!r}): the {job.block.driver.name} driver failed to copy rows {lo}..{hi} of "
            f"a component of {job.block.path!r} to host ({type(err).__name__}: {err}); nothing was committed.",
            path=self.target,
            file=job.block.storage.shard_file(job.block.index),
            tensor=job.block.path,
        )


def stages(driver: Any, component: Any, storage: ArrayStorage, index: Sequence[int]) -> bool:
    """Whether a save streams ``component`` (shard ``index`` of ``storage``) through :class:`SaveStage`."""
    return reads_rows(driver) and bool(driver.native_staged_save(component)) and bandable(storage, index)


def save_staged(blocks: Sequence[StagedBlock], root: str, pool: ThreadPoolExecutor | None, target: str) -> SaveStage:
    """Write ``blocks`` through a :class:`SaveStage` on ``pool`` (``None``: on this thread); returns it.

    Raises:
        CheckpointError: as :meth:`SaveStage.run`; OSError from a writer.
    """
    stage = SaveStage(pool, target)
    stage.run(blocks, root)
    return stage
