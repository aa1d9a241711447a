"""The conformance suite's raw view of DTensors: TensorFlow's own calls only, no code of the driver."""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any, cast

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

    # The driver stops at MAX_NATIVE_MESHES (256) DTensor meshes per process; the whole suite's fixed
    # meshes and the model-based test's pool and this pool made 152 in one run (docs/drivers/tensorflow.md#meshes-cost-threads).
    max_random_meshes = 128

    def device_data(self, tensor: Any) -> list[tuple[str, np.ndarray]]:
        from tensorflow.experimental import dtensor

        components = dtensor.unpack(tensor)
        return [(_name(_tf(), c.device), np.array(c.numpy())) for c in components]

    def from_numpy(self, array: np.ndarray) -> Any:
        return _tf().constant(array)

    def ones_fn(self) -> Callable[..., Any]:
        return cast("Callable[..., Any]", _tf().ones)

    def identity_op(self, tensor: Any) -> Any:
        return _tf().identity(tensor) + 0

    def subtract(self, a: Any, b: Any) -> Any:
        return a - b

    def add_inplace(self, target: Any, delta: Any) -> bool:
        """A Variable's ``DVariable.assign_add(delta)`` (TF's own in-place update); DTensors themselves are
        immutable (``False``)."""
        from layoutcore import Variable

        if not isinstance(target, Variable):
            return False
        target.handle.assign_add(delta)
        return True

    def compile(self, fn: Callable[..., Any]) -> Callable[..., Any] | None:
        """``tf.function(fn)``, called with every plain tensor argument made a replicated DTensor.

        TF runs a function on DTensor's device only when an input is a DTensor (or under
        ``dtensor.default_mesh(mesh)``); a function of plain tensors runs on the CPU, where DTensor's ops
        have no kernel. So, as a DTensor user does, plain arguments are copied to the mesh that
        the traced graph's first ``Relayout`` op names (raw ``dtensor.copy_to_mesh``).
        """
        tf = _tf()
        from tensorflow.experimental import dtensor

        function = tf.function(fn, autograph=False)

        def call(*args: Any) -> Any:
            if all(dtensor.is_dtensor(a) for a in args if isinstance(a, tf.Tensor)):
                return function(*args)
            graph = function.get_concrete_function(*args).graph
            relayouts = [op for op in graph.get_operations() if op.type == "Relayout"]
            if not relayouts:
                return function(*args)
            mesh = dtensor.Layout.from_string(relayouts[0].get_attr("layout").decode()).mesh
            placed = [
                dtensor.copy_to_mesh(a, dtensor.Layout.replicated(mesh, a.shape.rank))
                if isinstance(a, tf.Tensor) and not dtensor.is_dtensor(a)
                else a
                for a in args
            ]
            return function(*placed)

        return call

    # -- SPMD section: TF's operations on DTensors (DTensor's SPMD expansion) ----------------------
    def matmul(self, a: Any, b: Any) -> Any:
        return _tf().linalg.matmul(a, b)

    def einsum(self, subscripts: str, *operands: Any) -> Any:
        return _tf().einsum(subscripts, *operands)

    def add(self, a: Any, b: Any) -> Any:
        return _tf().math.add(a, b)

    def sum(self, tensor: Any, axis: int | tuple[int, ...] | None = None) -> Any:
        return _tf().math.reduce_sum(
            tensor, axis=None if axis is None else list(axis) if isinstance(axis, tuple) else axis
        )

    def output_layout(self, tensor: Any) -> tuple[tuple[Any, ...] | None, tuple[str, ...], str]:
        from tensorflow.experimental import dtensor

        layout = dtensor.fetch_layout(tensor)
        specs = list(layout.sharding_specs)
        return tuple(None if s == "unsharded" else s for s in specs), (), f"sharding_specs {specs}"


def _name(tf: Any, device: str) -> str:
    """layoutcore's canonical name of a TF device name, from ``tf.DeviceSpec``'s parse of it."""
    spec = tf.DeviceSpec.from_string(device)
    if (spec.job, spec.replica, spec.task) == _LOCAL_TASK:
        return f"{spec.device_type}:{spec.device_index}"
    return f"/job:{spec.job}/replica:{spec.replica}/task:{spec.task}/device:{spec.device_type}:{spec.device_index}"
