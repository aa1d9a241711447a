"""Which capabilities a (layout, shape) pair needs: the front-end's capability gate."""

from __future__ import annotations

import functools
from collections.abc import Mapping, Sequence
from types import MappingProxyType

from .._capabilities import Capability
from .._layout import Layout

__all__ = ["required_capabilities"]


def required_capabilities(layout: Layout, global_shape: Sequence[int]) -> Mapping[Capability, str]:
    """The capabilities needed to lay out a tensor of ``global_shape`` by ``layout`` (cached).

    Returns a read-only mapping (a ``types.MappingProxyType``; the answer is cached and shared,
    so no caller can change what the capability gate sees) from each needed capability to a
    sentence naming the tensor axis that needs it (for error messages). ``layout`` must have a
    mesh; ``global_shape`` its rank.

    Raises:
        LayoutError: ``layout`` has no mesh, or ``global_shape`` does not fit its rank.
    """
    if type(global_shape) is tuple and set(map(type, global_shape)) <= {int}:  # what drivers pass: cached
        return _required_checked(layout, global_shape)
    # Anything else is validated on every call: 16.0 and True hash as 16 and 1 but are no sizes.
    return _required(layout, layout.check_shape(global_shape))


@functools.lru_cache(maxsize=8192)
def _required_checked(layout: Layout, shape: tuple[int, ...]) -> Mapping[Capability, str]:
    # The shape check is cached with the answer: it runs on every front-end call (a refusal raises
    # and is not cached, so a bad shape is checked, and refused, every time).
    return _required(layout, layout.check_shape(shape))


@functools.lru_cache(maxsize=8192)
def _required(layout: Layout, shape: tuple[int, ...]) -> Mapping[Capability, str]:
    mesh = layout._require_mesh("required_capabilities")
    needed: dict[Capability, str] = {}
    for dim, size in enumerate(shape):
        names = layout.mesh_axes(dim)
        shards = layout.num_shards(dim)
        if len(names) > 1:
            needed.setdefault(Capability.MULTI_AXIS, f"tensor axis {dim} is split over mesh axes {names}")
            order = [mesh.axis_index(n) for n in names]
            if order != sorted(order):
                needed.setdefault(
                    Capability.MULTI_AXIS_ANY_ORDER,
                    f"tensor axis {dim} is split over mesh axes {names}, not in the mesh's order {mesh.axis_names}",
                )
        if size % shards:
            what = f"tensor axis {dim} has size {size}, which {shards} shards do not divide evenly"
            needed.setdefault(Capability.UNEVEN, what)
            if len(names) > 1:
                needed.setdefault(Capability.UNEVEN_MULTI_AXIS, what + f" (over mesh axes {names})")
    return MappingProxyType(needed)
