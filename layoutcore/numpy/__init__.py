"""The reference driver: NumPy arrays on virtual devices, and its SPMD engine.

:class:`NumpyDriver` is what ``use_driver("numpy")`` (the default) runs; :class:`ShardedArray` is
its distributed tensor, which computes NumPy operations as SPMD over its per-device components
(``layoutcore.propagation`` gives the output layouts).
"""

from __future__ import annotations

from ._driver import NumpyDriver, ShardedArray

__all__ = ["NumpyDriver", "ShardedArray"]
