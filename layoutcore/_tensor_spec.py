"""``TensorSpec``: a tensor's global shape, dtype and layout as one immutable value.

Like ``jax.ShapeDtypeStruct`` with a :class:`~layoutcore.Layout` (bound to a mesh). It is what
a checkpoint records per tensor, what ``checkpoint.load`` accepts as a target, and what the
interchange readers build from torch DCP, Orbax and safetensors metadata.

The JSON form (``to_json`` / ``from_json``) is versioned and canonical: keys sorted, no
whitespace, one spelling per value, so equal specs give equal text and equal
:attr:`TensorSpec.fingerprint`. Schema, version 1::

    {"chunking": "ceil",              # the shard rule: ceil(d / n) blocks, remainder last
     "dtype": "bfloat16",             # one of the 18 canonical dtype names
     "format": "layoutcore.TensorSpec",
     "layout": {"axes": [["x", "y"], []],   # per tensor axis: mesh axis names, major to minor
                "mesh": {"axis_names": ["x", "y"], "devices": null | ["CPU:0", ...],
                         "name": "", "shape": [2, 4]}},
     "shape": [8, 3],
     "version": 1}
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from . import geometry
from ._checks import check_listed, int_sequence, short_repr
from ._dtypes import ALL_DTYPES, dtype_name, itemsize
from ._errors import LayoutError
from ._layout import Layout
from ._mesh import Mesh

__all__ = [
    "SPEC_FORMAT",
    "SPEC_VERSION",
    "Box",
    "TensorSpec",
    "canonical_dtype",
    "device_bounds",
]

#: The ``format`` tag and schema version written by :meth:`TensorSpec.to_json`.
SPEC_FORMAT = "layoutcore.TensorSpec"
SPEC_VERSION = 1

#: ``(offsets, sizes)`` of a box in global coordinates, one int per tensor axis.
Box = tuple[tuple[int, ...], tuple[int, ...]]


def canonical_dtype(dtype: Any) -> str:
    """The canonical name (``"bfloat16"``, ``"float32"``, ...) of a dtype or dtype name.

    Raises:
        LayoutError: not one of the 18 dtypes layoutcore moves (``ALL_DTYPES``).
    """
    try:
        return dtype_name(dtype)
    except LayoutError as exc:
        raise LayoutError(
            f"TensorSpec dtype must be one of {list(ALL_DTYPES)}. Received: {short_repr(dtype)}", value=dtype
        ) from exc


@dataclass(frozen=True, slots=True)
class TensorSpec:
    """A tensor's global ``shape``, ``dtype`` and ``layout``, without data.

    Args:
        shape: the global shape (ints >= 0; NumPy ints accepted).
        dtype: a dtype name (``"bf16"``, ``"float32"``), a NumPy/ml_dtypes dtype or a
            framework dtype; stored as its canonical name.
        layout: a :class:`Layout` bound to a mesh (abstract or with devices) of the same rank.

    Raises:
        LayoutError: a bad shape, an unknown dtype, a layout without a mesh, or a rank mismatch.

    Example:
        >>> from layoutcore import Layout, Mesh
        >>> spec = TensorSpec((8, 3), "float32", Layout(("x", None), Mesh((4,), ("x",))))
        >>> spec.boxes()[3]
        ((6, 0), (2, 3))
    """

    shape: tuple[int, ...]
    dtype: str
    layout: Layout

    def __post_init__(self) -> None:
        shape = int_sequence(self.shape, "TensorSpec shape", minimum=0)
        dtype = canonical_dtype(self.dtype)
        layout = self.layout
        if not isinstance(layout, Layout):
            raise LayoutError(
                f"TensorSpec layout must be a layoutcore Layout. Received: {short_repr(layout)}", value=layout
            )
        if layout.mesh is None:
            raise LayoutError(
                f"TensorSpec layout must be bound to a mesh (Layout(axes, mesh)). Received: {layout!r}", value=layout
            )
        layout.check_shape(shape)
        object.__setattr__(self, "shape", shape)
        object.__setattr__(self, "dtype", dtype)

    # -- derived -------------------------------------------------------------------------------
    @property
    def mesh(self) -> Mesh:
        """The layout's mesh."""
        mesh = self.layout.mesh
        assert mesh is not None  # checked in the constructor
        return mesh

    @property
    def itemsize(self) -> int:
        """Bytes per element."""
        return itemsize(self.dtype)

    @property
    def nbytes(self) -> int:
        """Bytes of the global value, ``prod(shape) * itemsize``."""
        return math.prod(self.shape) * self.itemsize

    def boxes(self) -> list[Box]:
        """Per device, row-major: ``(offsets, sizes)`` of its shard in global coordinates.

        Equal to ``layout.device_slices(shape)`` written as start and length (empty blocks of
        uneven layouts have size 0), as torch DCP's ``ChunkStorageMetadata`` and serving
        weight-sync manifests describe shards.

        Raises:
            LayoutError: a mesh with more than ``2**22`` devices (too many to list).
        """
        starts, stops = device_bounds(self.shape, self.mesh.shape, self.layout.dim_axes)
        return [(tuple(a), tuple(s)) for a, s in zip(starts.tolist(), (stops - starts).tolist(), strict=True)]

    def replace(self, **changes: Any) -> TensorSpec:
        """A new spec with some fields replaced (``spec.replace(dtype="bfloat16")``)."""
        fields: dict[str, Any] = {"shape": self.shape, "dtype": self.dtype, "layout": self.layout}
        unknown = set(changes) - set(fields)
        if unknown:
            raise TypeError(f"TensorSpec.replace() got unknown fields {sorted(unknown)}")
        fields.update(changes)
        return TensorSpec(**fields)

    # -- JSON ----------------------------------------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        """The JSON-ready dict of :meth:`to_json` (schema in the module docstring)."""
        mesh = self.mesh
        return {
            "chunking": "ceil",
            "dtype": self.dtype,
            "format": SPEC_FORMAT,
            "layout": {
                "axes": [list(_entry_names(entry)) for entry in self.layout.axes],
                "mesh": {
                    "axis_names": list(mesh.axis_names),
                    "devices": None if mesh.devices is None else list(mesh.devices),
                    "name": mesh.name,
                    "shape": list(mesh.shape),
                },
            },
            "shape": list(self.shape),
            "version": SPEC_VERSION,
        }

    def to_json(self) -> str:
        """Canonical JSON text: sorted keys, no whitespace; equal specs give equal text."""
        import json  # not at import: import layoutcore stays light

        return json.dumps(self.to_dict(), sort_keys=True, separators=(",", ":"), ensure_ascii=True)

    @classmethod
    def from_json(cls, text: str | bytes | Mapping[str, Any]) -> TensorSpec:
        """Parse :meth:`to_json` output (text, bytes, or the already-parsed dict).

        Raises:
            LayoutError: malformed JSON, another format or a newer version, an unknown chunk
                rule, or any invalid shape, dtype, mesh or layout.
        """
        if isinstance(text, Mapping):
            data: Any = text
        else:
            try:
                import json  # not at import: import layoutcore stays light

                data = json.loads(text)
            except (TypeError, ValueError) as exc:
                raise LayoutError(
                    f"TensorSpec JSON cannot be parsed: {exc}. Received: {short_repr(text)}", value=text
                ) from exc
        return cls.from_dict(data)

    @classmethod
    def from_dict(cls, data: Any) -> TensorSpec:
        """Inverse of :meth:`to_dict`; raises :class:`LayoutError` as :meth:`from_json`."""
        if not isinstance(data, Mapping) or data.get("format") != SPEC_FORMAT:
            raise LayoutError(f"Not a {SPEC_FORMAT} JSON object. Received: {short_repr(data)}", value=data)
        version = data.get("version")
        if version != SPEC_VERSION:
            raise LayoutError(
                f"{SPEC_FORMAT} version {version!r} is not supported; this layoutcore reads version {SPEC_VERSION}.",
                value=data,
            )
        if data.get("chunking") != "ceil":
            raise LayoutError(
                f"Unknown shard rule {data.get('chunking')!r}; layoutcore's layouts use 'ceil'.", value=data
            )
        try:
            layout_d, mesh_d = data["layout"], data["layout"]["mesh"]
            devices = mesh_d["devices"]
            mesh = Mesh(
                tuple(mesh_d["shape"]),
                tuple(mesh_d["axis_names"]),
                None if devices is None else tuple(devices),
                name=mesh_d["name"],
            )
            axes = [_entry_from_names(entry) for entry in layout_d["axes"]]
            return cls(tuple(data["shape"]), data["dtype"], Layout(axes, mesh))
        except (KeyError, TypeError) as exc:
            raise LayoutError(
                f"Malformed {SPEC_FORMAT} JSON ({exc!r}). Received: {short_repr(data)}", value=data
            ) from exc

    @property
    def fingerprint(self) -> str:
        """SHA-256 (hex) of :meth:`to_json`: stable across processes, versions of Python and platforms."""
        import hashlib  # not at import: import layoutcore stays light

        return hashlib.sha256(self.to_json().encode("ascii")).hexdigest()

    def __repr__(self) -> str:
        return f"TensorSpec({self.shape!r}, {self.dtype!r}, {self.layout!r})"


def _entry_names(entry: Any) -> tuple[str, ...]:
    if entry is None:
        return ()
    return (entry,) if isinstance(entry, str) else tuple(entry)


def _entry_from_names(names: Any) -> Any:
    if not isinstance(names, list) or not all(isinstance(n, str) for n in names):
        raise TypeError(f"a layout axis entry is a list of mesh axis names, got {names!r}")
    return tuple(names) if len(names) > 1 else (names[0] if names else None)


def device_bounds(
    shape: Sequence[int], mesh_shape: Sequence[int], dim_axes: Sequence[Sequence[int]]
) -> tuple[Any, Any]:
    """Per device (row-major), the shard's start and stop on every tensor axis.

    Returns two int64 NumPy arrays of shape ``(devices, rank)``; the same numbers as
    :func:`layoutcore.geometry.shard_bounds`, computed for all devices at once.
    """
    count = math.prod(mesh_shape)
    check_listed(count, "TensorSpec.boxes", tuple(mesh_shape))
    coords = np.indices(tuple(mesh_shape), dtype=np.int64).reshape(len(mesh_shape), count)
    starts = np.zeros((count, len(shape)), dtype=np.int64)
    stops = np.zeros((count, len(shape)), dtype=np.int64)
    for d, (size, axes) in enumerate(zip(shape, dim_axes, strict=True)):
        block = np.zeros(count, dtype=np.int64)
        n = 1
        for a in axes:
            block = block * mesh_shape[a] + coords[a]
            n *= mesh_shape[a]
        c = geometry.chunk_size(size, n)
        starts[:, d] = np.minimum(block * c, size)
        stops[:, d] = np.minimum(starts[:, d] + c, size)
    return starts, stops
