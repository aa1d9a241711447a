"""Relayout at the physical floor on torch: ``relayout_plan``'s transfers as one ``all_to_all_single``.

``DTensor.redistribute`` walks the mesh axes one collective at a time, so a change on several mesh
axes at once ((x, y) -> (y, x), a tensor axis moving between two mesh axes) all-gathers more than
any device needs (0.30 of the floor for (x, y) -> (y, x) on 4x2, measured in
``benchmarks/bench_relayout_bytes.py``), and it refuses a move to another DeviceMesh. The driver
reads torch's own plan first (its redistribute planner's transform steps, without running them)
and prices each step at the bytes it must at least move (``relayout_plan`` of the step). Where
that sum equals the floor and no collective step splits an axis unevenly (torch pads uneven
collectives), ``redistribute`` runs as before. Anywhere else, and across meshes, every device
sends exactly the rectangles of ``relayout_plan`` in one ``all_to_all_single`` over the
participating ranks, with per-rank split sizes, as raw bytes (``uint8`` views, so bfloat16, bool
and int64 move bit for bit, never through arithmetic), and what a device holds itself is copied
locally. The result is a ``DTensor`` built with ``from_local`` on the target mesh and placements.

* **Simulation** (``LocalTensorMode`` + fake group): the per-rank split sizes are torch's
  ``LocalIntNode`` integers, which the mode's functional ``all_to_all_single`` reads per rank.
  Mesh positions are labels there, so the participants of a cross-mesh move are the target
  mesh's positions (rank ``q`` is target position ``q``) and then the source devices the target
  lacks.
* **Real group** (gloo, nccl): device ``"CPU:r"`` is rank ``r``; the collective runs over the
  world group, or a group of the participating ranks (``new_group(use_local_synchronization=True)``,
  made once per rank set).

A pending sum (``Partial``) on its own mesh goes to ``redistribute`` as before (torch reduces it
with a reduce-scatter or all-reduce); across meshes torch reduces it first, then the plan runs. A
tensor that requires grad gets the plan as an autograd function whose backward runs the reverse
plan. Where torch's private planner cannot be read, the plan runs (always right, at the floor).
Under ``torch.compile`` the front-end refuses, as for every data function.
"""

from __future__ import annotations

import contextlib
import functools
import math
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol, cast

import layoutcore as lc
from layoutcore import Layout, Mesh
from layoutcore.driver import LRUCache, RelayoutMove

from . import _convert, _private


class TorchDriver(Protocol):
    """What the relayout needs of the torch driver (a protocol: the driver module imports this one)."""

    def world(self) -> Any: ...
    def spmd(self, n: int) -> Any: ...
    def device_mesh(self, mesh: Mesh) -> Any: ...
    def native_fetch_layout(self, tensor: Any) -> Layout: ...
    def _from_local(self, shards: dict[int, Any], layout: Layout, shape: tuple[int, ...], like: Any) -> Any: ...


__all__ = ["CollectiveBytes", "RelayoutSchedule", "native_is_at_floor", "relayout_at_floor", "schedule"]

#: How many (source, target, shape, dtype) decisions and schedules are kept.
_CACHE_SIZE = 256


_LOCK = threading.Lock()
_DECISIONS: LRUCache[Any, Any] = LRUCache(_CACHE_SIZE)
_SCHEDULES: LRUCache[Any, Any] = LRUCache(_CACHE_SIZE)
_GROUPS: dict[tuple[Any, tuple[int, ...]], Any] = {}


# ------------------------------------------------------------------------------------------------
# The schedule: who sends which rectangle to whom, in local coordinates
# ------------------------------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class RelayoutSchedule:
    """``relayout_plan``'s transfers arranged for one ``all_to_all_single`` over ``participants``.

    Attributes:
        participants: the device names taking part, in collective (group) order.
        source_of: per participant, its source mesh position (``None``: holds nothing).
        target_of: per participant, its target mesh position (``None``: receives nothing).
        sends: ``sends[i][j]``: the rectangles participant ``i`` sends ``j``, as slices into
            ``i``'s source block, in plan order (the receiver reads them in the same order).
        receives: ``receives[j][i]``: where ``j`` puts them, as slices into its target block.
        local: per participant, ``(source slices, target slices)`` of what it keeps itself.
        target_shapes: per target position, its block's shape.
        floor_bytes: the plan's total, what the collective carries between devices.
    """

    participants: tuple[str, ...]
    source_of: tuple[int | None, ...]
    target_of: tuple[int | None, ...]
    sends: tuple[tuple[tuple[tuple[slice, ...], ...], ...], ...]
    receives: tuple[tuple[tuple[tuple[slice, ...], ...], ...], ...]
    local: tuple[tuple[tuple[slice, ...], tuple[slice, ...]] | None, ...]
    target_shapes: tuple[tuple[int, ...], ...]
    floor_bytes: int


def schedule(move: RelayoutMove, participants: Sequence[str]) -> RelayoutSchedule:
    """The core's schedule of ``move`` (:meth:`~layoutcore.driver.RelayoutMove.schedule`) arranged for one
    ``all_to_all_single``: per (sender, receiver) pair, its rectangles in plan order.

    ``participants`` names every device of either mesh once, in the order of the collective's group.
    Cached per move and participants.
    """
    key = (move.source, move.target, move.shape, move.dtype, tuple(participants))
    with _LOCK:
        found = _SCHEDULES.get(key)
    if found is not None:
        return cast("RelayoutSchedule", found)
    core = move.schedule(participants)
    u = len(core.participants)
    sends: list[list[list[tuple[slice, ...]]]] = [[[] for _ in range(u)] for _ in range(u)]
    receives: list[list[list[tuple[slice, ...]]]] = [[[] for _ in range(u)] for _ in range(u)]
    for piece in core.pieces:
        sends[piece.sender][piece.receiver].append(piece.source_at)
        receives[piece.receiver][piece.sender].append(piece.target_at)
    found = RelayoutSchedule(
        tuple(core.participants),
        core.source_of,
        core.target_of,
        tuple(tuple(tuple(r) for r in row) for row in sends),
        tuple(tuple(tuple(r) for r in row) for row in receives),
        tuple(None if k is None else (k.source_at, k.target_at) for k in core.keeps),
        core.target_shapes,
        core.floor_bytes,
    )
    with _LOCK:
        _SCHEDULES.put(key, found)
    return found


# ------------------------------------------------------------------------------------------------
# Deciding: torch's own planned steps, priced at their floors
# ------------------------------------------------------------------------------------------------
def native_is_at_floor(driver: TorchDriver, tensor: Any, move: RelayoutMove) -> bool:
    """Whether ``DTensor.redistribute`` of ``move`` (one DeviceMesh) moves exactly its plan's floor.

    Read from torch's redistribute planner (``_gen_transform_infos``, the steps ``redistribute``
    runs), never by running it: each step is priced at the floor of the layout change it makes
    (``relayout_plan`` between the step's placements); a collective step over an axis the mesh axis
    does not divide evenly counts as more (torch pads those), and so does a Shard -> Shard step on a
    real CPU group (torch 2.13 all-gathers there: gloo has no all-to-all in DTensor's eyes). Cached
    per layouts, shape, dtype and kind of group.
    Any planner it cannot read answers ``False`` (the plan runs, which is always right).
    """
    source, target, shape, dtype = move.source, move.target, move.shape, move.dtype
    world = driver.world()
    # torch 2.13 runs Shard -> Shard on a real CPU group (gloo) as all-gather + chunk, not all-to-all.
    gathers = not world.simulated and world.device_type == "cpu"
    key = (source, target, shape, dtype, gathers)
    with _LOCK:
        found = _DECISIONS.get(key)
    if found is not None:
        return bool(found)
    floor = move.plan.floor_bytes
    try:
        steps = _torch_steps(driver, tensor, target)
        cost = _steps_cost(steps, source, shape, dtype, gathers)
    except Exception:  # a private planner that changed shape: the plan runs (right, and at the floor)
        cost = None
    answer = cost is not None and cost <= floor
    with _LOCK:
        _DECISIONS.put(key, answer)
    return answer


def _torch_steps(driver: TorchDriver, tensor: Any, target: Layout) -> list[tuple[int, Any, Any]]:
    """``(mesh axis, from placement, to placement)`` of each step torch's planner would run."""
    from torch.distributed.tensor._dtensor_spec import DTensorSpec
    from torch.distributed.tensor._redistribute import _gen_transform_infos

    mesh = target.require_mesh()
    spec = tensor._spec
    with driver.spmd(mesh.size):
        wanted = DTensorSpec(spec.mesh, _convert.placements(target), tensor_meta=spec.tensor_meta)
        infos = _gen_transform_infos(spec, wanted)
    return [(int(i.mesh_dim), i.src_dst_placements[0], i.src_dst_placements[1]) for i in infos]


def _steps_cost(
    steps: list[tuple[int, Any, Any]], source: Layout, shape: tuple[int, ...], dtype: str, gathers: bool
) -> int | None:
    mesh = source.require_mesh()
    placements = list(_convert.placements(source))
    current = source
    cost = 0
    for axis, before, after in steps:
        if before.is_partial() or after.is_partial():
            return None
        placements[axis] = after
        following = _convert.layout_from_placements(placements, mesh, len(shape))
        step = lc.relayout_plan(current, following, shape, dtype).floor_bytes
        collective = before.is_shard()  # Shard -> Replicate (all-gather) or Shard -> Shard (all-to-all)
        if collective and step and gathers and after.is_shard():
            step += 1  # an all-gather of the whole group where an all-to-all would do: more than the floor
        elif collective and step:
            group = mesh.shape[axis]
            dims = {int(before.dim)} | ({int(after.dim)} if after.is_shard() else set())
            if any(_level_size(current, following, d, shape) % group for d in dims):
                step += 1  # padded: more than the floor, whatever the sizes
        cost += step
        current = following
    return cost


def _level_size(before: Layout, after: Layout, dim: int, shape: tuple[int, ...]) -> int:
    """The size of tensor axis ``dim`` that the step's mesh axis splits (the coarser of the two states)."""
    return shape[dim] // max(1, min(before.num_shards(dim), after.num_shards(dim)))


# ------------------------------------------------------------------------------------------------
# Running the plan
# ------------------------------------------------------------------------------------------------
def relayout_at_floor(driver: TorchDriver, tensor: Any, move: RelayoutMove) -> Any | None:
    """``tensor`` laid out by ``move``'s target moving exactly its plan's bytes, or ``None`` where the
    driver's native ``redistribute`` is right (already at the floor, a pending sum on its own mesh).
    The source layout, the concrete target, the plan and its schedule come from ``move`` (the core's).
    A tensor that requires grad gets a differentiable plan (its gradient returns by the reverse plan)."""
    device_mesh = driver.device_mesh(move.target.require_mesh())
    same_mesh = tensor.device_mesh == device_mesh
    partial = any(p.is_partial() for p in tensor.placements)
    if same_mesh and partial:
        return None
    if partial:  # pending sums are reduced first, on their own mesh, by torch (as a same-mesh relayout does)
        from torch.distributed.tensor import Replicate

        with driver.spmd(tensor.device_mesh.size()):
            tensor = tensor.redistribute(
                tensor.device_mesh, [Replicate() if p.is_partial() else p for p in tensor.placements]
            )
        # another tensor now, laid out without the sums: the move from its layout
        move = RelayoutMove.between(driver.native_fetch_layout(tensor), move.target, move.shape, move.dtype)
    if same_mesh and native_is_at_floor(driver, tensor, move):
        return None
    if tensor.requires_grad:
        return _differentiable(driver, tensor, move)
    return _run(driver, tensor, move)


def _differentiable(driver: TorchDriver, tensor: Any, move: RelayoutMove) -> Any:
    """The plan as an autograd function: the gradient goes back by the reverse plan (target -> source)."""
    import torch

    source, target = move.source, move.target

    class PlannedRelayout(torch.autograd.Function):
        @staticmethod
        def forward(ctx: Any, value: Any) -> Any:
            with torch.no_grad():
                return _run(driver, value.detach(), move)

        @staticmethod
        def backward(ctx: Any, grad: Any) -> Any:
            # The incoming gradient may carry other placements (torch's choice): lay it out by the target first.
            wanted = _convert.placements(target)
            if tuple(grad.placements) != wanted:
                with driver.spmd(target.require_mesh().size):
                    grad = grad.redistribute(grad.device_mesh, wanted)
            with torch.no_grad():
                return _run(driver, grad, move.reversed())

    with driver.spmd(max(source.require_mesh().size, target.require_mesh().size)):
        return PlannedRelayout.apply(tensor)


def _participants(driver: TorchDriver, source: Layout, target: Layout) -> tuple[list[str], list[int]]:
    """Device names in group order, and each one's rank (simulated: a label's stand-in rank)."""
    source_devices = cast("tuple[str, ...]", source.require_mesh().devices)  # concrete: bound by the front-end
    target_devices = cast("tuple[str, ...]", target.require_mesh().devices)
    if driver.world().simulated:
        # Positions are labels: target position q is simulated rank q, then the source devices the target lacks.
        names = list(target_devices) + [d for d in dict.fromkeys(source_devices) if d not in set(target_devices)]
        return names, list(range(len(names)))
    by_rank = {_convert.rank_of(d): d for d in (*source_devices, *target_devices)}
    ranks = sorted(by_rank)
    return [by_rank[r] for r in ranks], ranks


def _group(driver: TorchDriver, ranks: list[int]) -> Any:
    import torch.distributed as dist

    world = driver.world()
    if ranks == list(range(world.size)):
        return dist.group.WORLD
    key = (world.group, tuple(ranks))
    group = _GROUPS.get(key)
    if group is None:
        with driver.spmd(len(ranks)) if world.simulated else contextlib.nullcontext():
            group = dist.new_group(ranks, use_local_synchronization=not world.simulated)
        group = _GROUPS.setdefault(key, group)
    return group


def _bytes_of(block: Any, index: tuple[slice, ...]) -> Any:
    """A rectangle of ``block`` as a flat ``uint8`` tensor (its raw bytes: no dtype arithmetic)."""
    import torch

    piece = block[index].contiguous().reshape(-1)
    return piece.view(torch.uint8) if piece.dtype != torch.uint8 else piece


def _send_buffer(block: Any, sends: tuple[tuple[tuple[slice, ...], ...], ...]) -> tuple[Any, list[int]]:
    import torch

    pieces = [[_bytes_of(block, index) for index in row] for row in sends]
    splits = [sum(int(p.numel()) for p in row) for row in pieces]
    flat = [p for row in pieces for p in row]
    buffer = torch.cat(flat) if flat else torch.empty(0, dtype=torch.uint8)
    return buffer, splits


def _assemble(
    received: Any,
    receives: tuple[tuple[tuple[slice, ...], ...], ...],
    local: tuple[tuple[slice, ...], tuple[slice, ...]] | None,
    own: Any | None,
    shape: tuple[int, ...],
    like: Any,
) -> Any:
    """One target block from the received bytes (in sender order) and the rectangle kept locally."""
    import torch

    out = torch.empty(shape, dtype=like.dtype)
    if local is not None and own is not None:
        out[local[1]] = own[local[0]]
    offset = 0
    itemsize = like.element_size()
    for row in receives:
        for index in row:
            sizes = [s.stop - s.start for s in index]
            count = math.prod(sizes) * itemsize
            raw = received[offset : offset + count]
            out[index] = (raw.view(like.dtype) if like.dtype != torch.uint8 else raw).reshape(sizes)
            offset += count
    return out


def _all_to_all(group: Any, buffer: Any, send_splits: Any, receive_splits: Any) -> Any:
    import torch.distributed._functional_collectives as funcol

    return funcol.wait_tensor(funcol.all_to_all_single(buffer, receive_splits, send_splits, group))


def _per_rank_ints(values: dict[int, int]) -> Any:
    """One int per simulated rank, as the SymInt ``LocalTensorMode`` reads per rank."""
    import torch

    if len(set(values.values())) <= 1:
        return next(iter(values.values()), 0)
    node = _private._lookup(_private._LOCAL_TENSOR_MODULE, "LocalIntNode")(values)
    return torch.SymInt(node)


def _run(driver: TorchDriver, tensor: Any, move: RelayoutMove) -> Any:
    """The plan itself: one ``all_to_all_single`` of raw bytes, then each target block assembled.

    Simulated, every rank's buffers are built here and exchanged under ``LocalTensorMode``; on a real
    group this rank builds its own and takes part if it holds or needs anything.
    """
    source, target, shape = move.source, move.target, move.shape
    names, ranks = _participants(driver, source, target)
    plan = schedule(move, names)
    u = len(names)
    target_mesh = target.require_mesh()
    world = driver.world()
    local = _private.local_block(tensor)  # read only (cut into send buffers, kept parts copied out)
    if world.simulated:
        held = _private.local_tensors(local) if _private.is_local_tensor(local) else None
        blocks: dict[int, Any] = {}
        for i in range(u):
            p = plan.source_of[i]
            if p is not None:
                blocks[i] = held[p] if held is not None else local
        like = next(iter(blocks.values()))
        buffers: dict[int, Any] = {}
        splits: dict[int, list[int]] = {}
        for i in range(u):
            if i in blocks:
                buffers[i], splits[i] = _send_buffer(blocks[i], plan.sends[i])
            else:
                buffers[i], splits[i] = _send_buffer(like.new_empty(0), ((),) * u)
        send_splits = [_per_rank_ints({i: splits[i][j] for i in range(u)}) for j in range(u)]
        receive_splits = [_per_rank_ints({j: splits[i][j] for j in range(u)}) for i in range(u)]
        group = _group(driver, ranks)
        with driver.spmd(u):
            received_all = _all_to_all(group, _private.make_local_tensor(buffers), send_splits, receive_splits)
        received = _private.local_tensors(received_all)
        shards = {
            q: _assemble(received[i], plan.receives[i], plan.local[i], blocks.get(i), plan.target_shapes[q], like)
            for i, q in enumerate(plan.target_of)
            if q is not None
        }
        return driver._from_local(shards, Layout(target.axes, target_mesh), shape, like)
    me = world.rank
    shards = {}
    if me in ranks:
        i = ranks.index(me)
        own = local if plan.source_of[i] is not None else None
        like = local
        buffer, send = _send_buffer(own, plan.sends[i]) if own is not None else _send_buffer(local, ((),) * u)
        receive = [
            sum(math.prod(s.stop - s.start for s in index) for index in row) * local.element_size()
            for row in plan.receives[i]
        ]
        received = _all_to_all(_group(driver, ranks), buffer, send, receive)
        q = plan.target_of[i]
        if q is not None:
            shards[q] = _assemble(received, plan.receives[i], plan.local[i], own, plan.target_shapes[q], like)
    return driver._from_local(shards, Layout(target.axes, target_mesh), shape, local)


# ------------------------------------------------------------------------------------------------
# Counting what collectives carry (benchmarks, tests, the conformance suite)
# ------------------------------------------------------------------------------------------------
class CollectiveBytes:
    """Counts the bytes torch collectives carry between ranks while active.

    ``moved`` is the bytes all ranks together receive from other ranks, as ``floor_bytes`` counts:
    ``all_to_all_single`` with split sizes exactly (each rank's splits to the others, per simulated
    rank); ``all_gather_into_tensor`` ``(g-1)`` inputs; ``shard_dim_alltoall`` and an evenly split
    ``all_to_all_single`` ``(g-1)/g`` of the input; ``reduce_scatter_tensor`` ``(g-1)/g``;
    ``all_reduce`` ``2(g-1)/g`` (ring); ``broadcast`` ``(g-1)/g``. ``ops`` names each collective.

    It reads the collectives' own arguments, never the driver's plan. On a real group a
    ``CommDebugMode`` sees each functional collective; under the simulation ``LocalTensorMode``
    runs collectives itself without passing them to an outer mode, so the counter wraps the
    simulation's own collective implementations (``torch.distributed._local_tensor._c10d``) while
    active: every collective any code runs there is seen. Use::

        with CollectiveBytes() as counted:
            lc.relayout(x, layout)
        counted.moved
    """

    def __init__(self) -> None:
        self.moved = 0
        self.ops: list[str] = []
        self._mode: Any = None

    def __enter__(self) -> CollectiveBytes:
        import torch.distributed as dist

        with _LOCK:
            if not _COUNTERS:
                _wrap_simulation(install=True)
            _COUNTERS.append(self)
        if dist.is_initialized() and str(dist.get_backend()) != _private.FAKE_BACKEND:
            self._mode = _counting_mode_class()(self)
            self._mode.__enter__()
        return self

    def __exit__(self, *exc: Any) -> None:
        if self._mode is not None:
            self._mode.__exit__(*exc)
            self._mode = None
        with _LOCK:
            _COUNTERS.remove(self)
            if not _COUNTERS:
                _wrap_simulation(install=False)

    def record(self, op: str, args: Sequence[Any]) -> None:
        """Account one collective call ``op`` (its overload packet's name) with its arguments."""
        import torch.distributed as dist

        name = op.rsplit(".", 1)[-1]
        if name in {"wait_tensor", "_wrap_tensor_autograd"} or not (
            op.startswith(("_c10d_functional.", "c10d_functional.", "c10d.")) or name == "shard_dim_alltoall"
        ):
            return
        tensor = args[0]
        if name == "allreduce_":  # c10d's in-place all_reduce: a list of tensors, then the group
            name, tensor, args = "all_reduce", tensor[0], (tensor[0], args[1])
        per_rank: dict[int, Any] = (
            dict(_private.local_tensors(tensor)) if _private.is_local_tensor(tensor) else {-1: tensor}
        )

        def group_of(value: Any) -> Any:
            return dist.distributed_c10d._resolve_process_group(value) if isinstance(value, str) else value

        if name == "all_gather_into_tensor":
            g = int(args[1])
            moved = sum((g - 1) * _nbytes(t) for t in per_rank.values())
        elif name == "all_to_all_single" and args[2] is not None and len(args[2]):
            group = group_of(args[3])
            ranks = dist.get_process_group_ranks(group)
            g = len(ranks)
            moved = 0
            for rank, t in per_rank.items():
                splits = [_int_for(s, rank) for s in args[2]]
                row = _nbytes(t) // sum(splits) if sum(splits) else 0
                me = ranks.index(rank) if rank in ranks else dist.get_rank(group)
                moved += sum(s for k, s in enumerate(splits) if k != me) * row
        elif name in {"shard_dim_alltoall", "all_to_all_single"}:
            g = group_of(args[-1]).size()
            moved = sum(_nbytes(t) * (g - 1) // g for t in per_rank.values())
        elif name == "reduce_scatter_tensor":
            g = int(args[2])
            moved = sum(_nbytes(t) * (g - 1) // g for t in per_rank.values())
        elif name in {"all_reduce", "broadcast"}:
            g = group_of(args[-1] if name == "all_reduce" and isinstance(args[-1], str) else args[1]).size()
            factor = 2 if name == "all_reduce" else 1
            moved = sum(factor * _nbytes(t) * (g - 1) // g for t in per_rank.values())
        else:
            raise RuntimeError(f"CollectiveBytes cannot account collective {op}")
        self.moved += moved
        self.ops.append(f"{name} g={g}")


#: The active counters (:class:`CollectiveBytes`), and the simulation's collectives they wrap.
_COUNTERS: list[CollectiveBytes] = []
_SIMULATED_COLLECTIVES = {
    "_local_functional_all_gather_into_tensor": "_c10d_functional.all_gather_into_tensor",
    "_local_functional_reduce_scatter_tensor": "_c10d_functional.reduce_scatter_tensor",
    "_local_functional_shard_dim_alltoall": "_dtensor.shard_dim_alltoall",
    "_local_functional_all_to_all_single": "_c10d_functional.all_to_all_single",
    "_local_all_reduce_": "c10d.allreduce_",
}
_ORIGINALS: dict[str, Any] = {}


def _wrap_simulation(*, install: bool) -> None:
    """Wrap (or restore) the simulation's collective implementations so that active counters see them."""
    import importlib

    try:
        module = importlib.import_module(_private._LOCAL_TENSOR_MODULE + "._c10d")
    except ImportError:  # no simulation in this torch: a real group's CommDebugMode counts
        return
    for attr, op in _SIMULATED_COLLECTIVES.items():
        if install and attr not in _ORIGINALS and hasattr(module, attr):
            original = _ORIGINALS[attr] = getattr(module, attr)

            def counting(*args: Any, _original: Any = original, _op: str = op, **kwargs: Any) -> Any:
                for counter in list(_COUNTERS):
                    counter.record(_op, args)
                return _original(*args, **kwargs)

            setattr(module, attr, counting)
        elif not install and attr in _ORIGINALS:
            setattr(module, attr, _ORIGINALS.pop(attr))


def _nbytes(tensor: Any) -> int:
    return int(tensor.numel()) * int(tensor.element_size())


def _int_for(value: Any, rank: int) -> int:
    """A split size as rank ``rank`` sees it (a simulated per-rank SymInt, or a plain int)."""
    node = getattr(value, "node", None)
    per_rank = getattr(node, "_local_ints", None)
    if per_rank is not None:
        return int(per_rank[rank])
    return int(value)


@functools.cache
def _counting_mode_class() -> type:
    import torch
    from torch.distributed.tensor.debug import CommDebugMode

    class _Counting(CommDebugMode):
        """``CommDebugMode`` that hands each collective's arguments to a :class:`CollectiveBytes`."""

        def __init__(self, counter: CollectiveBytes) -> None:
            super().__init__()
            self._counter = counter

        def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
            if not isinstance(func, torch._ops.HigherOrderOperator) and not any(t.__name__ == "DTensor" for t in types):
                self._counter.record(str(func._overloadpacket), args)
            return super().__torch_dispatch__(func, types, args, kwargs)

    return _Counting
