"""Canonical device names.

A device is stored as ``"TYPE:INDEX"`` (``"CPU:0"``) when it lives on the local task
(``/job:localhost/replica:0/task:0``), and as the full TF name
(``"/job:worker/replica:0/task:1/device:CPU:0"``) otherwise. Inputs may be any of
``"cpu:0"``, ``"CPU:0"``, ``"/device:CPU:0"``, a full TF name, or a native device object
(``jax.Device``, ``torch.device``, ``tf.DeviceSpec``), recognised by duck typing so that no
framework is imported.
"""

from __future__ import annotations

import re
from typing import Any

from ._errors import LayoutError

__all__ = ["canonical_device", "full_device_name"]

_SHORT = re.compile(r"^(?:/device:)?([A-Za-z_]+):(\d+)$")
_FULL = re.compile(
    r"^/job:(?P<job>[^/]+)/replica:(?P<replica>\d+)/task:(?P<task>\d+)/device:(?P<type>[A-Za-z_]+):(?P<index>\d+)$"
)
_LOCAL_PREFIX = "/job:localhost/replica:0/task:0"


def canonical_device(device: Any) -> str:
    """Return the canonical name of ``device``.

    Raises:
        LayoutError: ``device`` is neither a recognised string nor a device object.
    """
    if isinstance(device, str):
        text = device.strip()
        if m := _SHORT.match(text):
            return f"{m.group(1).upper()}:{int(m.group(2))}"
        if m := _FULL.match(text):
            dtype, index = m.group("type").upper(), int(m.group("index"))
            prefix = f"/job:{m.group('job')}/replica:{int(m.group('replica'))}/task:{int(m.group('task'))}"
            if prefix == _LOCAL_PREFIX:
                return f"{dtype}:{index}"
            return f"{prefix}/device:{dtype}:{index}"
        raise LayoutError(
            "A device must look like 'CPU:0', 'cpu:0' or '/job:localhost/replica:0/task:0/device:CPU:0'. "
            f"Received: {device!r}",
            value=device,
        )
    # jax.Device: .platform + .id; torch.device: .type + .index; tf.DeviceSpec: .device_type + .device_index
    for type_attr, index_attr in (("platform", "id"), ("device_type", "device_index"), ("type", "index")):
        kind, number = getattr(device, type_attr, None), getattr(device, index_attr, None)
        if isinstance(kind, str) and isinstance(number, int):
            return f"{kind.upper()}:{number}"
    raise LayoutError(f"Cannot read a device name from {device!r} (type {type(device).__name__}).", value=device)


def full_device_name(canonical: str) -> str:
    """The TF full name of a canonical device name: ``"CPU:0"`` -> ``"/job:localhost/replica:0/task:0/device:CPU:0"``."""
    if canonical.startswith("/"):
        return canonical
    return f"{_LOCAL_PREFIX}/device:{canonical}"
