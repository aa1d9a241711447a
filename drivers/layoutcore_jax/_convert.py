"""Conversions between layoutcore values and ``jax.sharding`` values.

Every function imports JAX lazily, so importing this module costs nothing until one is called.
Mesh and layout conversions are cached on the hashable layoutcore values (and on the hashable
JAX values for the reverse direction), because every data call of the driver goes through them.

Dtypes: with ``jax_enable_x64`` off, :func:`narrowed_exactly` stores a 64-bit value in 32 bits
where every element fits exactly, and refuses it typed otherwise (the driver's ``narrow_input``).

Axis types: :func:`to_jax_mesh` builds ``Auto`` axes by default, the type
``jax.sharding.Mesh(...)`` and keras' JAX backend build. See the JAX driver page for why.
"""

from __future__ import annotations

import functools
import sys
import warnings
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Literal

import numpy as np

from layoutcore import DtypeNarrowingWarning, Layout, LayoutError, Mesh, UnsupportedLayoutError
from layoutcore.driver import (
    NARROWED,
    X64_DTYPES,
    Limitation,
    as_bits,
    canonical_devices,
    dtype_name,
    narrow_exactly,
)

from ._runtime import configure_cpu_devices

if TYPE_CHECKING:
    import jax
    from jax.sharding import NamedSharding, PartitionSpec

__all__ = [
    "SINGLE_DEVICE_AXIS",
    "AxisTypeName",
    "device_names",
    "from_jax_mesh",
    "from_jax_sharding",
    "from_named_sharding",
    "from_partition_spec",
    "narrowed_exactly",
    "to_jax_mesh",
    "to_named_sharding",
    "to_partition_spec",
    "warn_narrowed",
    "x64_remedies",
    "x64_request",
]

#: Mesh axis name of the one-device mesh that a ``SingleDeviceSharding`` converts to.
SINGLE_DEVICE_AXIS = "device"

#: ``"auto"`` or ``"explicit"``: the ``jax.sharding.AxisType`` of every axis of a converted mesh.
AxisTypeName = Literal["auto", "explicit"]


def device_names(devices: Sequence[Any]) -> tuple[str, ...]:
    """layoutcore's canonical names (``"CPU:0"``) of JAX devices, in the given order."""
    return canonical_devices(list(devices))  # the one naming rule of every driver


@functools.lru_cache(maxsize=1)
def _devices_by_name() -> dict[str, jax.Device]:
    import jax

    configure_cpu_devices()
    devices = jax.devices()
    return dict(zip(device_names(devices), devices, strict=True))


def _jax_devices_for(mesh: Mesh) -> list[jax.Device]:
    by_name = _devices_by_name()
    if mesh.devices is None:
        available = list(by_name.values())
        if mesh.size > len(available):
            raise LayoutError(
                f"{mesh} needs {mesh.size} devices but JAX has {len(available)}: {list(by_name)}; set "
                "LAYOUTCORE_CPU_DEVICES (or jax_num_cpu_devices) before JAX starts.",
                value=mesh,
            )
        return available[: mesh.size]
    missing = [d for d in mesh.devices if d not in by_name]
    if missing:
        raise LayoutError(
            f"{mesh!r} names device(s) {missing} that JAX does not have (it has {list(by_name)}); set "
            "LAYOUTCORE_CPU_DEVICES (or jax_num_cpu_devices) before JAX starts.",
            value=mesh,
        )
    return [by_name[d] for d in mesh.devices]


def to_jax_mesh(mesh: Mesh, *, axis_types: AxisTypeName = "auto") -> jax.sharding.Mesh:
    """The ``jax.sharding.Mesh`` of ``mesh``: its devices in row-major order, its axis names.

    An abstract mesh (``devices=None``) takes JAX's first ``mesh.size`` devices, as the driver
    binds it. Cached on ``(mesh, axis_types)``.

    Args:
        mesh: a layoutcore mesh.
        axis_types: ``"auto"`` (default; compiler-propagated shardings, as ``jax.sharding.Mesh``'s own
            default) or ``"explicit"`` (sharding in types, as ``jax.make_mesh``'s default).

    Raises:
        LayoutError: the mesh names a device JAX does not have, or needs more devices than JAX has.
    """
    if not isinstance(mesh, Mesh):
        raise LayoutError(f"to_jax_mesh expects a layoutcore Mesh. Received: {mesh!r}", value=mesh)
    if axis_types not in ("auto", "explicit"):
        raise LayoutError(f"axis_types must be 'auto' or 'explicit'. Received: {axis_types!r}", value=axis_types)
    return _to_jax_mesh(mesh, axis_types)


@functools.lru_cache(maxsize=1024)
def _to_jax_mesh(mesh: Mesh, axis_types: AxisTypeName) -> jax.sharding.Mesh:
    import numpy as np
    from jax.sharding import AxisType
    from jax.sharding import Mesh as JaxMesh

    kind = AxisType.Auto if axis_types == "auto" else AxisType.Explicit
    grid = np.empty(mesh.size, dtype=object)
    grid[:] = _jax_devices_for(mesh)
    return JaxMesh(grid.reshape(mesh.shape), mesh.axis_names, axis_types=(kind,) * mesh.ndim)


def from_jax_mesh(native: Any, *, name: str = "") -> Mesh:
    """The layoutcore mesh of a ``jax.sharding.Mesh`` (or an abstract mesh for a ``jax.sharding.AbstractMesh``).

    Devices are listed in ``native.devices.flat`` order, which is the order JAX itself gives
    shards in. Axis types are not part of a layoutcore mesh and are dropped.

    Raises:
        LayoutError: ``native`` is not a JAX mesh, or its axis names are not valid layoutcore axis
            names (non-empty strings without ``,``, ``|``, ``=`` or whitespace, not ``unsharded``/``match``).
    """
    from jax.sharding import AbstractMesh
    from jax.sharding import Mesh as JaxMesh

    if isinstance(native, JaxMesh):
        return _from_jax_mesh(native, name)
    if isinstance(native, AbstractMesh):
        try:
            return Mesh(tuple(native.axis_sizes), tuple(native.axis_names), name=name)
        except LayoutError as exc:
            raise LayoutError(f"JAX mesh {native} cannot be a layoutcore mesh: {exc}", value=native) from exc
    raise LayoutError(
        f"Expected a jax.sharding.Mesh or AbstractMesh. Received: {type(native).__name__} {native!r}", value=native
    )


@functools.lru_cache(maxsize=1024)
def _from_jax_mesh(native: jax.sharding.Mesh, name: str) -> Mesh:
    devices = native.devices
    try:
        return Mesh(tuple(int(s) for s in devices.shape), tuple(native.axis_names), list(devices.flat), name=name)
    except LayoutError as exc:
        raise LayoutError(f"JAX mesh {native} cannot be a layoutcore mesh: {exc}", value=native) from exc


def to_partition_spec(layout: Layout) -> PartitionSpec:
    """The ``PartitionSpec`` of ``layout``: one entry per tensor axis (``None``, a name, or a tuple
    of names, major to minor). The mesh is not needed.

    Raises:
        LayoutError: ``layout`` is not a layoutcore Layout.
    """
    if not isinstance(layout, Layout):
        raise LayoutError(f"to_partition_spec expects a layoutcore Layout. Received: {layout!r}", value=layout)
    return _to_partition_spec(layout.axes)


@functools.lru_cache(maxsize=4096)
def _to_partition_spec(axes: tuple[Any, ...]) -> PartitionSpec:
    from jax.sharding import PartitionSpec

    return PartitionSpec(*axes)


def to_named_sharding(layout: Layout, *, axis_types: AxisTypeName = "auto") -> NamedSharding:
    """The ``NamedSharding`` of ``layout`` on :func:`to_jax_mesh` of its mesh (cached).

    Raises:
        LayoutError: ``layout`` has no mesh, or see :func:`to_jax_mesh`.
    """
    if not isinstance(layout, Layout):
        raise LayoutError(f"to_named_sharding expects a layoutcore Layout. Received: {layout!r}", value=layout)
    if layout.mesh is None:
        raise LayoutError(f"{layout!r} has no mesh; bind one with layout.with_mesh(mesh).", value=layout)
    if axis_types not in ("auto", "explicit"):
        raise LayoutError(f"axis_types must be 'auto' or 'explicit'. Received: {axis_types!r}", value=axis_types)
    return _to_named_sharding(layout, axis_types)


@functools.lru_cache(maxsize=4096)
def _to_named_sharding(layout: Layout, axis_types: AxisTypeName) -> NamedSharding:
    from jax.sharding import NamedSharding

    assert layout.mesh is not None
    return NamedSharding(_to_jax_mesh(layout.mesh, axis_types), _to_partition_spec(layout.axes))


def from_partition_spec(spec: Any, mesh: Mesh | None = None, *, ndim: int | None = None) -> Layout:
    """The layoutcore layout of a ``PartitionSpec``.

    Args:
        spec: the ``PartitionSpec``.
        mesh: the layout's mesh (``None``: an unbound layout).
        ndim: the tensor's rank; JAX lets a spec be shorter than the rank (trailing axes
            replicated), so the layout is padded with ``None`` up to ``ndim``.

    Raises:
        LayoutError: ``spec`` is not a PartitionSpec, holds ``PartitionSpec.UNCONSTRAINED``,
            ``unreduced``/``reduced`` axes, or is longer than ``ndim``; or any Layout error
            (an axis used twice, a name not in ``mesh``).
    """
    from jax.sharding import PartitionSpec

    if not isinstance(spec, PartitionSpec):
        raise LayoutError(f"Expected a jax.sharding.PartitionSpec. Received: {spec!r}", value=spec)
    if getattr(spec, "unreduced", None) or getattr(spec, "reduced", None):
        raise LayoutError(
            f"{spec} holds pending reductions (unreduced/reduced axes), which a layoutcore layout cannot express.",
            value=spec,
        )
    entries = tuple(spec)
    if any(e is PartitionSpec.UNCONSTRAINED for e in entries):
        raise LayoutError(
            f"{spec} leaves an axis UNCONSTRAINED (the compiler chooses); a layoutcore layout fixes every axis.",
            value=spec,
        )
    if ndim is not None:
        if len(entries) > ndim:
            raise LayoutError(f"{spec} has {len(entries)} entries, more than the tensor's rank {ndim}.", value=spec)
        entries = entries + (None,) * (ndim - len(entries))
    return Layout(entries, mesh)


def from_named_sharding(sharding: Any, ndim: int | None = None) -> Layout:
    """The layoutcore layout of a ``NamedSharding`` (on :func:`from_jax_mesh` of its mesh).

    Args:
        sharding: the ``NamedSharding``.
        ndim: the tensor's rank (default: the spec's length); see :func:`from_partition_spec`.

    Raises:
        LayoutError: not a NamedSharding, or see :func:`from_partition_spec` and :func:`from_jax_mesh`.
    """
    from jax.sharding import NamedSharding

    if not isinstance(sharding, NamedSharding):
        raise LayoutError(f"Expected a jax.sharding.NamedSharding. Received: {sharding!r}", value=sharding)
    return _from_named_sharding(sharding, ndim)


@functools.lru_cache(maxsize=4096)
def _from_named_sharding(sharding: NamedSharding, ndim: int | None) -> Layout:
    return from_partition_spec(sharding.spec, from_jax_mesh(sharding.mesh), ndim=ndim)


def from_jax_sharding(sharding: Any, ndim: int) -> Layout:
    """The layoutcore layout of any JAX sharding that has one.

    * ``NamedSharding``: :func:`from_named_sharding`.
    * ``SingleDeviceSharding`` (an unsharded ``jax.Array``): a fully replicated layout on a
      one-device mesh whose axis is named :data:`SINGLE_DEVICE_AXIS` (``"device"``).

    Raises:
        LayoutError: any other sharding (``GSPMDSharding``, a custom sharding), naming its type;
            put the array on a ``NamedSharding`` first (``jax.device_put``).
    """
    from jax.sharding import NamedSharding, SingleDeviceSharding

    if isinstance(sharding, NamedSharding):
        return _from_named_sharding(sharding, ndim)
    if isinstance(sharding, SingleDeviceSharding):
        return _single_device_layout(next(iter(sharding.device_set)), ndim)
    raise LayoutError(
        f"A {type(sharding).__name__} has no layoutcore layout (only NamedSharding and SingleDeviceSharding "
        f"convert): {sharding!r}. Place the array with jax.device_put(array, NamedSharding(mesh, spec)) first.",
        value=sharding,
    )


@functools.lru_cache(maxsize=1024)
def _single_device_layout(device: jax.Device, ndim: int) -> Layout:
    return Layout([None] * ndim, Mesh((1,), (SINGLE_DEVICE_AXIS,), devices=[device]))


# -- 64-bit values with jax_enable_x64 off (docs/dtypes.md#no-silent-narrowing-jax-and-jax_enable_x64) --
def x64_remedies(name: str) -> str:
    """The two ways out for a 64-bit ``name`` that JAX without x64 cannot hold, for error messages."""
    return (
        '64-bit values need jax.config.update("jax_enable_x64", True) before arrays are made; or cast '
        f"the value to a 32-bit dtype first (e.g. x.astype(np.{NARROWED[name]}))"
    )


def narrowed_exactly(value: Any, name: str, what: str) -> np.ndarray:
    """``value`` (of 64-bit dtype ``name``) in its 32-bit dtype where every element fits exactly.

    Raises:
        UnsupportedLayoutError: ``feature=Limitation.DTYPE``, naming ``name``, ``what``, the first
            element that would change (its index, its value and a NaN's bits) and the remedies.
    """
    array = value if isinstance(value, np.ndarray) else np.asarray(value)
    narrowed = narrow_exactly(array)
    if narrowed.value is not None:
        return narrowed.value
    assert narrowed.first is not None
    raise UnsupportedLayoutError(
        f"The jax driver does not hold dtype {name} with jax_enable_x64 off, and {what} does not fit "
        f"{NARROWED[name]} exactly: element {narrowed.first} is {_element(array, narrowed.first)}, which "
        f"{NARROWED[name]} would change. {x64_remedies(name)}.",
        driver="jax",
        feature=Limitation.DTYPE,
        value=name,
    )


def warn_narrowed(name: str) -> None:
    """The :class:`~layoutcore.driver.DtypeNarrowingWarning` for ``name``, at the user's line."""
    warnings.warn(
        DtypeNarrowingWarning(
            f"The jax driver stores {name} values as {NARROWED[name]}, as jax.device_put does with "
            f"jax_enable_x64 off; every value fits exactly (values that do not are refused). Said once "
            f"per dtype. Enable jax_enable_x64 to keep {name}, or cast to {NARROWED[name]} first."
        ),
        stacklevel=_caller_level(),
    )


def _element(array: np.ndarray, index: tuple[int, ...]) -> str:
    """``array[index]`` for an error message, with its bits where it is a NaN (payloads differ)."""
    item = array[index]
    text = repr(item.item()) if isinstance(item, np.generic) else repr(item)
    if array.dtype.kind in "fc" and np.isnan(item):
        text += f" (bits {' '.join(f'0x{int(b):016x}' for b in np.atleast_1d(as_bits(np.asarray(item))))})"
    return text


def _caller_level() -> int:
    """``warnings.warn``'s stacklevel, called from the function that warns, of the first frame outside
    layoutcore and its drivers (the user's line)."""
    frame, level = sys._getframe(1), 1  # the warning function itself is stacklevel 1
    while frame.f_back is not None and frame.f_globals.get("__name__", "").startswith("layoutcore"):
        frame, level = frame.f_back, level + 1
    return level


def x64_request(leaf: Any) -> str | None:
    """The 64-bit dtype a ``call_with_layout`` argument explicitly asks for (``np.int64``, ``jnp.float64``,
    ``np.dtype("complex128")``, ``"float64"``), else None. Python's ``int``/``float`` types ask for JAX's
    default dtype, which is no request for 64 bits; 64-bit NumPy arrays are values (narrowed exactly or refused)."""
    # np.dtype("int64"), "float64", or a NumPy or JAX scalar type (jnp.float64 is JAX's own class)
    request = isinstance(leaf, np.dtype) or (isinstance(leaf, str) and leaf in X64_DTYPES)
    if not request and not (
        isinstance(leaf, type) and leaf not in (bool, int, float, complex) and hasattr(leaf, "dtype")
    ):
        return None
    try:
        name = dtype_name(leaf)
    except LayoutError:
        return None
    return name if name in X64_DTYPES else None
