"""Stored pieces of foreign checkpoints and the byte ranges a box of a tensor needs.

A *piece* is one stored block of a tensor: a global box ``(offsets, sizes)`` whose elements lie
in one file from ``byte_offset`` on, C-order, uncompressed, little-endian. safetensors stores one
piece per tensor, torch DCP one per saved chunk. Reading a box is then a set of byte runs: for
each piece the box meets, the rows of the intersection, merged where they touch in the file.
"""

from __future__ import annotations

import math
import os
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..._dtypes import itemsize, numpy_dtype
from ._errors import checkpoint_error

__all__ = ["Box", "Piece", "Run", "box_runs", "merge_runs", "read_box"]

#: A box of a tensor: ``(offsets, sizes)``, one entry per axis.
Box = tuple[tuple[int, ...], tuple[int, ...]]


@dataclass(frozen=True, slots=True)
class Piece:
    """One stored C-order, uncompressed block of a tensor.

    Attributes:
        offsets: the block's first element in the global tensor, per axis.
        sizes: the block's extent per axis (elements).
        file: absolute path of the file holding it.
        byte_offset: where its first element starts in ``file`` (bytes).
    """

    offsets: tuple[int, ...]
    sizes: tuple[int, ...]
    file: str
    byte_offset: int

    def __post_init__(self) -> None:
        if len(self.offsets) != len(self.sizes):
            raise ValueError(f"Piece offsets {self.offsets} and sizes {self.sizes} differ in rank")
        if any(o < 0 for o in self.offsets) or any(s < 0 for s in self.sizes) or self.byte_offset < 0:
            raise ValueError(f"Piece with a negative offset or size: {self!r}")

    def nbytes(self, item: int) -> int:
        """Bytes the piece occupies for elements of ``item`` bytes."""
        return math.prod(self.sizes) * item


@dataclass(frozen=True, slots=True)
class Run:
    """A contiguous byte range of one file: ``length`` bytes from ``offset``."""

    file: str
    offset: int
    length: int


def _intersection(piece: Piece, box: Box) -> tuple[tuple[int, ...], tuple[int, ...]] | None:
    start = tuple(max(p, b) for p, b in zip(piece.offsets, box[0], strict=True))
    stop = tuple(min(p + ps, b + bs) for p, ps, b, bs in zip(piece.offsets, piece.sizes, box[0], box[1], strict=True))
    if any(e <= s for s, e in zip(start, stop, strict=True)):
        return None
    return start, stop


def _piece_runs(piece: Piece, start: Sequence[int], stop: Sequence[int], item: int) -> tuple[np.ndarray, int]:
    """Byte offsets (absolute, one per run, in C order of the intersection) and the run length.

    The run is contiguous over the innermost axes on which the intersection spans the whole
    piece, plus the next axis out (partially).
    """
    rank = len(piece.sizes)
    if rank == 0:
        return np.array([piece.byte_offset], dtype=np.int64), item
    local0 = [s - o for s, o in zip(start, piece.offsets, strict=True)]
    extent = [e - s for s, e in zip(start, stop, strict=True)]
    strides = [item * math.prod(piece.sizes[d + 1 :]) for d in range(rank)]
    k = rank - 1
    while k > 0 and extent[k] == piece.sizes[k]:
        k -= 1
    length = extent[k] * strides[k]
    base = piece.byte_offset + sum(l0 * st for l0, st in zip(local0, strides, strict=True))
    offsets = np.zeros(1, dtype=np.int64) + base
    for d in range(k):  # outer axes: one run per index, C order
        offsets = (offsets[:, None] + np.arange(extent[d], dtype=np.int64)[None, :] * strides[d]).reshape(-1)
    return offsets, length


def merge_runs(runs: Iterable[Run]) -> list[Run]:
    """Sorted runs, touching or overlapping runs of one file merged (each byte at most once)."""
    merged: list[Run] = []
    for run in sorted(runs, key=lambda r: (r.file, r.offset)):
        if run.length <= 0:
            continue
        last = merged[-1] if merged else None
        if last is not None and last.file == run.file and run.offset <= last.offset + last.length:
            end = max(last.offset + last.length, run.offset + run.length)
            merged[-1] = Run(last.file, last.offset, end - last.offset)
        else:
            merged.append(run)
    return merged


def box_runs(pieces: Sequence[Piece], box: Box, dtype: str) -> list[Run]:
    """The byte runs that reading ``box`` of a tensor stored as ``pieces`` touches (unmerged)."""
    item = itemsize(dtype)
    runs: list[Run] = []
    for piece in pieces:
        hit = _intersection(piece, box)
        if hit is None:
            continue
        offsets, length = _piece_runs(piece, hit[0], hit[1], item)
        # Runs of one piece that touch are one read (a full-width row range is one run already).
        if len(offsets) > 1 and bool(np.all(np.diff(offsets) == length)):
            runs.append(Run(piece.file, int(offsets[0]), length * len(offsets)))
        else:
            runs.extend(Run(piece.file, int(o), length) for o in offsets)
    return runs


def _pread_into(fd: int, view: memoryview, offset: int, file: str) -> None:
    done = 0
    while done < len(view):
        got = os.preadv(fd, [view[done:]], offset + done)
        if got <= 0:
            raise checkpoint_error(f"{file} ends before byte {offset + len(view)} that its metadata names", file=file)
        done += got


class FileCache:
    """Open file descriptors, closed together (one ``open`` per file per load)."""

    def __init__(self) -> None:
        self._fds: dict[str, int] = {}

    def fd(self, file: str) -> int:
        fd = self._fds.get(file)
        if fd is None:
            try:
                fd = os.open(file, os.O_RDONLY)
            except OSError as err:
                raise checkpoint_error(f"cannot open {file}: {err.strerror}", file=file) from None
            self._fds[file] = fd
        return fd

    def close(self) -> None:
        for fd in self._fds.values():
            os.close(fd)
        self._fds.clear()

    def __enter__(self) -> FileCache:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def read_box(
    pieces: Sequence[Piece], box: Box, dtype: str, files: FileCache, *, path: str = ""
) -> np.ndarray[Any, Any]:
    """Read ``box`` of a tensor stored as ``pieces`` into a new C-order array of ``dtype``.

    Each byte is read at most once per call, straight into the result where a run spans a
    whole row range, otherwise into a staging buffer of the intersection.

    Raises:
        CheckpointError: the pieces do not cover the box (naming ``path``), or a file ends early.
    """
    np_dtype = numpy_dtype(dtype)
    item = np_dtype.itemsize
    out = np.empty(box[1], dtype=np_dtype)
    covered = 0
    for piece in pieces:
        hit = _intersection(piece, box)
        if hit is None:
            continue
        start, stop = hit
        extent = tuple(e - s for s, e in zip(start, stop, strict=True))
        covered += math.prod(extent)
        offsets, length = _piece_runs(piece, start, stop, item)
        fd = files.fd(piece.file)
        stage = np.empty(extent, dtype=np_dtype)
        flat = memoryview(stage.reshape(-1).view(np.uint8))
        if len(offsets) > 1 and bool(np.all(np.diff(offsets) == length)):
            _pread_into(fd, flat, int(offsets[0]), piece.file)
        else:
            for i, off in enumerate(offsets.tolist()):
                _pread_into(fd, flat[i * length : (i + 1) * length], off, piece.file)
        dest = tuple(slice(s - b, e - b) for s, e, b in zip(start, stop, box[0], strict=True))
        out[dest] = stage
    if covered != math.prod(box[1]):
        raise checkpoint_error(
            f"tensor {path!r}: the stored pieces cover {covered} of the {math.prod(box[1])} elements of box "
            f"offsets={box[0]} sizes={box[1]} (overlapping or missing pieces)",
            file=pieces[0].file if pieces else "",
        )
    return out
