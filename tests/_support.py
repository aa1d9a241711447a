"""Constants shared by the core tests (tests/ is on sys.path under pytest's default import mode)."""

from __future__ import annotations

#: The DTensor guide's devices.
DEVICES6 = [f"CPU:{i}" for i in range(6)]


def FULL(index: int) -> str:
    """TF's full name of local CPU ``index``."""
    return f"/job:localhost/replica:0/task:0/device:CPU:{index}"
