"""The one threaded reader: fills each planned tensor's host blocks on worker threads, for every format.

Byte formats (layoutcore's zarr shards, safetensors, torch DCP) go through the read core
(:func:`~._read_plan.read_boxes`: exact byte runs, whole pieces read in slabs and copied out,
checksums where the format has them); formats that decode chunks (Orbax) through their source's
:meth:`~._source.Source.decode`. Blocks are handed to the caller as the loader's own memory, one
array per distinct block (replicas are the same object): the caller hands them over to the driver
(:func:`layoutcore.driver._fill.pack_owned` / :func:`~layoutcore.driver._fill.fill`).
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import numpy as np

from .._dtypes import numpy_dtype
from ..driver._host_memory import ALIGN, aligned_empty
from . import _threads
from ._planner import Stored, TensorLoad
from ._read_plan import TensorReads, read_boxes
from ._scatter import begin_reuse
from ._threads import ThreadWork

__all__ = ["INLINE_BYTES", "TASK_BYTES", "Readers"]

#: A tensor reading fewer bytes is read on the calling thread.
INLINE_BYTES = 1 << 20
#: Bytes of stored pieces one reader task reads, at least (a large tensor is read as several tasks).
TASK_BYTES = 16 << 20


def _blocks(dtype: Any, shapes: list[tuple[int, ...]]) -> list[np.ndarray[Any, Any]]:
    """One allocation for a tensor's blocks, each a disjoint C-contiguous view of it.

    For a tensor whose chunks are copied out in slabs (a layout cutting across the saved blocks):
    the strided copies into fresh pages ran 0.57-0.63 of ``np.fromfile``'s throughput into one
    allocation per block and 0.72-0.82 into one allocation per tensor (512 MiB, interleaved; the
    big allocation's pages are huge-page aligned). Where every chunk is read straight into its
    block, one allocation per block measured as fast or faster, and each block owns its memory.
    """
    item = np.dtype(dtype).itemsize
    sizes = [(math.prod(s) * item + ALIGN - 1) // ALIGN * ALIGN for s in shapes]  # each block starts 64-byte aligned
    flat = aligned_empty((sum(sizes),))
    out, at = [], 0
    for shape, n in zip(shapes, sizes, strict=True):
        out.append(flat[at : at + math.prod(shape) * item].view(dtype).reshape(shape))
        at += n
    return out


class Readers(ThreadWork):
    """Reader threads that fill each tensor's host blocks, handing the tensors back in order.

    Tensors are read ahead of the caller while they fit in :data:`_threads.AHEAD_BYTES`, and the caller
    packs them (on its own thread: drivers are not asked to be thread-safe), so host memory in
    flight beyond the tensor being handed over stays bounded. A large tensor is split into several
    tasks over disjoint sets of its stored pieces. Each thread keeps its own descriptors and read
    buffer (peak: one slab or stored piece per thread); :meth:`close` closes them all.
    """

    def __init__(self, source: Stored, verify: bool, threads: int) -> None:
        super().__init__(threads, "layoutcore-load")
        self.source, self.verify = source, verify
        self._reuse: int | None = None  # the load's number (_scatter.begin_reuse) when it reads into kept memory

    def _fill(self, tl: TensorLoad, outs: list[np.ndarray[Any, Any]], pieces: range | None, bounce: bool) -> None:
        reads = tl.geometry.reads
        if reads is None:
            self.source.decode(tl.path, tl.geometry.boxes, outs)
            return
        fds, scratch = self.state()
        read_boxes(
            self.source.root,
            reads,
            outs,
            checkpoint=self.source.path,
            fds=fds,
            tensor_path=tl.path,
            node=tl.node,
            scratch=scratch,
            verify=self.verify,
            direct=tl.geometry.direct,
            pieces=pieces,
            bounce=bounce,
            reuse=self._reuse,
        )

    def _start(self, tl: TensorLoad, given: Any = None) -> tuple[TensorLoad, list[np.ndarray[Any, Any]], list[Any]]:
        dtype = numpy_dtype(tl.saved.dtype)
        geo = tl.geometry
        shapes = [sizes for _, sizes in geo.boxes]
        if given is not None:
            outs = given  # the destination's own host memory (checkpoint._staging.host_views)
        elif geo.direct is not None and None not in geo.direct:
            outs = [  # each chunk read straight into its block
                aligned_empty(sizes, dtype, phase=geo.phase) for sizes in shapes
            ]
        else:
            outs = _blocks(dtype, shapes)
        if self.pool is None or geo.read_bytes < INLINE_BYTES:  # a thread hop costs more
            self._fill(tl, outs, None, given is not None)
            return tl, outs, []
        parts = [None] if geo.reads is None else _piece_parts(geo.reads, self.threads)
        return tl, outs, [self.pool.submit(self._fill, tl, outs, part, given is not None) for part in parts]

    def read(
        self, plans: Sequence[TensorLoad], dest: Callable[[TensorLoad], Any] | None = None
    ) -> Iterable[tuple[TensorLoad, list[np.ndarray[Any, Any]]]]:
        """Yield ``(tensor, its blocks per local position)`` for each of ``plans``, in order.

        The blocks are handed over: one array per distinct block, a replica's entry is the same
        object, and the reader keeps no reference to them. ``dest(tensor)``, when given, may
        return the arrays to fill per distinct block (the destination's own memory) instead of
        new ones; it is called as the tensor's reads start.

        Raises:
            CheckpointError: as :func:`read_boxes` (or the source's decode); the first error in plan
                order, after which no further tensor is handed back.
        """
        if dest is not None:
            self._reuse = begin_reuse()
        ahead: deque[tuple[TensorLoad, list[np.ndarray[Any, Any]], list[Any], int]] = deque()
        nxt, beyond = 0, 0  # beyond: host bytes of ahead[1:], the tensors read ahead of the caller
        while ahead or nxt < len(plans):
            while nxt < len(plans):
                size = plans[nxt].host_bytes
                if ahead and beyond + size > _threads.AHEAD_BYTES:
                    break
                beyond += size if ahead else 0
                ahead.append((*self._start(plans[nxt], None if dest is None else dest(plans[nxt])), size))
                nxt += 1
            tl, outs, futures, _ = ahead.popleft()
            beyond -= ahead[0][3] if ahead else 0
            for f in futures:
                f.result()  # re-raises a reader's CheckpointError here
            yield tl, [outs[b] for b in tl.geometry.box_of]


def _piece_parts(reads: TensorReads, threads: int) -> list[range]:
    """The tensor's stored pieces split into runs of about :data:`TASK_BYTES` read bytes each.

    Pieces fill disjoint parts of the destination blocks (each element is read from one piece),
    so the runs can be read concurrently.
    """
    n = len(reads.pieces)
    if threads <= 1 or n <= 1 or reads.read_bytes <= TASK_BYTES:
        return [range(n)]
    parts, start, acc = [], 0, 0
    for i, pr in enumerate(reads.pieces):
        acc += int(pr.runs[:, 1].sum())
        if acc >= TASK_BYTES:
            parts.append(range(start, i + 1))
            start, acc = i + 1, 0
    if start < n:
        parts.append(range(start, n))
    return parts
