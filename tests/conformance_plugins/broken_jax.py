"""Mutants of the JAX driver for the conformance meta-test (a pytest plugin: ``-p broken_jax``).

Each is the real :class:`layoutcore_jax.JaxDriver` with one defect, registered under its own name;
select one with ``LAYOUTCORE_DRIVER``. Placement is built here from JAX's own API (``jax.sharding``),
so a mutant keeps its defect whatever the real driver's internals become:

* ``jax-reversed-devices``: mesh position ``p`` lives on device ``n - 1 - p``.
* ``jax-swapped-placements``: the mesh axes are swapped end for end (``x`` <-> ``y``).
* ``jax-lying-fetch``: ``native_fetch_layout`` reads every tensor as replicated.
* ``jax-shared-input``: ``device_put`` of the caller's own array, no copy, while declaring
  ``input_aliasing = "snapshot"``. JAX arrays are immutable, so replicas sharing storage with each other
  cannot show; what can is their sharing the caller's buffer: on CPU, ``device_put`` aliases a
  64-byte-aligned array (every replica, and every aligned block, points into it), so the caller's later
  writes show through the "snapshot".
* ``jax-widened-bfloat16``: declares bfloat16 (the real driver's ``supported_dtypes``) but holds a bfloat16
  value as float32 (the value right, the dtype widened): what ``jnp.asarray(x, jnp.float32)`` on the way in does.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from _mutation import replicated_like, swapped
from layoutcore_jax import JaxDriver

import layoutcore as lc
from layoutcore import Layout


def native_sharding(layout: Layout, devices: tuple[str, ...], *, reverse: bool = False) -> Any:
    """``NamedSharding`` of ``layout`` over ``devices`` (reversed on request), from JAX's API alone."""
    import jax
    from jax.sharding import NamedSharding, PartitionSpec

    by_name = {f"{d.platform.upper()}:{d.id}": d for d in jax.devices()}
    order = [by_name[name] for name in devices]
    if reverse:
        order.reverse()
    mesh = layout.mesh
    assert mesh is not None
    grid = np.empty(len(order), dtype=object)
    grid[:] = order
    return NamedSharding(jax.sharding.Mesh(grid.reshape(mesh.shape), mesh.axis_names), PartitionSpec(*layout.axes))


class ReversedDevicesJax(JaxDriver):
    name = "jax-reversed-devices"

    def native_distribute(self, value: Any, layout: Layout, devices: tuple[str, ...]) -> Any:
        import jax

        return jax.device_put(value, native_sharding(layout, devices, reverse=True))

    def native_relayout(self, tensor: Any, layout: Layout, devices: tuple[str, ...]) -> Any:
        return self.native_distribute(tensor, layout, devices)


class SwappedPlacementsJax(JaxDriver):
    name = "jax-swapped-placements"

    def native_distribute(self, value: Any, layout: Layout, devices: tuple[str, ...]) -> Any:
        import jax

        return jax.device_put(value, native_sharding(swapped(layout), devices))

    def native_relayout(self, tensor: Any, layout: Layout, devices: tuple[str, ...]) -> Any:
        return self.native_distribute(tensor, layout, devices)


class LyingFetchJax(JaxDriver):
    name = "jax-lying-fetch"

    def native_fetch_layout(self, tensor: Any) -> Layout:
        return replicated_like(super().native_fetch_layout(tensor), tensor.ndim)


class SharedInputJax(JaxDriver):
    name = "jax-shared-input"
    input_aliasing = "snapshot"

    def prepare_input(self, value: Any) -> Any:
        return value if isinstance(value, np.ndarray) else super().prepare_input(value)

    def native_distribute(self, value: Any, layout: Layout, devices: tuple[str, ...]) -> Any:
        import jax

        return jax.device_put(value, native_sharding(layout, devices))


class WidenedBfloat16Jax(JaxDriver):
    name = "jax-widened-bfloat16"

    def native_distribute(self, value: Any, layout: Layout, devices: tuple[str, ...]) -> Any:
        if str(value.dtype) == "bfloat16":
            value = value.astype(np.float32)  # the defect: numpy and jax arrays alike
        return super().native_distribute(value, layout, devices)


MUTANTS = (ReversedDevicesJax, SwappedPlacementsJax, LyingFetchJax, SharedInputJax, WidenedBfloat16Jax)

for _cls in MUTANTS:
    lc.driver.register_driver(_cls.name, _cls, replace=True)
