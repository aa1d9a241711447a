"""Every private torch API the driver uses, in one place.

The single-process simulation rests on torch internals that have no public equivalent in
torch 2.13:

* ``torch.distributed._local_tensor.LocalTensorMode`` / ``LocalTensor``: run DTensor code for
  ``n`` simulated ranks in one process; a ``LocalTensor`` holds one plain tensor per rank.
* ``LocalTensor._local_tensors``: the per-rank tensors (no public accessor exists).
* ``torch.testing._internal.distributed.fake_pg``: importing it registers the ``"fake"``
  process-group backend that the simulation's default group uses.
* ``DTensor._local_tensor``: this rank's block as stored, read by :func:`local_block` where the
  driver only reads it (``DTensor.to_local()`` runs an autograd function and, simulated, a
  ``LocalTensor`` dispatch: 0.6 ms per call on 8 simulated ranks, measured, torch 2.13).
* ``DeviceMesh._rank_map``: a ``LocalTensor`` in a DeviceMesh made under the mode (:func:`simulated_ranks_of`).
* ``torch.distributed._functional_collectives.AsyncCollectiveTensor``: waited for under the mode (:func:`waited`).
* ``torch.distributed.tensor.placement_types._StridedShard``: recognised only so that
  :func:`layoutcore_torch.from_torch_placements` can refuse it by name.
* ``DTensor._op_dispatcher.sharding_propagator`` and ``torch.distributed.tensor._redistribute._planner_cache``:
  these caches (``lru_cache(None)`` keyed by op schemas that hold the ``DeviceMesh``; a dict keyed by a
  weak reference to it) grow with every distinct mesh; :func:`clear_sharding_caches` empties them
  every so many new meshes, so a loop over thousands of meshes stays bounded.
* ``LocalTensor.__torch_dispatch__`` and ``local_tensor_mode()``: :func:`guard_local_tensors` wraps the
  former so that a torch op on simulated data outside any ``LocalTensorMode`` raises (see there).
* ``LocalTensorMode.__torch_dispatch__`` and ``LocalTensorMode._disable``: :func:`guarded_local_tensor_mode`
  subclasses the mode so that a write into a plain (shared) tensor is never applied once per simulated rank.
* ``DTensor(local, DTensorSpec(...), requires_grad=False)`` and ``torch.distributed.tensor._dtensor_spec``'s
  ``DTensorSpec`` / ``TensorMeta``: :func:`simulated_dtensor` builds a simulated DTensor that needs no
  gradient the way ``DTensor.from_local`` does after its checks, without its per-call rank lookup (a
  ``LocalTensor`` dispatch per rank: 10 ms of a 12 ms ``from_local`` on 8 simulated ranks, torch 2.13).

Nothing else in ``layoutcore_torch`` touches a private torch name. When torch moves or removes
one of these, :func:`require_simulation` raises a :class:`layoutcore.DriverUnavailableError`
naming the missing API; a real process group (``torchrun``, gloo, nccl) needs none of them.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any, cast

from layoutcore import DriverUnavailableError

__all__ = [
    "FAKE_BACKEND",
    "clear_sharding_caches",
    "guard_local_tensors",
    "guarded_local_tensor_mode",
    "init_fake_group",
    "is_local_tensor",
    "is_strided_shard",
    "local_block",
    "local_tensor_mode",
    "local_tensors",
    "make_local_tensor",
    "require_simulation",
    "simulated_dtensor",
    "simulated_ranks_of",
    "unguard_local_tensors",
    "waited",
]

#: The name of torch's fake process-group backend.
FAKE_BACKEND = "fake"

_LOCAL_TENSOR_MODULE = "torch.distributed._local_tensor"
_FAKE_PG_MODULE = "torch.testing._internal.distributed.fake_pg"
_PLACEMENT_MODULE = "torch.distributed.tensor.placement_types"
_SPEC_MODULE = "torch.distributed.tensor._dtensor_spec"
_FUNCOL_MODULE = "torch.distributed._functional_collectives"

_cache: dict[str, Any] = {}


def _lookup(module: str, attr: str) -> Any:
    key = f"{module}.{attr}"
    try:
        return _cache[key]
    except KeyError:
        pass
    try:
        value = getattr(importlib.import_module(module), attr)
    except (ImportError, AttributeError) as exc:
        import torch

        raise DriverUnavailableError(
            f"The torch driver's single-process simulation needs the private torch API {key}, which torch "
            f"{torch.__version__} does not have ({type(exc).__name__}: {exc}). Use torch 2.13, or run under a real "
            "process group (torchrun / torch.distributed.init_process_group), which needs no private API.",
            driver="torch",
            install="pip install 'torch==2.13.0'",
        ) from exc
    _cache[key] = value
    return value


def require_simulation() -> None:
    """Check that every private API of the simulation exists.

    Raises:
        DriverUnavailableError: one is missing; the message names it.
    """
    _lookup(_LOCAL_TENSOR_MODULE, "LocalTensorMode")
    _lookup(_LOCAL_TENSOR_MODULE, "LocalTensor")
    _lookup(_FAKE_PG_MODULE, "FakeStore")


def init_fake_group(world_size: int) -> None:
    """``init_process_group("fake")`` over ``world_size`` simulated ranks (this process is rank 0)."""
    import torch.distributed as dist

    store = _lookup(_FAKE_PG_MODULE, "FakeStore")()  # importing the module registers the backend
    dist.init_process_group(FAKE_BACKEND, store=store, rank=0, world_size=world_size)


def local_tensor_mode(ranks: int | frozenset[int]) -> Any:
    """A ``LocalTensorMode`` context simulating ranks ``0 .. ranks-1`` (or the ranks in the set)."""
    return _lookup(_LOCAL_TENSOR_MODULE, "LocalTensorMode")(ranks)


def is_local_tensor(value: Any) -> bool:
    """Whether ``value`` is a ``LocalTensor`` (one tensor per simulated rank)."""
    return isinstance(value, _lookup(_LOCAL_TENSOR_MODULE, "LocalTensor"))


def local_tensors(value: Any) -> dict[int, Any]:
    """The per-rank plain tensors of a ``LocalTensor`` (rank -> tensor)."""
    return cast("dict[int, Any]", value._local_tensors)


def local_block(dtensor: Any) -> Any:
    """The block ``dtensor`` stores for this rank (a ``LocalTensor`` of every rank's, simulated), without
    ``to_local()``'s autograd function (no gradient flows through it): for reading where the block lives,
    copying out of it, or viewing its memory from NumPy (``into=`` loads write there, as they would
    through ``to_local()``'s view of it); never for torch ops that write into it."""
    return dtensor._local_tensor


def make_local_tensor(per_rank: dict[int, Any]) -> Any:
    """A ``LocalTensor`` from one tensor per rank (shapes may differ: uneven shards).

    A rank's tensor that is itself a ``LocalTensor`` (cut from a value made under the mode, e.g.
    ``torch.arange`` inside ``spmd``, which is one copy per rank) contributes that rank's own copy: what the
    rank of a real group holds. Wrapping it whole nested per-rank values, and every later op on them ran
    once per rank per rank (an SGD step moved a parameter ``ranks`` times too far, torch 2.13).
    """
    local_tensor = _lookup(_LOCAL_TENSOR_MODULE, "LocalTensor")
    flat = {r: t._local_tensors[r] if isinstance(t, local_tensor) else t for r, t in per_rank.items()}
    return local_tensor(flat)


def simulated_dtensor(dtensor_cls: Any, local: Any, device_mesh: Any, placements: Any, shape: Any, stride: Any) -> Any:
    """The DTensor ``DTensor.from_local(local, device_mesh, placements, run_check=False, shape=shape,
    stride=stride)`` returns, for a ``local`` (a ``LocalTensor``) that needs no gradient and whose every
    simulated rank is part of ``device_mesh``: built as ``from_local``'s forward builds it, without that
    forward's ``_is_current_rank_part_of_mesh`` (``get_coordinate`` under the mode: one dispatch per
    rank, 6 ms a call on 8 ranks) and ``view_as`` (3 ms), which change nothing here.

    The DTensor holds ``local`` itself, not a view of it: the caller made ``local`` for it alone.
    """
    spec_cls = _lookup(_SPEC_MODULE, "DTensorSpec")
    meta = _lookup(_SPEC_MODULE, "TensorMeta")(shape, tuple(stride), local.dtype)
    return dtensor_cls(local, spec_cls(device_mesh, tuple(placements), tensor_meta=meta), requires_grad=False)


def simulated_ranks_of(device_mesh: Any) -> frozenset[int] | None:
    """The simulated ranks whose copies a ``DeviceMesh`` made under ``LocalTensorMode`` holds (its private
    ``_rank_map`` is then a ``LocalTensor``); ``None`` for a plain one."""
    rank_map = getattr(device_mesh, "_rank_map", None)
    return frozenset(rank_map._ranks) if rank_map is not None and is_local_tensor(rank_map) else None


def waited(value: Any) -> Any:
    """``value``, or for torch's private ``AsyncCollectiveTensor`` (a functional collective still pending, e.g.
    ``RowwiseParallel(use_local_output=False)``'s output) its waited result. Call it under the mode: waiting
    is a torch op on the simulation's data."""
    try:
        pending = _lookup(_FUNCOL_MODULE, "AsyncCollectiveTensor")
    except DriverUnavailableError:  # no such class: nothing can be pending that way
        return value
    return value.wait() if isinstance(value, pending) else value


def is_strided_shard(placement: Any) -> bool:
    """Whether ``placement`` is torch's private ``_StridedShard`` (a subclass-like twin of ``Shard``)."""
    try:
        strided = _lookup(_PLACEMENT_MODULE, "_StridedShard")
    except DriverUnavailableError:
        return False
    return isinstance(placement, strided)


def clear_sharding_caches() -> bool:
    """Empty DTensor's sharding-propagation caches (this thread's); returns whether torch still has them.

    Only a cost: later ops propagate their sharding once more. Never raises.
    """
    try:
        from torch.distributed.tensor import DTensor, _redistribute

        propagator = DTensor._op_dispatcher.sharding_propagator
        propagator.propagate_op_sharding.cache_clear()
        type(propagator)._propagate_tensor_meta_cached.cache_clear()
        _redistribute._planner_cache.clear()  # keyed by weakref(DeviceMesh): dead meshes' entries stay
    except (ImportError, AttributeError):
        return False
    return True


def guard_local_tensors(refusal: Callable[[Any], Exception]) -> None:
    """Make every torch op on a ``LocalTensor`` outside any ``LocalTensorMode`` raise ``refusal(op)``.

    Why: outside the mode, DTensor's Python code runs once, as rank 0: ``DeviceMesh.get_coordinate``
    and friends are unpatched, so e.g. ``Replicate -> Shard`` hands every simulated rank rank 0's
    chunk, and ``A @ B`` with ``A`` sharded on the contracting axis multiplies every rank's block of
    ``A`` by rank 0's block of ``B`` (torch 2.13). The collectives themselves are right there (``LocalTensor.__torch_dispatch__``
    enters the mode for each op), so a guard on the fake process group would miss this. Every op
    on a DTensor's per-rank data reaches ``LocalTensor.__torch_dispatch__`` only when no
    ``LocalTensorMode`` is on this thread's stack (the mode handles it first otherwise), so that
    is where the refusal goes; under a mode, even a temporarily disabled one, torch's own code runs.
    Idempotent; :func:`unguard_local_tensors` undoes it.
    """
    local_tensor = _lookup(_LOCAL_TENSOR_MODULE, "LocalTensor")
    current_mode = _lookup(_LOCAL_TENSOR_MODULE, "local_tensor_mode")
    if "original" in _guard:
        return
    original = local_tensor.__dict__["__torch_dispatch__"]  # the classmethod object itself
    import torch

    rank_free = frozenset(getattr(torch.ops.aten, name) for name in _RANK_FREE_OPS)
    is_compiling = torch.compiler.is_compiling
    identity_view = torch.ops.aten.view.default
    dispatch = original.__func__

    def guarded(cls: Any, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        # torch.compile's tracing runs ops on its real inputs to fake them; its graph runs (and is checked) later.
        if (
            current_mode() is None
            and func.overloadpacket not in rank_free
            and not is_compiling()
            and not (func is identity_view and list(args[1]) == list(args[0].shape))  # DTensor.to_local's view_as
        ):
            raise refusal(func)
        return dispatch(cls, func, types, args, kwargs)

    _guard["original"] = original
    local_tensor.__torch_dispatch__ = classmethod(guarded)


def unguard_local_tensors() -> None:
    """Undo :func:`guard_local_tensors` (no-op when not guarded)."""
    original = _guard.pop("original", None)
    if original is not None:
        _lookup(_LOCAL_TENSOR_MODULE, "LocalTensor").__torch_dispatch__ = original


#: Ops that take nothing but the tensor, so DTensor cannot pass them rank 0's view of the mesh: right outside
#: the mode too. Metadata queries (torch.compile asks them of its inputs) and ``detach`` / ``alias``
#: (``torch.nn.Parameter(dtensor)`` detaches).
_RANK_FREE_OPS: tuple[str, ...] = ("dim", "sym_size", "sym_stride", "sym_numel", "sym_storage_offset", "size")
_RANK_FREE_OPS += ("stride", "numel", "detach", "alias")

#: "original": LocalTensor's own ``__torch_dispatch__`` classmethod while :func:`guard_local_tensors` is on.
_guard: dict[str, Any] = {}


def guarded_local_tensor_mode(ranks: int | frozenset[int], refusal: Callable[[Any, Any, str], Exception]) -> Any:
    """A ``LocalTensorMode(ranks)`` that never applies a write into a plain (shared) tensor once per rank.

    Why: the simulation keeps one plain tensor for what every rank of a real group holds its own copy of
    (a parameter torch's ``parallelize_module`` leaves plain, a replicated DTensor's local tensor, optimizer
    state, a buffer), and ``LocalTensorMode`` runs an op once per simulated rank. An in-place op that writes
    into such a tensor with a ``LocalTensor`` argument was then applied once per rank: ``p.add_(g, alpha=-0.1)``
    with ``g`` one per rank moved ``p`` by ``-0.1 * ranks`` (torch 2.13), a silent wrong answer; so did SGD on
    ``RowwiseParallel``'s replicated bias. A real group gives each rank ``p - 0.1 * g_r``; one plain tensor
    can hold that only when every rank's ``g_r`` is the same. So:

    * every ``LocalTensor`` argument holds the same value on every rank (NaNs in the same places): the op
      runs once, on rank 0's values; that is what each rank of a real group computes;
    * else ``refusal(op, tensor, why)`` is raised: no plain tensor can hold the result.

    The check sits in the mode's own ``__torch_dispatch__`` (a subclass), because that is where every op on
    per-rank data arrives, including the local ops DTensor issues for an op on DTensors; a separate mode
    above it would not see those. It costs one cached schema lookup per op and, for a guarded write, one
    comparison per rank.
    """
    made = _cache.get("guarded_local_tensor_mode")
    if made is None:
        made = _cache["guarded_local_tensor_mode"] = _guarded_mode_class(refusal)
    return made(ranks)


def _guarded_mode_class(refusal: Callable[[Any, Any, str], Exception]) -> Any:
    mode_base = _lookup(_LOCAL_TENSOR_MODULE, "LocalTensorMode")
    local_tensor = _lookup(_LOCAL_TENSOR_MODULE, "LocalTensor")
    import torch

    plain_types = (torch.Tensor, torch.nn.Parameter)

    class GuardedLocalTensorMode(mode_base):  # type: ignore[misc, valid-type]  # torch's class, found at run time
        def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
            if not self._disable and _written(func):
                kwargs = kwargs or {}
                targets = _plain_targets(func, args, kwargs, plain_types)
                if targets:
                    args, kwargs = _collapse_local_args(func, args, kwargs, local_tensor, targets[0], refusal)
            return super().__torch_dispatch__(func, types, args, kwargs)

    return GuardedLocalTensorMode


def _written(func: Any) -> tuple[tuple[int, str], ...]:
    """The (position, name) of each argument op overload ``func``'s schema writes into (cached)."""
    try:
        return _written_cache[func]
    except KeyError:
        pass
    schema = getattr(func, "_schema", None)
    result = tuple(
        (index, arg.name)
        for index, arg in enumerate(schema.arguments if schema is not None else ())
        if arg.alias_info is not None and arg.alias_info.is_write
    )
    _written_cache[func] = result
    return result


def _plain_targets(
    func: Any, args: tuple[Any, ...], kwargs: dict[str, Any], plain_types: tuple[type, ...]
) -> list[Any]:
    """The arguments ``func`` writes into whose exact type is one of ``plain_types`` (not per-rank tensors)."""
    found: list[Any] = []
    for index, name in _written(func):
        value = args[index] if index < len(args) else kwargs.get(name)
        for item in value if isinstance(value, (list, tuple)) else (value,):
            if type(item) in plain_types:
                found.append(item)
    return found


def _same_on_every_rank(value: Any) -> Any:
    """Rank 0's tensor of LocalTensor ``value`` when every rank holds the same one (NaN equal to NaN), else None."""
    import torch

    per_rank = list(value._local_tensors.values())
    first = per_rank[0]
    for other in per_rank[1:]:
        if other.shape != first.shape or other.dtype != first.dtype:
            return None
        if not torch.equal(other, first):
            if not (first.is_floating_point() or first.is_complex()):
                return None
            if not bool(((other == first) | (other.isnan() & first.isnan())).all()):
                return None
    return first


def _collapse_local_args(
    func: Any,
    args: Any,
    kwargs: dict[str, Any],
    local_tensor: type,
    target: Any,
    refusal: Callable[[Any, Any, str], Exception],
) -> tuple[Any, Any]:
    """``(args, kwargs)`` with each LocalTensor replaced by its one value, for a write into plain ``target``.

    Raises:
        The ``refusal`` exception: a LocalTensor whose per-rank values differ (the write would
        keep only one rank's data).
    """
    from torch.utils import _pytree

    flat, spec = _pytree.tree_flatten((args, kwargs))
    if not any(isinstance(a, local_tensor) for a in flat):
        return args, kwargs
    once = []
    for a in flat:
        if isinstance(a, local_tensor):
            value = _same_on_every_rank(a)
            if value is None:
                raise refusal(func, target, "its per-rank values differ")
            a = value
        once.append(a)
    return _pytree.tree_unflatten(once, spec)  # type: ignore[no-any-return]


#: Per op overload: the (position, name) of each argument its schema writes into.
_written_cache: dict[Any, tuple[tuple[int, str], ...]] = {}
