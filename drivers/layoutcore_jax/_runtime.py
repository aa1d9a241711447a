"""Starting JAX with layoutcore's CPU device count (``LAYOUTCORE_CPU_DEVICES``)."""

from __future__ import annotations

import os
import threading
import warnings

from layoutcore.driver import CPU_DEVICES_ENV, cpu_device_count

__all__ = ["configure_cpu_devices", "mark_configured"]

_lock = threading.Lock()
_configured = False


def _jax_cpu_setting() -> int:
    """JAX's ``jax_num_cpu_devices`` (-1: not set)."""
    import jax

    return int(jax.config.jax_num_cpu_devices)


def _user_chose_count() -> bool:
    """Whether the user already told JAX how many CPU devices to make (layoutcore then keeps out)."""
    return _jax_cpu_setting() > 0 or "xla_force_host_platform_device_count" in os.environ.get("XLA_FLAGS", "")


def configure_cpu_devices() -> None:
    """Apply ``LAYOUTCORE_CPU_DEVICES`` (default 8) as ``jax_num_cpu_devices``, once per process.

    It must run before JAX starts its backends (its first operation). Precedence:

    1. An explicit JAX setting (``jax.config.update("jax_num_cpu_devices", n)``,
       ``JAX_NUM_CPU_DEVICES``, or ``XLA_FLAGS=--xla_force_host_platform_device_count``) is kept:
       layoutcore never overrides JAX's own knob; a set ``LAYOUTCORE_CPU_DEVICES`` that disagrees
       is warned about.
    2. Otherwise layoutcore's count is applied.
    3. If JAX has already started, its devices stand, and a ``RuntimeWarning`` says so (once per
       process) when their number differs from the count asked for.

    Raises:
        ConfigurationError: ``LAYOUTCORE_CPU_DEVICES`` is not a positive integer.
    """
    global _configured
    if _configured:
        return
    with _lock:
        if _configured:
            return
        import jax

        wanted = cpu_device_count()
        if _user_chose_count():
            if os.environ.get(CPU_DEVICES_ENV, "").strip() and _jax_cpu_setting() not in (-1, wanted):
                warnings.warn(
                    f"{CPU_DEVICES_ENV}={wanted} is ignored: JAX was configured for "
                    f"{_jax_cpu_setting()} CPU devices (jax_num_cpu_devices), which layoutcore keeps.",
                    RuntimeWarning,
                    stacklevel=3,
                )
        else:
            try:
                jax.config.update("jax_num_cpu_devices", wanted)
            except RuntimeError:
                # JAX refuses once its backends exist: its devices stand.
                have = len(jax.devices("cpu"))
                if have != wanted:
                    warnings.warn(
                        f"JAX had already started with {have} CPU device(s) before layoutcore could apply "
                        f"{CPU_DEVICES_ENV}={wanted}; its devices stand. Use the jax driver (or set "
                        "jax_num_cpu_devices) before any other JAX operation to get the count you ask for.",
                        RuntimeWarning,
                        stacklevel=3,
                    )
        _configured = True


def mark_configured() -> None:
    """Record that the CPU device count was settled elsewhere (``initialize_distributed``)."""
    global _configured
    _configured = True
