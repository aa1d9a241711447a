"""The conformance suite's raw view of DTensors: ``dtensor.unpack`` and ``.numpy()`` only."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
from layoutcore_conformance import ConformanceAdapter

from ._runtime import canonical_names, tf_modules

__all__ = ["TensorFlowAdapter"]


class TensorFlowAdapter(ConformanceAdapter):
    """Reads each local component with ``dtensor.unpack`` and names it by ``component.device``."""

    def device_data(self, tensor: Any) -> list[tuple[str, np.ndarray]]:
        _, dtensor = tf_modules()
        components = dtensor.unpack(tensor)
        names = canonical_names([c.device for c in components])
        return [(name, np.array(c.numpy())) for name, c in zip(names, components, strict=True)]

    def from_numpy(self, array: np.ndarray) -> Any:
        tf, _ = tf_modules()
        return tf.constant(array)

    def ones_fn(self) -> Callable[..., Any]:
        tf, _ = tf_modules()
        return tf.ones  # type: ignore[no-any-return]
