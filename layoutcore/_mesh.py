"""The named device mesh value."""

from __future__ import annotations

import math
import re
from collections import Counter
from collections.abc import Iterable, Sequence, Sized
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from ._checks import MAX_LISTED, MAX_SIZE, check_listed, checked_int, short_repr
from ._devices import canonical_devices, device_type, full_device_name, full_device_names
from ._errors import LayoutError

__all__ = ["MAX_STRING_DEVICES", "DeviceMesh", "Mesh", "MeshDimension", "create_mesh"]

#: Names TF DTensor reserves in sharding specs; a mesh axis cannot take them.
RESERVED_AXIS_NAMES = frozenset({"unsharded", "match"})
#: Characters TF DTensor's strings cannot carry in a name: its separators, whitespace, and control
#: characters (a NUL byte truncates the name in TF's C++).
_BAD_NAME_CHARS = re.compile(r"[,|=\s\x00-\x1f\x7f-\x9f]")
#: Most devices ``to_string`` writes (and ``local_devices`` lists): about 60 bytes each, so the
#: largest string is about 250 MB. Above it an abstract mesh (which may be any size) raises.
MAX_STRING_DEVICES = MAX_LISTED
_DIM_SIZE = re.compile(r"[0-9]{1,19}", re.ASCII)
_ID_LIST = re.compile(r"[0-9]{1,19}(?:,[0-9]{1,19})*", re.ASCII)


class MeshDimension(NamedTuple):
    """One mesh axis, as TF DTensor's ``mesh[name]`` returns it."""

    name: str
    size: int


def _check_axis_name(name: Any) -> str:
    if not isinstance(name, str) or not name:
        raise LayoutError(f"A mesh axis name must be a non-empty string. Received: {short_repr(name)}", value=name)
    if _BAD_NAME_CHARS.search(name) or name in RESERVED_AXIS_NAMES:
        raise LayoutError(
            "A mesh axis name cannot contain ',', '|', '=', whitespace or control characters (NUL included), "
            f"nor be 'unsharded' or 'match' (TF DTensor could not round-trip it). Received: {short_repr(name)}",
            value=name,
        )
    return name


def _checked_shape(shape: Any) -> tuple[int, ...]:
    """Positive int sizes whose product fits int64, checked before anything is allocated."""
    if hasattr(type(shape), "__index__") and not isinstance(shape, Iterable):
        shape = (shape,)
    if isinstance(shape, (str, bytes)) or not isinstance(shape, Iterable):
        raise LayoutError(f"Mesh shape must be a sequence of ints. Received: {short_repr(shape)}", value=shape)
    try:
        raw = tuple(shape)
    except Exception as exc:  # an iterable whose iteration fails is a bad value
        raise LayoutError(f"Mesh shape must be a sequence of ints. Received: {short_repr(shape)}", value=shape) from exc
    if not raw:
        raise LayoutError("A mesh needs at least one axis. Received: shape=()", value=shape)
    try:
        sizes = tuple(checked_int(s, "A mesh axis size", minimum=1) for s in raw)
    except LayoutError as exc:
        raise LayoutError(f"{exc} (in shape={short_repr(raw)})", value=shape) from exc
    total = 1
    for size in sizes:  # stop early: a product of huge sizes is slow to compute in full
        total *= size
        if total > MAX_SIZE:
            raise LayoutError(
                f"A mesh holds at most 2**63 - 1 devices (TF's int64 ids). Received: shape={short_repr(sizes)}",
                value=shape,
            )
    return sizes


def _checked_names(axis_names: Any, ndim: int) -> tuple[str, ...]:
    if isinstance(axis_names, str):
        axis_names = (axis_names,)
    if isinstance(axis_names, bytes) or not isinstance(axis_names, Iterable):
        raise LayoutError(
            f"Mesh axis_names must be a sequence of str. Received: {short_repr(axis_names)}", value=axis_names
        )
    try:
        names = tuple(axis_names)
    except Exception as exc:  # an iterable whose iteration fails is a bad value
        raise LayoutError(
            f"Mesh axis_names must be a sequence of str. Received: {short_repr(axis_names)}", value=axis_names
        ) from exc
    if len(names) != ndim:
        raise LayoutError(
            f"Mesh needs one axis name per dimension: {ndim} sizes but {len(names)} names. "
            f"Received: axis_names={short_repr(names)}",
            value=axis_names,
        )
    for axis in names:
        _check_axis_name(axis)
    if len(set(names)) != len(names):
        duplicated = sorted(a for a, n in Counter(names).items() if n > 1)
        raise LayoutError(
            f"Mesh axis names must be unique; repeated: {short_repr(duplicated)}. Received: {short_repr(names)}",
            value=axis_names,
        )
    return names


def _checked_devices(devices: Any, size: int) -> tuple[str, ...]:
    """Canonical device names, after checking the count (so a wrong count costs nothing)."""
    if isinstance(devices, (str, bytes)) or not (hasattr(devices, "flat") or isinstance(devices, Iterable)):
        raise LayoutError(
            f"Mesh devices must be a sequence (or array) of devices. Received: {short_repr(devices)}", value=devices
        )
    try:  # a sized container with the wrong count is refused before it is copied
        count = devices.size if hasattr(devices, "flat") else len(devices) if isinstance(devices, Sized) else size
    except Exception as exc:  # a __len__ that raises (or overflows) cannot be a device list
        raise LayoutError(f"Cannot count the mesh devices {short_repr(devices)}: {exc!r}", value=devices) from exc
    if count != size:
        raise LayoutError(
            f"A mesh of {size} positions needs {size} devices. Received {count}: {short_repr(devices)}", value=devices
        )
    try:
        flat = list(devices.flat) if hasattr(devices, "flat") else list(devices)
    except Exception as exc:  # an iterable whose iteration fails is a bad value
        raise LayoutError(f"Cannot list the mesh devices {short_repr(devices)}: {exc!r}", value=devices) from exc
    if len(flat) != size:
        raise LayoutError(
            f"A mesh of {size} positions needs {size} devices. Received {len(flat)}: {short_repr(flat)}",
            value=devices,
        )
    canonical = canonical_devices(flat)
    if len(set(canonical)) != len(canonical):
        repeated = sorted(d for d, n in Counter(canonical).items() if n > 1)
        raise LayoutError(f"Mesh devices must be distinct; repeated: {short_repr(repeated)}", value=devices)
    return canonical


@dataclass(frozen=True, slots=True, init=False)
class Mesh:
    """A named, row-major grid of devices.

    Args:
        shape: size of each mesh axis, e.g. ``(3, 2)``.
        axis_names: one name per axis, e.g. ``("x", "y")``.
        devices: ``prod(shape)`` devices in row-major mesh order (strings such as ``"CPU:0"``
            or native device objects, all of one device type; a nested array is flattened in
            C order), or ``None`` for an *abstract* mesh that each driver binds to its own
            first ``size`` devices.
        name: an optional mesh name (TF DTensor's ``mesh_name``).

    Raises:
        LayoutError: empty shape, a size that is not a positive int, more than ``2**63 - 1``
            devices, names that do not match the shape, duplicate/empty/reserved names or names
            holding ``, | =``, whitespace or control characters, a device count other than
            ``prod(shape)``, a repeated device, or devices of more than one type.

    Construction and parsing take time linear in the number of devices and axes.

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
    # The hash, computed once at construction: a mesh is a dict key on every front-end call, and
    # hashing 65 536 device names each time cost 700 us per call.
    _hash: int = field(init=False, repr=False, compare=False)

    # Mesh has TF's ``mesh[axis]``; without this Python would try to iterate it through __getitem__(0).
    __iter__ = None

    def __init__(
        self,
        shape: Sequence[int],
        axis_names: Sequence[str],
        devices: Iterable[Any] | None = None,
        *,
        name: str = "",
    ) -> None:
        shape_t = _checked_shape(shape)
        names_t = _checked_names(axis_names, len(shape_t))
        if not isinstance(name, str) or _BAD_NAME_CHARS.search(name):
            raise LayoutError(
                "A mesh name must be a string without ',', '|', '=', whitespace or control characters. "
                f"Received: {short_repr(name)}",
                value=name,
            )
        devices_t = None if devices is None else _checked_devices(devices, math.prod(shape_t))
        object.__setattr__(self, "shape", shape_t)
        object.__setattr__(self, "axis_names", names_t)
        object.__setattr__(self, "devices", devices_t)
        object.__setattr__(self, "name", name)
        object.__setattr__(self, "_hash", hash((shape_t, names_t, devices_t, name)))

    def __hash__(self) -> int:
        return self._hash

    def __eq__(self, other: object) -> bool:
        # Cheap fields first: the cached hashes tell most unequal meshes apart in O(1); only two
        # equal meshes that are distinct objects compare their device tuples.
        if self is other:
            return True
        if not isinstance(other, Mesh):
            return NotImplemented
        return (
            self._hash == other._hash
            and self.shape == other.shape
            and self.axis_names == other.axis_names
            and self.name == other.name
            and self.devices == other.devices
        )

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
        if isinstance(axis_name, str):
            try:
                return self.axis_names.index(axis_name)
            except ValueError:
                pass
        raise LayoutError(
            f"Mesh axis {short_repr(axis_name)} is not in the mesh. Valid axis names: "
            f"{short_repr(list(self.axis_names))}",
            value=axis_name,
        )

    def axis_size(self, axis_name: str) -> int:
        """Size of mesh axis ``axis_name``; raises :class:`LayoutError` for an unknown axis."""
        return self.shape[self.axis_index(axis_name)]

    def with_devices(self, devices: Iterable[Any] | None) -> Mesh:
        """A copy of this mesh over other devices (``None``: abstract)."""
        return Mesh(self.shape, self.axis_names, devices, name=self.name)

    def _with_checked_devices(self, devices: tuple[str, ...]) -> Mesh:
        """``with_devices`` for devices already canonical, distinct, of one type and ``size`` many."""
        mesh = Mesh(self.shape, self.axis_names, name=self.name)
        object.__setattr__(mesh, "devices", devices)
        object.__setattr__(mesh, "_hash", hash((self.shape, self.axis_names, devices, self.name)))
        return mesh

    # -- TF DTensor's Mesh members -------------------------------------------------------------
    def __contains__(self, dim_name: object) -> bool:
        """``"x" in mesh``: whether the mesh has an axis named ``dim_name`` (TF's ``contains_dim``)."""
        return isinstance(dim_name, str) and dim_name in self.axis_names

    def contains_dim(self, dim_name: str) -> bool:
        """TF DTensor's spelling of ``dim_name in mesh``."""
        return dim_name in self

    def dim_size(self, dim_name: str) -> int:
        """TF DTensor's spelling of :meth:`axis_size`; raises :class:`LayoutError` for an unknown axis."""
        return self.axis_size(dim_name)

    def __getitem__(self, dim_name: str) -> MeshDimension:
        """``mesh["x"]``: the axis as ``MeshDimension(name, size)``, as TF DTensor.

        Raises:
            LayoutError: the mesh has no such axis.
        """
        return MeshDimension(dim_name, self.axis_size(dim_name))

    @property
    def strides(self) -> list[int]:
        """Row-major strides of the mesh, TF's ``strides``: ``[2, 1]`` for shape ``(3, 2)``.

        A device's coordinate is ``(position // strides) % shape``.
        """
        strides = [1] * self.ndim
        for axis in range(self.ndim - 2, -1, -1):
            strides[axis] = strides[axis + 1] * self.shape[axis + 1]
        return strides

    def device_type(self) -> str | None:
        """The devices' type (``"CPU"``, ``"GPU"``, ``"TPU"``), or ``None`` for an abstract mesh.

        A mesh holds one device type only, as in TF DTensor.
        """
        return None if self.devices is None else device_type(self.devices[0])

    def local_devices(self) -> list[str]:
        """Full TF names of the mesh's devices, as TF's ``Mesh.from_string(self.to_string())`` lists them.

        A Mesh value does not know which process reads it, so every device counts as local
        (``to_string`` writes them so). An abstract mesh has none (``[]``).

        Raises:
            LayoutError: more than :data:`MAX_STRING_DEVICES` devices.
        """
        if self.devices is None:
            return []
        self._check_string_size("local_devices")
        return [full_device_name(d) for d in self.devices]

    def num_local_devices(self) -> int:
        """``len(self.local_devices())``, without building the list."""
        return 0 if self.devices is None else self.size

    # -- TF DTensor string form ----------------------------------------------------------------
    def to_string(self) -> str:
        """The TF DTensor mesh string, ``name|x=3,y=2|global ids|local ids|full device names``.

        An abstract mesh is written over ``CPU:0 .. CPU:size-1``, the devices the NumPy driver
        binds it to (``from_string`` then returns a concrete mesh).

        Raises:
            LayoutError: more than :data:`MAX_STRING_DEVICES` devices (an abstract mesh may be
                any size; its string would not fit in memory).
        """
        self._check_string_size("to_string")
        size = self.size
        devices = self.devices or tuple(f"CPU:{i}" for i in range(size))
        ids = _ids_text(size)
        dims = ",".join(f"{n}={s}" for n, s in zip(self.axis_names, self.shape, strict=True))
        return f"{self.name}|{dims}|{ids}|{ids}|{full_device_names(devices)}"

    def _check_string_size(self, what: str) -> None:
        check_listed(self.size, f"Mesh.{what} (MAX_STRING_DEVICES)", self)

    @classmethod
    def from_string(cls, text: str) -> Mesh:
        """Parse a TF DTensor mesh string (what ``dtensor.Mesh.to_string()`` prints).

        A string that lists only some devices (a multi-client or remote mesh) without the
        global device list, or that uses TF's ``*CPU`` generator, gives an abstract mesh.
        Linear in the length of ``text``; sizes are checked against the text before any list
        is built.

        Raises:
            LayoutError: the string is malformed (sizes other than ASCII digits, too many
                devices, ...), describes a single-device mesh, or its ids, local devices and
                global devices disagree.
        """
        if not isinstance(text, str):
            raise LayoutError(f"Mesh.from_string expects a str. Received: {short_repr(text)}", value=text)
        try:
            return cls._parse(text)
        except LayoutError as exc:
            raise LayoutError(f"{exc} (in mesh string {short_repr(text)})", value=text) from exc

    @classmethod
    def _parse(cls, text: str) -> Mesh:
        parts = text.split("|")
        if parts[-1] == "use_xla_spmd":
            parts = parts[:-1]  # a compilation hint of TF's, not placement
        if len(parts) < 2:
            raise LayoutError(
                "A mesh string looks like 'name|x=3,y=2|0,1,...|0,1,...|/job:...'; single-device meshes "
                "have no axes and are not layoutcore meshes."
            )
        name = parts[0]
        shape, names = _parse_dims(parts[1])
        if len(parts) == 3 and parts[2].startswith("*"):
            return cls(shape, names, name=name)  # TF's device generator: abstract, nothing allocated
        if len(parts) not in (5, 6):
            raise LayoutError(
                "A mesh string has 5 '|'-separated fields (name, dims, global ids, local ids, local devices), "
                f"and optionally the global devices; received {len(parts)}"
            )
        probe = cls(shape, names, name=name)  # validates shape and names; the size is now an int64
        size = probe.size
        # TF writes ids 0..n-1 in order; recognising that text skips parsing a million ints.
        in_order = _ids_text(size) if parts[2].count(",") + 1 == size else None
        if parts[2] != in_order:
            _check_global_ids(parts[2], size)
        local_devices = parts[4].split(",") if parts[4] else []
        local_ids = _local_ids(parts[3], in_order, size, len(local_devices))
        # The local devices must be a valid set of devices even when they do not make a whole mesh.
        local = _checked_devices(local_devices, len(local_devices)) if local_devices else ()
        if len(parts) == 6 and parts[5]:
            return _with_global_devices(probe, parts[5], local_ids, local)
        if len(local_ids) != size:
            return probe  # only some devices known here: bind on use
        if not isinstance(local_ids, range):  # TF places the device with global id g at mesh position g
            by_id = dict(zip(local_ids, local, strict=True))
            local = tuple(by_id[g] for g in range(size))
        return probe._with_checked_devices(local)

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


def _ids_text(size: int) -> str:
    """``"0,1,...,size-1"``, the id list TF writes."""
    return ",".join(map(str, range(size)))


def _ids(field: str, what: str, size: int) -> list[int]:
    """Parse a comma-separated id list of at most ``size`` ids, counting before building anything."""
    if not field:
        return []
    if field.count(",") + 1 > size:
        raise LayoutError(f"More {what} device ids than the {size} devices of the mesh")
    if not _ID_LIST.fullmatch(field):
        raise LayoutError(f"Bad {what} device id list {short_repr(field)} (comma-separated ASCII digits)")
    return [int(i) for i in field.split(",")]


def _parse_dims(dims_text: str) -> tuple[list[int], list[str]]:
    """A mesh string's ``"x=3,y=2"`` field as (shape, axis names).

    Raises:
        LayoutError: a dimension that is not ``name=size`` with the size in ASCII digits.
    """
    shape: list[int] = []
    names: list[str] = []
    for dim in dims_text.split(",") if dims_text else []:
        axis, eq, size_text = dim.partition("=")
        if not eq or not _DIM_SIZE.fullmatch(size_text.strip()):
            raise LayoutError(f"Bad mesh dimension {short_repr(dim)} (expected 'name=size', size in ASCII digits)")
        names.append(axis)
        shape.append(int(size_text))
    return shape, names


def _check_global_ids(field: str, size: int) -> None:
    """Refuse a global id field that is not ``0..size-1`` once each (in any order)."""
    global_ids = _ids(field, "global", size)
    if len(global_ids) != size or set(global_ids) != set(range(size)):
        raise LayoutError(f"Global device ids must be 0..{size - 1} once each. Received: {short_repr(field)}")


def _local_ids(field: str, in_order: str | None, size: int, n_devices: int) -> Sequence[int]:
    """The local id field: ``range(size)`` when it is TF's in-order text ``in_order``, else the parsed ids.

    Raises:
        LayoutError: not ``n_devices`` ids, or ids that repeat or lie outside ``0..size-1``.
    """
    local_ids: Sequence[int] = range(size) if field == in_order else _ids(field, "local", size)
    if len(local_ids) != n_devices:
        raise LayoutError(f"{len(local_ids)} local device ids but {n_devices} local devices")
    if not isinstance(local_ids, range) and (
        any(i >= size for i in local_ids) or len(set(local_ids)) != len(local_ids)
    ):
        raise LayoutError(f"Local device ids must be distinct ids in 0..{size - 1}. Received: {short_repr(field)}")
    return local_ids


def _with_global_devices(probe: Mesh, field: str, local_ids: Sequence[int], local: tuple[str, ...]) -> Mesh:
    """``probe`` bound to the global device field ``field``, checked against the local ids and devices.

    Raises:
        LayoutError: a device count other than the mesh size, or a local device whose id names
            another global device.
    """
    size = probe.size
    if field.count(",") + 1 != size:
        raise LayoutError(f"{field.count(',') + 1} global devices for a mesh of {size}")
    mesh = probe.with_devices(field.split(","))
    assert mesh.devices is not None
    if not (isinstance(local_ids, range) and local == mesh.devices):
        for i, device in zip(local_ids, local, strict=True):
            if mesh.devices[i] != device:
                raise LayoutError(
                    f"Local device {device!r} has id {i}, but the global device with id {i} is {mesh.devices[i]!r}"
                )
    return mesh


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
        if isinstance(mesh_dims, (str, bytes)):
            raise TypeError("a string is not a list of pairs")
        pairs = [(axis, size) for axis, size in mesh_dims]
    except Exception as exc:  # anything that is not a list of pairs, however it fails to unpack
        raise LayoutError(
            "mesh_dims must be a list of (axis_name, size) pairs, e.g. [('x', 3), ('y', 2)]. "
            f"Received: {short_repr(mesh_dims)}",
            value=mesh_dims,
        ) from exc
    return Mesh([s for _, s in pairs], [a for a, _ in pairs], devices, name=name)
