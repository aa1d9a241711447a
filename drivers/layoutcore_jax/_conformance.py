"""The conformance suite's raw view of JAX arrays (no code of the driver under test)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, cast

import numpy as np
from layoutcore_conformance import ConformanceAdapter

__all__ = ["JaxAdapter"]


class JaxAdapter(ConformanceAdapter):
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

        return cast("Callable[..., Any]", jnp.ones)

    def identity_op(self, tensor: Any) -> Any:
        return tensor + 0

    def subtract(self, a: Any, b: Any) -> Any:
        return a - b

    #: jax.numpy adds every numeric dtype but float8 is left out: XLA's NaN of an e5m2 sum is 0x7f where
    #: ml_dtypes' (the NumPy model's) is 0x7e, an arithmetic convention, not a data move.
    arithmetic_dtypes = ConformanceAdapter.arithmetic_dtypes | {"uint16", "uint32", "uint64"}

    def add_inplace(self, target: Any, delta: Any) -> bool:
        """JAX arrays are immutable: a Variable takes ``value.at[...].add(delta)`` (JAX's functional in-place
        update) through ``assign``; a distributed array is left alone (``False``)."""
        from layoutcore import Variable

        if not isinstance(target, Variable):
            return False
        target.assign(target.value.at[...].add(delta))
        return True

    def relayout_bytes(self, relayout: Callable[[], Any]) -> tuple[Any, int] | None:
        """Counted from the compiled HLO of every program JAX runs meanwhile (and device_put's reshard program)."""
        from ._relayout import CollectiveBytes

        with CollectiveBytes() as counted:
            result = relayout()
        return result, counted.moved

    def compile(self, fn: Callable[..., Any]) -> Callable[..., Any] | None:
        import jax

        return cast("Callable[..., Any] | None", jax.jit(fn))

    # -- SPMD section: jax.numpy's operations on jax.Arrays -----------------------------------------
    def matmul(self, a: Any, b: Any) -> Any:
        import jax.numpy as jnp

        return jnp.matmul(a, b)

    def einsum(self, subscripts: str, *operands: Any) -> Any:
        import jax.numpy as jnp

        return jnp.einsum(subscripts, *operands)

    def add(self, a: Any, b: Any) -> Any:
        import jax.numpy as jnp

        return jnp.add(a, b)

    def sum(self, tensor: Any, axis: int | tuple[int, ...] | None = None) -> Any:
        import jax.numpy as jnp

        return jnp.sum(tensor, axis=axis)

    def output_layout(self, tensor: Any) -> tuple[tuple[Any, ...] | None, tuple[str, ...], str]:
        from jax.sharding import NamedSharding

        sharding = tensor.sharding
        if not isinstance(sharding, NamedSharding):
            return None, (), repr(sharding)
        spec = tuple(sharding.spec) + (None,) * (tensor.ndim - len(sharding.spec))
        axes = tuple(e if e is None or isinstance(e, str) else (tuple(e) if len(e) > 1 else e[0]) for e in spec)
        return axes, (), f"PartitionSpec{spec}"
