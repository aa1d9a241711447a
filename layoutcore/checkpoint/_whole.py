"""Whole-tensor reads for a driver whose distributed tensors are views of one global array (NumPy).

A driver with ``input_aliasing = "shares"`` keeps each device's block as a view of the value it was
given (``distribute_tensor`` copies nothing). Loading new tensors for it, a tensor whose local
blocks together are the whole tensor (one process holding every device, any layout) is read as
**one** array, C-order, and handed to ``distribute_tensor``: its blocks become views of it, as
``safetensors.numpy.load_file`` + ``distribute_tensor`` makes them, instead of each block being
written separately. The bytes read are the same (the blocks tile the tensor), but a layout that cuts
across the stored order (columns of a row-major safetensors tensor, columns of a checkpoint saved
by rows) is then read in whole stored runs straight into place, not one ``iovec`` or one strided
copy per row part, and a format that decodes chunks (Orbax) copies each chunk once, contiguously.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import Any

import numpy as np

from .._dtypes import numpy_dtype
from ..driver._host_memory import ALIGN
from ._planner import Geometry, TensorLoad
from ._read_plan import TensorReads, direct_slots, plan_tensor

__all__ = ["whole_tensor_reads"]


def _whole(geo: Geometry, shape: tuple[int, ...]) -> Geometry | None:
    """``geo`` read as one box, the whole tensor, where its distinct blocks tile the tensor (else ``None``).

    Distinct blocks of a layout are disjoint, so they tile the tensor when their volumes add up to it.
    """
    total = math.prod(shape)
    if len(geo.boxes) < 2 or not total or sum(math.prod(s) for _, s in geo.boxes) != total:
        return None
    box = ((0,) * len(shape), tuple(shape))
    reads = None if geo.reads is None else plan_tensor(geo.reads.tensor, [box])
    direct = None if reads is None else direct_slots(reads)
    phase = 0 if reads is None or direct is None else _phase(reads, direct)
    return replace(geo, boxes=(box,), box_of=(0,) * len(geo.box_of), reads=reads, direct=direct, phase=phase)


def _phase(reads: TensorReads, direct: Sequence[tuple[int, int, int] | None]) -> int:
    """The phase (bytes past a 64-byte boundary) at which the whole tensor's block makes every
    direct read's destination congruent to its file offset, or 0 where the reads disagree.

    The block goes to NumPy, which needs no alignment; a read whose destination is misaligned to
    its file offset ran 1.47x slower (``_slabs.COPY_ALIGN``), and a safetensors tensor starts
    wherever its header ends.
    """
    phases = {(int(pr.runs[0, 0]) - slot[1]) % ALIGN for pr, slot in zip(reads.pieces, direct, strict=True) if slot}
    if len(phases) != 1 or None in direct:
        return 0
    phase = phases.pop()
    return phase if phase % numpy_dtype(reads.tensor.dtype).alignment == 0 else 0


def whole_tensor_reads(
    plans: Sequence[TensorLoad], driver: Any, pack: Callable[[Any, TensorLoad, list[np.ndarray]], Any]
) -> tuple[list[TensorLoad], Callable[[Any, TensorLoad, list[np.ndarray]], Any]]:
    """``plans`` with each tensor whose blocks tile it read whole, and the pack that hands it over.

    For a ``driver`` without ``input_aliasing = "shares"`` the plans and ``pack`` come back unchanged.
    The returned pack gives a whole-read tensor to ``driver.distribute_tensor`` (blocks: views of
    it) and every other tensor to ``pack``.
    """
    if getattr(driver, "input_aliasing", "snapshot") != "shares":
        return list(plans), pack
    merged: dict[int, Geometry | None] = {}  # by id of the planner's geometry: tensors alike share one
    whole: set[str] = set()
    out = []
    for tl in plans:
        geo = tl.geometry
        if id(geo) not in merged:
            merged[id(geo)] = _whole(geo, tl.saved.shape)
        new = merged[id(geo)]
        if new is None:
            out.append(tl)
            continue
        whole.add(tl.path)
        out.append(replace(tl, geometry=new))

    def pack_whole(drv: Any, tl: TensorLoad, blocks: list[np.ndarray]) -> Any:
        if tl.path in whole:
            return drv.distribute_tensor(blocks[0], tl.layout)
        return pack(drv, tl, blocks)

    return out, pack_whole
