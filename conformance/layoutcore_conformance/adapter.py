"""How the conformance suite reads a driver's data *without* the code under test.

Each driver names a :class:`ConformanceAdapter` subclass in ``Driver.conformance_adapter``
(``"package.module:Class"``). The adapter uses the framework's own raw calls only (for JAX
``array.addressable_shards``, for TF ``dtensor.unpack``, for torch the local tensors), so
that a bug in the driver's ``unpack``/``to_numpy`` cannot hide itself: the suite compares
what the adapter reads with the pure shard math in :mod:`layoutcore.geometry`.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any

import numpy as np

from layoutcore import Driver

__all__ = ["ConformanceAdapter", "load_adapter"]


class ConformanceAdapter:
    """Raw framework access for the conformance suite. Subclass it for a driver.

    Required:
        :meth:`device_data`: per-device ``(device_name, numpy array)`` of a distributed tensor,
        in row-major mesh order, read with the framework's own calls.
    Optional:
        :meth:`from_numpy` (default: identity), :meth:`ones_fn` (default ``np.ones``),
        :attr:`dtypes` (the NumPy dtype names the property tests draw from).
    """

    #: NumPy dtype names the property tests use. The default is what every framework holds
    #: without silent conversion (JAX without x64 turns float64/int64 into 32-bit types);
    #: an adapter widens it where its framework keeps more dtypes exactly.
    dtypes: tuple[str, ...] = ("float32", "int32")

    def __init__(self, driver: Driver) -> None:
        self.driver = driver

    def device_data(self, tensor: Any) -> list[tuple[str, np.ndarray]]:
        """``(canonical device name, data)`` per local device of ``tensor``, row-major mesh order."""
        raise NotImplementedError(f"{type(self).__name__} must implement device_data")

    def from_numpy(self, array: np.ndarray) -> Any:
        """A plain (undistributed) framework tensor holding ``array``."""
        return array

    def ones_fn(self) -> Callable[..., Any]:
        """The framework's ``ones(shape, dtype=...)`` factory, for ``call_with_layout``."""
        return np.ones


def load_adapter(driver: Driver) -> ConformanceAdapter:
    """Instantiate the adapter that ``driver.conformance_adapter`` names.

    Raises:
        LookupError: the driver names no adapter, or it cannot be imported.
    """
    path = getattr(driver, "conformance_adapter", "")
    if not path:
        raise LookupError(
            f"Driver {driver.name!r} declares no conformance_adapter ('module:Class'); the suite needs one to read "
            "per-device data through the framework's own calls."
        )
    module_name, _, attr = path.partition(":")
    cls = getattr(importlib.import_module(module_name), attr)
    return cls(driver)  # type: ignore[no-any-return]
