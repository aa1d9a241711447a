"""How the conformance suite reads a driver's data *without* the code under test.

Each driver names a :class:`ConformanceAdapter` subclass in ``Driver.conformance_adapter``
(``"package.module:Class"``). The adapter uses the framework's own raw calls only (for JAX
``array.addressable_shards``, for TF ``dtensor.unpack``, for torch the local tensors), so
that a bug in the driver's ``unpack``/``to_numpy`` cannot hide itself: the suite compares
what the adapter reads with the pure shard math in :mod:`layoutcore.geometry`. Device names come
from the framework too (``shard.device``, ``component.device``, ``DTensor.device_mesh``), never
from the driver's ``bind_mesh`` or ``fetch_layout``.

The optional hooks run the framework's own operations on distributed values, so that the suite
can check what users meet beyond layoutcore's calls: the layout of an operation's output
(:meth:`~ConformanceAdapter.identity_op`), in-place writes (:meth:`~ConformanceAdapter.subtract_inplace`)
and the framework's compiler (:meth:`~ConformanceAdapter.compile`).
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
        :attr:`dtypes` (the NumPy dtype names the property tests draw from),
        :meth:`identity_op`, :meth:`subtract`, :meth:`subtract_inplace` and :meth:`compile`
        (the framework's own operations and compiler); :meth:`matmul`, :meth:`einsum`,
        :meth:`add`, :meth:`sum`, :meth:`output_layout` and :meth:`reduce_pending` for the SPMD
        section (defaults: NumPy's operations, the driver's ``fetch_layout``).
    """

    #: NumPy dtype names the property tests use. The default is what every framework holds
    #: without silent conversion (JAX without x64 turns float64/int64 into 32-bit types);
    #: an adapter widens it where its framework keeps more dtypes exactly.
    dtypes: tuple[str, ...] = ("float32", "int32")

    def __init__(self, driver: Driver) -> None:
        self.driver = driver

    def device_data(self, tensor: Any) -> list[tuple[str, np.ndarray]]:
        """``(canonical device name, data)`` per local device of ``tensor``, row-major mesh order.

        The arrays must be copies: the suite compares them after later writes.
        """
        raise NotImplementedError(f"{type(self).__name__} must implement device_data")

    def from_numpy(self, array: np.ndarray) -> Any:
        """A plain (undistributed) framework tensor holding ``array``."""
        return array

    def ones_fn(self) -> Callable[..., Any]:
        """The framework's ``ones(shape, dtype=...)`` factory, for ``call_with_layout``."""
        return np.ones

    def identity_op(self, tensor: Any) -> Any:
        """``tensor + 0`` computed by the framework: a new distributed tensor, with the same layout,
        that no layoutcore call created (so the driver reads its layout natively)."""
        raise NotImplementedError(f"{type(self).__name__} must implement identity_op")

    def subtract(self, a: Any, b: Any) -> Any:
        """``a - b`` of two distributed tensors of one layout, computed by the framework."""
        raise NotImplementedError(f"{type(self).__name__} must implement subtract")

    def subtract_inplace(self, target: Any, value: Any) -> bool:
        """``target -= value`` in place with the framework's own in-place op (``Tensor.sub_``).

        ``target`` is a distributed tensor or a variable's native value, ``value`` a distributed
        tensor of the same layout. Returns ``False`` (doing nothing) where the framework's
        distributed arrays are immutable (JAX, TF): the suite then writes through
        ``Variable.assign`` only.
        """
        return False

    def compile(self, fn: Callable[..., Any]) -> Callable[..., Any] | None:
        """``fn`` under the framework's compiler (``jax.jit``, ``tf.function``, ``torch.compile``),
        or ``None`` where the framework has none (the NumPy reference driver)."""
        return None

    # -- the SPMD section (test_spmd): the framework's own operations on its native tensors ------
    # The defaults are NumPy's, which the NumPy driver's ShardedArray runs as SPMD.
    def matmul(self, a: Any, b: Any) -> Any:
        """``a @ b`` by the framework (``jnp.matmul``, ``tf.linalg.matmul``, ``torch.matmul``)."""
        return np.matmul(a, b)

    def einsum(self, subscripts: str, *operands: Any) -> Any:
        """``einsum(subscripts, *operands)`` by the framework."""
        return np.einsum(subscripts, *operands)

    def add(self, a: Any, b: Any) -> Any:
        """``a + b`` by the framework (broadcasting as NumPy)."""
        return np.add(a, b)

    def sum(self, tensor: Any, axis: int | tuple[int, ...] | None = None) -> Any:
        """The framework's sum over ``axis`` (``None``: all axes)."""
        return np.sum(tensor, axis=axis)

    def output_layout(self, tensor: Any) -> tuple[tuple[Any, ...] | None, tuple[str, ...], str]:
        """How the framework laid out an operation's result, read with its own calls:
        ``(axes, pending, text)``: the layout entries (``None`` where the framework's sharding is
        no mesh-axis layout), the mesh axes with a *pending sum* (torch's ``Partial``), and the
        framework's own description."""
        layout = self.driver.fetch_layout(tensor)
        return layout.axes, (), str(layout)

    def reduce_pending(self, tensor: Any) -> Any:
        """``tensor`` with its pending sums (torch's ``Partial``) carried out by the framework."""
        return tensor


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
