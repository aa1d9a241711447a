"""Conformance adapters for the drivers that ship with layoutcore's core."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from layoutcore import ShardedArray

from .adapter import ConformanceAdapter

__all__ = ["NumpyAdapter"]


class NumpyAdapter(ConformanceAdapter):
    """Reads a :class:`ShardedArray`'s components straight from its storage.

    NumPy is the "framework" here: an operation on a distributed value runs per device on the
    components, and its result carries its layout in the array itself, as a framework's native
    tensor does (``ShardedArray.layout`` is what ``native_fetch_layout`` reads).
    """

    dtypes = ("float32", "int32", "float64", "int64", "bool", "uint8", "float16", "complex64")

    def device_data(self, tensor: Any) -> list[tuple[str, np.ndarray]]:
        assert isinstance(tensor, ShardedArray), type(tensor)
        return [(d, np.array(c)) for d, c in zip(tensor.devices, tensor.components, strict=True)]

    def identity_op(self, tensor: Any) -> Any:
        return _per_device(lambda c: c + 0, tensor)

    def subtract(self, a: Any, b: Any) -> Any:
        assert isinstance(b, ShardedArray) and b.layout == a.layout, (a, b)
        parts = iter(b.components)
        return _per_device(lambda c: c - next(parts), a)

    # subtract_inplace: the default False. The components are read-only views (DESIGN §2a).


def _per_device(op: Callable[[np.ndarray], np.ndarray], tensor: ShardedArray) -> ShardedArray:
    out = []
    for component in tensor.components:
        result = np.asarray(op(component))
        result.flags.writeable = False
        out.append(result)
    return ShardedArray(tuple(out), tensor.layout, tensor.shape, out[0].dtype if out else tensor.dtype, tensor.devices)
