"""Which process group the torch driver runs on: a real one, or its single-process simulation.

* **Real process group.** When ``torch.distributed`` already has a default group (``torchrun``,
  gloo, nccl), a mesh position is a rank: device ``"CPU:3"`` (``"CUDA:3"`` under nccl) is rank 3.
* **Single-process simulation.** Otherwise the first data operation starts a ``"fake"`` default
  group over ``LAYOUTCORE_CPU_DEVICES`` ranks, and every torch call on a mesh of ``n`` devices runs
  inside ``LocalTensorMode(n)`` (:func:`simulated_ranks`), under which each simulated rank holds
  its own data.

``LocalTensorMode`` is not thread-safe: entering it patches methods of the ``DeviceMesh`` *class*
for every thread, and its per-mode caches are keyed by mesh identity. Two threads in two modes at
once gave ``KeyError: 4``, ``AssertionError("Unexpectedly not in LocalTensorMode")`` and wrong data
(measured with torch 2.13). So every use of the mode, the driver's and the user's
(:func:`layoutcore_torch.spmd`), holds one process-wide re-entrant lock: simulated work from several
threads runs one thread at a time, and a thread may nest calls freely.
"""

from __future__ import annotations

import contextlib
import os
import threading
import warnings
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from layoutcore import UnsupportedLayoutError
from layoutcore.driver import CPU_DEVICES_ENV, Limitation, cpu_device_count

from . import _private

__all__ = ["SIMULATION_LOCK", "TESTED_TORCH", "ProcessGroupMode", "World", "simulated_ranks", "warn_if_untested"]

#: The torch releases (major, minor) this driver is tested on; ``pip install 'layoutcore[torch]'`` pins them.
TESTED_TORCH = ((2, 13),)

#: Held by every thread that runs torch code under ``LocalTensorMode`` (module docstring).
SIMULATION_LOCK = threading.RLock()

#: Process-wide facts (the default group is process-global; drivers may be re-created): whether a
#: torch driver started the fake group, and whether the "devices stand" warning was given.
_PROCESS = {"started_simulation": False, "warned": False}


@dataclass(frozen=True, slots=True)
class World:
    """What the default process group looks like to the driver.

    Attributes:
        group: torch's ``dist.group.WORLD`` object (identity tells a replaced group apart).
        simulated: whether it is the driver's fake group (then ``LocalTensorMode`` holds the data).
        size: world size (ranks).
        rank: this process's rank (0 in the simulation).
        device_type: ``"cpu"``, or ``"cuda"`` under nccl.
    """

    group: Any
    simulated: bool
    size: int
    rank: int
    device_type: str


@contextlib.contextmanager
def simulated_ranks(ranks: int | frozenset[int]) -> Iterator[None]:
    """``LocalTensorMode(ranks)`` under :data:`SIMULATION_LOCK` (see the module docstring), with the
    shared-write guard inside it: a write into a plain tensor from per-rank values is applied once when
    every rank's value is the same, else refused (:func:`_private.guarded_local_tensor_mode`)."""
    with SIMULATION_LOCK, _private.guarded_local_tensor_mode(ranks, _shared_write_error):
        yield


class ProcessGroupMode:
    """The driver's view of ``torch.distributed``'s default group, started lazily.

    Args:
        on_change: called (under the lock) when the default group was replaced or released, so
            the driver can drop every DeviceMesh made for the old one.
    """

    __slots__ = ("_dist", "_on_change", "_world")

    def __init__(self, on_change: Callable[[], None]) -> None:
        import torch.distributed as dist

        self._dist = dist
        self._on_change = on_change
        self._world: World | None = None

    def world(self) -> World:
        """The current default group, starting the simulation if there is none (first data use)."""
        dist = self._dist
        if not dist.is_initialized():
            with SIMULATION_LOCK:
                if not dist.is_initialized():
                    _private.require_simulation()
                    _warn_if_launched_by_torchrun()
                    _private.init_fake_group(cpu_device_count())
                    _PROCESS["started_simulation"] = True
        group = dist.group.WORLD
        world = self._world
        if world is not None and world.group is group:
            return world
        with SIMULATION_LOCK:
            backend = str(dist.get_backend(group))
            simulated = backend == _private.FAKE_BACKEND
            if simulated:
                _private.require_simulation()
                _private.guard_local_tensors(_outside_spmd_error)
            else:
                _private.unguard_local_tensors()
            device_type = "cuda" if "nccl" in backend else "cpu"
            previous = self._world
            world = World(group, simulated, dist.get_world_size(group), dist.get_rank(group), device_type)
            if previous is not None:  # another group replaced ours: its meshes and bindings are stale
                self._on_change()
            self._world = world
            _warn_if_devices_stand(world)
            return world

    def spmd(self, ranks: int) -> contextlib.AbstractContextManager[Any]:
        """Context for torch calls on a mesh of ``ranks`` devices: :func:`simulated_ranks` when simulated."""
        return simulated_ranks(ranks) if self.world().simulated else contextlib.nullcontext()

    def release_simulation(self) -> bool:
        """Destroy the fake default group a torch driver started; returns whether there was one."""
        dist = self._dist
        with SIMULATION_LOCK:
            if not (_PROCESS["started_simulation"] and dist.is_initialized()):
                return False
            if str(dist.get_backend()) != _private.FAKE_BACKEND:
                return False
            dist.destroy_process_group()
            _private.unguard_local_tensors()
            _PROCESS["started_simulation"] = False
            self._world = None
            self._on_change()
            return True


def warn_if_untested(version: str) -> None:
    """Warn once (``RuntimeWarning``) when torch ``version`` is outside :data:`TESTED_TORCH`.

    The driver keeps working there: its real-process-group mode uses public torch APIs only, and the
    simulation checks each private API it needs, raising ``DriverUnavailableError`` naming a missing one.
    """
    try:
        major, minor = (int(part) for part in version.split("+")[0].split(".")[:2])
    except ValueError:
        return
    if (major, minor) in TESTED_TORCH or _PROCESS.get("warned_version"):
        return
    _PROCESS["warned_version"] = True
    tested = ", ".join(f"{a}.{b}" for a, b in TESTED_TORCH)
    warnings.warn(
        f"layoutcore's torch driver is tested on torch {tested}; this is torch {version}. It should work (the "
        "simulation names any private torch API it misses), but run the conformance suite to be sure: "
        "LAYOUTCORE_DRIVER=torch python -m pytest --pyargs layoutcore_conformance",
        RuntimeWarning,
        stacklevel=4,
    )


def _outside_spmd_error(op: Any) -> UnsupportedLayoutError:
    # Outside LocalTensorMode DTensor code runs as rank 0 only: wrong data, not an error, in torch 2.13.
    return UnsupportedLayoutError(
        f"torch op {op} ran on the simulation's per-rank data outside LocalTensorMode, where DTensor computes "
        "as if every simulated rank were rank 0 (wrong data). Run torch ops on simulated DTensors under "
        "layoutcore_torch.spmd(mesh), e.g. `with layoutcore_torch.spmd(mesh): y = a @ b`.",
        driver="torch",
        feature=Limitation.OUTSIDE_SPMD,
    )


def _shared_write_error(op: Any, tensor: Any, why: str) -> UnsupportedLayoutError:
    # A real group gives each rank its own copy of that tensor; the simulation has one plain tensor for all.
    kind = "nn.Parameter" if type(tensor).__name__ == "Parameter" else "torch.Tensor"
    described = f"plain {kind} of shape {tuple(tensor.shape)} and dtype {str(tensor.dtype).removeprefix('torch.')}"
    return UnsupportedLayoutError(
        f"torch op {op} writes into a {described} (shared by every simulated rank) from per-rank values, and "
        f"{why}: in a real process group each rank's copy of that tensor would differ, which one plain tensor "
        "cannot hold. Make the tensor a DTensor (layoutcore_torch.distribute_module_parameters, or "
        "lc.distribute_tensor) so each rank holds its own, or write the same value on every rank.",
        driver="torch",
        feature=Limitation.PER_RANK_WRITE,
        value=tensor,
    )


def _warn_if_devices_stand(world: World) -> None:
    wanted = cpu_device_count()
    if _PROCESS["warned"] or world.size == wanted or (not world.simulated and not os.environ.get(CPU_DEVICES_ENV)):
        return
    _PROCESS["warned"] = True
    kind = "simulated (fake) process group" if world.simulated else f"{world.device_type} process group"
    warnings.warn(
        f"torch.distributed was already initialised with a {kind} of world size {world.size}; its "
        f"{world.size} ranks stand and {CPU_DEVICES_ENV}={wanted} is ignored.",
        RuntimeWarning,
        stacklevel=4,
    )


def _warn_if_launched_by_torchrun() -> None:
    if os.environ.get("TORCHELASTIC_RUN_ID") or ("RANK" in os.environ and "WORLD_SIZE" in os.environ):
        warnings.warn(
            f"This process looks launched as rank {os.environ.get('RANK')} of {os.environ.get('WORLD_SIZE')} "
            "(torchrun environment), but no process group is initialised, so layoutcore starts its "
            "single-process simulation. Call torch.distributed.init_process_group() before the first "
            "layoutcore data operation to use the real group.",
            RuntimeWarning,
            stacklevel=5,
        )
