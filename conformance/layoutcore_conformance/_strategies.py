"""Hypothesis strategies: random meshes, layouts and shapes as :class:`~._oracle.Case` values.

Meshes have rank 1 to 3 and at most 8 devices (fewer if the driver has fewer); layouts put any
subset of mesh axes on any tensor axes, several on one axis in any order; shapes include zero-size
and uneven dimensions. The strategies are plain data, so a failing example prints as a ``Case``
that can be pasted into a test.
"""

from __future__ import annotations

import functools
import math
import random
from collections.abc import Callable, Sequence

from hypothesis import strategies as st

import layoutcore as lc

from ._oracle import Case, Entry
from .adapter import load_adapter

__all__ = [
    "MAX_DEVICES",
    "cases",
    "device_budget",
    "layout_specs",
    "mesh_parts",
    "other_layouts",
    "random_mesh_pool",
    "shapes_for",
]

#: The largest mesh the property tests draw (the contract's "at most 8 devices").
MAX_DEVICES = 8
#: Mesh axis names to draw from; "batch" and "model" as in keras, single letters as in DTensor.
AXIS_POOL = ("x", "y", "z", "batch", "model")

MeshParts = tuple[tuple[int, ...], tuple[str, ...], tuple[str, ...] | None, str]


def device_budget() -> int:
    """Largest mesh to draw: 8, or fewer if the active driver has fewer devices."""
    return min(MAX_DEVICES, len(_devices(lc.active_driver_name())))


@functools.lru_cache(maxsize=8)
def _devices(driver_name: str) -> tuple[str, ...]:
    # Per driver name: one process may run the suite on several drivers (layoutcore_conformance.run).
    return tuple(lc.get_driver(driver_name).list_devices())


@st.composite
def mesh_parts(draw: st.DrawFn, max_devices: int | None = None) -> MeshParts:
    """``(shape, axis_names, devices, name)`` of a random mesh of rank 1..3 and at most ``max_devices``.

    Where the active driver's adapter sets ``max_random_meshes``, the mesh comes from
    :func:`random_mesh_pool` instead, so that one process never makes more distinct meshes than that.
    """
    budget = max_devices if max_devices is not None else device_budget()
    driver_name = lc.active_driver_name()
    limit = _adapter_mesh_limit(driver_name)
    if limit is not None:
        pool = [
            parts for parts in random_mesh_pool(driver_name, device_budget(), limit) if math.prod(parts[0]) <= budget
        ]
        return draw(st.sampled_from(pool))
    return _random_mesh(
        budget,
        _devices(driver_name),
        integer=lambda lo, hi: draw(st.integers(lo, hi)),
        names=lambda rank: tuple(draw(st.permutations(AXIS_POOL))[:rank]),
        concrete=lambda: draw(st.booleans()),
        name=lambda: draw(st.sampled_from(MESH_NAMES)),
    )


#: Mesh names the property tests draw from.
MESH_NAMES = ("", "mesh1")


def _random_mesh(
    budget: int,
    devices: Sequence[str],
    *,
    integer: Callable[[int, int], int],
    names: Callable[[int], tuple[str, ...]],
    concrete: Callable[[], bool],
    name: Callable[[], str],
) -> MeshParts:
    """One random mesh of rank 1..3 and at most ``budget`` devices, its choices made by the given
    functions in this order: rank, each axis size, axis names, concrete or not, mesh name."""
    shape: list[int] = []
    for _ in range(integer(1, 3)):
        shape.append(integer(1, max(1, budget // math.prod(shape))))
    axis_names = names(len(shape))
    # A concrete mesh names the driver's first devices, in order: every framework can build it
    # (torch's simulated ranks need a regular grid), and its fetch_layout must keep the names.
    mesh_devices = tuple(devices[: math.prod(shape)]) if concrete() else None
    return tuple(shape), axis_names, mesh_devices, name()


@functools.lru_cache(maxsize=8)
def random_mesh_pool(driver_name: str, budget: int, size: int) -> tuple[MeshParts, ...]:
    """``size`` distinct meshes drawn as :func:`mesh_parts` draws them (rank uniform in 1..3, each
    axis uniform in what the budget leaves, random axis names, abstract or concrete, named or not),
    the same in every run.

    For frameworks that keep resources per distinct mesh until the process ends (TF DTensor: a
    thread pool per mesh, capped at 256 by layoutcore's TF driver).
    """
    rng = random.Random(f"layoutcore-conformance-meshes-{budget}")  # the same pool in every run
    pool: dict[MeshParts, None] = {}
    while len(pool) < size:
        parts = _random_mesh(
            budget,
            _devices(driver_name),
            integer=rng.randint,
            names=lambda rank: tuple(rng.sample(AXIS_POOL, rank)),
            concrete=lambda: rng.random() < 0.5,
            name=lambda: rng.choice(MESH_NAMES),
        )
        pool[parts] = None
    return tuple(pool)


@functools.lru_cache(maxsize=8)
def _adapter_mesh_limit(driver_name: str) -> int | None:
    return load_adapter(lc.get_driver(driver_name)).max_random_meshes


@st.composite
def layout_specs(draw: st.DrawFn, axis_names: Sequence[str], rank: int) -> tuple[Entry, ...]:
    """A random layout of ``rank`` over mesh axes ``axis_names``: each mesh axis is unused or
    shards one tensor axis; several on one tensor axis come in a random (maybe non-mesh) order."""
    owner = [draw(st.integers(-1, rank - 1)) if rank else -1 for _ in axis_names]
    order = draw(st.permutations(range(len(axis_names))))
    spec: list[Entry] = []
    for dim in range(rank):
        names = [axis_names[a] for a in order if owner[a] == dim]
        if not names:
            spec.append(draw(st.sampled_from([None, lc.UNSHARDED])))
        elif len(names) == 1:
            spec.append(draw(st.sampled_from([names[0], (names[0],)])))
        else:
            spec.append(tuple(names))
    return tuple(spec)


@st.composite
def shapes_for(draw: st.DrawFn, blocks: Sequence[int]) -> tuple[int, ...]:
    """A shape with, per tensor axis, a size in ``0 .. 2*blocks+1`` (capped at 12), or half the time
    ``blocks`` or ``2*blocks``: even, uneven and empty. The even sizes are drawn on purpose: drivers
    that refuse uneven sharding (TF, JAX's S0 -> S1) check data only on them."""
    return tuple(
        draw(st.one_of(st.integers(0, min(12, 2 * n + 1)), st.sampled_from([n, 2 * n] if n > 1 else [1, 2])))
        for n in blocks
    )


@st.composite
def cases(draw: st.DrawFn, dtypes: Sequence[str] = ("float32",), max_rank: int = 3) -> Case:
    """A random mesh, a layout of rank ``0..max_rank`` on it, a shape and a dtype."""
    shape_m, names, devices, mesh_name = draw(mesh_parts())
    rank = draw(st.integers(0, max_rank))
    spec = draw(layout_specs(names, rank))
    case = Case(shape_m, names, spec, (), draw(st.sampled_from(list(dtypes))), devices, mesh_name)
    blocks = [math.prod(shape_m[a] for a in axes) for axes in case.dim_axes]
    return Case(shape_m, names, spec, draw(shapes_for(blocks)), case.dtype, devices, mesh_name)


@st.composite
def other_layouts(draw: st.DrawFn, case: Case, *, other_mesh: bool) -> Case:
    """Another layout for ``case``'s tensor: on the same mesh, or (``other_mesh``) on a fresh random mesh."""
    if other_mesh:
        shape_m, names, devices, mesh_name = draw(mesh_parts())
    else:
        shape_m, names, devices, mesh_name = case.mesh_shape, case.axis_names, case.devices, case.mesh_name
    spec = draw(layout_specs(names, len(case.shape)))
    return Case(shape_m, names, spec, case.shape, case.dtype, devices, mesh_name)
