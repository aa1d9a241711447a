"""Module-level data functions: each dispatches to ``driver=``, else the active driver; those that take a
distributed tensor, when no ``use_driver``/``set_driver`` is in force, to the value's own driver (docs/design.md#data-functions-made-precise)."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import numpy as np

from ._errors import LayoutError
from ._layout import Layout
from ._layout_map import LayoutMap
from ._layout_map import layout_map_scope as _map_scope
from .driver._frontend import Driver
from .driver._registry import driver_for, get_driver

__all__ = [
    "call_with_layout",
    "copy_to_mesh",
    "distribute_tensor",
    "fetch_layout",
    "layout_map_scope",
    "list_devices",
    "pack",
    "relayout",
    "to_numpy",
    "unpack",
]

DriverArg = str | Driver | None


def list_devices(device_type: str | None = None, *, driver: DriverArg = None) -> list[str]:
    """Canonical names of the driver's devices (``["CPU:0", ...]``), optionally of one type."""
    return get_driver(driver).list_devices(device_type)


def distribute_tensor(value: Any, layout: Layout, *, driver: DriverArg = None) -> Any:
    """Place a global value (NumPy array, framework tensor, nested list) by ``layout``.

    Returns the driver's native distributed tensor (``jax.Array``, TF DTensor, torch DTensor,
    or :class:`~layoutcore.numpy.ShardedArray` for NumPy). A distributed input is relaid out.

    Raises:
        LayoutError: ``layout`` has no mesh, or its rank differs from ``value``'s.
        UnsupportedLayoutError: the driver cannot express ``layout`` for this shape.
    """
    return get_driver(driver).distribute_tensor(value, layout)


def unpack(tensor: Any, *, driver: DriverArg = None) -> list[Any]:
    """The per-device components of ``tensor``, in row-major mesh order (local ones only,
    in a multi-process run)."""
    return driver_for(tensor, driver).unpack(tensor)


def pack(
    components: Sequence[Any], layout: Layout, *, global_shape: Sequence[int] | None = None, driver: DriverArg = None
) -> Any:
    """The inverse of :func:`unpack`.

    Raises:
        LayoutError: a wrong component count, a component shape that does not fit ``layout``,
            mixed dtypes, or replicas that hold different data (naming the devices).
    """
    return get_driver(driver).pack(components, layout, global_shape=global_shape)


def relayout(tensor: Any, layout: Layout, *, driver: DriverArg = None) -> Any:
    """The same global value with another layout."""
    return driver_for(tensor, driver).relayout(tensor, layout)


def fetch_layout(tensor: Any, *, driver: DriverArg = None) -> Layout:
    """The :class:`Layout` of ``tensor``, equal to the one it was made with."""
    return driver_for(tensor, driver).fetch_layout(tensor)


def copy_to_mesh(value: Any, layout: Layout, *, driver: DriverArg = None) -> Any:
    """Copy ``value`` to every device of a fully replicated ``layout`` (as DTensor's)."""
    return get_driver(driver).copy_to_mesh(value, layout)


def to_numpy(tensor: Any, *, driver: DriverArg = None) -> np.ndarray:
    """The global value of ``tensor`` as a NumPy array, for any layout."""
    return driver_for(tensor, driver).to_numpy(tensor)


def call_with_layout(
    fn: Callable[..., Any], layout: Layout, *args: Any, driver: DriverArg = None, **kwargs: Any
) -> Any:
    """Call tensor-creating ``fn(*args, **kwargs)`` and return its result laid out by ``layout``.

    Where the framework can, the full value is never materialised on one device.
    """
    return get_driver(driver).call_with_layout(fn, layout, *args, **kwargs)


@contextlib.contextmanager
def layout_map_scope(layout_map: LayoutMap, *, driver: str | None = None) -> Iterator[LayoutMap]:
    """Within this context, a ``Variable`` with a ``path`` and no layout takes ``layout_map[path]``.

    Where nothing matches, the map's ``on_missing`` applies (by default the variable is fully
    replicated). Scopes nest; the innermost wins. The active driver (or ``driver=``) enters its
    own scope too: on the TF driver with tf-keras installed, the variables of tf-keras models
    built inside take their layouts from the map, keyed as tf-keras keys them (``"d1.kernel"``).

    Raises:
        LayoutError: ``layout_map`` is not a :class:`LayoutMap`.
        DriverNotFoundError, DriverUnavailableError: the driver cannot be used.
    """
    if not isinstance(layout_map, LayoutMap):
        raise LayoutError(f"layout_map_scope expects a LayoutMap. Received: {layout_map!r}", value=layout_map)
    with _map_scope(layout_map) as active, get_driver(driver).enter_layout_map_scope(layout_map):
        yield active
