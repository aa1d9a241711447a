"""The process group of several DTensor clients, and its barrier made of DTensor's own collectives.

TF has no barrier call for DTensor clients: :class:`DTensorBarrier` is an all-gather that completes
only once every client has sent its block, bounded in time because TF's collectives may wait for a
hung peer forever. A dead client is reported by TF's coordination service (its heartbeats stop;
about 10 s measured), a hung one by the barrier's ``timeout_s``.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import numpy as np

from layoutcore import Layout, Mesh

__all__ = ["DTensorBarrier", "all_gather_check"]


class DTensorBarrier:
    """A barrier of every DTensor client (``barrier(tag, timeout_s)``, :data:`layoutcore.driver.Barrier`).

    ``check`` runs the collective (:func:`all_gather_check` of the driver; a stand-in in tests). It
    runs in a daemon thread (``.numpy()`` waits with the GIL released) and the caller gives up after
    ``timeout_s`` seconds: the barrier then raises ``TimeoutError``, the thread stays blocked in TF,
    and this client's DTensor runtime is unusable (end the process).
    """

    def __init__(self, check: Callable[[], None]) -> None:
        self._check = check

    def __call__(self, tag: str, timeout_s: float) -> None:
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
        if not done.wait(timeout_s):
            raise TimeoutError(
                f"the other DTensor clients did not reach it within {timeout_s:g} s; "
                "this client's DTensor collectives stay blocked, so end the process"
            )
        if outcome[0] is not None:
            raise outcome[0]


def all_gather_check(driver: Any) -> None:
    """Every client packs its devices' blocks of ``arange(n)`` (int32, sharded over a 1-D mesh of all
    ``n`` devices of the cluster, so every client contributes), relayouts it to replicated (DTensor's
    all-gather) and reads it back, checking it equals ``arange(n)``.

    Raises:
        RuntimeError: the gathered value differs; TF's own errors when a peer died.
    """
    n = len(driver.list_devices())
    mesh = Mesh((n,), ("clients",))  # abstract: binds to every client's devices, in global order
    layout = Layout(("clients",), mesh)
    positions = driver.local_positions(mesh, driver.bind_mesh(mesh))
    packed = driver.pack([np.array([p], dtype=np.int32) for p in positions], layout, global_shape=(n,))
    gathered = driver.relayout(packed, Layout.replicated(mesh, 1))
    # ``.numpy()`` of the replicated DTensor waits with the GIL released (``dtensor.unpack`` would
    # hold it while waiting, and the caller's timeout could never fire)
    got = np.asarray(gathered.numpy())
    if not np.array_equal(got, np.arange(n, dtype=np.int32)):
        raise RuntimeError(f"DTensor barrier gathered {got.tolist()}, expected 0..{n - 1}")
