"""Canonical device names.

A device is stored as ``"TYPE:INDEX"`` (``"CPU:0"``) when it lives on the local task
(``/job:localhost/replica:0/task:0``), and as the full TF name
(``"/job:worker/replica:0/task:1/device:CPU:0"``) otherwise. Inputs may be any of
``"cpu:0"``, ``"CPU:0"``, ``"/device:CPU:0"``, a full TF name, or a native device object
(``jax.Device``, ``torch.device``, ``tf.DeviceSpec``), recognised by duck typing so that no
framework is imported.

Numbers are ASCII digits only, at most :data:`MAX_INDEX_DIGITS` of them, so that no input can
reach ``int()``'s 4 300-digit limit or name a device TF's int64 ids could not hold.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

from ._checks import short_repr
from ._errors import LayoutError

__all__ = [
    "MAX_INDEX_DIGITS",
    "canonical_device",
    "canonical_devices",
    "device_type",
    "full_device_name",
    "full_device_names",
]

#: Longest accepted device index / task / replica number (int64 has 19 digits).
MAX_INDEX_DIGITS = 18

_NUM = rf"[0-9]{{1,{MAX_INDEX_DIGITS}}}"
_SHORT = re.compile(rf"(?:/device:)?([A-Za-z_]+):({_NUM})", re.ASCII)
_FULL = re.compile(
    rf"/job:(?P<job>[A-Za-z0-9_.\-]+)/replica:(?P<replica>{_NUM})/task:(?P<task>{_NUM})"
    rf"/device:(?P<type>[A-Za-z_]+):(?P<index>{_NUM})",
    re.ASCII,
)
_LOCAL_PREFIX = "/job:localhost/replica:0/task:0"
#: The job names TF's device-name parser accepts (measured with tf.experimental.dtensor.Mesh.from_string on
#: TF 2.21: 'my-worker', 'w.1', '1w' and '_w' fail with "Failed to parse local_devices"); see
#: docs/framework-facts.md.
_JOB = re.compile(r"[A-Za-z][A-Za-z0-9_]*", re.ASCII)
# Already-canonical local names of one type, one per line: what nearly every caller passes and what
# every mesh string TF prints holds. Checking them with one regex pass keeps a million-device mesh
# linear and fast; anything else goes through canonical_device one by one.
_CANONICAL_RUN = re.compile(r"([A-Z][A-Z_]*):(?:0|[1-9][0-9]{0,17})\n(?:\1:(?:0|[1-9][0-9]{0,17})\n)*", re.ASCII)
_LOCAL_HEAD = "/job:localhost/replica:0/task:0/device:"
_FULL_LOCAL_RUN = re.compile(
    rf"{_LOCAL_HEAD}([A-Z][A-Z_]*):(?:0|[1-9][0-9]{{0,17}})\n(?:{_LOCAL_HEAD}\1:(?:0|[1-9][0-9]{{0,17}})\n)*",
    re.ASCII,
)


def canonical_device(device: Any) -> str:
    """Return the canonical name of ``device``.

    Raises:
        LayoutError: ``device`` is neither a recognised string nor a device object.
    """
    if isinstance(device, str):
        text = device.strip()
        if m := _SHORT.fullmatch(text):
            return f"{m.group(1).upper()}:{int(m.group(2))}"
        if m := _FULL.fullmatch(text):
            if not _JOB.fullmatch(m.group("job")):
                raise LayoutError(
                    f"Device {short_repr(device)}: job name {m.group('job')!r} is not one TF DTensor's "
                    "Mesh.from_string accepts (a letter, then letters, digits or '_'), so the mesh string would "
                    "not round-trip through TF. Rename the job, e.g. 'worker_1'.",
                    value=device,
                )
            kind, index = m.group("type").upper(), int(m.group("index"))
            prefix = f"/job:{m.group('job')}/replica:{int(m.group('replica'))}/task:{int(m.group('task'))}"
            if prefix == _LOCAL_PREFIX:
                return f"{kind}:{index}"
            return f"{prefix}/device:{kind}:{index}"
        raise LayoutError(
            "A device must look like 'CPU:0', 'cpu:0' or '/job:localhost/replica:0/task:0/device:CPU:0'. "
            f"Received: {short_repr(device)}",
            value=device,
        )
    # jax.Device: .platform + .id; torch.device: .type + .index; tf.DeviceSpec: .device_type + .device_index
    for type_attr, index_attr in (("platform", "id"), ("device_type", "device_index"), ("type", "index")):
        try:
            kind, number = getattr(device, type_attr, None), getattr(device, index_attr, None)
        except Exception:  # a property that raises is not a device attribute
            continue
        if isinstance(kind, str) and isinstance(number, int) and not isinstance(number, bool) and number >= 0:
            return canonical_device(f"{kind}:{number}")
    raise LayoutError(
        f"Cannot read a device name from {short_repr(device)} (type {type(device).__name__}).", value=device
    )


def canonical_devices(devices: Sequence[Any]) -> tuple[str, ...]:
    """Canonical names of ``devices``, all of one device type, in linear time.

    Already-canonical local names of one type (what nearly every caller passes, and what every
    mesh string TF prints holds) are checked in one regex pass; anything else one by one.

    Raises:
        LayoutError: a device that :func:`canonical_device` rejects, or devices of several types
            (``CPU`` and ``TPU``), which TF DTensor rejects too.
    """
    if all(type(d) is str for d in devices):
        joined = "\n".join(devices) + "\n"
        # A name holding a newline would be counted as two; the count check rules that out.
        if joined.count("\n") == len(devices):
            if _CANONICAL_RUN.fullmatch(joined):
                return tuple(devices)
            if _FULL_LOCAL_RUN.fullmatch(joined):  # TF's own spelling, as every mesh string holds it
                return tuple(joined.replace(_LOCAL_HEAD, "")[:-1].split("\n"))
    canonical = tuple(canonical_device(d) for d in devices)
    types = sorted({device_type(d) for d in canonical})
    if len(types) > 1:
        raise LayoutError(
            f"A mesh holds devices of one type; received {len(types)} types {types} (TF DTensor rejects "
            "this too). Build one mesh per device type.",
            value=types,
        )
    return canonical


def device_type(canonical: str) -> str:
    """The device type of a canonical name: ``"CPU:0"`` and ``"/job:w/.../device:CPU:0"`` give ``"CPU"``."""
    return canonical.rsplit(":", 2)[-2]


def full_device_name(canonical: str) -> str:
    """The TF full name of a canonical device name: ``"CPU:0"`` -> ``"/job:localhost/replica:0/task:0/device:CPU:0"``."""
    if canonical.startswith("/"):
        return canonical
    return f"{_LOCAL_PREFIX}/device:{canonical}"


def full_device_names(canonical: Sequence[str]) -> str:
    """``",".join(full_device_name(d) for d in canonical)``, without a Python call per local device."""
    if not any(d.startswith("/") for d in canonical):
        return _LOCAL_HEAD + ("," + _LOCAL_HEAD).join(canonical) if canonical else ""
    return ",".join(full_device_name(d) for d in canonical)
