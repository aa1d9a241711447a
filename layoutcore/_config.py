"""Settings read from the environment, and the error a bad setting raises.

Framework-free and import-light: drivers read :func:`cpu_device_count` before their framework
starts, so it must not import anything of theirs.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Callable
from typing import Any, TypeVar

from ._errors import LayoutcoreError

__all__ = [
    "BARRIER_TIMEOUT_ENV",
    "CPU_DEVICES_ENV",
    "DEFAULT_BARRIER_TIMEOUT_S",
    "DEFAULT_CPU_DEVICES",
    "MAX_DEFAULT_THREADS",
    "THREADS_ENV",
    "ConfigurationError",
    "checkpoint_barrier_timeout",
    "checkpoint_threads",
    "cpu_device_count",
    "environ_setting",
]

#: Environment variable: how many CPU devices each driver exposes in one process.
CPU_DEVICES_ENV = "LAYOUTCORE_CPU_DEVICES"
#: Devices per driver when :data:`CPU_DEVICES_ENV` is unset or empty.
DEFAULT_CPU_DEVICES = 8
#: Environment variable: seconds a TF multi-client checkpoint barrier waits for the other clients.
BARRIER_TIMEOUT_ENV = "LAYOUTCORE_CHECKPOINT_BARRIER_TIMEOUT"
#: Seconds a TF multi-client barrier waits when :data:`BARRIER_TIMEOUT_ENV` is unset or empty.
DEFAULT_BARRIER_TIMEOUT_S = 300.0

#: Environment variable: worker threads of a checkpoint save or load.
THREADS_ENV = "LAYOUTCORE_CHECKPOINT_THREADS"
#: Most worker threads a save or load starts when :data:`THREADS_ENV` is unset (fewer on fewer cores).
MAX_DEFAULT_THREADS = 4

_Number = TypeVar("_Number", int, float)


class ConfigurationError(LayoutcoreError, ValueError):
    """An environment variable or setting holds a bad value."""


def cpu_device_count() -> int:
    """``LAYOUTCORE_CPU_DEVICES`` (default 8): CPU devices a driver exposes in one process.

    Raises:
        ConfigurationError: the variable is not a positive integer.
    """
    return _positive_setting(CPU_DEVICES_ENV, DEFAULT_CPU_DEVICES, int, "a positive integer")


def checkpoint_barrier_timeout() -> float:
    """``LAYOUTCORE_CHECKPOINT_BARRIER_TIMEOUT`` (default 300): seconds a TF multi-client checkpoint
    barrier waits for the other clients.

    Raises:
        ConfigurationError: the variable is not a positive number.
    """
    return _positive_setting(BARRIER_TIMEOUT_ENV, DEFAULT_BARRIER_TIMEOUT_S, float, "a positive number of seconds")


def checkpoint_threads() -> int:
    """``LAYOUTCORE_CHECKPOINT_THREADS``: worker threads of a checkpoint save or load (default: the
    cores this process may run on, at most 4; 1 reads and writes on the calling thread only).

    Raises:
        ConfigurationError: the variable is not a positive integer.
    """
    default = min(MAX_DEFAULT_THREADS, len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else 1)
    return _positive_setting(THREADS_ENV, max(1, default), int, "a positive integer")


def environ_setting(name: str) -> str | None:
    """``os.environ.get(name)``, for a setting read on every call (the active driver, JAX's relayout mode).

    Where ``name`` is unset (the default), ``os.environ.get`` raises and catches a ``KeyError`` inside
    (0.7 us). CPython's ``os.environ`` keeps the encoded table it reads in ``_data``, and every write
    through ``os.environ`` (``monkeypatch.setenv`` too) updates it: read it directly where it is there.
    """
    environ = os.environ
    data = getattr(environ, "_data", None)
    if not isinstance(data, dict):
        return environ.get(name)
    raw = data.get(_encoded(name))
    return None if raw is None else _decoded(raw)


# Keyed by a setting's name (a str) and by its raw value (bytes): immutable, and their codings never change.
# Bounded: a process cycling through values decodes again.
@functools.lru_cache(maxsize=64)
def _encoded(name: str) -> Any:
    return os.environ.encodekey(name)


@functools.lru_cache(maxsize=64)
def _decoded(raw: Any) -> str:
    decoded: str = os.environ.decodevalue(raw)
    return decoded


def _positive_setting(env: str, default: _Number, parse: Callable[[str], _Number], what: str) -> _Number:
    """``env`` parsed by ``parse`` and > 0, or ``default`` where it is unset or empty."""
    raw = os.environ.get(env, "").strip()
    if not raw:
        return default
    value: _Number | None
    try:
        value = parse(raw)
    except ValueError:
        value = None
    if value is None or not value > 0:  # not > 0 also catches NaN
        raise ConfigurationError(f"{env} must be {what}. Received: {raw!r}", value=raw)
    return value
