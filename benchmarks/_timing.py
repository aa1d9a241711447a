"""Side-by-side timing shared by the framework-overhead benchmarks (bench_jax, bench_tensorflow),
the peak-RSS sampler of the checkpoint benchmarks, and where a ``--quick`` run writes (:func:`quick_path`)."""

from __future__ import annotations

import contextlib
import ctypes
import gc
import os
import statistics
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any


def _no_sync(result: Any) -> None:
    return None


def side_by_side(
    native: Callable[..., Any],
    ours: Callable[..., Any],
    reps: int,
    warmup: int,
    *,
    sync: Callable[[Any], Any] = _no_sync,
    fresh: Callable[[], Any] | None = None,
) -> dict[str, float]:
    """Median seconds of ``native()`` and ``ours()``, run alternately, alternating which goes first.

    ``sync(result)`` waits for an asynchronous framework to finish (JAX: ``block_until_ready``) and
    is inside the timed region. With ``fresh``, each call gets ``fresh()``'s result as its argument,
    made before the clock starts (an input no earlier call has cached anything on). Returns the
    medians ``native_s``, ``layoutcore_s``, ``ratio`` (ours / native) and ``overhead_us``, and the
    minima ``native_min_s``, ``layoutcore_min_s`` and ``ratio_min`` (on a shared machine the minimum
    is the least disturbed run).
    """

    def timed(fn: Callable[..., Any]) -> float:
        args = () if fresh is None else (fresh(),)
        start = time.perf_counter()
        sync(fn(*args))
        return time.perf_counter() - start

    for _ in range(warmup):
        timed(native)
        timed(ours)
    t_native: list[float] = []
    t_ours: list[float] = []
    for i in range(reps):
        first, second = ((native, t_native), (ours, t_ours)) if i % 2 else ((ours, t_ours), (native, t_native))
        first[1].append(timed(first[0]))
        second[1].append(timed(second[0]))
    n, o = statistics.median(t_native), statistics.median(t_ours)
    n_min, o_min = min(t_native), min(t_ours)
    return {
        "native_s": n,
        "layoutcore_s": o,
        "ratio": o / n,
        "overhead_us": (o - n) * 1e6,
        "native_min_s": n_min,
        "layoutcore_min_s": o_min,
        "ratio_min": o_min / n_min,
    }


def malloc_trim() -> None:
    """Hand glibc's free memory back to the kernel (``malloc_trim(0)``; a no-op without glibc)."""
    with contextlib.suppress(OSError, AttributeError):  # not glibc: nothing to trim
        ctypes.CDLL(None).malloc_trim(0)


def _rss() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def peak_rss_growth(fn: Callable[[], Any]) -> int:
    """Peak resident memory while ``fn()`` runs (sampled from ``/proc/self/statm`` by a thread every
    millisecond) minus the resident memory before it, in bytes; ``fn``'s result is dropped after."""
    gc.collect()
    malloc_trim()  # freed memory glibc kept would otherwise serve fn's allocations without RSS growth
    peak, stop = [0], threading.Event()

    def sample() -> None:
        while not stop.is_set():
            peak[0] = max(peak[0], _rss())
            time.sleep(0.001)

    base = _rss()
    th = threading.Thread(target=sample)
    th.start()
    try:
        out = fn()
        peak[0] = max(peak[0], _rss())
    finally:
        stop.set()
        th.join()
    del out
    return peak[0] - base


def quick_path(path: Path, quick: bool) -> Path:
    """Where a run writes: ``path``, or for a ``--quick`` smoke run ``NAME.quick.json`` beside it, never over
    the committed result (``tests/test_benchmark_results.py`` shows no ``*.quick.json``; git ignores them)."""
    return path.with_name(f"{path.stem}.quick{path.suffix}") if quick else path
