"""Settings read from the environment, and the error a bad setting raises.

Framework-free and import-light: drivers read :func:`cpu_device_count` before their framework
starts, so it must not import anything of theirs.
"""

from __future__ import annotations

import os

from ._errors import LayoutcoreError

__all__ = ["CPU_DEVICES_ENV", "DEFAULT_CPU_DEVICES", "ConfigurationError", "cpu_device_count"]

#: Environment variable: how many CPU devices each driver exposes in one process.
CPU_DEVICES_ENV = "LAYOUTCORE_CPU_DEVICES"
#: Devices per driver when :data:`CPU_DEVICES_ENV` is unset or empty.
DEFAULT_CPU_DEVICES = 8


class ConfigurationError(LayoutcoreError, ValueError):
    """An environment variable or setting holds a bad value."""


def cpu_device_count() -> int:
    """``LAYOUTCORE_CPU_DEVICES`` (default 8): CPU devices a driver exposes in one process.

    Raises:
        ConfigurationError: the variable is not a positive integer.
    """
    raw = os.environ.get(CPU_DEVICES_ENV, "").strip()
    if not raw:
        return DEFAULT_CPU_DEVICES
    try:
        count = int(raw)
    except ValueError:
        count = 0
    if count <= 0:
        raise ConfigurationError(f"{CPU_DEVICES_ENV} must be a positive integer. Received: {raw!r}", value=raw)
    return count
