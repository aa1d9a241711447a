"""Canonical dtype names of NumPy, ml_dtypes and framework dtype objects, as the front-end reads them."""

from __future__ import annotations

from typing import Any

import numpy as np

from .._dtypes import dtype_name as _canonical_dtype_name
from .._errors import LayoutError
from ._cache import LRUCache

__all__ = ["dtype_name", "known_dtype_name"]

_KNOWN_DTYPES: LRUCache[Any, str | None] = LRUCache(1024)  # dtype objects are few: bounded anyway


def known_dtype_name(dtype: Any) -> str | None:
    """The canonical name of ``dtype`` (a NumPy, ml_dtypes or framework dtype object) if it is one of
    the 18 (``layoutcore.driver.ALL_DTYPES``), else None. Cached per dtype object: every data
    function asks."""
    try:
        return _KNOWN_DTYPES[dtype]
    except KeyError:
        pass
    except TypeError:  # unhashable: not a dtype object
        return None
    try:
        name: str | None = _canonical_dtype_name(dtype)
    except LayoutError:
        name = None
    _KNOWN_DTYPES.put(dtype, name)
    return name


def dtype_name(dtype: Any) -> str:
    """The canonical name of a NumPy, ml_dtypes or framework dtype object (``tf.float32``,
    ``torch.bfloat16``, ``jnp.bfloat16`` -> ``"float32"``, ``"bfloat16"``, ``"bfloat16"``); for
    dtypes outside the 18, NumPy's name, else ``str(dtype)``."""
    known = known_dtype_name(dtype)
    if known is not None:
        return known
    dtype = getattr(dtype, "as_numpy_dtype", dtype)  # TF DType
    try:
        return str(np.dtype(dtype).name)
    except TypeError:
        text = str(dtype)
        return text.removeprefix("torch.")
