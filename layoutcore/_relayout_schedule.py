"""Who keeps, sends and receives which rectangle of a relayout, and in which rounds: :func:`relayout_schedule`.

A :class:`~layoutcore.RelayoutPlan` lists the rectangles a relayout must move, between mesh
positions. A driver runs them between devices: the schedule names the participating devices
(every device of either mesh, once), puts each rectangle in the sender's source-block and the
receiver's target-block coordinates, adds what each device keeps of its own source block for its
target block (a piece it "sends to itself", which moves nothing), and, where asked, splits the
pieces into the fewest rounds in which every device sends at most one and receives at most one
piece of one shape (a bipartite edge colouring). Pure functions on plain ints and slices: no
framework is imported and no data is touched. The JAX driver runs the rounds as ``ppermute``
steps; the torch driver runs the pieces as one ``all_to_all_single``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from ._relayout_plan import RelayoutPlan

__all__ = ["Piece", "RelayoutSchedule", "relayout_schedule"]


@dataclass(frozen=True, slots=True)
class Piece:
    """One rectangle from a sender's source block to a receiver's target block.

    Attributes:
        sender, receiver: participant indexes (equal: the device keeps the rectangle; nothing moves).
        source_at: the rectangle as slices into the sender's source block.
        target_at: the rectangle as slices into the receiver's target block.
    """

    sender: int
    receiver: int
    source_at: tuple[slice, ...]
    target_at: tuple[slice, ...]

    @property
    def shape(self) -> tuple[int, ...]:
        """The rectangle's shape (elements per tensor axis)."""
        return tuple(s.stop - s.start for s in self.source_at)


@dataclass(frozen=True, slots=True)
class RelayoutSchedule:
    """A :class:`~layoutcore.RelayoutPlan` arranged between devices (see :func:`relayout_schedule`).

    Attributes:
        plan: the plan it arranges.
        participants: the devices taking part (names of either mesh, each once), in the order given.
        source_of: per participant, its source mesh position (``None``: it holds nothing).
        target_of: per participant, its target mesh position (``None``: it receives nothing).
        keeps: per participant, the piece it keeps of its own block (``None``: none).
        pieces: what moves between devices: every transfer of the plan, in plan order.
        source_shapes, target_shapes: per source / target mesh position, its block's shape.
        rounds: with ``rounds=True``, the keeps and pieces split into rounds (tuples of ``Piece``) in
            which all pieces have one shape and every participant sends at most one and receives at
            most one; as many rounds per shape as its busiest participant has pieces. Else ``()``.
    """

    plan: RelayoutPlan
    participants: tuple[Any, ...]
    source_of: tuple[int | None, ...]
    target_of: tuple[int | None, ...]
    keeps: tuple[Piece | None, ...]
    pieces: tuple[Piece, ...]
    source_shapes: tuple[tuple[int, ...], ...]
    target_shapes: tuple[tuple[int, ...], ...]
    rounds: tuple[tuple[Piece, ...], ...]

    @property
    def floor_bytes(self) -> int:
        """Bytes moved between devices: the plan's floor."""
        return self.plan.floor_bytes


def _explicit(blocks: list[tuple[slice, ...]], shape: tuple[int, ...]) -> list[tuple[slice, ...]]:
    """Blocks with explicit starts and stops (``device_slices`` writes ``slice(None)`` for a whole axis)."""
    return [tuple(slice(*s.indices(n)[:2]) for s, n in zip(block, shape, strict=True)) for block in blocks]


def _shift(index: Sequence[slice], block: Sequence[slice]) -> tuple[slice, ...]:
    """A global rectangle as slices into ``block`` (the global slices of a block)."""
    return tuple(slice(i.start - b.start, i.stop - b.start) for i, b in zip(index, block, strict=True))


def _devices(plan: RelayoutPlan) -> tuple[Sequence[Any], Sequence[Any]]:
    source, target = plan.source.mesh, plan.target.mesh
    assert source is not None and target is not None
    if source.devices is None or target.devices is None:  # abstract: devices are positions, as in the plan
        return range(source.size), range(target.size)
    return source.devices, target.devices


def relayout_schedule(
    plan: RelayoutPlan, participants: Sequence[Any] | None = None, *, rounds: bool = False
) -> RelayoutSchedule:
    """``plan`` arranged between devices: what each keeps, sends and receives, and (``rounds=True``) when.

    Args:
        plan: a :func:`~layoutcore.relayout_plan`.
        participants: every device of either mesh once, in the order the driver's collective uses;
            default: the source mesh's devices, then the target mesh's others (positions where a
            mesh is abstract).
        rounds: also split the keeps and pieces into rounds (:attr:`RelayoutSchedule.rounds`).

    Raises:
        ValueError: ``participants`` misses a device of either mesh.
    """
    source_devices, target_devices = _devices(plan)
    names = tuple(dict.fromkeys((*source_devices, *target_devices)) if participants is None else participants)
    where = {d: i for i, d in enumerate(names)}
    missing = [d for d in (*source_devices, *target_devices) if d not in where]
    if missing:
        raise ValueError(f"relayout_schedule: participants {names!r} miss devices {missing!r}")
    shape = plan.shape
    source_blocks = _explicit(plan.source.device_slices(shape), shape)
    target_blocks = _explicit(plan.target.device_slices(shape), shape)
    source_of: list[int | None] = [None] * len(names)
    target_of: list[int | None] = [None] * len(names)
    for p, d in enumerate(source_devices):
        source_of[where[d]] = p
    for q, d in enumerate(target_devices):
        target_of[where[d]] = q
    keeps = [_keep(i, source_of[i], target_of[i], source_blocks, target_blocks) for i in range(len(names))]
    pieces = tuple(
        Piece(
            where[source_devices[t.src]],
            where[target_devices[t.dst]],
            _shift(t.index, source_blocks[t.src]),
            _shift(t.index, target_blocks[t.dst]),
        )
        for t in plan.transfers
    )
    by_shape: dict[tuple[int, ...], list[Piece]] = {}
    if rounds:
        for piece in (*(k for k in keeps if k is not None), *pieces):
            by_shape.setdefault(piece.shape, []).append(piece)
    return RelayoutSchedule(
        plan,
        names,
        tuple(source_of),
        tuple(target_of),
        tuple(keeps),
        pieces,
        tuple(tuple(s.stop - s.start for s in block) for block in source_blocks),
        tuple(tuple(s.stop - s.start for s in block) for block in target_blocks),
        tuple(tuple(r) for group in by_shape.values() for r in matchings(group)),
    )


def _keep(
    i: int,
    held: int | None,
    wanted: int | None,
    source_blocks: list[tuple[slice, ...]],
    target_blocks: list[tuple[slice, ...]],
) -> Piece | None:
    """What participant ``i`` keeps of source block ``held`` for target block ``wanted``."""
    if held is None or wanted is None:
        return None
    a, b = source_blocks[held], target_blocks[wanted]
    overlap = tuple(slice(max(x.start, y.start), min(x.stop, y.stop)) for x, y in zip(a, b, strict=True))
    if any(s.stop <= s.start for s in overlap):
        return None
    return Piece(i, i, _shift(overlap, a), _shift(overlap, b))


def matchings(items: Sequence[Piece]) -> list[list[Piece]]:
    """Split ``items`` into the fewest rounds in which each sender sends and each receiver receives at
    most once: as many as the busiest device has items (König's edge colouring).

    The bipartite multigraph senders -> receivers is padded to a regular one with placeholder
    edges, and a perfect matching (Kuhn's augmenting paths) is peeled off per round; placeholders
    are dropped. Where every device sends and receives the same number of items (the usual even
    relayout, with what a device keeps counted as a send to itself), every device takes part in
    every round.
    """
    if not items:
        return []
    senders = sorted({p.sender for p in items})
    receivers = sorted({p.receiver for p in items})
    left = {d: i for i, d in enumerate(senders)}
    right = {d: i for i, d in enumerate(receivers)}
    n = max(len(senders), len(receivers))
    out_deg, in_deg = [0] * n, [0] * n
    # edges[l][r] = list of item indexes (None: a placeholder)
    edges: list[dict[int, list[int | None]]] = [{} for _ in range(n)]
    for k, p in enumerate(items):
        i, j = left[p.sender], right[p.receiver]
        edges[i].setdefault(j, []).append(k)
        out_deg[i] += 1
        in_deg[j] += 1
    degree = max(max(out_deg), max(in_deg))
    short_right = [j for j in range(n) for _ in range(degree - in_deg[j])]
    at = 0
    for i in range(n):
        for _ in range(degree - out_deg[i]):
            edges[i].setdefault(short_right[at], []).append(None)
            at += 1
    rounds = []
    for _ in range(degree):
        match_of_right: list[int | None] = [None] * n
        for i in range(n):
            _augment(i, edges, match_of_right, [False] * n)
        members = []
        for j, owner in enumerate(match_of_right):
            assert owner is not None  # a regular bipartite multigraph has a perfect matching (Hall)
            item = edges[owner][j].pop()
            if not edges[owner][j]:
                del edges[owner][j]
            if item is not None:
                members.append(items[item])
        rounds.append(members)
    return rounds


def _augment(
    i: int, edges: list[dict[int, list[int | None]]], match_of_right: list[int | None], seen: list[bool]
) -> bool:
    """Kuhn's step: match left vertex ``i``, re-matching others along an augmenting path."""
    stack = [(i, iter(edges[i]))]
    path: list[tuple[int, int]] = []  # (left, right) edges of the path so far
    while stack:
        node, rights = stack[-1]
        for j in rights:
            if seen[j]:
                continue
            seen[j] = True
            owner = match_of_right[j]
            if owner is None:
                for li, rj in [*path, (node, j)]:
                    match_of_right[rj] = li
                return True
            path.append((node, j))
            stack.append((owner, iter(edges[owner])))
            break
        else:
            stack.pop()
            if path:
                path.pop()
    return False
