"""The framework's own multi-process engine, as a checkpoint needs it: rank, size, barrier.

Found from the driver of the tensors being saved, without importing a framework that is not
loaded already: JAX (``jax.distributed``: ``process_index``/``process_count``, barrier
``multihost_utils.sync_global_devices``), torch (a real ``torch.distributed`` group, not
layoutcore's single-process simulation: ``get_rank``/``get_world_size``/``barrier``) and TF
DTensor multi-client (``dtensor.client_id``/``num_clients``; the barrier is a DTensor all-gather
over a mesh of every client's devices, see :class:`_TFBarrier`). Every other case (NumPy, TF in
one client, a single process) is one process.

A TF barrier is bounded in time: a dead client is reported by TF's coordination service (its
heartbeats stop; about 10 s measured), a hung one by the barrier's timeout,
``LAYOUTCORE_CHECKPOINT_BARRIER_TIMEOUT`` seconds (default 300). Either way the save raises
``CheckpointError`` and commits nothing.
"""

from __future__ import annotations

import sys
import threading
from dataclasses import dataclass
from typing import Any

from .._config import BARRIER_TIMEOUT_ENV, checkpoint_barrier_timeout
from .._errors import CheckpointError

__all__ = ["Engine", "engine_for"]


@dataclass(frozen=True, slots=True)
class Engine:
    """Rank and size of the process group, and its barrier (a no-op for one process)."""

    name: str
    rank: int
    size: int
    _barrier: Any = None

    def barrier(self, tag: str, *, path: str = "") -> None:
        """Wait until every process reached the barrier named ``tag``.

        Raises:
            CheckpointError: the framework's barrier failed or timed out (a peer died or hung);
                the checkpoint at ``path`` is then not committed.
        """
        if self.size > 1 and self._barrier is not None:
            try:
                self._barrier(tag)
            except Exception as exc:  # the framework's own error type (DistBackendError, XlaRuntimeError, ...)
                raise CheckpointError(
                    f"Checkpoint {path}: process {self.rank} of {self.size} ({self.name}) failed at barrier {tag!r}; "
                    f"a peer process died or hung, and nothing was committed ({type(exc).__name__}: {str(exc)[:300]})",
                    path=path,
                ) from exc


SINGLE = Engine("single", 0, 1)


def engine_for(driver_name: str | None) -> Engine:
    """The engine of ``driver_name``'s framework, or one process."""
    if driver_name == "jax" and "jax" in sys.modules:
        import jax

        if jax.process_count() > 1:
            from jax.experimental import multihost_utils

            return Engine("jax", jax.process_index(), jax.process_count(), multihost_utils.sync_global_devices)
    if driver_name == "torch" and "torch" in sys.modules:
        import torch.distributed as dist

        if dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1:
            from ..driver._registry import get_driver

            world = get_driver("torch").world()  # type: ignore[attr-defined]  # the torch driver's own method
            if not getattr(world, "simulated", False):
                return Engine("torch", dist.get_rank(), dist.get_world_size(), lambda tag: dist.barrier())
    if driver_name == "tensorflow" and "tensorflow" in sys.modules:
        from tensorflow.experimental import dtensor

        if dtensor.num_clients() > 1:
            return Engine(
                "tensorflow", dtensor.client_id(), dtensor.num_clients(), _TFBarrier(checkpoint_barrier_timeout())
            )
    return SINGLE


class _TFBarrier:
    """A barrier of every DTensor client, made of DTensor's own collectives, bounded in time.

    Each client packs its devices' blocks of ``arange(n)`` (int32, sharded over a 1-D mesh of
    all ``n`` devices of the cluster, so every client contributes), relayouts it to replicated
    (DTensor's all-gather, which completes only once every client has sent its blocks) and
    reads it back with ``.numpy()``, checking it equals ``arange(n)``. TF's collectives may wait
    for a hung peer forever, so the wait runs in a daemon thread (``.numpy()`` waits with the GIL
    released) and the caller gives up after ``timeout_s`` seconds: the barrier then raises, the
    thread stays blocked in TF, and this client's DTensor runtime is unusable (end the process).
    """

    def __init__(self, timeout_s: float, check: Any = None) -> None:
        self.timeout_s = timeout_s
        self._check = check or _tf_all_gather_check  # the collective (a stand-in in tests)

    def __call__(self, tag: str) -> None:
        outcome: list[BaseException | None] = []
        done = threading.Event()

        def run() -> None:
            try:
                self._check()
                outcome.append(None)
            except BaseException as exc:  # handed to the caller
                outcome.append(exc)
            finally:
                done.set()

        threading.Thread(target=run, name=f"layoutcore-barrier-{tag}", daemon=True).start()
        if not done.wait(self.timeout_s):
            raise TimeoutError(
                f"the other DTensor clients did not reach it within {self.timeout_s:g} s ({BARRIER_TIMEOUT_ENV}); "
                "this client's DTensor collectives stay blocked, so end the process"
            )
        if outcome[0] is not None:
            raise outcome[0]


def _tf_all_gather_check() -> None:
    import numpy as np

    from .._layout import Layout
    from .._mesh import Mesh
    from ..driver._registry import get_driver

    drv = get_driver("tensorflow")
    n = len(drv.list_devices())
    mesh = Mesh((n,), ("clients",))  # abstract: binds to every client's devices, in global order
    layout = Layout(("clients",), mesh)
    positions = drv.local_positions(mesh, drv.bind_mesh(mesh))
    packed = drv.pack([np.array([p], dtype=np.int32) for p in positions], layout, global_shape=(n,))
    gathered = drv.relayout(packed, Layout.replicated(mesh, 1))
    # ``.numpy()`` of the replicated DTensor waits with the GIL released (``dtensor.unpack`` would
    # hold it while waiting, and the caller's timeout could never fire)
    got = np.asarray(gathered.numpy())
    if not np.array_equal(got, np.arange(n, dtype=np.int32)):
        raise RuntimeError(f"DTensor barrier gathered {got.tolist()}, expected 0..{n - 1}")
