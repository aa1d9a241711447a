"""The conformance suite's raw view of JAX arrays (no code of the driver under test)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
from layoutcore_conformance import ConformanceAdapter  # type: ignore[import-not-found,unused-ignore]

__all__ = ["JaxAdapter"]


class JaxAdapter(ConformanceAdapter):  # type: ignore[misc,unused-ignore]
    """Reads ``jax.Array.addressable_shards`` and orders them by the sharding's mesh, with JAX calls only.

    JAX arrays are immutable, so there is no in-place operation (writes go through ``Variable.assign``);
    the compiler is ``jax.jit``.
    """

    def device_data(self, tensor: Any) -> list[tuple[str, np.ndarray]]:
        import jax
        from jax.sharding import NamedSharding, SingleDeviceSharding

        assert isinstance(tensor, jax.Array), type(tensor)
        sharding = tensor.sharding
        shards = {shard.device: shard for shard in tensor.addressable_shards}
        if isinstance(sharding, NamedSharding):
            order = [d for d in sharding.mesh.devices.flat if d in shards]
        else:
            assert isinstance(sharding, SingleDeviceSharding), sharding
            order = list(shards)
        return [(f"{d.platform.upper()}:{d.id}", np.array(shards[d].data)) for d in order]

    def from_numpy(self, array: np.ndarray) -> Any:
        import jax.numpy as jnp

        return jnp.asarray(array)

    def ones_fn(self) -> Callable[..., Any]:
        import jax.numpy as jnp

        return jnp.ones  # type: ignore[no-any-return]

    def identity_op(self, tensor: Any) -> Any:
        return tensor + 0

    def subtract(self, a: Any, b: Any) -> Any:
        return a - b

    def compile(self, fn: Callable[..., Any]) -> Callable[..., Any] | None:
        import jax

        return jax.jit(fn)  # type: ignore[no-any-return]
