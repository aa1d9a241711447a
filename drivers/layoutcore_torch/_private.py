"""Every private torch API the driver uses, in one place.

The single-process simulation rests on torch internals that have no public equivalent in
torch 2.13:

* ``torch.distributed._local_tensor.LocalTensorMode`` / ``LocalTensor``: run DTensor code for
  ``n`` simulated ranks in one process; a ``LocalTensor`` holds one plain tensor per rank.
* ``LocalTensor._local_tensors``: the per-rank tensors (no public accessor exists).
* ``torch.testing._internal.distributed.fake_pg``: importing it registers the ``"fake"``
  process-group backend that the simulation's default group uses.
* ``torch.distributed.tensor.placement_types._StridedShard``: recognised only so that
  :func:`layoutcore_torch.from_torch_placements` can refuse it by name.
* ``DTensor._op_dispatcher.sharding_propagator`` and ``torch.distributed.tensor._redistribute._planner_cache``:
  these caches (``lru_cache(None)`` keyed by op schemas that hold the ``DeviceMesh``; a dict keyed by a
  weak reference to it) grow with every distinct mesh; :func:`clear_sharding_caches` empties them
  every so many new meshes, so a loop over thousands of meshes stays bounded.

Nothing else in ``layoutcore_torch`` touches a private torch name. When torch moves or removes
one of these, :func:`require_simulation` raises a :class:`layoutcore.DriverUnavailableError`
naming the missing API; a real process group (``torchrun``, gloo, nccl) needs none of them.
"""

from __future__ import annotations

import importlib
from typing import Any

from layoutcore import DriverUnavailableError

__all__ = [
    "FAKE_BACKEND",
    "clear_sharding_caches",
    "init_fake_group",
    "is_local_tensor",
    "is_strided_shard",
    "local_tensor_mode",
    "local_tensors",
    "make_local_tensor",
    "require_simulation",
]

#: The name of torch's fake process-group backend.
FAKE_BACKEND = "fake"

_LOCAL_TENSOR_MODULE = "torch.distributed._local_tensor"
_FAKE_PG_MODULE = "torch.testing._internal.distributed.fake_pg"
_PLACEMENT_MODULE = "torch.distributed.tensor.placement_types"

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


def local_tensor_mode(ranks: int) -> Any:
    """A ``LocalTensorMode`` context simulating ranks ``0 .. ranks-1``."""
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
