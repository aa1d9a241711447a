"""The suite's oracle: what every device must hold, from the pure shard math alone.

Nothing here reads data through the driver under test. Per-device data comes from the
driver's :class:`~layoutcore_conformance.ConformanceAdapter` (the framework's own raw calls),
and what it must equal is ``x[slices]`` with the slices from :mod:`layoutcore.geometry`,
fed with mesh-axis indices that this module works out from the axis *names* the test wrote,
not from ``Layout.dim_axes`` / ``Layout.device_slices`` (which belong to the code under test).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pytest

import layoutcore as lc
from layoutcore import geometry

from .adapter import ConformanceAdapter

__all__ = [
    "Case",
    "assert_device_data",
    "assert_native_layout",
    "assert_refused",
    "bound_devices",
    "concrete",
    "expected_capabilities",
    "missing_capabilities",
    "needs_cross_mesh",
    "spec_names",
    "values",
]

#: One tensor axis as a test writes it: ``None``/``"unsharded"``, a mesh axis name, or a sequence of names.
Entry = Any


def spec_names(entry: Entry) -> tuple[str, ...]:
    """Mesh axis names one layout entry splits its tensor axis over, major to minor."""
    if entry is None or entry == lc.UNSHARDED:
        return ()
    if isinstance(entry, str):
        return (entry,)
    return tuple(entry)


def dim_axes_of(axis_names: Sequence[str], spec: Sequence[Entry]) -> tuple[tuple[int, ...], ...]:
    """Per tensor axis, the mesh-axis indices it is split over, from the names alone."""
    names = list(axis_names)
    return tuple(tuple(names.index(n) for n in spec_names(entry)) for entry in spec)


@dataclass(frozen=True)
class Case:
    """A mesh, a layout on it and a global shape, as plain data (hypothesis prints it on failure).

    ``devices`` is ``None`` for an abstract mesh (each driver binds its first ``size`` devices).
    """

    mesh_shape: tuple[int, ...]
    axis_names: tuple[str, ...]
    spec: tuple[Entry, ...]
    shape: tuple[int, ...]
    dtype: str = "float32"
    devices: tuple[str, ...] | None = None
    mesh_name: str = ""

    @property
    def size(self) -> int:
        """Number of devices of the mesh."""
        return math.prod(self.mesh_shape)

    def mesh(self) -> lc.Mesh:
        """The :class:`layoutcore.Mesh` this case describes."""
        return lc.Mesh(self.mesh_shape, self.axis_names, self.devices, name=self.mesh_name)

    def layout(self) -> lc.Layout:
        """The :class:`layoutcore.Layout` this case describes."""
        return lc.Layout(self.spec, self.mesh())

    @property
    def dim_axes(self) -> tuple[tuple[int, ...], ...]:
        """Mesh-axis indices per tensor axis (the geometry functions' input)."""
        return dim_axes_of(self.axis_names, self.spec)

    def slices(self) -> list[tuple[slice, ...]]:
        """The oracle: one tuple of slices per device, row-major mesh order, explicit bounds on every axis.

        Built from ``geometry.shard_bounds`` (ints), not ``device_slices``, which writes a one-block
        axis as ``slice(None)`` as JAX does; the tables in ``facts`` compare ``(start, stop)``.
        """
        return [
            tuple(slice(a, b) for a, b in geometry.shard_bounds(self.shape, self.mesh_shape, self.dim_axes, p))
            for p in range(math.prod(self.mesh_shape))
        ]

    def values(self) -> np.ndarray:
        """A global array of this case's shape and dtype with (mostly) distinct entries."""
        return values(self.shape, self.dtype)

    def with_spec(self, spec: Sequence[Entry]) -> Case:
        """The same mesh and shape with another layout."""
        return Case(self.mesh_shape, self.axis_names, tuple(spec), self.shape, self.dtype, self.devices, self.mesh_name)


def values(shape: Sequence[int], dtype: str | np.dtype[Any]) -> np.ndarray:
    """``1, 2, 3, ...`` in C order, cast to ``dtype``: a misplaced block shows as wrong values.

    Starts at 1 so that a zero-filled component is never right by accident.
    """
    count = math.prod(shape)
    dt = np.dtype(dtype)
    base = np.arange(1, count + 1)
    if dt == np.bool_:
        array = (base % 3) == 0
    elif dt.kind == "u" and dt.itemsize == 1:
        array = (base % 251).astype(dt)
    elif dt.kind == "c":
        array = (base + 1j * base[::-1]).astype(dt) if count else base.astype(dt)
    else:
        array = base.astype(dt)
    return np.asarray(array, dtype=dt).reshape(tuple(shape))


def bound_devices(driver: lc.driver.Driver, mesh_shape: Sequence[int], devices: Sequence[str] | None) -> list[str]:
    """The devices a mesh must run on: its own, or (abstract) the driver's first ``size`` devices."""
    if devices is not None:
        return list(devices)
    return list(driver.list_devices())[: math.prod(mesh_shape)]


def _where(mesh_shape: Sequence[int], position: int, device: str) -> str:
    return f"device {device} (mesh position {position}, coordinate {geometry.mesh_coordinate(mesh_shape, position)})"


def assert_device_data(
    adapter: ConformanceAdapter,
    tensor: Any,
    x: np.ndarray,
    case: Case,
    *,
    check_dtype: bool = True,
    what: str = "",
) -> None:
    """Every device of ``tensor`` holds exactly ``x[oracle slice]``, read through ``adapter``.

    Also checks the device names and their row-major order against the mesh's devices.
    """
    label = f"{what}: " if what else ""
    got = adapter.device_data(tensor)
    expected_devices = bound_devices(adapter.driver, case.mesh_shape, case.devices)
    got_devices = [device for device, _ in got]
    assert got_devices == expected_devices, (
        f"{label}{case}: the adapter reports devices {got_devices}, expected the mesh's devices "
        f"{expected_devices} in row-major mesh order"
    )
    for position, ((device, data), sl) in enumerate(zip(got, case.slices(), strict=True)):
        want = np.asarray(x[sl])
        where = _where(case.mesh_shape, position, device)
        assert isinstance(data, np.ndarray), f"{label}adapter returned {type(data).__name__} for {where}"
        assert data.shape == want.shape, (
            f"{label}{case}: {where} holds shape {data.shape}; the chunk rule gives {want.shape} (slice {sl})"
        )
        if check_dtype:
            assert data.dtype == want.dtype, f"{label}{case}: {where} holds dtype {data.dtype}, expected {want.dtype}"
        assert np.array_equal(data, want), (
            f"{label}{case}: {where} holds\n{data}\nbut its oracle slice {sl} of the global value is\n{want}"
        )


def expected_capabilities(case: Case) -> set[str]:
    """The capabilities ``case`` needs, worked out here from the contract's definitions.

    Cross-checks :func:`layoutcore.driver.required_capabilities`, which the gating relies on.
    """
    needed: set[str] = set()
    for size, axes in zip(case.shape, case.dim_axes, strict=True):
        blocks = math.prod(case.mesh_shape[a] for a in axes)
        uneven = size % blocks != 0
        if uneven:
            needed.add(lc.driver.Capability.UNEVEN.value)
        if len(axes) > 1:
            needed.add(lc.driver.Capability.MULTI_AXIS.value)
            if list(axes) != sorted(axes):
                needed.add(lc.driver.Capability.MULTI_AXIS_ANY_ORDER.value)
            if uneven:
                needed.add(lc.driver.Capability.UNEVEN_MULTI_AXIS.value)
    return needed


def missing_capabilities(driver: lc.driver.Driver, layout: lc.Layout, shape: Sequence[int]) -> set[str]:
    """Capabilities ``layout`` needs for ``shape`` that ``driver`` does not declare."""
    required = lc.driver.required_capabilities(layout, tuple(shape))
    return {c.value for c in required if c not in driver.capabilities}


def needs_cross_mesh(driver: lc.driver.Driver, source: Case, target: Case) -> bool:
    """Whether relayout from ``source``'s mesh to ``target``'s moves to another (bound) mesh."""

    def key(case: Case) -> tuple[Any, ...]:
        return (
            case.mesh_shape,
            case.axis_names,
            tuple(bound_devices(driver, case.mesh_shape, case.devices)),
            case.mesh_name,
        )

    return key(source) != key(target)


def assert_refused(driver: lc.driver.Driver, missing: set[str], call: Callable[[], Any], what: str) -> None:
    """``call()`` must raise :class:`UnsupportedLayoutError` naming the driver and a missing capability.

    A driver that returns data instead fails here: it would hand users a layout it does not
    declare, and nothing would tell them whether that data is right.
    """
    try:
        result = call()
    except lc.UnsupportedLayoutError as err:
        assert isinstance(err, NotImplementedError)
        assert err.driver == driver.name, (
            f"{what}: UnsupportedLayoutError.driver is {err.driver!r}, not {driver.name!r}"
        )
        assert str(err.feature) in missing, (
            f"{what}: UnsupportedLayoutError.feature is {err.feature!r}; the missing capabilities are {sorted(missing)}"
        )
        assert str(err.feature) in str(err), f"{what}: the message does not name the capability: {err}"
        return
    pytest.fail(
        f"{what}: the {driver.name!r} driver does not declare {sorted(missing)} but returned "
        f"{type(result).__name__} instead of raising UnsupportedLayoutError"
    )


def concrete(driver: lc.driver.Driver, layout: lc.Layout) -> lc.Layout:
    """``layout`` on a nameless concrete mesh: an abstract mesh takes the devices it binds to by the
    contract's rule (the driver's first ``size`` devices, worked out by the oracle, not by ``bind_mesh``)."""
    mesh = layout.mesh
    assert mesh is not None, layout
    devices = bound_devices(driver, mesh.shape, mesh.devices)
    return layout.with_mesh(lc.Mesh(mesh.shape, mesh.axis_names, devices))


def assert_native_layout(driver: lc.driver.Driver, tensor: Any, layout: lc.Layout, what: str) -> None:
    """``driver.native_fetch_layout(tensor)`` is ``layout``, on the same concrete mesh (name aside)."""
    got = driver.native_fetch_layout(tensor)
    assert isinstance(got, lc.Layout), f"{what}: native_fetch_layout returned {type(got).__name__}, not a Layout"
    assert got.mesh is not None, f"{what}: native_fetch_layout returned {got!r} without a mesh"
    assert concrete(driver, got) == concrete(driver, layout), (
        f"{what}: native_fetch_layout reads {got!r}; the tensor was made with {layout!r}"
    )
