"""How the conformance suite reads a driver's data *without* the code under test.

A driver package registers a :class:`ConformanceAdapter` subclass under the driver's name in the
``layoutcore.conformance_adapters`` entry-point group (``name = "package.module:Class"``), or at run
time with :func:`register_adapter`; the driver class itself carries no test metadata. The adapter uses the framework's own raw calls only (for JAX
``array.addressable_shards``, for TF ``dtensor.unpack``, for torch the local tensors), so
that a bug in the driver's ``unpack``/``to_numpy`` cannot hide itself: the suite compares
what the adapter reads with the pure shard math in :mod:`layoutcore.geometry`. Device names come
from the framework too (``shard.device``, ``component.device``, ``DTensor.device_mesh``), never
from the driver's ``bind_mesh`` or ``fetch_layout``.

The optional hooks run the framework's own operations on distributed values, so that the suite
can check what users meet beyond layoutcore's calls: the layout of an operation's output
(:meth:`~ConformanceAdapter.identity_op`), in-place writes (:meth:`~ConformanceAdapter.subtract_inplace`)
the framework's compiler (:meth:`~ConformanceAdapter.compile`) and in-place updates of any dtype
(:meth:`~ConformanceAdapter.add_inplace`, for the model-based test).
"""

from __future__ import annotations

import importlib
import importlib.metadata
import threading
from collections.abc import Callable
from typing import Any

import numpy as np

from layoutcore import Variable
from layoutcore.driver import Driver

__all__ = ["ADAPTER_GROUP", "ConformanceAdapter", "load_adapter", "register_adapter"]

#: The entry-point group a driver package registers its adapter in: ``<driver name> = "module:Class"``.
ADAPTER_GROUP = "layoutcore.conformance_adapters"


class ConformanceAdapter:
    """Raw framework access for the conformance suite. Subclass it for a driver.

    Required:
        :meth:`device_data`: per-device ``(device_name, numpy array)`` of a distributed tensor,
        in row-major mesh order, read with the framework's own calls.
    Optional:
        :meth:`from_numpy` (default: identity), :meth:`ones_fn` (default ``np.ones``),
        :attr:`dtypes` (the NumPy dtype names the property tests draw from),
        :attr:`max_random_meshes` (a per-process cap on the distinct meshes they draw),
        :meth:`identity_op`, :meth:`subtract`, :meth:`subtract_inplace`, :meth:`add_inplace` and
        :meth:`compile` (the framework's own operations and compiler); :meth:`relayout_bytes` (bytes
        a relayout moves, for ``Capability.RELAYOUT_AT_FLOOR``); :meth:`matmul`, :meth:`einsum`,
        :meth:`add`, :meth:`sum`, :meth:`output_layout` and :meth:`reduce_pending` for the SPMD
        section (defaults: NumPy's operations, the driver's ``fetch_layout``).
    """

    #: NumPy dtype names the property tests use. The default is what every framework holds
    #: without silent conversion (JAX without x64 turns float64/int64 into 32-bit types);
    #: an adapter widens it where its framework keeps more dtypes exactly.
    dtypes: tuple[str, ...] = ("float32", "int32")

    #: Canonical dtype names whose addition the framework computes (its kernels), for
    #: :meth:`add_inplace` in the model-based test. Moving data needs no arithmetic, so this is
    #: narrower than what the driver holds; bool and float8 have no addition in most frameworks.
    arithmetic_dtypes: frozenset[str] = frozenset(
        [
            "int8",
            "int16",
            "int32",
            "int64",
            "uint8",
            "float16",
            "bfloat16",
            "float32",
            "float64",
            "complex64",
            "complex128",
        ]
    )

    #: At most this many distinct random meshes in one process (``None``: no limit). Set it where
    #: the framework keeps resources per mesh until the process ends; the property tests then draw
    #: their meshes from a fixed pool of this size (``_strategies.random_mesh_pool``).
    max_random_meshes: int | None = None

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

    def add_inplace(self, target: Any, delta: Any) -> bool:
        """``target += delta`` through the framework's own operation, updating ``target`` itself.

        ``target`` is a :class:`layoutcore.Variable` or a distributed tensor, ``delta`` a distributed
        tensor of the same layout and dtype (one of :attr:`arithmetic_dtypes`). A Variable is updated
        the framework's way: torch ``add_`` on its Parameter, TF ``DVariable.assign_add``, JAX
        ``value.at[...].add`` then ``assign``; the default (NumPy) assigns ``self.add(value, delta)``.
        Returns ``False`` (doing nothing) for a distributed tensor where the framework's arrays are
        immutable (everything but torch).
        """
        if isinstance(target, Variable):
            target.assign(self.add(target.value, delta))
            return True
        return False

    def compile(self, fn: Callable[..., Any]) -> Callable[..., Any] | None:
        """``fn`` under the framework's compiler (``jax.jit``, ``tf.function``, ``torch.compile``),
        or ``None`` where the framework has none (the NumPy reference driver)."""
        return None

    def relayout_bytes(self, relayout: Callable[[], Any]) -> tuple[Any, int] | None:
        """Run ``relayout()`` (one layoutcore ``relayout`` call) and count the bytes the framework's
        transfers carry between devices meanwhile, with the framework's own means (the collectives'
        arguments, the compiled programs' collectives), never the driver's plan.

        Returns ``(relayout()'s result, bytes received by all devices together)``, counted as
        ``relayout_plan``'s ``floor_bytes`` counts them; ``None`` (the default): this adapter cannot
        count. test_relayout_floor then skips for a driver without ``Capability.RELAYOUT_AT_FLOOR``
        and fails for one that declares it.
        """
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


_registered: dict[str, type[ConformanceAdapter] | str] = {}
_lock = threading.Lock()


def register_adapter(driver_name: str, adapter: type[ConformanceAdapter] | str) -> None:
    """Use ``adapter`` (a class, or ``"module:Class"``) for the driver named ``driver_name``, and for its
    subclasses that find no adapter of their own: the run-time twin of the entry-point group."""
    with _lock:
        _registered[driver_name] = adapter


def _entry_points() -> dict[str, str]:
    return {ep.name: ep.value for ep in importlib.metadata.entry_points(group=ADAPTER_GROUP)}


def adapter_path(driver: Driver) -> str:
    """``"module:Class"`` (or the class's qualified name) of the adapter :func:`load_adapter` picks; ``""`` if none."""
    found = _find(driver)
    if found is None:
        return ""
    return found if isinstance(found, str) else f"{found.__module__}:{found.__qualname__}"


def _find(driver: Driver) -> type[ConformanceAdapter] | str | None:
    # The driver's own name first, then the names its base classes register under (a subclass of the
    # torch driver is read with torch's adapter unless it registers its own).
    names = [driver.name] + [getattr(cls, "name", "") for cls in type(driver).__mro__]
    points = _entry_points()
    for name in names:
        if not isinstance(name, str) or not name:
            continue
        with _lock:
            if name in _registered:
                return _registered[name]
        if name in points:
            return points[name]
    return None


def load_adapter(driver: Driver) -> ConformanceAdapter:
    """Instantiate the adapter registered for ``driver`` (see :func:`register_adapter` and :data:`ADAPTER_GROUP`).

    Raises:
        LookupError: no adapter is registered for the driver's name nor its base classes' names.
        ImportError: the registered ``"module:Class"`` cannot be imported.
    """
    found = _find(driver)
    if found is None:
        raise LookupError(
            f"No conformance adapter is registered for driver {driver.name!r}: register a ConformanceAdapter "
            f"subclass under {driver.name!r} in the {ADAPTER_GROUP!r} entry-point group (or call "
            "layoutcore_conformance.register_adapter); the suite needs one to read per-device data through the "
            "framework's own calls."
        )
    if isinstance(found, str):
        module_name, _, attr = found.partition(":")
        found = getattr(importlib.import_module(module_name), attr)
    assert isinstance(found, type) and issubclass(found, ConformanceAdapter), found
    return found(driver)
