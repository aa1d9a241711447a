"""Conformance adapters for the drivers that ship with layoutcore's core."""

from __future__ import annotations

from typing import Any

import numpy as np

from layoutcore import ShardedArray

from .adapter import ConformanceAdapter

__all__ = ["NumpyAdapter"]


class NumpyAdapter(ConformanceAdapter):
    """Reads a :class:`ShardedArray`'s components straight from its storage."""

    dtypes = ("float32", "int32", "float64", "int64", "bool", "uint8", "float16", "complex64")

    def device_data(self, tensor: Any) -> list[tuple[str, np.ndarray]]:
        assert isinstance(tensor, ShardedArray), type(tensor)
        return [(d, np.array(c)) for d, c in zip(tensor.devices, tensor.components, strict=True)]
