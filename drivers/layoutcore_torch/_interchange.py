"""TensorSpec <-> torch DTensor placements, including tensor axes over several mesh axes in any order.

torch expresses a tensor axis split over mesh axes *in mesh order* with ``Shard(d)`` on each of
them (``[Shard(0), Shard(0)]`` on mesh ``("x", "y")`` is layoutcore's ``(("x", "y"),)``). Any
other order needs torch's private ``_StridedShard(d, split_factor=f)``: torch shards mesh axes
left to right, and a mesh axis whose block must be *minor* to axes that come after it in the
mesh carries the product of those axes' sizes as its ``split_factor``. For example
``(("y", "x"),)`` on mesh ``x=3, y=2`` is ``[_StridedShard(0, split_factor=2), Shard(0)]``.

What cannot be expressed, with typed refusals (:class:`layoutcore.UnsupportedLayoutError`):
``Partial`` placements (pending reductions: no layout has them) and an uneven tensor axis
split over several mesh axes (torch chunks it per mesh axis, nested; layoutcore chunks it once
over the product; the blocks differ when the product does not divide the axis).
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from typing import Any

from layoutcore import Layout, LayoutError, Mesh, TensorSpec, UnsupportedLayoutError
from layoutcore.driver import Capability, Limitation

from . import _private
from ._convert import layout_from_placements

__all__ = ["layout_from_torch", "spec_from_dtensor", "to_placements", "to_torch_dtype"]


def _strided(dim: int, split_factor: int) -> Any:
    from torch.distributed.tensor.placement_types import _StridedShard

    return _StridedShard(dim, split_factor=split_factor)


def to_placements(spec: TensorSpec | Layout, *, shape: Sequence[int] | None = None) -> tuple[Any, ...]:
    """The torch placements of a layout, one per mesh axis in mesh order.

    Args:
        spec: a :class:`TensorSpec`, or a :class:`Layout` bound to a mesh.
        shape: the global shape when ``spec`` is a Layout (needed to refuse uneven strided axes).

    Raises:
        LayoutError: a Layout without a mesh.
        UnsupportedLayoutError: an uneven tensor axis over several mesh axes
            (``feature="uneven_multi_axis"``).
    """
    from torch.distributed.tensor import Replicate, Shard

    layout = spec.layout if isinstance(spec, TensorSpec) else spec
    global_shape = spec.shape if isinstance(spec, TensorSpec) else (tuple(shape) if shape is not None else None)
    mesh = layout.mesh
    if mesh is None:
        raise LayoutError(f"{layout!r} has no mesh; bind one with layout.with_mesh(mesh).", value=layout)
    out: list[Any] = [Replicate()] * mesh.ndim
    for dim, indices in enumerate(layout.dim_axes):
        uneven = global_shape is not None and global_shape[dim] % math.prod(mesh.shape[i] for i in indices)
        if len(indices) > 1 and uneven:
            assert global_shape is not None
            raise UnsupportedLayoutError(
                f"torch cannot express {layout} for shape {tuple(global_shape)}: tensor axis {dim} is uneven and split "
                f"over mesh axes {layout.mesh_axes(dim)}; torch chunks each mesh axis in turn (nested), layoutcore "
                "chunks the axis once over the product, and the blocks differ.",
                driver="torch",
                feature=Capability.UNEVEN_MULTI_AXIS,
                value=layout,
            )
        if list(indices) == sorted(indices):
            for index in indices:
                out[index] = Shard(dim)
            continue
        order = list(indices)  # major to minor
        for index in indices:
            # axes torch applies after this one (later in the mesh) that are more major in the layout
            later_major = [j for j in order[: order.index(index)] if j > index]
            factor = math.prod(mesh.shape[j] for j in later_major)
            out[index] = _strided(dim, factor) if factor > 1 else Shard(dim)
    return tuple(out)


def layout_from_torch(placements: Sequence[Any], mesh: Mesh, rank: int) -> Layout:
    """The Layout on ``mesh`` of torch ``placements``, ``_StridedShard`` included.

    A ``_StridedShard`` set is matched against :func:`to_placements` of every order of its
    mesh axes; a set no order produces (a split factor torch accepts but that is no mesh-axis
    order) is refused. Orders that differ only in where size-1 mesh axes go give the same
    placements (and blocks); they come back in mesh order.

    Raises:
        UnsupportedLayoutError: ``Partial`` (``feature="partial"``), an unknown placement, or a
            ``_StridedShard`` set that is no order of its mesh axes.
        LayoutError: a placement count other than the mesh's rank, or a shard dim out of range.
    """
    placements = tuple(placements)
    if not any(_private.is_strided_shard(p) for p in placements):
        return layout_from_placements(placements, mesh, rank)
    if len(placements) != mesh.ndim:
        raise LayoutError(f"{len(placements)} placements for a {mesh.ndim}-D mesh {mesh}.", value=placements)
    plain = [p if not _private.is_strided_shard(p) else _as_shard(p) for p in placements]
    base = layout_from_placements(plain, mesh, rank)  # Partial/unknown refused here, dims checked
    candidates: list[list[Any]] = []
    for entry in base.axes:
        candidates.append([tuple(p) for p in itertools.permutations(entry)] if isinstance(entry, tuple) else [entry])
    for axes in itertools.product(*candidates):
        layout = Layout(list(axes), mesh)
        if _same(to_placements(layout), placements):
            return layout
    raise UnsupportedLayoutError(
        f"torch placements {placements} on {mesh} are no order of their mesh axes (a _StridedShard split factor that "
        "no layoutcore layout has).",
        driver="torch",
        feature=Capability.MULTI_AXIS_ANY_ORDER,
        value=placements,
    )


def _as_shard(placement: Any) -> Any:
    from torch.distributed.tensor import Shard

    return Shard(int(placement.dim))


def _same(a: Sequence[Any], b: Sequence[Any]) -> bool:
    def key(p: Any) -> tuple[str, int, int]:
        return (type(p).__name__, int(getattr(p, "dim", -1)), int(getattr(p, "split_factor", 1)))

    return [key(p) for p in a] == [key(p) for p in b]


def to_torch_dtype(name: str) -> Any:
    """The torch dtype of a canonical dtype name (``"bfloat16"`` -> ``torch.bfloat16``).

    Raises:
        UnsupportedLayoutError: a dtype torch lacks.
    """
    import torch

    dtype = getattr(torch, name, None)
    if not isinstance(dtype, torch.dtype):
        raise UnsupportedLayoutError(
            f"torch has no dtype {name!r}", driver="torch", feature=Limitation.DTYPE, value=name
        )
    return dtype


def spec_from_dtensor(tensor: Any, mesh: Mesh | None = None) -> TensorSpec:
    """The :class:`TensorSpec` of a DTensor: global shape, dtype, and the layout of its placements.

    ``mesh``: the layoutcore mesh of ``tensor.device_mesh`` (default: its shape and dim names,
    abstract).

    Raises:
        UnsupportedLayoutError: see :func:`layout_from_torch`.
    """
    from torch.distributed.tensor import DTensor

    if not isinstance(tensor, DTensor):
        raise LayoutError(f"Expected a torch DTensor. Received: {type(tensor).__name__}", value=tensor)
    dm = tensor.device_mesh
    if mesh is None:
        names = dm.mesh_dim_names or tuple(f"dim{i}" for i in range(dm.ndim))
        mesh = Mesh(tuple(dm.mesh.shape), tuple(names))
    layout = layout_from_torch(tensor.placements, mesh, tensor.ndim)
    return TensorSpec(tuple(tensor.shape), str(tensor.dtype).removeprefix("torch."), layout)
