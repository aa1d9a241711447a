"""Thread safety: 8 threads distribute, relayout and read back at once, and every result is right.

Each thread runs its own sequence of even layouts (every driver holds them) on a mesh it shares with
other threads, so the driver's per-mesh state (bindings, native meshes, records) is hit concurrently:
``distribute_tensor``, ``relayout`` to another layout and to the replicated one, ``to_numpy``, and a
``Variable`` assign. Every tensor's per-device data is read by the adapter and compared with the oracle.

A deadlock must fail, not hang CI. The threads are daemons joined with a deadline
(``LAYOUTCORE_CONFORMANCE_THREADS_S``, default 120 s): threads still running after it fail the test with
their stacks, and the session ends with ``os._exit`` once pytest has reported (see
``conftest.pytest_unconfigure``), since a thread stuck inside a framework call cannot be stopped. A
deadlock inside a framework call that holds the GIL (TF DTensor's eager ``relayout``, measured) stops the
test's own thread too; for that a watchdog process, 15 s after the deadline, writes a message naming the
driver to stderr and sends this process ``SIGABRT``, on which faulthandler prints every thread's stack and
the process exits with a failure status.
"""

from __future__ import annotations

import contextlib
import faulthandler
import os
import subprocess
import sys
import threading
import traceback
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest

import layoutcore as lc

from ._oracle import Case, assert_device_data
from ._strategies import device_budget
from .adapter import ConformanceAdapter

THREADS = 8
ROUNDS = 6
DEADLINE_ENV = "LAYOUTCORE_CONFORMANCE_THREADS_S"
DEFAULT_DEADLINE_S = 120.0

#: Threads of a timed-out run, still alive: conftest ends the process after pytest's report.
STUCK: list[threading.Thread] = []

#: (mesh shape, axis names, layout specs to cycle through) per mesh; shapes divide evenly.
MESHES: list[tuple[tuple[int, ...], tuple[str, ...], list[tuple[Any, ...]]]] = [
    ((4, 2), ("x", "y"), [("x", "y"), ("y", "x"), ("x", None), (None, "y"), (None, None)]),
    ((2, 2), ("a", "b"), [("a", None), (None, "b"), ("a", "b"), (None, None)]),
    ((8,), ("d",), [("d", None), (None, "d"), (None, None)]),
]


#: Seconds the watchdog process gives the join path (which reports better) before it aborts the process.
WATCHDOG_GRACE_S = 15.0
_WATCHDOG = r"""
import os, select, signal, sys
pid, timeout, message = int(sys.argv[1]), float(sys.argv[2]), sys.argv[3]
ready, _, _ = select.select([sys.stdin], [], [], timeout)
if not ready:
    sys.stderr.write(message + "\n")
    sys.stderr.flush()
    try:
        os.kill(pid, signal.SIGABRT)
    except ProcessLookupError:
        pass
"""


@contextlib.contextmanager
def _abort_if_stuck(seconds: float, message: str) -> Iterator[None]:
    """Abort this process (stacks by faulthandler) unless the block ends within ``seconds``, even when a
    framework call holds the GIL; a separate process keeps the time."""
    if not faulthandler.is_enabled():
        faulthandler.enable(all_threads=True)
    watchdog = subprocess.Popen(
        [sys.executable, "-c", _WATCHDOG, str(os.getpid()), repr(seconds), message], stdin=subprocess.PIPE
    )
    try:
        yield
    finally:
        assert watchdog.stdin is not None
        watchdog.stdin.close()  # the block ended: the watchdog exits without a word
        watchdog.wait()


def _deadline() -> float:
    raw = os.environ.get(DEADLINE_ENV, "").strip()
    return float(raw) if raw else DEFAULT_DEADLINE_S


def _work(thread: int, adapter: ConformanceAdapter, barrier: threading.Barrier) -> int:
    """One thread's rounds; returns how many results it checked. Raises on the first wrong one."""
    budget = device_budget()
    meshes = [m for m in MESHES if int(np.prod(m[0])) <= budget]
    shape_m, names, specs = meshes[thread % len(meshes)]
    rows = 8 * (1 + thread % 3)
    checked = 0
    barrier.wait()  # start together, so the calls really overlap
    for round_ in range(ROUNDS):
        first = specs[(thread + round_) % len(specs)]
        second = specs[(thread + round_ + 1) % len(specs)]
        source = Case(shape_m, names, first, (rows, 8), "float32")
        target = source.with_spec(second)
        replicated = source.with_spec((None, None))
        x = source.values() + np.float32(1000 * thread + round_)
        tensor = lc.distribute_tensor(x, source.layout())
        assert_device_data(adapter, tensor, x, source, what=f"thread {thread} round {round_}: distribute_tensor")
        moved = lc.relayout(tensor, target.layout())
        assert_device_data(adapter, moved, x, target, what=f"thread {thread} round {round_}: relayout")
        gathered = lc.relayout(moved, replicated.layout())
        assert_device_data(adapter, gathered, x, replicated, what=f"thread {thread} round {round_}: to replicated")
        for name, t in (("source", tensor), ("moved", moved), ("replicated", gathered)):
            out = lc.to_numpy(t)
            assert np.array_equal(out, x), f"thread {thread} round {round_}: to_numpy({name}) differs from the value"
        variable = lc.Variable(x, target.layout())
        variable.assign(lc.distribute_tensor(-x, target.layout()))
        assert_device_data(adapter, variable.value, -x, target, what=f"thread {thread} round {round_}: Variable")
        checked += 5
    return checked


def test_eight_threads_at_once(driver: lc.driver.Driver, adapter: ConformanceAdapter) -> None:
    barrier = threading.Barrier(THREADS, timeout=_deadline())
    results: dict[int, int] = {}
    errors: dict[int, BaseException] = {}

    def run(thread: int) -> None:
        try:
            results[thread] = _work(thread, adapter, barrier)
        except BaseException as exc:  # reported below, with the thread's number
            errors[thread] = exc
            barrier.abort()

    threads = [threading.Thread(target=run, args=(i,), name=f"conformance-{i}", daemon=True) for i in range(THREADS)]
    message = (
        f"layoutcore conformance: test_threads: {THREADS} threads on the {driver.name} driver did not finish within "
        f"{_deadline() + WATCHDOG_GRACE_S:g} s and this process's own thread is blocked too (a deadlock inside a "
        f"framework call that holds the GIL). Aborting; faulthandler prints every thread's stack below."
    )
    with _abort_if_stuck(_deadline() + WATCHDOG_GRACE_S, message):
        for t in threads:
            t.start()
        deadline = _deadline()
        for t in threads:
            t.join(timeout=deadline)  # the first join takes the time; the rest find their threads done or stuck
            deadline = 0.01 if t.is_alive() else deadline
    stuck = [t for t in threads if t.is_alive()]
    if stuck:
        STUCK.extend(stuck)
        frames = sys._current_frames()
        stacks = "\n".join(
            f"--- {t.name} ---\n" + "".join(traceback.format_stack(frames[t.ident])) for t in stuck if t.ident in frames
        )
        pytest.fail(
            f"{len(stuck)} of {THREADS} threads still running after {_deadline():g} s ({DEADLINE_ENV}): a deadlock "
            f"in the {driver.name} driver or its framework. Their stacks:\n{stacks}",
            pytrace=False,
        )
    if errors:
        first = min(errors)
        lines = [f"thread {i}: {type(e).__name__}: {e}" for i, e in sorted(errors.items())]
        raise AssertionError(f"{len(errors)} of {THREADS} threads failed:\n" + "\n".join(lines)) from errors[first]
    assert sorted(results) == list(range(THREADS)) and all(n == 5 * ROUNDS for n in results.values()), results
