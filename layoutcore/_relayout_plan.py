"""The exact data movement of a relayout (docs/design.md#seeing-before-running): :func:`relayout_plan` and the transfers the NumPy driver runs.

:func:`relayout_plan` lists the rectangles a relayout must move. Device ``d`` needs its
target block ``B_d`` and holds its source block ``A_d``; the source's distinct blocks are
disjoint and cover the tensor, so ``B_d \\ A_d`` is exactly the union of ``B_d``'s
intersections with the *other* source blocks. One transfer per (destination device, other
source block) is therefore both sufficient and minimal: ``floor_bytes = Σ_d |B_d \\ A_d|·itemsize``.
Pure accounting on :mod:`layoutcore.geometry`; no framework is imported and no data is touched.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from . import geometry
from ._errors import LayoutError
from ._layout import Layout
from ._mesh import Mesh
from ._plan import _axes_json, dtype_name_and_itemsize

__all__ = ["RelayoutPlan", "Transfer", "relayout_plan", "relayout_transfers"]


@dataclass(frozen=True, slots=True)
class Transfer:
    """One rectangle sent from one device to another.

    Attributes:
        src: the sending device's row-major position in the source layout's mesh.
        dst: the receiving device's row-major position in the target layout's mesh.
        index: the rectangle, as one ``slice`` per tensor axis into the global value.
        nbytes: its size in bytes.
    """

    src: int
    dst: int
    index: tuple[slice, ...]
    nbytes: int

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready: ``index`` as ``[start, stop]`` pairs."""
        return {
            "src": self.src,
            "dst": self.dst,
            "index": [[s.start, s.stop] for s in self.index],
            "nbytes": self.nbytes,
        }


@dataclass(frozen=True, slots=True)
class RelayoutPlan:
    """The exact data movement of a relayout (see :func:`relayout_plan`).

    Attributes:
        source, target: the layouts. shape: the global shape. dtype: its name. itemsize: bytes per element.
        transfers: every rectangle sent; each element a device needs and does not hold, once.
        floor_bytes: their total, the physical minimum ``Σ_d |B_d \\ A_d|·itemsize``.
        ingress_bytes: bytes received per target-mesh device, row-major.
        egress_bytes: bytes sent per source-mesh device, row-major.
    """

    source: Layout
    target: Layout
    shape: tuple[int, ...]
    dtype: str
    itemsize: int
    transfers: tuple[Transfer, ...]
    floor_bytes: int
    ingress_bytes: tuple[int, ...]
    egress_bytes: tuple[int, ...]

    @property
    def nbytes(self) -> int:
        """Bytes of the whole (global) value."""
        return math.prod(self.shape) * self.itemsize

    def __repr__(self) -> str:
        return (
            f"RelayoutPlan(source={self.source!r}, target={self.target!r}, shape={self.shape!r}, "
            f"dtype={self.dtype!r}, transfers=<{len(self.transfers)} transfers>, floor_bytes={self.floor_bytes})"
        )

    def to_dict(self, *, transfers: bool = True) -> dict[str, Any]:
        """JSON-ready; ``transfers=False`` leaves the (possibly long) transfer list out."""
        out: dict[str, Any] = {
            "source": {"axes": _axes_json(self.source), "mesh": _mesh_json(self.source.mesh)},
            "target": {"axes": _axes_json(self.target), "mesh": _mesh_json(self.target.mesh)},
            "shape": list(self.shape),
            "dtype": self.dtype,
            "nbytes": self.nbytes,
            "floor_bytes": self.floor_bytes,
            "transfer_count": len(self.transfers),
            "ingress_bytes": list(self.ingress_bytes),
            "egress_bytes": list(self.egress_bytes),
        }
        if transfers:
            out["transfers"] = [t.to_dict() for t in self.transfers]
        return out


def _mesh_json(mesh: Mesh | None) -> dict[str, Any] | None:
    if mesh is None:
        return None
    return {"shape": list(mesh.shape), "axis_names": list(mesh.axis_names), "devices": mesh.devices, "name": mesh.name}


# The slots' own setters (a frozen dataclass' __setattr__ refuses; these do not).
_SET_SRC, _SET_DST, _SET_INDEX, _SET_NBYTES = (getattr(Transfer, f).__set__ for f in ("src", "dst", "index", "nbytes"))


def _transfer(src: int, dst: int, index: tuple[slice, ...], nbytes: int) -> Transfer:
    """``Transfer(src, dst, index, nbytes)`` through its slots directly: an all-gather on 1 024 devices
    builds a million of them, and the frozen dataclass' ``__init__`` costs twice as much."""
    transfer = object.__new__(Transfer)
    _SET_SRC(transfer, src)
    _SET_DST(transfer, dst)
    _SET_INDEX(transfer, index)
    _SET_NBYTES(transfer, nbytes)
    return transfer


def _holder_map(source_devices: Sequence[Any], target_devices: Sequence[Any]) -> list[int | None]:
    """Per target position, the source position of the same device (``None``: it holds nothing)."""
    where = {d: i for i, d in enumerate(source_devices)}
    return [where.get(d) for d in target_devices]


def relayout_transfers(
    source: Layout,
    target: Layout,
    shape: tuple[int, ...],
    itemsize: int,
    source_devices: Sequence[Any],
    target_devices: Sequence[Any],
) -> tuple[list[Transfer], list[int], list[int]]:
    """The transfers of a relayout between two bound layouts: ``(transfers, ingress, egress)``.

    ``source_devices`` and ``target_devices`` name each mesh position's device (any hashable
    names; equal names are the same device). Among a source block's replicas, each transfer is
    sent by the holder that has sent the least so far, which keeps the largest egress low.
    """
    source_mesh, target_mesh = source.mesh, target.mesh
    assert source_mesh is not None and target_mesh is not None
    source_blocks = source.offset_to_shard()
    holders: dict[tuple[int, ...], list[int]] = {}
    for position, block in enumerate(source_blocks):
        holders.setdefault(block, []).append(position)
    local = _holder_map(source_devices, target_devices)
    egress = [0] * source_mesh.size
    ingress = [0] * target_mesh.size
    transfers: list[Transfer] = []
    append = transfers.append
    # Devices with the same target block need the same pieces (minus what each holds): build once.
    source_counts = [source.num_shards(d) for d in range(len(shape))]
    target_counts = [target.num_shards(d) for d in range(len(shape))]
    pieces_of: dict[tuple[int, ...], list[tuple[tuple[int, ...], tuple[slice, ...], int]]] = {}
    for dst, target_block in enumerate(target.offset_to_shard()):
        pieces = pieces_of.get(target_block)
        if pieces is None:
            bounds = tuple(
                geometry._bounds(size, count, b)
                for size, count, b in zip(shape, target_counts, target_block, strict=True)
            )
            pieces = pieces_of[target_block] = _pieces(bounds, source_counts, shape, itemsize)
        holder = local[dst]
        own = None if holder is None else source_blocks[holder]
        received = 0
        for block, index, nbytes in pieces:
            if block == own:
                continue
            candidates = holders[block]
            src = candidates[0] if len(candidates) == 1 else min(candidates, key=egress.__getitem__)
            egress[src] += nbytes
            received += nbytes
            append(_transfer(src, dst, index, nbytes))
        ingress[dst] = received
    return transfers, ingress, egress


def _pieces(
    bounds: tuple[tuple[int, int], ...], source_counts: list[int], shape: tuple[int, ...], itemsize: int
) -> list[tuple[tuple[int, ...], tuple[slice, ...], int]]:
    """``(source block, rectangle, bytes)`` for every non-empty intersection of a target block with a source block.

    Per axis, only the source chunks that overlap the target interval are visited (chunk arithmetic),
    so the work is proportional to the pieces, not to the number of source blocks.
    """
    if any(stop <= start for start, stop in bounds):
        return []  # an empty target block (chunk rule) needs nothing
    blocks: list[list[int]] = []
    slices: list[list[slice]] = []
    sizes: list[list[int]] = []
    for (start, stop), size, count in zip(bounds, shape, source_counts, strict=True):
        chunk = geometry.chunk_size(size, count)
        overlapping = [
            (b, max(start, b * chunk), min(stop, (b + 1) * chunk, size))
            for b in range(start // chunk, min((stop - 1) // chunk + 1, count))
        ]
        overlapping = [piece for piece in overlapping if piece[2] > piece[1]]
        blocks.append([b for b, _, _ in overlapping])
        slices.append([slice(lo, hi) for _, lo, hi in overlapping])
        sizes.append([hi - lo for _, lo, hi in overlapping])
    # Three products in step (C-level iteration): the source block, the rectangle and its bytes.
    nbytes = (itemsize * n for n in map(math.prod, itertools.product(*sizes)))
    return list(zip(itertools.product(*blocks), itertools.product(*slices), nbytes, strict=True))


def _device_names(mesh: Mesh, other: Mesh) -> Sequence[Any]:
    # Devices are matched by name; abstract meshes (either side) by position.
    if mesh.devices is None or other.devices is None:
        return range(mesh.size)
    return mesh.devices


def relayout_plan(source: Layout, target: Layout, shape: Sequence[int], dtype: Any = "float32") -> RelayoutPlan:
    """The exact data movement of relaying a value of ``shape`` out from ``source`` to ``target``.

    The layouts may be on the same mesh or on two meshes: devices are matched by name, and when
    either mesh is abstract, by row-major position. A device of the target mesh that is not in
    the source mesh holds nothing to start with.

    Example:
        >>> mesh = Mesh((4,), ("x",))
        >>> p = relayout_plan(Layout(["x", None], mesh), Layout([None, "x"], mesh), (8, 8))
        >>> p.floor_bytes, p.ingress_bytes    # each device keeps 1/16 and receives 3/16 of 256 B
        (192, (48, 48, 48, 48))

    Raises:
        LayoutError: a layout without a mesh, a shape that does not fit a layout, or an unknown dtype.
    """
    for name, layout in (("source", source), ("target", target)):
        if not isinstance(layout, Layout) or layout.mesh is None:
            raise LayoutError(
                f"relayout_plan: {name} must be a Layout bound to a mesh. Received: {layout!r}", value=layout
            )
    shape_t = source.check_shape(shape)
    target.check_shape(shape_t)
    dtype_name, itemsize = dtype_name_and_itemsize(dtype)
    assert source.mesh is not None and target.mesh is not None
    transfers, ingress, egress = relayout_transfers(
        source,
        target,
        shape_t,
        itemsize,
        _device_names(source.mesh, target.mesh),
        _device_names(target.mesh, source.mesh),
    )
    return RelayoutPlan(
        source,
        target,
        shape_t,
        dtype_name,
        itemsize,
        tuple(transfers),
        sum(ingress),
        tuple(ingress),
        tuple(egress),
    )
