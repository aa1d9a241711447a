"""The per-tensor layout value."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TypeAlias

from . import geometry
from ._capabilities import Capability
from ._checks import MAX_RANK, check_listed, checked_int, int_sequence, short_repr
from ._errors import LayoutError, UnsupportedLayoutError
from ._mesh import Mesh

__all__ = ["UNSHARDED", "AxisSpec", "BoundLayout", "Layout", "TensorLayout"]

#: TF DTensor's token for a replicated tensor axis; ``None`` means the same.
UNSHARDED = "unsharded"

#: One tensor axis: replicated (``None``), one mesh axis, or several (major to minor).
AxisSpec: TypeAlias = str | tuple[str, ...] | None


def _sharding_dims(canonical: tuple[AxisSpec, ...], raw: tuple[Any, ...], axes: Any) -> dict[str, int]:
    """Mesh axis name -> the tensor axis it shards, for the canonical entries of a layout.

    Raises:
        LayoutError: a mesh axis shards two tensor axes (naming both and the given ``axes``).
    """
    seen: dict[str, int] = {}
    for dim, entry in enumerate(canonical):
        for name in _names(entry):
            if name in seen:
                raise LayoutError(
                    f"Mesh axis {name!r} shards both tensor axis {seen[name]} and tensor axis {dim}; "
                    f"a mesh axis can shard at most one tensor axis. Received: {short_repr(raw)}",
                    value=axes,
                )
            seen[name] = dim
    return seen


def _check_layout_mesh(mesh: Any, names: Iterable[str], raw: tuple[Any, ...], axes: Any) -> None:
    """Refuse a layout mesh that is not a ``Mesh``, or lacks one of the mesh axis ``names`` used.

    Raises:
        LayoutError: naming the mesh, or the unknown axes and the valid ones.
    """
    if not isinstance(mesh, Mesh):
        raise LayoutError(f"Layout mesh must be a layoutcore Mesh. Received: {short_repr(mesh)}", value=mesh)
    unknown = [n for n in names if n not in mesh]
    if unknown:
        raise LayoutError(
            f"Layout names mesh axes {short_repr(unknown)} that are not in the mesh. Valid axis names: "
            f"{short_repr(list(mesh.axis_names))}. Received: {short_repr(raw)}",
            value=axes,
        )


def _canonical_entry(entry: Any, axes: Any) -> AxisSpec:
    # Type checks come before any ==: an array entry would answer == with an array, not a bool.
    if entry is None:
        return None
    if isinstance(entry, str):
        if not entry:
            raise LayoutError(
                f"A layout entry cannot be the empty string. Received axes: {short_repr(axes)}", value=axes
            )
        return None if entry == UNSHARDED else entry
    if isinstance(entry, (tuple, list)):
        names = tuple(entry)
        for name in names:
            if not isinstance(name, str) or not name or name == UNSHARDED:
                raise LayoutError(
                    "A multi-axis layout entry holds mesh axis names only. "
                    f"Received entry {short_repr(entry)} in {short_repr(axes)}",
                    value=axes,
                )
        if not names:
            return None
        return names[0] if len(names) == 1 else names
    raise LayoutError(
        "A layout entry is None, 'unsharded', a mesh axis name or a tuple of names. "
        f"Received entry {short_repr(entry)} in {short_repr(axes)}",
        value=axes,
    )


def _names(entry: AxisSpec) -> tuple[str, ...]:
    if entry is None:
        return ()
    return (entry,) if isinstance(entry, str) else entry


@dataclass(frozen=True, slots=True, init=False)
class Layout:
    """How one tensor is laid out on a mesh: one entry per tensor axis.

    Args:
        axes: per tensor axis, ``None`` / ``UNSHARDED`` (replicated), a mesh axis name, or a
            tuple of names (the axis is split over their product, major to minor, as
            ``PartitionSpec(("x", "y"))``). TF DTensor's ``sharding_specs`` list is accepted.
        mesh: the mesh, or ``None`` for a layout to be bound later (``with_mesh``,
            ``LayoutMap``). ``device_mesh=`` is keras' spelling.

    Raises:
        LayoutError: a malformed entry, a mesh axis used on two tensor axes, or a name not in
            the mesh.

    Example:
        >>> mesh = Mesh((3, 2), ("x", "y"))
        >>> Layout(["x", UNSHARDED], mesh).axes
        ('x', None)
        >>> Layout([("x", "y"), None], mesh).num_shards(0)
        6
    """

    axes: tuple[AxisSpec, ...]
    mesh: Mesh | None
    # The hash, computed once, when first asked (a layout is a dict key several times in every relayout, and
    # the generated __hash__ hashed the axes and called Mesh.__hash__ each time); None until then, so that
    # making a layout hashes no mesh (propagation makes many and keys on none).
    _hash: int | None = field(init=False, repr=False, compare=False)

    def __init__(self, axes: Iterable[Any], mesh: Mesh | None = None, *, device_mesh: Mesh | None = None) -> None:
        if device_mesh is not None:
            if mesh is not None and mesh != device_mesh:
                raise LayoutError("Pass the mesh once, as mesh= or device_mesh=, not both.", value=device_mesh)
            mesh = device_mesh
        if isinstance(axes, (str, bytes)) or not isinstance(axes, Iterable):
            raise LayoutError(
                "Layout axes must be a sequence with one entry per tensor axis, e.g. ('x', None). "
                f"Received: {short_repr(axes)}",
                value=axes,
            )
        try:
            raw = tuple(axes)
        except Exception as exc:  # an iterable whose iteration fails is a bad value
            raise LayoutError(f"Cannot read layout axes from {short_repr(axes)}: {exc!r}", value=axes) from exc
        canonical = tuple(_canonical_entry(entry, raw) for entry in raw)
        seen = _sharding_dims(canonical, raw, axes)
        if mesh is not None:
            _check_layout_mesh(mesh, seen, raw, axes)
        object.__setattr__(self, "axes", canonical)
        object.__setattr__(self, "mesh", mesh)
        object.__setattr__(self, "_hash", None)

    def __hash__(self) -> int:
        found = self._hash
        if found is None:  # two threads may both compute it: the same int
            found = hash((self.axes, self.mesh))
            object.__setattr__(self, "_hash", found)
        return found

    def __reduce__(self) -> tuple[Any, ...]:
        return (Layout, (self.axes, self.mesh))

    # -- construction helpers (TF DTensor's classmethods) --------------------------------------------
    @classmethod
    def replicated(cls, mesh: Mesh, rank: int) -> Layout:
        """Fully replicated layout of ``rank`` (``0 <= rank <= 64``, NumPy's limit)."""
        return cls([None] * _check_rank(rank, minimum=0), mesh)

    @classmethod
    def batch_sharded(cls, mesh: Mesh, batch_dim: str, rank: int, axis: int = 0) -> Layout:
        """Tensor axis ``axis`` sharded over mesh axis ``batch_dim``, the rest replicated.

        Raises:
            LayoutError: ``rank < 1``, ``axis`` outside ``0 .. rank-1``, or an unknown mesh axis
                (TF DTensor crashes the interpreter on the first two).
        """
        rank = _check_rank(rank, minimum=1)
        axis = checked_int(axis, f"batch_sharded axis (for rank {rank})", minimum=0, maximum=rank - 1)
        axes: list[AxisSpec] = [None] * rank
        axes[axis] = batch_dim
        return cls(axes, mesh)

    @classmethod
    def inner_sharded(cls, mesh: Mesh, inner_dim: str, rank: int) -> Layout:
        """The last tensor axis sharded over mesh axis ``inner_dim`` (``rank`` >= 1)."""
        rank = _check_rank(rank, minimum=1)
        return cls([None] * (rank - 1) + [inner_dim], mesh)

    # -- properties --------------------------------------------------------------------------
    @property
    def device_mesh(self) -> Mesh | None:
        """keras' name for :attr:`mesh`."""
        return self.mesh

    @property
    def rank(self) -> int:
        """Number of tensor axes."""
        return len(self.axes)

    @property
    def sharding_specs(self) -> list[str]:
        """TF DTensor's form: one mesh axis name or ``"unsharded"`` per tensor axis.

        Raises:
            UnsupportedLayoutError: an entry spans several mesh axes, which TF cannot write.
        """
        specs = []
        for dim, entry in enumerate(self.axes):
            if isinstance(entry, tuple):
                raise UnsupportedLayoutError(
                    f"Tensor axis {dim} is split over several mesh axes {entry}, which TF DTensor's "
                    f"sharding_specs cannot express. Layout: {self!r}",
                    driver="tensorflow",
                    feature=Capability.MULTI_AXIS,
                    value=self,
                )
            specs.append(UNSHARDED if entry is None else entry)
        return specs

    def mesh_axes(self, dim: int) -> tuple[str, ...]:
        """Mesh axis names tensor axis ``dim`` is split over, major to minor (``()``: replicated)."""
        return _names(self.axes[self._check_dim(dim)])

    @property
    def dim_axes(self) -> tuple[tuple[int, ...], ...]:
        """Per tensor axis, the mesh-axis *indices* it is split over (the geometry functions' input)."""
        mesh = self._require_mesh("dim_axes")
        return tuple(tuple(mesh.axis_index(n) for n in _names(e)) for e in self.axes)

    def with_mesh(self, mesh: Mesh) -> Layout:
        """A new layout with the same axes on ``mesh`` (this one is never changed)."""
        return Layout(self.axes, mesh)

    def is_fully_replicated(self) -> bool:
        """True when no tensor axis is sharded (as TF: sharding over a size-1 axis counts as sharded)."""
        return all(entry is None for entry in self.axes)

    def num_shards(self, dim: int) -> int:
        """Number of blocks tensor axis ``dim`` is split into (product of its mesh axis sizes)."""
        mesh = self._require_mesh("num_shards")
        return geometry.num_blocks(mesh.shape, [mesh.axis_index(n) for n in self.mesh_axes(dim)])

    def delete(self, dims: int | Sequence[int]) -> Layout:
        """A layout without tensor axes ``dims`` (an int, NumPy's included, or a sequence of them).

        Raises:
            LayoutError: a dim that is not an int in ``0 .. rank-1`` (TF silently ignores
                out-of-range and negative dims).
        """
        if hasattr(type(dims), "__index__") and not isinstance(dims, Iterable):
            dims = (dims,)
        wanted = set(int_sequence(dims, "delete: dims"))
        for dim in wanted:
            self._check_dim(dim, "delete: dim")
        return Layout([e for i, e in enumerate(self.axes) if i not in wanted], self.mesh)

    def offset_to_shard(self) -> list[tuple[int, ...]]:
        """Per device (row-major), its block index on every tensor axis (TF's ``offset_to_shard``)."""
        mesh = self._require_mesh("offset_to_shard")
        return geometry.device_blocks(mesh.shape, self.dim_axes)

    def offset_tuple_to_global_index(self, offset_tuple: Sequence[int]) -> int:
        """Row-major index of a block tuple over the grid of blocks (not a device index), as TF.

        Raises:
            LayoutError: not a sequence of ints, or a tuple outside the block grid.
        """
        shards = [self.num_shards(d) for d in range(self.rank)]
        offsets = int_sequence(offset_tuple, "offset_tuple")
        if len(offsets) != self.rank or any(not 0 <= o < n for o, n in zip(offsets, shards, strict=True)):
            raise LayoutError(
                f"Offset tuple {short_repr(offsets)} does not fit the block grid {shards} of {short_repr(self)}",
                value=offset_tuple,
            )
        index = 0
        for offset, n in zip(offsets, shards, strict=True):
            index = index * n + offset
        return index

    # -- geometry ------------------------------------------------------------------------------
    def check_shape(self, global_shape: Sequence[int]) -> tuple[int, ...]:
        """Validate a global shape against this layout and return it as a tuple of ints.

        Raises:
            LayoutError: not a sequence of ints (NumPy ints accepted), the rank differs, or a
                size is negative.
        """
        shape = int_sequence(global_shape, "A global shape", minimum=0)
        if len(shape) != self.rank:
            raise LayoutError(
                f"Layout of rank {self.rank} {short_repr(self.axes)} cannot lay out a tensor of rank {len(shape)} "
                f"(shape {short_repr(shape)}).",
                value=global_shape,
            )
        return shape

    def shard_shape(self, global_shape: Sequence[int]) -> tuple[int, ...]:
        """Shape of the largest shard (device 0's): ``ceil(size / num_shards)`` per axis."""
        shape = self.check_shape(global_shape)
        return tuple(geometry.chunk_size(size, self.num_shards(d)) for d, size in enumerate(shape))

    def local_shapes(self, global_shape: Sequence[int]) -> list[tuple[int, ...]]:
        """Shape of every device's shard, row-major (they differ for uneven dimensions)."""
        mesh = self._require_mesh("local_shapes")
        shape, dim_axes = self.check_shape(global_shape), self.dim_axes
        check_listed(mesh.size, "local_shapes", mesh)
        return [geometry.local_shape(shape, mesh.shape, dim_axes, p) for p in range(mesh.size)]

    def device_slices(self, global_shape: Sequence[int]) -> list[tuple[slice, ...]]:
        """One tuple of ``slice`` per device, row-major: the part of the global value it holds.

        A tensor axis with one block (replicated, or sharded over size-1 mesh axes) is
        ``slice(None)``, as in JAX's ``devices_indices_map``.
        """
        mesh = self._require_mesh("device_slices")
        return geometry.device_slices(self.check_shape(global_shape), mesh.shape, self.dim_axes)

    def is_even(self, global_shape: Sequence[int]) -> bool:
        """Whether every tensor axis divides evenly into its blocks."""
        mesh = self._require_mesh("is_even")
        return geometry.is_evenly_divisible(self.check_shape(global_shape), mesh.shape, self.dim_axes)

    # -- TF DTensor string form ----------------------------------------------------------------
    def to_string(self) -> str:
        """TF DTensor's layout string, ``"sharding_specs:x,unsharded, mesh:<mesh string>"``."""
        mesh = self._require_mesh("to_string")
        return "sharding_specs:" + "".join(s + "," for s in self.sharding_specs) + " mesh:" + mesh.to_string()

    @classmethod
    def from_string(cls, text: str) -> Layout:
        """Parse a TF DTensor layout string (what ``dtensor.Layout.to_string()`` prints).

        Raises:
            LayoutError: malformed text, a single-device (``maximal``) or ``parted`` layout,
                TF's ``match`` token, or any invalid mesh or layout.
        """
        if not isinstance(text, str):
            raise LayoutError(f"Layout.from_string expects a str. Received: {text!r}", value=text)
        head, sep, mesh_text = text.partition(" mesh:")
        if not sep or not head.startswith("sharding_specs:"):
            raise LayoutError(
                "A layout string looks like 'sharding_specs:x,unsharded, mesh:|x=3|...'; single-device "
                f"('maximal') and 'parted' layouts are not layoutcore layouts. Received: {text!r}",
                value=text,
            )
        specs_text = head[len("sharding_specs:") :]
        if specs_text and not specs_text.endswith(","):
            raise LayoutError(f"Each sharding spec ends with ','. Received: {text!r}", value=text)
        specs = specs_text.split(",")[:-1] if specs_text else []
        if "match" in specs:
            raise LayoutError(f"TF's 'match' placeholder is not a layout. Received: {text!r}", value=text)
        return cls(specs, Mesh.from_string(mesh_text))

    # -- printing ----------------------------------------------------------------------------
    def __repr__(self) -> str:
        mesh = "" if self.mesh is None else f", mesh={self.mesh!r}"
        return f"Layout({self.axes!r}{mesh})"

    def __str__(self) -> str:
        entries = ", ".join(
            UNSHARDED if e is None else (e if isinstance(e, str) else "(" + ",".join(e) + ")") for e in self.axes
        )
        where = "" if self.mesh is None else f" on {self.mesh}"
        return f"Layout[{entries}]{where}"

    # -- internals -----------------------------------------------------------------------------
    def require_mesh(self, what: str = "This operation") -> Mesh:
        """The layout's mesh, which must be set (what a hook's ``layout.mesh`` always is).

        Raises:
            LayoutError: the layout has no mesh (naming ``what`` needs one).
        """
        mesh = self.mesh
        if mesh is None:
            raise LayoutError(f"{what} needs a layout bound to a mesh; {self!r} has none (use with_mesh).", value=self)
        return mesh

    _require_mesh = require_mesh  # the older private spelling

    def _check_dim(self, dim: int, what: str = "A tensor axis") -> int:
        if self.rank == 0:
            raise LayoutError(f"{what} {short_repr(dim)}: a rank-0 layout has no tensor axes", value=dim)
        return checked_int(dim, f"{what} of {short_repr(self)}", minimum=0, maximum=self.rank - 1)


if TYPE_CHECKING:

    class BoundLayout(Layout):
        """A :class:`Layout` whose mesh is set: what the front-end hands every hook, validated.

        A static promise only (at run time it is :class:`Layout` itself): type checkers see
        ``layout.mesh`` as a :class:`Mesh`, never ``None``.
        """

        mesh: Mesh

else:
    BoundLayout = Layout


def _check_rank(rank: Any, *, minimum: int) -> int:
    return checked_int(rank, "rank", minimum=minimum, maximum=MAX_RANK)


#: keras.distribution's name for :class:`Layout` (takes ``device_mesh=``).
TensorLayout = Layout
