"""Every private torch API the driver uses, in one place.

The single-process simulation rests on torch internals that have no public equivalent in
torch 2.13:

* ``torch.distributed._local_tensor.LocalTensorMode`` / ``LocalTensor``: run DTensor code for
  ``n`` simulated ranks in one process; a ``LocalTensor`` holds one plain tensor per rank.
* ``LocalTensor._local_tensors``: the per-rank tensors (no public accessor exists).
* ``torch.testing._internal.distributed.fake_pg``: importing it registers the ``"fake"``
  process-group backend that the simulation's default group uses.
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

Nothing else in ``layoutcore_torch`` touches a private torch name. When torch moves or removes
one of these, :func:`require_simulation` raises a :class:`layoutcore.DriverUnavailableError`
naming the missing API; a real process group (``torchrun``, gloo, nccl) needs none of them.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any

from layoutcore import DriverUnavailableError

__all__ = [
    "FAKE_BACKEND",
    "clear_sharding_caches",
    "guard_local_tensors",
    "init_fake_group",
    "is_local_tensor",
    "is_strided_shard",
    "local_tensor_mode",
    "local_tensors",
    "make_local_tensor",
    "require_simulation",
    "simulated_ranks_of",
    "unguard_local_tensors",
    "waited",
]

#: The name of torch's fake process-group backend.
FAKE_BACKEND = "fake"

_LOCAL_TENSOR_MODULE = "torch.distributed._local_tensor"
_FAKE_PG_MODULE = "torch.testing._internal.distributed.fake_pg"
_PLACEMENT_MODULE = "torch.distributed.tensor.placement_types"
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
    return value._local_tensors  # type: ignore[no-any-return]


def make_local_tensor(per_rank: dict[int, Any]) -> Any:
    """A ``LocalTensor`` from one plain tensor per rank (shapes may differ: uneven shards)."""
    return _lookup(_LOCAL_TENSOR_MODULE, "LocalTensor")(per_rank)


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
