"""The framework's own multi-process engine, as a checkpoint needs it: rank, size, barrier.

Found from the driver of the tensors being saved, without importing a framework that is not
loaded already: JAX (``jax.distributed``: ``process_index``/``process_count``, barrier
``multihost_utils.sync_global_devices``) and torch (a real ``torch.distributed`` group, not
layoutcore's single-process simulation: ``get_rank``/``get_world_size``/``barrier``). Every other
case (NumPy, TF in one client, a single process) is one process; a multi-client TF save is
refused with ``CheckpointError`` (its clients' commits are not coordinated yet).
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from typing import Any

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
            # each client would commit its own part: refuse rather than leave a partial checkpoint
            raise CheckpointError(
                f"checkpoint.save from {dtensor.num_clients()} TF DTensor clients is not supported yet: the "
                "clients' writes are not coordinated. Save from a single client, or from JAX or torch processes.",
                path="",
            )
    return SINGLE
