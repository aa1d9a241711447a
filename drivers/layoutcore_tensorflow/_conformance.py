"""The conformance suite's raw view of DTensors: TensorFlow's own calls only, no code of the driver."""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

import numpy as np
from layoutcore_conformance import ConformanceAdapter

__all__ = ["TensorFlowAdapter"]

#: The task whose devices layoutcore names short (``"CPU:0"``); others keep TF's full name.
_LOCAL_TASK = ("localhost", 0, 0)


def _tf() -> Any:
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    import tensorflow as tf

    return tf


class TensorFlowAdapter(ConformanceAdapter):
    """Reads each local component with ``dtensor.unpack`` and names it by ``component.device``
    (parsed with ``tf.DeviceSpec``). DTensors are immutable, so there is no in-place operation
    (writes go through ``Variable.assign``, a ``DVariable.assign``); the compiler is ``tf.function``."""

    def device_data(self, tensor: Any) -> list[tuple[str, np.ndarray]]:
        from tensorflow.experimental import dtensor

        components = dtensor.unpack(tensor)
        return [(_name(_tf(), c.device), np.array(c.numpy())) for c in components]

    def from_numpy(self, array: np.ndarray) -> Any:
        return _tf().constant(array)

    def ones_fn(self) -> Callable[..., Any]:
        return _tf().ones  # type: ignore[no-any-return]

    def identity_op(self, tensor: Any) -> Any:
        return _tf().identity(tensor) + 0

    def subtract(self, a: Any, b: Any) -> Any:
        return a - b

    def compile(self, fn: Callable[..., Any]) -> Callable[..., Any] | None:
        return _tf().function(fn, autograph=False)  # type: ignore[no-any-return]


def _name(tf: Any, device: str) -> str:
    """layoutcore's canonical name of a TF device name, from ``tf.DeviceSpec``'s parse of it."""
    spec = tf.DeviceSpec.from_string(device)
    if (spec.job, spec.replica, spec.task) == _LOCAL_TASK:
        return f"{spec.device_type}:{spec.device_index}"
    return f"/job:{spec.job}/replica:{spec.replica}/task:{spec.task}/device:{spec.device_type}:{spec.device_index}"
