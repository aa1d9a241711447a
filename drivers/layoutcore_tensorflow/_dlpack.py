"""Sharing a TF tensor's CPU buffer with NumPy through DLPack, without a copy.

``EagerTensor.numpy()`` copies the buffer on every call (TF 2.21, measured: a new address each
time); ``np.from_dlpack`` shares it. The driver's ``component_to_numpy`` uses this, so what reads
components (``layoutcore.transfer``'s senders, checkpoint saves, ``pack``'s replica check) reads
TF's own memory.
"""

from __future__ import annotations

from typing import Any

import numpy as np

__all__ = ["dlpack_view"]

#: Same-width unsigned TF dtypes, by item size, for sharing a buffer NumPy has no DLPack code for.
_WORDS = {1: "uint8", 2: "uint16", 4: "uint32", 8: "uint64"}


def dlpack_view(tf: Any, eager: Any, component: Any) -> np.ndarray | None:
    """A read-only NumPy array over ``component``'s CPU buffer, or ``None`` where DLPack cannot share it."""
    if not isinstance(component, eager) or "CPU" not in component.device or component.dtype == tf.string:
        return None
    try:
        try:
            view = np.from_dlpack(component)
        except (BufferError, RuntimeError, TypeError, ValueError):  # bfloat16, float8: no NumPy DLPack code
            want = np.dtype(component.dtype.as_numpy_dtype)
            words = tf.bitcast(component, getattr(tf, _WORDS[want.itemsize]))
            view = np.from_dlpack(words).view(want)
    except Exception:  # any dtype or tensor DLPack refuses: the caller copies with .numpy()
        return None
    view.flags.writeable = False  # TF tensors are immutable; a reader must not write through
    return view
