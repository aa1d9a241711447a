"""The format-neutral read core: stored pieces in, byte ranges out (pure Python + NumPy).

Any checkpoint format whose tensors are stored as uncompressed, C-order boxes at byte offsets
of files maps onto this module: layoutcore's own zarr shards (one piece per inner chunk), torch
DCP (one piece per ``ChunkStorageMetadata`` item of a ``.distcp`` file, when the item is a raw
tensor), safetensors (one piece per tensor, the whole tensor) and Orbax/TensorStore zarr
arrays stored without compression.

Vocabulary:

* :class:`StoredPiece` -- a box ``(start, shape)`` in global coordinates, stored C-order at
  ``offset`` of ``file``. The stored ``shape`` may reach past the tensor's edge (zarr edge chunks
  are padded); only the part inside the tensor is ever read. ``crc32c_at`` says where a 4-byte
  little-endian CRC-32C of the piece's bytes is stored (zarr's ``crc32c`` codec puts it right
  after the data); it is read, and checked, only when the whole piece is read.
* :class:`StoredTensor` -- one tensor: its global shape, dtype name and its pieces (disjoint).
* A *needed box* -- ``(offsets, sizes)`` that a device must hold (``TensorSpec.boxes()``).

:func:`plan_tensor` intersects the distinct needed boxes with the pieces and gives, per piece,
the exact byte runs to read (the C-order runs of each intersection: the trailing axes the
intersection covers whole make one run). :func:`merge_ranges` unions runs per file, so a
process reads each byte at most once, and the totals give

* ``floor_bytes`` -- each distinct needed element once, times the item size;
* ``read_bytes`` -- the union of the runs (plus checksums of pieces read whole);
* ``amplification`` -- ``read_bytes / floor_bytes`` (1.0 when nothing is needed).

With ``granularity="piece"`` every touched piece is read whole, which is what a reader that
decodes whole chunks (TensorStore, Orbax, torch DCP's ``torch.load`` of each item) reads: the
planner then predicts *their* bytes, for comparison.

A foreign reader (DCP, safetensors, ...) builds ``StoredTensor``s from its metadata and calls
:func:`plan_tensor` / :func:`merge_ranges`, or :func:`read_boxes` to fill NumPy arrays.
"""

from __future__ import annotations

import math
import os
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from operator import mul, sub
from typing import Any, Literal

import numpy as np

from .._crc import crc32c
from .._dtypes import itemsize as _itemsize
from .._dtypes import numpy_dtype
from .._errors import CheckpointError
from ._scatter import scatter_read
from ._slabs import (
    CRC_BYTES,
    crc_mismatch,
    kernel_copy_misaligned,
    phased,
    preadv_all,
    read_whole_in_slabs,
    slabbed,
    strides_of,
)

__all__ = [
    "Box",
    "PieceReads",
    "StoredPiece",
    "StoredTensor",
    "TensorReads",
    "direct_slots",
    "merge_ranges",
    "plan_tensor",
    "read_boxes",
]

Box = tuple[tuple[int, ...], tuple[int, ...]]
#: dtype -> the byte layoutcore's writer padded edge chunks with before it padded every dtype with zero
#: bytes: ``float8_e8m0fnu`` has no zero, and the NumPy 0 it was padded with is its NaN, ``0xFF``. A
#: partial read of such a chunk checks its checksum with zero padding, then with this.
LEGACY_PADDING = {"float8_e8m0fnu": 0xFF}
#: A read at least this large whose destination is misaligned to its file offset (``COPY_ALIGN``)
#: goes through the phased read buffer and a copy out; a smaller one is read straight in.
MISALIGNED_MIN_BYTES = 64 << 10
Granularity = Literal["exact", "piece"]


@dataclass(frozen=True, slots=True)
class StoredPiece:
    """A box of a tensor stored C-order, uncompressed, at a byte offset of a file.

    Attributes:
        file: the file, relative to the checkpoint root (or absolute).
        offset: byte offset of the box's first element in ``file``.
        start: the box's offsets in global coordinates, one per tensor axis.
        shape: the stored box's shape (may reach past the tensor's edge; padding is never read).
        crc32c_at: byte offset of a 4-byte little-endian CRC-32C of all ``prod(shape) *
            itemsize`` bytes, or ``None`` when the format stores none.
    """

    file: str
    offset: int
    start: tuple[int, ...]
    shape: tuple[int, ...]
    crc32c_at: int | None = None


@dataclass(frozen=True, slots=True)
class StoredTensor:
    """One stored tensor: global ``shape``, canonical ``dtype`` name, and disjoint ``pieces``."""

    path: str
    shape: tuple[int, ...]
    dtype: str
    pieces: tuple[StoredPiece, ...]

    @property
    def itemsize(self) -> int:
        """Bytes per element."""
        return _itemsize(self.dtype)


@dataclass(frozen=True, slots=True)
class PieceReads:
    """What to read from one piece.

    Attributes:
        piece: index into ``StoredTensor.pieces``.
        runs: ``(n, 2)`` int64 array of ``(file offset, length)``, sorted, disjoint.
        whole: whether the whole piece is read (its checksum, if any, is then read and checked).
        copies: ``(box index, intersection start, intersection stop)`` per needed box it serves.
        zero_padded: an edge piece whose every element inside the tensor is read, and its
            checksum, but not its padding: the checksum is checked over the read bytes with
            zeros in the padding (the fill the writer pads edge chunks with).
    """

    piece: int
    runs: np.ndarray[Any, Any]
    whole: bool
    copies: tuple[tuple[int, tuple[int, ...], tuple[int, ...]], ...]
    zero_padded: bool = False


@dataclass(frozen=True, slots=True)
class TensorReads:
    """The reads of one tensor for a set of needed boxes."""

    tensor: StoredTensor
    boxes: tuple[Box, ...]
    pieces: tuple[PieceReads, ...]
    floor_bytes: int
    uncovered: tuple[int, ...] = field(default=())

    @property
    def read_bytes(self) -> int:
        """Bytes this tensor reads (runs plus checksums), before merging with other tensors."""
        total = 0
        for p in self.pieces:
            total += int(p.runs[:, 1].sum()) if len(p.runs) else 0
        return total


def _c_runs(
    piece_shape: Sequence[int], rel_start: Sequence[int], sizes: Sequence[int], base: int, item: int
) -> np.ndarray[Any, Any]:
    """C-order byte runs ``(offset, length)`` of the sub-box ``rel_start + sizes`` of a stored piece."""
    rank = len(piece_shape)
    if rank == 0:
        return np.array([[base, item]], dtype=np.int64)
    if any(s == 0 for s in sizes):
        return np.zeros((0, 2), dtype=np.int64)
    # k: the last axis not covered whole; axes after it are contiguous with it.
    k = rank - 1
    while k > 0 and sizes[k] == piece_shape[k] and rel_start[k] == 0:
        k -= 1
    strides = [item] * rank
    for d in range(rank - 2, -1, -1):
        strides[d] = strides[d + 1] * piece_shape[d + 1]
    run_len = sizes[k] * strides[k]
    first = base + sum(r * s for r, s in zip(rel_start, strides, strict=True))
    if k == 0:
        return np.array([[first, run_len]], dtype=np.int64)
    offsets = np.zeros(1, dtype=np.int64) + first
    for d in range(k):
        steps = np.arange(sizes[d], dtype=np.int64) * strides[d]
        offsets = (offsets[:, None] + steps[None, :]).reshape(-1)
    out = np.empty((offsets.size, 2), dtype=np.int64)
    out[:, 0] = offsets
    out[:, 1] = run_len
    return out


def merge_ranges(runs: np.ndarray[Any, Any]) -> np.ndarray[Any, Any]:
    """Union of ``(offset, length)`` ranges: sorted, overlapping and touching ranges joined."""
    if len(runs) == 0:
        return np.zeros((0, 2), dtype=np.int64)
    order = np.argsort(runs[:, 0], kind="stable")
    starts = runs[order, 0]
    ends = starts + runs[order, 1]
    reach = np.maximum.accumulate(ends)
    new = np.ones(len(starts), dtype=bool)
    new[1:] = starts[1:] > reach[:-1]
    group = np.cumsum(new) - 1
    g_start = starts[new]
    g_end = np.zeros(len(g_start), dtype=np.int64)
    np.maximum.at(g_end, group, ends)
    out = np.empty((len(g_start), 2), dtype=np.int64)
    out[:, 0] = g_start
    out[:, 1] = g_end - g_start
    return out


def _distinct_boxes(boxes: Iterable[Box]) -> tuple[Box, ...]:
    seen: dict[Box, None] = {}
    for box in boxes:
        seen.setdefault((tuple(box[0]), tuple(box[1])), None)
    return tuple(seen)


def plan_tensor(
    tensor: StoredTensor,
    boxes: Iterable[Box],
    *,
    granularity: Granularity = "exact",
    with_copies: bool = True,
) -> TensorReads:
    """The byte runs that give every needed box of ``tensor``, each byte once.

    Args:
        tensor: the stored tensor.
        boxes: the boxes the process's devices need: blocks of one layout, so two boxes are
            either identical (replicas, counted once) or disjoint.
        granularity: ``"exact"`` reads only the needed runs; ``"piece"`` reads every touched
            piece whole (what whole-chunk readers do).
        with_copies: also list, per piece, which box parts it fills (a loader needs them; a
            plan does not, and skips the per-intersection work for pieces needed whole).

    Returns:
        TensorReads; ``uncovered`` lists the needed boxes that the pieces do not cover entirely
        (a loader must refuse them: the data is not in the checkpoint).
    """
    needed = _distinct_boxes(boxes)
    item = tensor.itemsize
    rank = len(tensor.shape)
    floor = sum(math.prod(sizes) for _, sizes in needed) * item
    nonempty = [b for b, (_, sizes) in enumerate(needed) if math.prod(sizes)]
    if not tensor.pieces or not nonempty:
        return TensorReads(tensor, needed, (), floor, tuple(nonempty))
    n_p = len(tensor.pieces)
    p_start = np.array([p.start for p in tensor.pieces], dtype=np.int64).reshape(n_p, rank)
    p_shape = np.array([p.shape for p in tensor.pieces], dtype=np.int64).reshape(n_p, rank)
    p_stop = np.minimum(p_start + p_shape, np.array(tensor.shape, dtype=np.int64))
    b_start = np.array([needed[b][0] for b in nonempty], dtype=np.int64).reshape(len(nonempty), rank)
    b_stop = b_start + np.array([needed[b][1] for b in nonempty], dtype=np.int64).reshape(len(nonempty), rank)
    lo = np.maximum(p_start[None, :, :], b_start[:, None, :])  # (boxes, pieces, rank)
    hi = np.minimum(p_stop[None, :, :], b_stop[:, None, :])
    vol = np.prod(np.clip(hi - lo, 0, None), axis=2)  # elements of each intersection
    box_vol = np.prod(b_stop - b_start, axis=1)
    uncovered = tuple(nonempty[i] for i in np.nonzero(vol.sum(axis=1) < box_vol)[0].tolist())
    piece_in = np.prod(p_stop - p_start, axis=1)
    touched = np.nonzero(vol.sum(axis=0) > 0)[0].tolist()
    full = (vol.sum(axis=0) >= piece_in).tolist()
    out: list[PieceReads] = []
    for j in touched:
        piece = tensor.pieces[j]
        copies: tuple[tuple[int, tuple[int, ...], tuple[int, ...]], ...] = ()
        if with_copies or not (full[j] or granularity == "piece"):
            hits = np.nonzero(vol[:, j])[0].tolist()
            copies = tuple((nonempty[i], tuple(lo[i, j].tolist()), tuple(hi[i, j].tolist())) for i in hits)
        if granularity == "piece":
            runs = _c_runs(piece.shape, (0,) * rank, piece.shape, piece.offset, item)
        elif full[j]:
            inside = tuple((p_stop[j] - p_start[j]).tolist())
            runs = _c_runs(piece.shape, (0,) * rank, inside, piece.offset, item)
        else:
            parts = [
                _c_runs(
                    piece.shape,
                    tuple(s - ps for s, ps in zip(a, piece.start, strict=True)),
                    tuple(e - s for s, e in zip(a, z, strict=True)),
                    piece.offset,
                    item,
                )
                for _, a, z in copies
            ]
            runs = parts[0] if len(parts) == 1 else merge_ranges(np.concatenate(parts))
        whole = _covers_whole_piece(runs, piece, item)
        padded = False
        if not whole and full[j] and piece.crc32c_at is not None and granularity == "exact":
            # an edge chunk needed whole: its padding (zeros, as the writer writes it) is not read,
            # its checksum is, and is checked over the read bytes with zeros in the padding
            padded = True
            crc = np.array([[piece.crc32c_at, CRC_BYTES]], dtype=np.int64)
            runs = merge_ranges(np.concatenate([runs, crc]))
        if whole and piece.crc32c_at is not None:
            if piece.crc32c_at == piece.offset + math.prod(piece.shape) * item:
                runs = np.array([[piece.offset, int(runs[0, 1]) + CRC_BYTES]], dtype=np.int64)
            else:
                crc = np.array([[piece.crc32c_at, CRC_BYTES]], dtype=np.int64)
                runs = merge_ranges(np.concatenate([runs, crc]))
        out.append(PieceReads(j, runs, whole, copies, padded))
    return TensorReads(tensor, needed, tuple(out), floor, uncovered)


def _covers_whole_piece(runs: np.ndarray[Any, Any], piece: StoredPiece, item: int) -> bool:
    nbytes = math.prod(piece.shape) * item
    return len(runs) == 1 and int(runs[0, 0]) == piece.offset and int(runs[0, 1]) >= nbytes


def read_boxes(
    root: str,
    reads: TensorReads,
    out: Sequence[np.ndarray[Any, Any]],
    *,
    checkpoint: str | None = None,
    fds: dict[str, int] | None = None,
    tensor_path: str | None = None,
    node: str = "",
    scratch: list[np.ndarray[Any, Any]] | None = None,
    verify: bool = True,
    direct: Sequence[tuple[int, int, int] | None] | None = None,
    pieces: range | None = None,
    bounce: bool = False,
    reuse: int | None = None,
) -> None:
    """Fill ``out[i]`` (C-contiguous, of ``reads.boxes[i]``'s sizes) from the files under ``root``.

    Each piece's runs are read with ``os.preadv`` into one buffer spanning them (or straight
    into the destination when the piece maps onto a contiguous part of it), so the bytes read
    are exactly ``reads.read_bytes``. Checksums of pieces read whole (or whole but for the
    padding of an edge chunk, which is zeros) are verified; a piece larger than a slab that is
    scattered is checked and copied slab by slab (:func:`~._slabs.read_whole_in_slabs`). Piece files
    are ``root/node/file``; ``tensor_path`` (default ``reads.tensor.path``) names the tensor in
    errors, ``fds`` (file -> descriptor) keeps files open across calls, and ``scratch`` (a
    one-element list holding a uint8 array) is a read buffer reused across pieces and calls.
    ``verify=False`` skips the checksums (the bytes read stay the same). ``direct`` is
    :func:`direct_slots` of ``reads``, for a caller that reads many tensors of one geometry.
    ``pieces`` (default: all) limits the work to those indexes of ``reads.pieces``; calls over
    disjoint ranges write disjoint parts of ``out`` and may run in different threads.
    ``bounce=True`` (for memory the caller did not allocate, e.g. ``into=`` destinations) reads a
    piece whose destination is misaligned to its file offset (:data:`~._slabs.COPY_ALIGN`,
    at least :data:`MISALIGNED_MIN_BYTES`) through the phased read buffer and a copy out instead
    of straight in: on 4 KiB pages (NumPy's own arrays, 16 bytes past a page) the kernel's
    misaligned copy ran 1.45x slower than that; on the loader's own huge-page blocks it ran 1.35x
    faster, so the loader's blocks are read straight in. ``reuse`` (with ``bounce``): the load's
    :func:`~._scatter.begin_reuse` number, to keep and reuse the iovec tables of scatter reads into
    memory the caller keeps.

    Raises:
        CheckpointError: a missing or short file, a checksum mismatch, or needed data that no
            piece holds; the message names the tensor path and the file.
    """
    tensor, item = reads.tensor, reads.tensor.itemsize
    name = checkpoint or root
    tpath = tensor.path if tensor_path is None else tensor_path
    if reads.uncovered:
        box = reads.boxes[reads.uncovered[0]]
        raise CheckpointError(
            f"Checkpoint {name}: tensor {tpath!r} has no stored data for the box {box} (offsets, sizes); "
            "the checkpoint is incomplete.",
            path=name,
            tensor=tpath,
        )
    dtype = numpy_dtype(tensor.dtype)
    own = fds is None
    opened: dict[str, int] = {} if fds is None else fds
    scratch = [np.empty(0, dtype=np.uint8)] if scratch is None else scratch
    flat: list[np.ndarray[Any, Any] | None] = [None] * len(out)  # uint8 views of the destinations
    bases: list[int] = []  # their addresses, for scatter reads (taken once per call: 2 us each)
    try:
        for i in range(len(reads.pieces)) if pieces is None else pieces:
            pr = reads.pieces[i]
            piece = tensor.pieces[pr.piece]
            file = _joined(node, piece.file)
            fd = _open(root, file, opened, name, tpath)
            where = (name, file, tpath)
            runs = pr.runs
            span_lo = int(runs[0, 0])
            span_hi = int(runs[-1, 0] + runs[-1, 1])
            slot = direct[i] if direct is not None else _direct_slot(pr, piece, reads, item)
            if slot is not None:
                b, start, want = slot
                dst = flat[b]
                if dst is None:
                    dst = flat[b] = out[b].reshape(-1).view(np.uint8)
                buf = dst[start : start + want]
                if not bounce or want < MISALIGNED_MIN_BYTES or not kernel_copy_misaligned(buf.ctypes.data, span_lo):
                    tail = np.empty(CRC_BYTES, dtype=np.uint8) if pr.whole and piece.crc32c_at is not None else None
                    views = [buf] if tail is None else [buf, tail]
                    preadv_all(fd, views, span_lo, span_hi - span_lo, name, file, tpath)
                    if tail is not None and verify:
                        _check_crc(buf, tail, name, file, tpath)
                    continue
                # else through a buffer at the file's phase and a copy out: faster than the kernel's
                # misaligned copy straight in (COPY_ALIGN)
            elif not (verify and piece.crc32c_at is not None) and scatter_read(
                fd, pr, piece, reads, out, item, where, bases, reuse=reuse if bounce else None
            ):
                continue  # each part straight into its block (checksums, if any, unchecked: verify=False)
            if slabbed(pr, piece, item):
                read_whole_in_slabs(fd, pr, piece, reads.boxes, out, dtype, scratch, verify, where)
                continue
            _read_buffered(fd, pr, piece, reads, out, dtype, phased(scratch, span_hi - span_lo, span_lo), verify, where)
    finally:
        if own:
            for fd in opened.values():
                os.close(fd)


def _read_buffered(
    fd: int,
    pr: PieceReads,
    piece: StoredPiece,
    reads: TensorReads,
    out: Sequence[np.ndarray[Any, Any]],
    dtype: np.dtype[Any],
    buf: np.ndarray[Any, Any],
    verify: bool,
    where: tuple[str, str, str],
) -> None:
    """Read piece ``pr``'s runs into ``buf`` (a reused buffer at the file's phase, as long as the
    runs' span: one per thread, so no page faults after the first piece), check the piece's
    checksum where it was read whole (or whole but for an edge chunk's padding), then copy each of
    its parts into ``out``.

    Raises:
        CheckpointError: a short read; a checksum mismatch (``where``: checkpoint, file, tensor).
    """
    name, file, tpath = where
    runs = pr.runs
    span_lo = int(runs[0, 0])
    item = dtype.itemsize
    if pr.zero_padded and verify:
        buf[...] = 0  # the padding, which is not read, as the writer wrote it
    for off, length in runs.tolist():
        _pread_into(fd, buf[off - span_lo : off - span_lo + length], off, name, file, tpath)
    nbytes = math.prod(piece.shape) * item
    if (pr.whole or pr.zero_padded) and piece.crc32c_at is not None and verify:
        data = buf[piece.offset - span_lo : piece.offset - span_lo + nbytes]
        crc = buf[piece.crc32c_at - span_lo : piece.crc32c_at - span_lo + CRC_BYTES]
        stored = int.from_bytes(bytes(crc), "little")
        matches = crc32c(data) == stored
        legacy = LEGACY_PADDING.get(reads.tensor.dtype) if pr.zero_padded else None
        if not matches and legacy is not None:
            # an edge chunk padded as an earlier writer padded this dtype: check it so
            buf[...] = legacy
            for off, length in runs.tolist():
                _pread_into(fd, buf[off - span_lo : off - span_lo + length], off, name, file, tpath)
            matches = crc32c(data) == stored
        if not matches:
            raise crc_mismatch(name, file, tpath)
    strides = strides_of(piece.shape, item)
    # per-axis arithmetic through map (in C): this runs per piece on the reader threads, whose
    # Python time holds the GIL the other readers need (see _slabs._copy_plans)
    for b, a, z in pr.copies:
        first = piece.offset - span_lo + sum(map(mul, map(sub, a, piece.start), strides))
        src = np.ndarray(tuple(map(sub, z, a)), dtype=dtype, buffer=buf, offset=first, strides=strides)
        box_off = reads.boxes[b][0]
        # the Ellipsis keeps a 0-d destination an array, not a scalar
        cut: tuple[Any, ...] = (*map(slice, map(sub, a, box_off), map(sub, z, box_off)), Ellipsis)
        dst = out[b][cut]
        np.copyto(dst, src, casting="no")


def _joined(node: str, file: str) -> str:
    if not node:
        return file
    return node + "/" + (file[2:] if file.startswith("./") else file)


def direct_slots(reads: TensorReads) -> tuple[tuple[int, int, int] | None, ...]:
    """Per piece of ``reads.pieces``: ``(box, byte offset in it, bytes)`` when the piece's one run
    lands on a contiguous part of that box (it is then read straight into it), else ``None``."""
    item = reads.tensor.itemsize
    return tuple(_direct_slot(pr, reads.tensor.pieces[pr.piece], reads, item) for pr in reads.pieces)


def _direct_slot(pr: PieceReads, piece: StoredPiece, reads: TensorReads, item: int) -> tuple[int, int, int] | None:
    """``(box, byte offset, bytes)`` of the destination when one contiguous run lands on a contiguous part of it."""
    data_runs = pr.runs
    if len(pr.copies) != 1 or len(data_runs) != 1:
        return None
    b, a, z = pr.copies[0]
    want = math.prod(e - s for s, e in zip(a, z, strict=True)) * item
    # the runs must be a single range of exactly the needed bytes (plus an adjacent checksum)
    total = int(data_runs[:, 1].sum())
    extra = CRC_BYTES if pr.whole and piece.crc32c_at is not None else 0
    if len(data_runs) != 1 or total != want + extra:
        return None
    if extra and piece.crc32c_at != piece.offset + want:
        return None
    box_off, box_sizes = reads.boxes[b]
    sizes = tuple(e - s for s, e in zip(a, z, strict=True))
    rel = tuple(s - o for s, o in zip(a, box_off, strict=True))
    # contiguous in the destination: after the first axis that is not 1, all axes are whole
    rank = len(sizes)
    k = 0
    while k < rank and sizes[k] == 1:
        k += 1
    if any(sizes[d] != box_sizes[d] for d in range(k + 1, rank)):
        return None
    start = sum(r * s for r, s in zip(rel, strides_of(box_sizes, item), strict=True))
    return b, start, want


def _open(root: str, file: str, opened: dict[str, int], name: str, tensor: str) -> int:
    fd = opened.get(file)
    if fd is None:
        full = file if os.path.isabs(file) else os.path.join(root, file)
        try:
            fd = os.open(full, os.O_RDONLY)
        except OSError as exc:
            raise CheckpointError(
                f"Checkpoint {name}: tensor {tensor!r}: file {file!r} cannot be opened ({exc.strerror}); "
                "the checkpoint is incomplete or damaged.",
                path=name,
                file=file,
                tensor=tensor,
            ) from exc
        opened[file] = fd
    return fd


def _pread_into(fd: int, view: np.ndarray[Any, Any], offset: int, name: str, file: str, tensor: str) -> None:
    preadv_all(fd, [view], offset, view.nbytes, name, file, tensor)


def _check_crc(data: np.ndarray[Any, Any], crc: np.ndarray[Any, Any], name: str, file: str, tensor: str) -> None:
    stored = int.from_bytes(bytes(crc), "little")
    if crc32c(data) != stored:
        raise crc_mismatch(name, file, tensor)
