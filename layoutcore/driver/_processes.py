"""The framework's process group as the core sees it: this process's rank, the group's size, a barrier.

A driver returns one from :meth:`~layoutcore.driver.DriverHooks.process_group`; the core (a
checkpoint save: every process writes its blocks, then one commits) uses it without naming a
framework.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

__all__ = ["SINGLE_PROCESS", "Barrier", "ProcessGroup"]

#: ``barrier(tag, timeout_s)``: return once every process of the group called it with ``tag``;
#: raise (any exception) when a peer died, or after ``timeout_s`` seconds where the framework's
#: own barrier could otherwise wait forever.
Barrier = Callable[[str, float], None]


@dataclass(frozen=True, slots=True)
class ProcessGroup:
    """The processes that run one program together (a JAX ``jax.distributed`` job, a torch
    process group, DTensor clients).

    Attributes:
        rank: this process, ``0 <= rank < size``.
        size: how many processes; 1 for a single-process run (a simulated one included).
        barrier: waits for every process (see :data:`Barrier`); ``None`` only when ``size == 1``.
        name: names the engine in messages, e.g. ``"torch"``.

    Raises:
        ValueError: ``rank`` outside ``range(size)``, or several processes without a barrier.
    """

    rank: int = 0
    size: int = 1
    barrier: Barrier | None = None
    name: str = "single"

    def __post_init__(self) -> None:
        if not 0 <= self.rank < self.size:
            raise ValueError(f"ProcessGroup: rank {self.rank} is outside 0..{self.size - 1}")
        if self.size > 1 and self.barrier is None:
            raise ValueError(f"ProcessGroup: {self.size} processes need a barrier")


#: One process (the default of :meth:`~layoutcore.driver.DriverHooks.process_group`).
SINGLE_PROCESS = ProcessGroup()
