"""The processes of a save, as the driver of its tensors reports them: rank, size, barrier.

The driver's :meth:`~layoutcore.driver.DriverHooks.process_group` hook knows the framework's
engine (``jax.distributed``, a torch process group, DTensor clients); this module names none. A
barrier that fails or times out (``LAYOUTCORE_CHECKPOINT_BARRIER_TIMEOUT`` seconds, default 300,
where the framework's own barrier could wait forever) raises ``CheckpointError`` and the save
commits nothing.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from .._config import checkpoint_barrier_timeout
from .._errors import CheckpointError
from ..driver._processes import SINGLE_PROCESS, ProcessGroup

__all__ = ["Engine", "engine_for"]


@dataclass(frozen=True, slots=True)
class Engine:
    """A save's process group, with the barrier's timeout read once from the environment."""

    group: ProcessGroup
    timeout_s: float

    @property
    def name(self) -> str:
        return self.group.name

    @property
    def rank(self) -> int:
        return self.group.rank

    @property
    def size(self) -> int:
        return self.group.size

    def barrier(self, tag: str, *, path: str = "") -> None:
        """Wait until every process reached the barrier named ``tag`` (a no-op for one process).

        Raises:
            CheckpointError: the framework's barrier failed or timed out (a peer died or hung);
                the checkpoint at ``path`` is then not committed.
        """
        if self.size == 1 or self.group.barrier is None:
            return
        try:
            self.group.barrier(tag, self.timeout_s)
        except Exception as exc:  # the framework's own error type (DistBackendError, XlaRuntimeError, ...)
            raise CheckpointError(
                f"Checkpoint {path}: process {self.rank} of {self.size} ({self.name}) failed at barrier {tag!r}; "
                f"a peer process died or hung, and nothing was committed ({type(exc).__name__}: {str(exc)[:300]})",
                path=path,
            ) from exc


def engine_for(driver: Any) -> Engine:
    """The engine of ``driver`` (a :class:`~layoutcore.Driver`), or one process for ``None``.

    Raises:
        ConfigurationError: ``LAYOUTCORE_CHECKPOINT_BARRIER_TIMEOUT`` is not a positive number (read
            only for several processes).
    """
    group = SINGLE_PROCESS if driver is None else driver.process_group()
    return Engine(group, checkpoint_barrier_timeout() if group.size > 1 else 0.0)
