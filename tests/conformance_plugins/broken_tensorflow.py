"""Mutants of the TF DTensor driver for the conformance meta-test (a pytest plugin: ``-p broken_tensorflow``).

Each is the real :class:`layoutcore_tensorflow.TensorFlowDriver` with one defect, registered under its
own name; select one with ``LAYOUTCORE_DRIVER``. Placement is built here from DTensor's own API
(``dtensor.create_mesh``, ``copy_to_mesh``, ``relayout``), so a mutant keeps its defect whatever the
real driver's internals become:

* ``tensorflow-reversed-devices``: mesh position ``p`` lives on device ``n - 1 - p``.
* ``tensorflow-swapped-placements``: the mesh axes are swapped end for end (``x`` <-> ``y``).
* ``tensorflow-lying-fetch``: ``native_fetch_layout`` reads every tensor as replicated.
* ``tensorflow-shared-input``: ``copy_to_mesh`` of the caller's own array, no copy, while declaring
  ``input_aliasing = "snapshot"``. DTensors are immutable, so replicas sharing storage with each other
  cannot show; what can is their sharing the caller's buffer: TF aliases a 64-byte-aligned array, so the
  caller's later writes show through the "snapshot".
* ``tensorflow-narrowed-float64``: declares float64 but holds a float64 value as float32 (``tf.cast`` on the
  way in): 1/3 and the subnormals change, and the dtype too.
"""

from __future__ import annotations

import functools
from typing import Any

import numpy as np
from _mutation import replicated_like, swapped
from layoutcore_tensorflow import TensorFlowDriver

import layoutcore as lc
from layoutcore import Layout


@functools.lru_cache(maxsize=64)  # TF starts threads for every native mesh: make each once
def _native_mesh(shape: tuple[int, ...], names: tuple[str, ...], devices: tuple[str, ...]) -> Any:
    from tensorflow.experimental import dtensor

    full = [d if d.startswith("/") else f"/job:localhost/replica:0/task:0/device:{d}" for d in devices]
    return dtensor.create_mesh(list(zip(names, shape, strict=True)), devices=full, device_type="CPU")


def place(value: Any, layout: Layout, devices: tuple[str, ...], *, reverse: bool = False) -> Any:
    """``relayout(copy_to_mesh(value))`` by ``layout`` over ``devices`` (reversed on request), DTensor alone."""
    from tensorflow.experimental import dtensor

    mesh = layout.mesh
    assert mesh is not None
    native = _native_mesh(mesh.shape, mesh.axis_names, tuple(reversed(devices)) if reverse else devices)
    specs = [dtensor.UNSHARDED if entry is None else entry for entry in layout.axes]
    replicated = dtensor.Layout.replicated(native, rank=len(specs))
    return dtensor.relayout(dtensor.copy_to_mesh(value, replicated), dtensor.Layout(specs, native))


def _plain(driver: TensorFlowDriver, tensor: Any) -> Any:
    return driver.to_numpy(tensor) if driver.is_distributed(tensor) else tensor


class ReversedDevicesTensorFlow(TensorFlowDriver):
    name = "tensorflow-reversed-devices"

    def native_distribute(self, value: Any, layout: Layout, devices: tuple[str, ...]) -> Any:
        return place(value, layout, devices, reverse=True)

    def native_relayout(self, tensor: Any, layout: Layout, devices: tuple[str, ...]) -> Any:
        return place(_plain(self, tensor), layout, devices, reverse=True)


class SwappedPlacementsTensorFlow(TensorFlowDriver):
    name = "tensorflow-swapped-placements"

    def native_distribute(self, value: Any, layout: Layout, devices: tuple[str, ...]) -> Any:
        return place(value, swapped(layout), devices)

    def native_relayout(self, tensor: Any, layout: Layout, devices: tuple[str, ...]) -> Any:
        return place(_plain(self, tensor), swapped(layout), devices)


class LyingFetchTensorFlow(TensorFlowDriver):
    name = "tensorflow-lying-fetch"

    def native_fetch_layout(self, tensor: Any) -> Layout:
        return replicated_like(super().native_fetch_layout(tensor), len(tensor.shape))


class SharedInputTensorFlow(TensorFlowDriver):
    name = "tensorflow-shared-input"
    input_aliasing = "snapshot"

    def prepare_input(self, value: Any) -> Any:
        return value if isinstance(value, np.ndarray) else super().prepare_input(value)

    def native_distribute(self, value: Any, layout: Layout, devices: tuple[str, ...]) -> Any:
        return place(value, layout, devices)


class NarrowedFloat64TensorFlow(TensorFlowDriver):
    name = "tensorflow-narrowed-float64"

    def native_distribute(self, value: Any, layout: Layout, devices: tuple[str, ...]) -> Any:
        import tensorflow as tf

        if str(getattr(value.dtype, "name", value.dtype)) == "float64":
            value = tf.cast(value, tf.float32)  # the defect
        return super().native_distribute(value, layout, devices)


MUTANTS = (
    ReversedDevicesTensorFlow,
    SwappedPlacementsTensorFlow,
    LyingFetchTensorFlow,
    SharedInputTensorFlow,
    NarrowedFloat64TensorFlow,
)

for _cls in MUTANTS:
    lc.driver.register_driver(_cls.name, _cls, replace=True)
