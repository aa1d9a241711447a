"""CRC-32C (Castagnoli), the checksum of zarr v3's ``crc32c`` codec: checkpoints' chunks and indexes,
and the pieces of a transfer with ``verify=True``. Framework-free, so both can use it.

``google-crc32c`` (a zarr-python dependency; hardware CRC32 instructions, about 14 GB/s here)
does the work. Its Python API holds the GIL for anything but ``bytes`` of 1 MiB or more, so a
load's reader threads would take turns; where its shared library is found, the same C function is
called through :mod:`ctypes`, which releases the GIL for the call. A table-driven pure-Python
fallback keeps small indexes checkable without the wheel.

Without the wheel, or with a google-crc32c that fell back to its own pure-Python code (no C
library for this platform), checksums run at a few MB/s instead of GB/s: the first checksum on
such a path warns once with :class:`SlowChecksumWarning`, naming the path and the install command.
"""

from __future__ import annotations

import ctypes
import glob
import os
import warnings
from typing import Any

import numpy as np

__all__ = ["SlowChecksumWarning", "crc32c"]

#: The command that installs google-crc32c's binary wheel (with its C library).
INSTALL_WHEEL = "pip install --force-reinstall --only-binary=:all: google-crc32c"


class SlowChecksumWarning(RuntimeWarning):
    """Checksums (CRC-32C) of checkpoints and verified transfers run in pure Python, about 1000x slower than with google-crc32c's
    C library (a few MB/s): the wheel is missing, or it has no C library for this platform.
    Warned once per process, at the first checksum on that path."""


_g: Any
try:
    import google_crc32c as _g
except ImportError:  # pragma: no cover - exercised only where the wheel is missing
    _g = None


def _c_extend() -> Any:
    """``crc32c_extend(uint32 crc, const uint8 *data, size_t n)`` from google-crc32c's library, or None."""
    if _g is None or getattr(_g, "implementation", "") != "c":  # pragma: no cover - wheel without its C library
        return None
    pattern = os.path.join(os.path.dirname(os.path.dirname(_g.__file__)), "google_crc32c.libs", "libcrc32c*.so*")
    for lib in sorted(glob.glob(pattern)):
        try:
            fn = ctypes.CDLL(lib).crc32c_extend
        except (OSError, AttributeError):  # pragma: no cover - a foreign build of the wheel
            continue
        fn.restype = ctypes.c_uint32
        fn.argtypes = [ctypes.c_uint32, ctypes.c_void_p, ctypes.c_size_t]
        return fn
    return None  # pragma: no cover - e.g. a wheel linked statically: the GIL-holding API is used


_extend = _c_extend()
_TABLE: list[int] = []
_warned_slow = False


def _warn_slow() -> None:
    """Warn once that checksums take a pure-Python path (``_g`` is read now, so tests can swap it)."""
    global _warned_slow
    if _g is None:
        path = "google-crc32c is not installed, so layoutcore computes CRC-32C with its own pure-Python table"
    else:
        path = f"google-crc32c has no C library here (implementation {getattr(_g, 'implementation', '?')!r})"
    _warned_slow = True
    warnings.warn(
        f"Slow checkpoint checksums: {path}, at a few MB/s instead of GB/s; saves and loads of large "
        f"checkpoints will crawl. Install the binary wheel: {INSTALL_WHEEL}",
        SlowChecksumWarning,
        stacklevel=3,
    )


def _table() -> list[int]:
    if not _TABLE:
        for n in range(256):
            c = n
            for _ in range(8):
                c = (c >> 1) ^ 0x82F63B78 if c & 1 else c >> 1
            _TABLE.append(c)
    return _TABLE


def crc32c(data: Any, value: int = 0) -> int:
    """CRC-32C of a bytes-like object or a C-contiguous NumPy array's bytes.

    ``value`` is the CRC-32C of the bytes before ``data``: ``crc32c(b, crc32c(a)) == crc32c(a + b)``,
    so a long buffer can be checked in pieces, each while it is still in the CPU cache. A NumPy
    array is checked with the GIL released (other threads run meanwhile).
    """
    if isinstance(data, np.ndarray):
        view = data.reshape(-1).view(np.uint8)
        if _extend is not None:
            return int(_extend(value, view.ctypes.data, view.nbytes))
        if view.flags.writeable:
            view = view.view()
            view.flags.writeable = False  # google-crc32c takes read-only buffers only
        data = view
    if not _warned_slow and (_g is None or getattr(_g, "implementation", "") != "c"):
        _warn_slow()
    if _g is not None:
        return int(_g.extend(value, data) if value else _g.value(data))
    table, crc = _table(), value ^ 0xFFFFFFFF
    for byte in bytes(data):
        crc = table[(crc ^ byte) & 0xFF] ^ (crc >> 8)
    return crc ^ 0xFFFFFFFF
