"""The named device mesh value."""

from __future__ import annotations

import math
import operator
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from ._devices import canonical_device, full_device_name
from ._errors import LayoutError

__all__ = ["DeviceMesh", "Mesh", "create_mesh"]

#: Names TF DTensor reserves in sharding specs; a mesh axis cannot take them.
RESERVED_AXIS_NAMES = frozenset({"unsharded", "match"})
_BAD_NAME_CHARS = re.compile(r"[,|=\s]")


def _check_axis_name(name: Any) -> str:
    if not isinstance(name, str) or not name:
        raise LayoutError(f"A mesh axis name must be a non-empty string. Received: {name!r}", value=name)
    if _BAD_NAME_CHARS.search(name) or name in RESERVED_AXIS_NAMES:
        raise LayoutError(
            "A mesh axis name cannot contain ',', '|', '=' or whitespace, nor be 'unsharded' or 'match' "
            f"(TF DTensor could not round-trip it). Received: {name!r}",
            value=name,
        )
    return name


@dataclass(frozen=True, slots=True, init=False)
class Mesh:
    """A named, row-major grid of devices.

    Args:
        shape: size of each mesh axis, e.g. ``(3, 2)``.
        axis_names: one name per axis, e.g. ``("x", "y")``.
        devices: ``prod(shape)`` devices in row-major mesh order (strings such as ``"CPU:0"``
            or native device objects; a nested array is flattened in C order), or ``None`` for
            an *abstract* mesh that each driver binds to its own first ``size`` devices.
        name: an optional mesh name (TF DTensor's ``mesh_name``).

    Raises:
        LayoutError: empty shape, a non-positive size, names that do not match the shape,
            duplicate/empty/reserved names, a device count other than ``prod(shape)``, or a
            repeated device.

    Example:
        >>> Mesh((3, 2), ("x", "y"))
        Mesh((3, 2), ('x', 'y'))
        >>> Mesh((2,), ("batch",), devices=["cpu:0", "cpu:1"]).devices
        ('CPU:0', 'CPU:1')
    """

    shape: tuple[int, ...]
    axis_names: tuple[str, ...]
    devices: tuple[str, ...] | None
    name: str

    def __init__(
        self,
        shape: Sequence[int],
        axis_names: Sequence[str],
        devices: Iterable[Any] | None = None,
        *,
        name: str = "",
    ) -> None:
        if isinstance(shape, int):
            shape = (shape,)
        if isinstance(axis_names, str):
            axis_names = (axis_names,)
        try:
            shape_t = tuple(shape)
            names_t = tuple(axis_names)
        except TypeError:
            raise LayoutError(
                f"Mesh shape and axis_names must be sequences. Received: shape={shape!r}, axis_names={axis_names!r}",
                value=shape,
            ) from None
        if not shape_t:
            raise LayoutError("A mesh needs at least one axis. Received: shape=()", value=shape)
        for size in shape_t:
            # Any integer (NumPy's too) is accepted through __index__; bools and floats are not sizes.
            if isinstance(size, bool) or not hasattr(type(size), "__index__") or operator.index(size) <= 0:
                raise LayoutError(f"Mesh axis sizes must be positive ints. Received: shape={shape_t!r}", value=shape)
        if len(names_t) != len(shape_t):
            raise LayoutError(
                f"Mesh needs one axis name per dimension. Received: shape={shape_t!r}, axis_names={names_t!r}",
                value=axis_names,
            )
        for axis in names_t:
            _check_axis_name(axis)
        duplicated = sorted({a for a in names_t if names_t.count(a) > 1})
        if duplicated:
            raise LayoutError(
                f"Mesh axis names must be unique; repeated: {duplicated}. Received: {names_t!r}", value=axis_names
            )
        if not isinstance(name, str) or _BAD_NAME_CHARS.search(name):
            raise LayoutError(
                f"A mesh name must be a string without ',', '|', '=' or whitespace. Received: {name!r}", value=name
            )
        devices_t: tuple[str, ...] | None = None
        if devices is not None:
            flat = list(devices.flat) if hasattr(devices, "flat") else list(devices)
            devices_t = tuple(canonical_device(d) for d in flat)
            size = math.prod(shape_t)
            if len(devices_t) != size:
                raise LayoutError(
                    f"Mesh of shape {shape_t} needs {size} devices. Received {len(devices_t)}: {list(devices_t)}",
                    value=devices,
                )
            repeated = sorted({d for d in devices_t if devices_t.count(d) > 1})
            if repeated:
                raise LayoutError(f"Mesh devices must be distinct; repeated: {repeated}", value=devices)
        object.__setattr__(self, "shape", tuple(operator.index(s) for s in shape_t))
        object.__setattr__(self, "axis_names", names_t)
        object.__setattr__(self, "devices", devices_t)
        object.__setattr__(self, "name", name)

    def __reduce__(self) -> tuple[Any, ...]:
        return (_restore_mesh, (self.shape, self.axis_names, self.devices, self.name))

    # -- properties -------------------------------------------------------------------------
    @property
    def size(self) -> int:
        """Number of devices, ``prod(shape)``."""
        return math.prod(self.shape)

    @property
    def ndim(self) -> int:
        """Number of mesh axes."""
        return len(self.shape)

    @property
    def is_abstract(self) -> bool:
        """True when the mesh names no devices (each driver binds its own)."""
        return self.devices is None

    @property
    def dim_names(self) -> list[str]:
        """TF DTensor's name for :attr:`axis_names` (a list)."""
        return list(self.axis_names)

    def axis_index(self, axis_name: str) -> int:
        """Position of ``axis_name`` in :attr:`axis_names`.

        Raises:
            LayoutError: the mesh has no such axis.
        """
        try:
            return self.axis_names.index(axis_name)
        except ValueError:
            raise LayoutError(
                f"Mesh axis {axis_name!r} is not in the mesh. Valid axis names: {list(self.axis_names)}",
                value=axis_name,
            ) from None

    def axis_size(self, axis_name: str) -> int:
        """Size of mesh axis ``axis_name``; raises :class:`LayoutError` for an unknown axis."""
        return self.shape[self.axis_index(axis_name)]

    def with_devices(self, devices: Iterable[Any] | None) -> Mesh:
        """A copy of this mesh over other devices (``None``: abstract)."""
        return Mesh(self.shape, self.axis_names, devices, name=self.name)

    # -- TF DTensor string form ----------------------------------------------------------------
    def to_string(self) -> str:
        """The TF DTensor mesh string, ``name|x=3,y=2|global ids|local ids|full device names``.

        An abstract mesh is written over ``CPU:0 .. CPU:size-1``, the devices the NumPy driver
        binds it to (``from_string`` then returns a concrete mesh).
        """
        devices = self.devices or tuple(f"CPU:{i}" for i in range(self.size))
        ids = ",".join(str(i) for i in range(self.size))
        dims = ",".join(f"{n}={s}" for n, s in zip(self.axis_names, self.shape, strict=True))
        return f"{self.name}|{dims}|{ids}|{ids}|{','.join(full_device_name(d) for d in devices)}"

    @classmethod
    def from_string(cls, text: str) -> Mesh:
        """Parse a TF DTensor mesh string (what ``dtensor.Mesh.to_string()`` prints).

        A string that lists only some devices (a multi-client or remote mesh) without the
        global device list, or that uses TF's ``*CPU`` generator, gives an abstract mesh.

        Raises:
            LayoutError: the string is malformed, describes a single-device mesh, or its
                ids and devices disagree.
        """
        if not isinstance(text, str):
            raise LayoutError(f"Mesh.from_string expects a str. Received: {text!r}", value=text)
        try:
            return cls._parse(text)
        except LayoutError as exc:
            if repr(text) in str(exc):
                raise
            raise LayoutError(f"{exc} (in mesh string {text!r})", value=text) from exc

    @classmethod
    def _parse(cls, text: str) -> Mesh:
        parts = text.split("|")
        if parts and parts[-1] == "use_xla_spmd":
            parts = parts[:-1]  # a compilation hint of TF's, not placement
        if len(parts) < 2:
            raise LayoutError(
                "A mesh string looks like 'name|x=3,y=2|0,1,...|0,1,...|/job:...'; single-device meshes "
                f"have no axes and are not layoutcore meshes. Received: {text!r}",
                value=text,
            )
        name, dims_text = parts[0], parts[1]
        shape: list[int] = []
        names: list[str] = []
        for dim in dims_text.split(",") if dims_text else []:
            axis, eq, size_text = dim.partition("=")
            if not eq or not size_text.strip().isdigit():
                raise LayoutError(f"Bad mesh dimension {dim!r} (expected 'name=size') in {text!r}", value=text)
            names.append(axis)
            shape.append(int(size_text))
        if len(parts) == 3 and parts[2].startswith("*"):
            return cls(shape, names, name=name)
        if len(parts) < 5:
            raise LayoutError(f"A mesh string needs 5 '|'-separated fields. Received: {text!r}", value=text)

        def ids(field: str) -> list[int]:
            try:
                return [int(i) for i in field.split(",")] if field else []
            except ValueError:
                raise LayoutError(f"Bad device id list {field!r} in mesh string {text!r}", value=text) from None

        global_ids, local_ids = ids(parts[2]), ids(parts[3])
        local_devices = [d for d in parts[4].split(",") if d]
        size = math.prod(shape) if shape else 0
        if sorted(global_ids) != list(range(size)):
            raise LayoutError(
                f"Global device ids must be 0..{size - 1}. Received: {global_ids} in {text!r}", value=text
            )
        if len(local_ids) != len(local_devices):
            raise LayoutError(
                f"{len(local_ids)} local device ids but {len(local_devices)} local devices in {text!r}", value=text
            )
        if len(parts) > 5 and parts[5]:
            return cls(shape, names, parts[5].split(","), name=name)
        if sorted(local_ids) != list(range(size)):
            return cls(shape, names, name=name)  # only some devices known here: bind on use
        # TF places the device with global id g at mesh position g.
        by_id = dict(zip(local_ids, local_devices, strict=True))
        return cls(shape, names, [by_id[g] for g in range(size)], name=name)

    # -- printing ----------------------------------------------------------------------------
    def __repr__(self) -> str:
        args = [repr(self.shape), repr(self.axis_names)]
        if self.devices is not None:
            args.append(f"devices={self.devices!r}")
        if self.name:
            args.append(f"name={self.name!r}")
        return f"Mesh({', '.join(args)})"

    def __str__(self) -> str:
        dims = ", ".join(f"{n}={s}" for n, s in zip(self.axis_names, self.shape, strict=True))
        label = f"{self.name}: " if self.name else ""
        return f"Mesh({label}{dims})"


def _restore_mesh(
    shape: tuple[int, ...], axis_names: tuple[str, ...], devices: tuple[str, ...] | None, name: str
) -> Mesh:
    return Mesh(shape, axis_names, devices, name=name)


#: keras.distribution's name for :class:`Mesh`.
DeviceMesh = Mesh


def create_mesh(
    mesh_dims: Sequence[tuple[str, int]],
    devices: Iterable[Any] | None = None,
    *,
    name: str = "",
    mesh_name: str | None = None,
) -> Mesh:
    """Build a mesh from ``[(axis_name, size), ...]``, as ``tf.experimental.dtensor.create_mesh``.

    ``mesh_name=`` is accepted as TF's spelling of ``name=``.

    Raises:
        LayoutError: a malformed ``mesh_dims`` entry, or any :class:`Mesh` error.
    """
    if mesh_name is not None:
        name = mesh_name
    try:
        pairs = [(axis, size) for axis, size in mesh_dims]
    except (TypeError, ValueError):
        raise LayoutError(
            f"mesh_dims must be a list of (axis_name, size) pairs, e.g. [('x', 3), ('y', 2)]. Received: {mesh_dims!r}",
            value=mesh_dims,
        ) from None
    return Mesh([s for _, s in pairs], [a for a, _ in pairs], devices, name=name)
