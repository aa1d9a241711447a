"""Multi-process start-up: ``jax.distributed.initialize`` with a bounded, explained failure."""

from __future__ import annotations

import os
import sys
import threading
import time

from layoutcore import ConfigurationError, LayoutcoreError
from layoutcore.driver import cpu_device_count

from . import _runtime

__all__ = ["DistributedInitError", "initialize_distributed"]

#: Seconds the watchdog gives JAX after ``timeout_s`` to abort by itself before aborting for it.
ABORT_GRACE_S = 15.0


class DistributedInitError(LayoutcoreError, RuntimeError):
    """``initialize_distributed`` was called too late (JAX already started) or twice."""


def _check_int(name: str, value: object, minimum: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ConfigurationError(f"{name} must be an int >= {minimum}. Received: {name}={value!r}", value=value)
    return value


def initialize_distributed(
    coordinator_address: str,
    num_processes: int,
    process_id: int,
    *,
    timeout_s: int = 300,
    local_device_count: int | None = None,
    heartbeat_timeout_s: int = 100,
) -> None:
    """Join a multi-process JAX run (``jax.distributed.initialize``), before any other JAX use.

    Every process calls it with the same ``coordinator_address`` and ``num_processes`` and its
    own ``process_id``; process 0 hosts the coordinator at that address. Afterwards
    ``layoutcore.list_devices(driver="jax")`` lists every process's devices (process 1's CPU
    devices are numbered from 2048 on CPU), an abstract mesh binds to them in that order, and
    ``unpack``/``pack`` hold this process's components only.

    **A missing peer kills the process.** If not all ``num_processes`` processes register within
    ``timeout_s`` seconds, JAX does not raise: its coordination client *aborts the process*
    (SIGABRT, exit status 134, or ``-6`` from ``subprocess``), and no ``try``/``except`` can catch
    it. So that the cause is not lost in JAX's log ("another task died ... DEADLINE_EXCEEDED"), a
    watchdog prints a ``layoutcore_jax: ... no peer ...`` line on stderr when ``timeout_s``
    passes, and aborts the process itself if JAX has not done so :data:`ABORT_GRACE_S` seconds
    later. The whole failure therefore ends within ``timeout_s + ABORT_GRACE_S`` seconds (JAX
    itself takes about ``timeout_s + 5``). Run workers under a supervisor (``timeout``, a job
    scheduler) that reports the exit status. After start-up, a peer that stops answering for
    ``heartbeat_timeout_s`` seconds aborts the others the same way.

    Args:
        coordinator_address: ``"host:port"`` of process 0, e.g. ``"127.0.0.1:12345"``.
        num_processes: how many processes take part (>= 1).
        process_id: this process's index, ``0 .. num_processes - 1``.
        timeout_s: seconds to wait for every process to register (>= 1).
        local_device_count: CPU devices this process contributes (``jax_num_cpu_devices``);
            default ``LAYOUTCORE_CPU_DEVICES`` (8). Ignored on GPU/TPU, where JAX uses the
            local accelerators.
        heartbeat_timeout_s: seconds without a heartbeat after which a peer counts as dead.

    Raises:
        ConfigurationError: a bad argument (named in the message).
        DistributedInitError: JAX has already started in this process (``initialize_distributed``
            must come before any JAX operation, the JAX driver's first use included), or it was
            already initialised.
    """
    if not isinstance(coordinator_address, str) or ":" not in coordinator_address:
        raise ConfigurationError(
            f"coordinator_address must be 'host:port'. Received: {coordinator_address!r}", value=coordinator_address
        )
    _check_int("num_processes", num_processes, 1)
    _check_int("process_id", process_id, 0)
    if process_id >= num_processes:
        raise ConfigurationError(
            f"process_id must be in 0..{num_processes - 1} for num_processes={num_processes}. Received: {process_id}",
            value=process_id,
        )
    _check_int("timeout_s", timeout_s, 1)
    _check_int("heartbeat_timeout_s", heartbeat_timeout_s, 1)
    if local_device_count is not None:
        _check_int("local_device_count", local_device_count, 1)

    import jax

    try:
        if local_device_count is not None:
            jax.config.update("jax_num_cpu_devices", local_device_count)
        elif not _runtime._user_chose_count():
            jax.config.update("jax_num_cpu_devices", cpu_device_count())
    except RuntimeError as exc:
        raise DistributedInitError(
            "initialize_distributed must run before any JAX operation (including the jax driver's first use), "
            f"but JAX has already started in this process: {exc}",
            value=coordinator_address,
        ) from exc

    _runtime.mark_configured()  # the count is settled: the driver must not apply LAYOUTCORE_CPU_DEVICES again

    done = threading.Event()
    started = time.monotonic()

    def watchdog() -> None:
        if done.wait(timeout_s):
            return
        sys.stderr.write(
            f"layoutcore_jax: process {process_id} of {num_processes} found no peer: not every process registered "
            f"with the coordinator at {coordinator_address} within timeout_s={timeout_s} s. JAX now aborts this "
            "process (SIGABRT); no Python exception can be raised. Check that all processes were started with the "
            "same coordinator address and num_processes, and distinct process ids.\n"
        )
        sys.stderr.flush()
        if done.wait(ABORT_GRACE_S):
            return
        sys.stderr.write(
            f"layoutcore_jax: JAX did not abort {time.monotonic() - started:.0f} s after start-up began; "
            f"aborting process {process_id} now.\n"
        )
        sys.stderr.flush()
        os.abort()

    threading.Thread(target=watchdog, name="layoutcore_jax-init-watchdog", daemon=True).start()
    try:
        jax.distributed.initialize(
            coordinator_address=coordinator_address,
            num_processes=num_processes,
            process_id=process_id,
            initialization_timeout=timeout_s,
            heartbeat_timeout_seconds=heartbeat_timeout_s,
        )
    except RuntimeError as exc:
        raise DistributedInitError(f"jax.distributed.initialize failed: {exc}", value=coordinator_address) from exc
    finally:
        done.set()
