"""Box records (torch DCP ``ChunkStorageMetadata``, serving manifests) <-> layoutcore layouts.

A box record lists, per stored block, ``(offsets, sizes)`` into the global tensor and nothing
else: no mesh, no device order, no chunk rule. :func:`layout_from_boxes` finds the smallest
layout with exactly those blocks (one abstract mesh axis ``d<i>`` per split tensor axis), or
``None`` where no layout has them (irregular blocks); :func:`dcp_chunks` goes the other way.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from ... import geometry
from ..._capabilities import Limitation
from ..._errors import UnsupportedLayoutError
from ..._layout import Layout
from ..._mesh import Mesh
from ..._tensor_spec import TensorSpec
from ._model import Box

__all__ = ["dcp_chunks", "layout_from_boxes", "spec_from_boxes"]


def layout_from_boxes(shape: Sequence[int], boxes: Sequence[Box]) -> Layout | None:
    """The layout on an abstract mesh whose distinct blocks are exactly ``boxes`` (empty ones aside).

    Each tensor axis cut into ``n > 1`` intervals by the boxes gets mesh axis ``d<axis>`` of
    size ``n``, and the intervals must be the chunk rule's ``n`` blocks; the boxes must be the
    full product of the per-axis intervals, each once. One unsplit box gives a replicated
    layout on a one-device mesh ``("d",)``. Which device held which block is not recorded, so
    the mesh is abstract and row-major.

    Returns:
        The layout, or ``None`` when the boxes are not the blocks of any layout.
    """
    shape = tuple(shape)
    rank = len(shape)
    stored = {(tuple(o), tuple(s)) for o, s in boxes if math.prod(s) or rank == 0}
    cuts: list[list[tuple[int, int]]] = []
    for d in range(rank):
        intervals = sorted({(o[d], s[d]) for o, s in stored})
        n = len(intervals)
        expected = [(start, size) for start, size in _chunk_intervals(shape[d], n) if size]
        if intervals != expected:
            return None
        cuts.append(intervals)
    if len(stored) != math.prod(len(c) for c in cuts):
        return None
    for o, s in stored:
        for d in range(rank):
            if (o[d], s[d]) not in cuts[d]:
                return None
    split = [d for d in range(rank) if len(cuts[d]) > 1]
    if not split:
        return Layout((None,) * rank, Mesh((1,), ("d",)))
    mesh = Mesh(tuple(len(cuts[d]) for d in split), tuple(f"d{d}" for d in split))
    return Layout(tuple(f"d{d}" if d in split else None for d in range(rank)), mesh)


def spec_from_boxes(shape: Sequence[int], dtype: Any, boxes: Sequence[Box]) -> TensorSpec:
    """The :class:`TensorSpec` of a box record (DCP ``ChunkStorageMetadata``), via :func:`layout_from_boxes`.

    Raises:
        UnsupportedLayoutError: boxes that are the blocks of no layout (irregular sizes, not a
            grid, overlaps or holes), ``feature=Limitation.PLACEMENT``, naming them.
    """
    layout = layout_from_boxes(shape, boxes)
    if layout is None:
        raise UnsupportedLayoutError(
            f"the boxes {list(boxes)[:6]} of a tensor of shape {tuple(shape)} are the blocks of no layout (each "
            "axis must be cut by the chunk rule and the boxes must be the full grid of those cuts)",
            driver="torch",
            feature=Limitation.PLACEMENT,
            value=list(boxes),
        )
    return TensorSpec(tuple(shape), dtype, layout)


def _chunk_intervals(dim: int, n: int) -> list[tuple[int, int]]:
    out = []
    for i in range(n):
        lo, hi = geometry.chunk_bounds(dim, n, i)
        out.append((lo, hi - lo))
    return out


def dcp_chunks(shape: Sequence[int], layout: Layout) -> list[Box]:
    """The DCP ``ChunkStorageMetadata`` boxes a tensor of ``shape`` under ``layout`` is saved as.

    One box per distinct non-empty block, in the row-major order of the first device holding
    it: what ``torch.distributed.checkpoint`` records for a DTensor of that layout (replicas
    are saved once; empty blocks are not saved).
    """
    shape = tuple(shape)
    seen: dict[Box, None] = {}
    for slices in layout.device_slices(shape):
        bounds = [s.indices(d)[:2] for s, d in zip(slices, shape, strict=True)]
        box = (tuple(lo for lo, _ in bounds), tuple(hi - lo for lo, hi in bounds))
        if math.prod(box[1]) or not shape:
            seen.setdefault(box, None)
    return list(seen)
