"""``transfer.plan``: which rectangle goes from which rank to which, at the floor (``docs/design.md#moving-weights-between-jobs``).

For every receiver tensor, every receiving rank needs the distinct blocks its devices hold
under the target layout (``N_r``). Through its :class:`~layoutcore.transfer._routes.Route` each
needed block maps onto regions of sender tensors; there, the sender's distinct blocks are
disjoint and cover the tensor, so intersecting the needed region with the sender's block grid
(:func:`layoutcore._relayout_plan._pieces`, chunk arithmetic on :mod:`layoutcore.geometry`)
gives pieces that cover ``N_r`` exactly once. A piece whose block one of ``r``'s own sender
devices holds is copied locally; every other piece crosses the wire once, so
``wire_bytes == floor_bytes == Σ_r |N_r \\ H_r|·itemsize``.

Tensors of one *geometry* (shapes, layouts, meshes, rank maps and route equal; paths aside) have
the same pieces, so each geometry is computed once per replica rotation and shared: a model of
10 000 tensors has a few dozen geometries. Among a block's replicas, a piece goes to the holder
that has sent least within its tensor, the tensor's rotation breaks ties, and tensors (largest
first) take the rotation that keeps the largest egress lowest so far.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any, NamedTuple

import numpy as np

from .. import geometry
from .._devices import canonical_device
from .._errors import TransferError
from .._relayout_plan import _pieces
from .._tensor_spec import Box, TensorSpec
from ._routes import PER_SEGMENT, Route, routes

__all__ = ["Piece", "TransferPlan", "plan"]

_CACHE: dict[Any, TransferPlan] = {}
_CACHE_SIZE = 8


class Piece(NamedTuple):
    """One rectangle moved from one rank to another (or copied locally when the ranks are equal).

    Boxes are ``(offsets, sizes)``, one int per tensor axis, in the global coordinates of the
    sender tensor and of the receiver tensor (for a ``"per_segment"`` fuse: the receiver tensor
    as its devices hold it, device block after device block).
    """

    source_rank: int
    target_rank: int
    sender_path: str
    sender_box: Box
    receiver_path: str
    receiver_box: Box


# A geometry's piece: (src rank, dst rank, index of the route's sender, sender box, receiver box, bytes).
_Raw = tuple[int, int, int, Box, Box, int]


@dataclass(slots=True)
class _Geometry:
    pieces: list[_Raw]
    recv: dict[int, int]  # bytes each rank receives over the wire
    sent: dict[int, int]  # bytes each rank sends over the wire
    by_rank: dict[int, list[int]]  # indices of the pieces a rank sends or receives (local ones once)
    max_holders: int  # the most replicas a wire piece could come from (1: nothing to choose)
    local: int = 0  # bytes copied locally
    sent_vec: Any = None  # ``sent`` as a NumPy vector over the plan's ranks (for balancing)


@dataclass(frozen=True, eq=False)
class TransferPlan:
    """The exact data movement of one transfer (see :func:`plan`).

    Attributes:
        routes: per receiver path, the sender paths and how they are joined.
        floor_bytes: ``Σ_r |N_r \\ H_r|·itemsize`` over receiving ranks ``r`` (bytes).
        floor_per_rank: receiving rank -> its share of ``floor_bytes``.
        wire_bytes: bytes of the pieces between distinct ranks; equals ``floor_bytes``.
        local_bytes: bytes of the pieces a rank copies from its own sender components.
        per_rank: rank -> ``(bytes sent, bytes received)`` over the wire, for every rank of both sets.
        source_ranks, target_ranks: the ranks of each side, ascending.
        itemsize: receiver path -> bytes per element.
    """

    routes: tuple[Route, ...]
    floor_bytes: int
    floor_per_rank: dict[int, int]
    wire_bytes: int
    local_bytes: int
    per_rank: dict[int, tuple[int, int]]
    source_ranks: tuple[int, ...]
    target_ranks: tuple[int, ...]
    itemsize: dict[str, int]
    _geometries: tuple[_Geometry, ...] = field(repr=False)

    @cached_property
    def pieces(self) -> tuple[Piece, ...]:
        """Every piece, local ones included, receiver path by receiver path (built on first use)."""
        return tuple(piece for i in range(len(self.routes)) for piece in self._expand(i, range(10**18)))

    def _expand(self, i: int, indices: Any) -> Iterator[Piece]:
        route, raw = self.routes[i], self._geometries[i].pieces
        if isinstance(indices, range):
            indices = range(len(raw))
        for j in indices:
            src, dst, k, sbox, rbox, _ = raw[j]
            yield Piece(src, dst, route.senders[k], sbox, route.receiver, rbox)

    def pieces_of(self, rank: int) -> list[Piece]:
        """The pieces ``rank`` sends or receives (local copies included), in :attr:`pieces` order."""
        out: list[Piece] = []
        for i, geo in enumerate(self._geometries):
            indices = geo.by_rank.get(rank)
            if indices:
                out.extend(self._expand(i, indices))
        return out

    def nbytes(self, piece: Piece) -> int:
        """Bytes of ``piece``."""
        return math.prod(piece.receiver_box[1]) * self.itemsize[piece.receiver_path]

    def to_dict(self, *, pieces: bool = False) -> dict[str, Any]:
        """JSON-ready totals (and the pieces when ``pieces=True``)."""
        out: dict[str, Any] = {
            "floor_bytes": self.floor_bytes,
            "wire_bytes": self.wire_bytes,
            "local_bytes": self.local_bytes,
            "floor_per_rank": {str(r): b for r, b in self.floor_per_rank.items()},
            "per_rank": {str(r): list(sr) for r, sr in self.per_rank.items()},
            "tensors": len(self.routes),
        }
        if pieces:
            out["pieces"] = [
                [p.source_rank, p.target_rank, p.sender_path, p.sender_box, p.receiver_path, p.receiver_box]
                for p in self.pieces
            ]
        return out

    def __repr__(self) -> str:
        return (
            f"TransferPlan(tensors={len(self.routes)}, floor_bytes={self.floor_bytes}, wire_bytes={self.wire_bytes}, "
            f"local_bytes={self.local_bytes}, source_ranks={self.source_ranks}, target_ranks={self.target_ranks})"
        )


# -- inputs --------------------------------------------------------------------------------------
def _rank_map(ranks: Any, side: str) -> dict[str, int]:
    if not isinstance(ranks, Mapping):
        raise TransferError(f"{side}_ranks must be a mapping device name -> rank. Received: {ranks!r}")
    out: dict[str, int] = {}
    for device, rank in ranks.items():
        if isinstance(rank, bool) or not isinstance(rank, int) or rank < 0:
            raise TransferError(f"{side}_ranks[{device!r}] must be an int >= 0. Received: {rank!r}")
        try:
            out[canonical_device(device)] = rank
        except Exception as exc:  # a LayoutError naming the device
            raise TransferError(f"{side}_ranks: {exc}") from exc
    return out


def _specs(specs: Any, side: str) -> Mapping[str, TensorSpec]:
    if not isinstance(specs, Mapping) or not all(type(k) is str and type(v) is TensorSpec for k, v in specs.items()):
        raise TransferError(f"{side} must be a mapping path -> TensorSpec. Received: {type(specs).__name__}")
    return specs


class _Side:
    """One side's specs turned into geometry keys: (shape, mesh shape, dim_axes, rank per mesh position)."""

    def __init__(self, ranks: dict[str, int], side: str) -> None:
        self.ranks, self.side = ranks, side
        self._by_layout: dict[Any, tuple[Any, ...]] = {}
        self._order = list(ranks)

    def key(self, path: str, spec: TensorSpec) -> tuple[Any, ...]:
        layout = spec.layout
        known = self._by_layout.get(layout)
        if known is None:
            mesh = spec.mesh
            devices = mesh.devices if mesh.devices is not None else tuple(self._order[: mesh.size])
            missing = [d for d in devices if d not in self.ranks]
            if missing or len(devices) != mesh.size:
                raise TransferError(
                    f"{path!r}: {self.side} device(s) {missing or list(devices)} of {mesh!r} have no rank in "
                    f"{self.side}_ranks, so the elements they hold have no {self.side} process",
                    paths=(path,),
                )
            known = self._by_layout[layout] = (mesh.shape, layout.dim_axes, tuple(self.ranks[d] for d in devices))
        return (spec.shape, *known)


# -- one geometry --------------------------------------------------------------------------------
def _regions(
    route: Route, tkey: tuple[Any, ...], skeys: list[tuple[Any, ...]]
) -> list[list[tuple[int, int, int, int]]]:
    """Per target block index along the route's axis: ``(sender index, lo, hi, shift)`` receiver intervals."""
    shape, mesh_shape, dim_axes, _ = tkey
    axis = route.axis
    lengths = [k[0][axis] if k[0] else 1 for k in skeys]
    n = geometry._num_blocks(mesh_shape, dim_axes[axis]) if shape else 1
    if route.mode != PER_SEGMENT or n == 1:
        out, offset = [], 0
        for k, length in enumerate(lengths):
            out.append((k, offset, offset + length, offset))
            offset += length
        return [out] * n
    per_block = []
    for j in range(n):
        lo, hi = geometry._bounds(shape[axis], n, j)
        regions = []
        for k, length in enumerate(lengths):
            s_lo, s_hi = geometry._bounds(length, n, j)
            regions.append((k, lo, lo + s_hi - s_lo, lo - s_lo))
            lo += s_hi - s_lo
        if lo != hi:
            raise TransferError(
                f"{route.receiver!r}: per_segment fuse of segments {list(route.senders)} (sizes {lengths} along axis "
                f"{axis}) over {n} blocks gives device block {j} {lo - geometry._bounds(shape[axis], n, j)[0]} rows, "
                f"but the receiver layout gives it {hi - geometry._bounds(shape[axis], n, j)[0]}",
                paths=(route.receiver,),
            )
        per_block.append(regions)
    return per_block


def _holders(skey: tuple[Any, ...]) -> tuple[dict[tuple[int, ...], tuple[int, ...]], list[int]]:
    _, mesh_shape, dim_axes, ranks = skey
    holders: dict[tuple[int, ...], set[int]] = {}
    for position, block in enumerate(geometry.device_blocks(mesh_shape, dim_axes)):
        holders.setdefault(block, set()).add(ranks[position])
    counts = [geometry._num_blocks(mesh_shape, axes) for axes in dim_axes]
    return {b: tuple(sorted(r)) for b, r in holders.items()}, counts


def _needed(tkey: tuple[Any, ...]) -> list[tuple[int, tuple[int, ...], tuple[tuple[int, int], ...]]]:
    """``(rank, block, bounds)`` per distinct block of each receiving rank, by rank then mesh order."""
    shape, mesh_shape, dim_axes, ranks = tkey
    counts = [geometry._num_blocks(mesh_shape, axes) for axes in dim_axes]
    seen: set[tuple[int, tuple[int, ...]]] = set()
    out = []
    for position, block in enumerate(geometry.device_blocks(mesh_shape, dim_axes)):
        if (ranks[position], block) not in seen:
            seen.add((ranks[position], block))
            bounds = tuple(geometry._bounds(s, c, b) for s, c, b in zip(shape, counts, block, strict=True))
            out.append((ranks[position], block, bounds))
    out.sort(key=lambda item: item[0])
    return out


def _geometry(route: Route, tkey: tuple[Any, ...], skeys: list[tuple[Any, ...]], itemsize: int, rot: int) -> _Geometry:
    axis, regions = route.axis, _regions(route, tkey, skeys)
    sources = [(_holders(k), k[0]) for k in skeys]
    dim_axes = tkey[2]
    geo = _Geometry([], {}, {}, {}, 1)
    for dst, block, bounds in _needed(tkey):
        for k, lo, hi, shift in regions[block[axis] if dim_axes else 0]:
            sbounds: tuple[tuple[int, int], ...] = ()  # a scalar: one empty box
            if bounds:
                a_lo, a_hi = max(bounds[axis][0], lo), min(bounds[axis][1], hi)
                if a_hi <= a_lo:
                    continue
                sbounds = (*bounds[:axis], (a_lo - shift, a_hi - shift), *bounds[axis + 1 :])
            (holders, counts), sshape = sources[k]
            for sblock, slices, nbytes in _pieces(sbounds, counts, sshape, itemsize):
                src = _choose(holders[sblock], dst, rot, geo)
                offsets = tuple(s.start for s in slices)
                sizes = tuple(s.stop - s.start for s in slices)
                roffsets = (*offsets[:axis], offsets[axis] + shift, *offsets[axis + 1 :]) if offsets else ()
                index = len(geo.pieces)
                geo.pieces.append((src, dst, k, (offsets, sizes), (roffsets, sizes), nbytes))
                geo.by_rank.setdefault(dst, []).append(index)
                if src != dst:
                    geo.by_rank.setdefault(src, []).append(index)
                    geo.recv[dst] = geo.recv.get(dst, 0) + nbytes
                    geo.sent[src] = geo.sent.get(src, 0) + nbytes
                else:
                    geo.local += nbytes
    return geo


def _choose(holders: tuple[int, ...], dst: int, rot: int, geo: _Geometry) -> int:
    """The sending rank of a piece: ``dst`` itself when it holds the block, else the least-loaded holder."""
    if len(holders) == 1:
        return holders[0]
    if dst in holders:
        return dst
    n = len(holders)
    geo.max_holders = max(geo.max_holders, n)
    best = min(range(n), key=lambda i: (geo.sent.get(holders[i], 0), (i - rot) % n))
    return holders[best]


# -- the plan ------------------------------------------------------------------------------------
def plan(
    sources: Mapping[str, TensorSpec],
    targets: Mapping[str, TensorSpec],
    *,
    source_ranks: Mapping[Any, int],
    target_ranks: Mapping[Any, int],
    rename: Any = None,
    fuse: Any = None,
) -> TransferPlan:
    """The exact data movement from sender tensors to receiver tensors laid out differently.

    Pure and framework-free. Each side's device names are a namespace of their own.

    Args:
        sources: sender path -> :class:`~layoutcore.TensorSpec` (global shape, dtype, layout).
        targets: receiver path -> ``TensorSpec``.
        source_ranks, target_ranks: device name -> process rank, one map per side. A spec on an
            abstract mesh takes the first ``mesh.size`` devices of its side's map, in map order.
        rename: a mapping (renames the sender paths it lists, keeps the others) or a callable,
            sender path -> receiver path.
        fuse: receiver path -> ``[sender paths]``, ``(axis, [sender paths])`` or
            ``(axis, [sender paths], "per_segment")`` (sender paths as sent, before rename): the
            receiver tensor is the concatenation of the sender tensors along ``axis`` (default 0),
            laid out by its own layout; with ``"per_segment"`` each segment is laid out by the
            receiver's layout on its own and a device's block is the concatenation of its segment
            blocks (vLLM's ``QKVParallelLinear``: ``[q_t; k_t; v_t]`` on TP rank ``t``).

    Returns:
        A :class:`TransferPlan`. A repeated call with equal specs, rank maps and resolved
        ``rename``/``fuse`` returns the same plan object (cached; equal specs have equal
        :attr:`~layoutcore.TensorSpec.fingerprint`).

    Raises:
        TransferError: listing the paths: a receiver path with no source after rename/fuse, a
            shape or dtype difference (no casting), fused segments that do not add up (or a
            per-segment split that does not give the receiver's device blocks), a needed
            element that no sender holds (a sender device without a rank); a malformed argument.

    Example:
        >>> from layoutcore import Layout, Mesh, TensorSpec
        >>> rows = Layout(("x", None), Mesh((2,), ("x",), ["CPU:0", "CPU:1"]))
        >>> cols = Layout((None, "y"), Mesh((2,), ("y",), ["CPU:0", "CPU:1"]))
        >>> p = plan({"w": TensorSpec((4, 4), "float32", rows)}, {"w": TensorSpec((4, 4), "float32", cols)},
        ...          source_ranks={"CPU:0": 0, "CPU:1": 1}, target_ranks={"CPU:0": 2, "CPU:1": 3})
        >>> p.floor_bytes, p.per_rank[0], p.per_rank[2]
        (64, (32, 0), (0, 32))
    """
    sources, targets = _specs(sources, "sources"), _specs(targets, "targets")
    smap, tmap = _rank_map(source_ranks, "source"), _rank_map(target_ranks, "target")
    quick = _quick_key(sources, targets, smap, tmap, rename, fuse)
    cached = _CACHE.get(quick) if quick is not None else None
    if cached is not None:
        return cached
    resolved = routes(sources, targets, rename, fuse)
    key = (
        tuple((r, targets[r.receiver], tuple(sources[s] for s in r.senders)) for r in resolved),
        tuple(smap.items()),
        tuple(tmap.items()),
    )
    cached = _CACHE.get(key)
    if cached is not None:
        return cached
    result = _build(resolved, sources, targets, smap, tmap)
    for k in (key, quick):
        if k is not None:
            if len(_CACHE) >= _CACHE_SIZE:
                del _CACHE[next(iter(_CACHE))]
            _CACHE[k] = result
    return result


def _quick_key(
    sources: Mapping[str, TensorSpec],
    targets: Mapping[str, TensorSpec],
    smap: dict[str, int],
    tmap: dict[str, int],
    rename: Any,
    fuse: Any,
) -> Any:
    """The call's inputs as a key, before ``rename``/``fuse`` are resolved (a repeated call skips resolving);
    ``None`` when they cannot be keyed (a callable ``rename``: keyed by its resolution instead)."""
    try:
        fuse_key = None if fuse is None else repr(sorted(fuse.items()))
        names = None if rename is None else tuple(sorted(rename.items())) if isinstance(rename, Mapping) else None
    except (AttributeError, TypeError):
        return None
    if rename is not None and names is None:
        return None
    return (
        "inputs",
        tuple(sources.items()),
        tuple(targets.items()),
        tuple(smap.items()),
        tuple(tmap.items()),
        names,
        fuse_key,
    )


def _build(
    resolved: tuple[Route, ...],
    sources: Mapping[str, TensorSpec],
    targets: Mapping[str, TensorSpec],
    smap: dict[str, int],
    tmap: dict[str, int],
) -> TransferPlan:
    sside, tside = _Side(smap, "source"), _Side(tmap, "target")
    keys = []
    for route in resolved:
        target = targets[route.receiver]
        skeys = [sside.key(s, sources[s]) for s in route.senders]
        keys.append((route.axis, route.mode, target.itemsize, tside.key(route.receiver, target), tuple(skeys)))
    source_ranks, target_ranks = tuple(sorted(set(smap.values()))), tuple(sorted(set(tmap.values())))
    everyone = sorted(set(source_ranks) | set(target_ranks))
    index = {r: i for i, r in enumerate(everyone)}
    geometries: dict[Any, _Geometry] = {}
    egress = np.zeros(len(everyone), dtype=np.int64)
    chosen: list[_Geometry | None] = [None] * len(resolved)
    order = sorted(range(len(resolved)), key=lambda i: (-targets[resolved[i].receiver].nbytes, resolved[i].receiver))
    for i in order:
        chosen[i] = _balanced(resolved[i], keys[i], geometries, egress, index)
    geos = tuple(g for g in chosen if g is not None)
    # totals per distinct geometry, times how often it is used
    uses: dict[int, tuple[_Geometry, int]] = {}
    for geo in geos:
        uses[id(geo)] = (geo, uses.get(id(geo), (geo, 0))[1] + 1)
    recv: dict[int, int] = {}
    sent: dict[int, int] = {}
    local = 0
    for geo, n in uses.values():
        for r, b in geo.recv.items():
            recv[r] = recv.get(r, 0) + b * n
        for r, b in geo.sent.items():
            sent[r] = sent.get(r, 0) + b * n
        local += geo.local * n
    return TransferPlan(
        routes=resolved,
        floor_bytes=sum(recv.values()),
        floor_per_rank={r: recv.get(r, 0) for r in target_ranks},
        wire_bytes=sum(sent.values()),
        local_bytes=local,
        per_rank={r: (sent.get(r, 0), recv.get(r, 0)) for r in everyone},
        source_ranks=source_ranks,
        target_ranks=target_ranks,
        itemsize={r.receiver: targets[r.receiver].itemsize for r in resolved},
        _geometries=geos,
    )


def _balanced(
    route: Route, key: tuple[Any, ...], geometries: dict[Any, _Geometry], egress: Any, index: dict[int, int]
) -> _Geometry:
    """The tensor's geometry under the replica rotation that keeps the largest egress lowest; adds its egress."""
    best = _variant(route, key, geometries, 0, index)
    if best.max_holders > 1:
        best_cost = int((egress + best.sent_vec).max())
        for rot in range(1, best.max_holders):
            geo = _variant(route, key, geometries, rot, index)
            cost = int((egress + geo.sent_vec).max())
            if cost < best_cost:
                best, best_cost = geo, cost
    egress += best.sent_vec
    return best


def _variant(
    route: Route, key: tuple[Any, ...], geometries: dict[Any, _Geometry], rot: int, index: dict[int, int]
) -> _Geometry:
    geo = geometries.get((key, rot))
    if geo is None:
        _, _, itemsize, tkey, skeys = key
        geo = geometries[(key, rot)] = _geometry(route, tkey, list(skeys), itemsize, rot)
        geo.sent_vec = np.zeros(len(index), dtype=np.int64)
        for r, b in geo.sent.items():
            geo.sent_vec[index[r]] = b
    return geo
