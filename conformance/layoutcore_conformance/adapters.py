"""Conformance adapters for the drivers that ship with layoutcore's core."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from layoutcore.numpy import ShardedArray

from .adapter import ConformanceAdapter

__all__ = ["NumpyAdapter"]


class NumpyAdapter(ConformanceAdapter):
    """Reads a :class:`ShardedArray`'s components straight from its storage.

    NumPy is the "framework" here: ``ShardedArray``'s operators run per device (SPMD) and their result
    carries its layout in the array itself, as a framework's native tensor does (``ShardedArray.layout``
    is what ``native_fetch_layout`` reads). Its components are read-only views (docs/design.md#data-functions-made-precise), so there is
    no in-place operation and no compiler.
    """

    dtypes = ("float32", "int32", "float64", "int64", "bool", "uint8", "float16", "complex64")
    #: NumPy (and ml_dtypes) adds every dtype but bool; the model computes with the same library.
    arithmetic_dtypes = ConformanceAdapter.arithmetic_dtypes | {
        "uint16",
        "uint32",
        "uint64",
        "float8_e4m3fn",
        "float8_e5m2",
    }  # not float8_e8m0fnu: it has no zero (x + 0 is NaN), so its sums are no model of a move

    def device_data(self, tensor: Any) -> list[tuple[str, np.ndarray]]:
        assert isinstance(tensor, ShardedArray), type(tensor)
        return [(d, np.array(c)) for d, c in zip(tensor.devices, tensor.components, strict=True)]

    def relayout_bytes(self, relayout: Callable[[], Any]) -> tuple[Any, int] | None:
        """Counted at the reference driver's simulated wire (its ``_send``, every element a relayout moves)."""
        from layoutcore.numpy import _driver as wire

        real = wire._send
        moved = [0]

        def send(piece: np.ndarray) -> np.ndarray:
            moved[0] += piece.nbytes
            return real(piece)

        wire._send = send
        try:
            result = relayout()
        finally:
            wire._send = real
        return result, moved[0]

    def identity_op(self, tensor: Any) -> Any:
        return tensor + 0

    def subtract(self, a: Any, b: Any) -> Any:
        return a - b
