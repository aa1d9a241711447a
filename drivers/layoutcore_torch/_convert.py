"""Conversions between layoutcore values and torch's: ``Mesh`` <-> ``DeviceMesh``, ``Layout`` <-> placements,
and torch tensors <-> NumPy arrays.

Layout -> placements: per mesh axis, ``Shard(d)`` when tensor axis ``d`` uses it, else ``Replicate()``;
a tensor axis over several mesh axes in mesh order is repeated ``Shard(d)`` (torch applies placements
in mesh order, i.e. major to minor). A tensor axis over mesh axes out of mesh order would need the
private ``_StridedShard`` and is refused (``multi_axis_any_order``).

DeviceMeshes: building one creates a process group per mesh axis, which torch keeps for the life of
the default group (about 20 KiB each, measured: 1 500 distinct meshes grew ``pg_map`` by 1 500
groups). So the process groups are made once per *rank grid* (shape and ranks), and every Mesh on
that grid gets a cheap ``DeviceMesh.from_group`` over them carrying its own axis names. The tables
are bounded (least recently used entries go first), and every ``MAX_MESHES`` new DeviceMeshes the
driver empties DTensor's sharding-propagation caches, which torch keeps unbounded and which hold every
DeviceMesh an op ran on (measured: about 5 KiB per distinct mesh otherwise).
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from layoutcore import Layout, LayoutError, Mesh, UnsupportedLayoutError
from layoutcore.driver import ML_DTYPES, Capability, Limitation, LRUCache, numpy_dtype

from . import _private
from ._mode import ProcessGroupMode, simulated_ranks

__all__ = [
    "MAX_MESHES",
    "MeshTable",
    "contiguous_stride",
    "layout_from_placements",
    "placements",
    "rank_of",
    "to_numpy",
]

#: How many Mesh -> DeviceMesh conversions (and rank grids) the driver keeps.
MAX_MESHES = 256


class MeshTable:
    """``DeviceMesh`` of each ``Mesh`` in the current world, and the way back.

    Args:
        mode: the driver's process-group mode (simulated or real ranks).
        bind_mesh: the driver's ``bind_mesh`` (the devices a Mesh runs on, row-major).
    """

    __slots__ = ("_bind", "_by_eq", "_by_id", "_grids", "_made", "_meshes", "_mode")

    def __init__(self, mode: ProcessGroupMode, bind_mesh: Callable[[Mesh], tuple[str, ...]]) -> None:
        self._mode = mode
        self._bind = bind_mesh
        self._meshes: LRUCache[Mesh, Any] = LRUCache(MAX_MESHES)
        self._grids: LRUCache[tuple[tuple[int, ...], tuple[int, ...]], list[Any]] = LRUCache(MAX_MESHES)
        # DeviceMesh -> concrete Mesh, by torch equality (same ranks and names): for an equal DeviceMesh that
        # torch's sharding-propagation caches handed a DTensor in place of ours.
        self._by_eq: LRUCache[Any, Mesh] = LRUCache(MAX_MESHES)
        # id(DeviceMesh) -> (the DeviceMesh, the Mesh the user gave, its concrete binding), for the ones made here
        # (a table, not an attribute on the DeviceMesh: torch.compile treats DeviceMesh as an opaque object).
        self._by_id: LRUCache[int, tuple[Any, Mesh, Mesh]] = LRUCache(MAX_MESHES)
        self._made = 0  # DeviceMeshes made; every MAX_MESHES of them, torch's sharding caches are emptied

    def clear(self) -> None:
        """Forget every DeviceMesh (the default group changed)."""
        self._meshes.clear()
        self._grids.clear()
        self._by_eq.clear()
        self._by_id.clear()

    def device_mesh(self, mesh: Mesh) -> Any:
        """The ``DeviceMesh`` of ``mesh`` (abstract or device-bound), one per Mesh value and world.

        Raises:
            LayoutError: the mesh needs devices the driver does not have.
            UnsupportedLayoutError: its ranks are not in ascending order (``permuted_devices``).
        """
        native = self._meshes.get(mesh)
        if native is not None:
            return native
        world = self._mode.world()
        devices = self._bind(mesh)
        # Simulated: position p is rank p (the device names are labels); real: device "CPU:r" is rank r.
        ranks = tuple(range(mesh.size)) if world.simulated else tuple(rank_of(d) for d in devices)
        if list(ranks) != sorted(ranks):
            # Measured on torch 2.13 + gloo with DeviceMesh([1, 0]): all-gathers concatenate by group rank,
            # not by mesh coordinate, so full_tensor and redistribute return misplaced data.
            raise UnsupportedLayoutError(
                f"{mesh!r} lists ranks {list(ranks)} out of ascending order; torch DeviceMesh collectives misplace "
                "data on such a DeviceMesh, so the torch driver needs a mesh whose devices are in ascending rank "
                "order.",
                driver="torch",
                feature=Limitation.PERMUTED_DEVICES,
                value=mesh,
            )
        import torch
        from torch.distributed.device_mesh import DeviceMesh

        grid = torch.tensor(ranks, dtype=torch.int64).reshape(mesh.shape)
        key = (mesh.shape, ranks)
        with self._mode.spmd(mesh.size):
            groups = self._grids.get(key)
            if groups is None:
                native = DeviceMesh(world.device_type, grid, mesh_dim_names=mesh.axis_names)
                groups = self._grids.setdefault(key, _groups_of(native))
            else:  # the same ranks under other names: reuse the grid's process groups
                native = DeviceMesh.from_group(groups, world.device_type, grid, mesh_dim_names=mesh.axis_names)
        concrete = mesh if mesh.devices is not None else mesh.with_devices(devices)
        native = self._meshes.setdefault(mesh, native)
        self._by_id.setdefault(id(native), (native, mesh, concrete))
        self._made += 1
        if self._made % MAX_MESHES == 0:  # torch's caches hold every DeviceMesh an op ever ran on
            _private.clear_sharding_caches()
        self._by_eq.setdefault(native, concrete)
        return native

    def mesh_of(self, device_mesh: Any, *, concrete: bool) -> Mesh:
        """The Mesh of a ``DeviceMesh``: the one :meth:`device_mesh` made it from (its concrete binding when
        ``concrete``), else a concrete mesh of its shape and ``mesh_dim_names`` over devices
        ``"CPU:<rank>"`` (``"CUDA:<rank>"``), row-major.

        Raises:
            LayoutError: a foreign DeviceMesh without ``mesh_dim_names``.
        """
        known_id = self._by_id.get(id(device_mesh))
        if known_id is not None and known_id[0] is device_mesh:
            return known_id[2] if concrete else known_id[1]
        known = self._by_eq.get(device_mesh)
        if known is not None:
            return known
        names = device_mesh.mesh_dim_names
        if not names:
            raise LayoutError(
                f"{device_mesh} has no mesh_dim_names; layoutcore meshes name every axis. Create it with "
                "DeviceMesh(..., mesh_dim_names=(...)) or init_device_mesh(..., mesh_dim_names=(...)).",
                value=device_mesh,
            )
        kind = str(device_mesh.device_type).upper()
        # A DeviceMesh made under LocalTensorMode computes .mesh by torch ops on a LocalTensor: run them in a mode.
        held = _private.simulated_ranks_of(device_mesh)
        with contextlib.nullcontext() if held is None else simulated_ranks(held):
            grid = device_mesh.mesh
            ranks = [int(r) for r in grid.flatten().tolist()]
        return Mesh(tuple(int(s) for s in grid.shape), tuple(names), [f"{kind}:{r}" for r in ranks])


def _groups_of(device_mesh: Any) -> list[Any]:
    """The process group of each mesh axis (this rank's), for ``DeviceMesh.from_group``."""
    return [device_mesh.get_group(axis) for axis in range(device_mesh.ndim)]


@functools.lru_cache(maxsize=1024)
def placements(layout: Layout) -> tuple[Any, ...]:
    """Torch placements of ``layout``, one per mesh axis in mesh order.

    Raises:
        LayoutError: the layout has no mesh.
        UnsupportedLayoutError: a tensor axis over several mesh axes out of mesh order.
    """
    from torch.distributed.tensor import Replicate, Shard

    mesh = layout.mesh
    if mesh is None:
        raise LayoutError(f"{layout!r} has no mesh; bind one with layout.with_mesh(mesh).", value=layout)
    per_axis: list[Any] = [Replicate()] * mesh.ndim
    for dim, indices in enumerate(layout.dim_axes):
        if list(indices) != sorted(indices):
            raise UnsupportedLayoutError(
                f"torch cannot express {layout}: tensor axis {dim} is split over mesh axes "
                f"{layout.mesh_axes(dim)} out of the mesh's order {mesh.axis_names} (it would need the "
                "private _StridedShard).",
                driver="torch",
                feature=Capability.MULTI_AXIS_ANY_ORDER,
                value=layout,
            )
        for index in indices:
            per_axis[index] = Shard(dim)
    return tuple(per_axis)


def layout_from_placements(placements: Sequence[Any], mesh: Mesh, rank: int) -> Layout:
    """The Layout on ``mesh`` of ``placements`` for a rank-``rank`` tensor.

    Raises:
        UnsupportedLayoutError: a ``Partial`` (pending reduction) or ``_StridedShard`` placement.
        LayoutError: a placement count other than the mesh's rank, or a Shard dim out of range.
    """
    from torch.distributed.tensor import Partial, Replicate, Shard

    placements = tuple(placements)
    if len(placements) != mesh.ndim:
        raise LayoutError(
            f"{len(placements)} placements {placements} for a {mesh.ndim}-D mesh {mesh}; torch needs one per mesh axis.",
            value=placements,
        )
    entries: list[list[str]] = [[] for _ in range(rank)]
    for axis_name, placement in zip(mesh.axis_names, placements, strict=True):
        if isinstance(placement, Partial):
            raise UnsupportedLayoutError(
                f"Placement {placement!r} on mesh axis {axis_name!r} is a pending reduction; layoutcore layouts have "
                "no Partial. relayout() the tensor (or assign it to a Variable) to reduce it into a layout.",
                driver="torch",
                feature=Limitation.PARTIAL,
                value=placements,
            )
        if _private.is_strided_shard(placement):
            raise UnsupportedLayoutError(
                f"Placement {placement!r} on mesh axis {axis_name!r} is torch's private _StridedShard, which "
                "layoutcore's torch driver does not map to a Layout.",
                driver="torch",
                feature=Capability.MULTI_AXIS_ANY_ORDER,
                value=placements,
            )
        if isinstance(placement, Shard):
            dim = int(placement.dim)
            if not -rank <= dim < rank:
                raise LayoutError(
                    f"{placement!r} on mesh axis {axis_name!r} shards axis {dim} of a rank-{rank} tensor.",
                    value=placements,
                )
            entries[dim % rank].append(axis_name)
        elif not isinstance(placement, Replicate):
            raise UnsupportedLayoutError(
                f"Unknown placement {placement!r} on mesh axis {axis_name!r}.",
                driver="torch",
                feature=Limitation.PLACEMENT,
                value=placements,
            )
    return Layout([tuple(e) if e else None for e in entries], mesh)


def rank_of(device: str) -> int:
    """Rank of a canonical device name in a real group: ``"CPU:3"`` -> 3.

    Raises:
        LayoutError: no rank after the colon.
    """
    try:
        return int(device.rsplit(":", 1)[1])
    except (IndexError, ValueError):
        raise LayoutError(f"Cannot read a rank from device {device!r}.", value=device) from None


def contiguous_stride(shape: Sequence[int]) -> tuple[int, ...]:
    """Row-major strides (in elements) of ``shape``, as torch gives a contiguous tensor."""
    stride = []
    step = 1
    for size in reversed(shape):
        stride.append(step)
        step *= max(int(size), 1)
    return tuple(reversed(stride))


#: torch dtypes NumPy has no dtype for, by canonical name: they cross to NumPy as a same-width
#: integer view, and come out as ml_dtypes arrays (never widened: to_numpy keeps the dtype).
_ML_DTYPES = ML_DTYPES


def to_numpy(tensor: Any, *, copy: bool) -> np.ndarray:
    """A plain torch tensor as a NumPy array of the same dtype (bfloat16 and float8 as ml_dtypes arrays,
    moved bit for bit through a same-width integer view)."""
    tensor = tensor.detach()
    if tensor.device.type != "cpu":
        tensor, copy = tensor.cpu(), False
    name = str(tensor.dtype).removeprefix("torch.")
    if name in _ML_DTYPES:  # NumPy has no such dtype: its bits, viewed as ml_dtypes'
        import torch

        ints = tensor.view(torch.int16 if name == "bfloat16" else torch.uint8).numpy()
        out_view: np.ndarray = ints.view(numpy_dtype(name))
        return out_view.copy() if copy else out_view
    out: np.ndarray = tensor.numpy()
    return out.copy() if copy else out


def from_numpy(array: np.ndarray) -> Any:
    """A torch tensor sharing ``array``'s memory (a scalar copy for 0-d), ml_dtypes' bfloat16 and float8
    included (through a same-width integer view, bit for bit).

    ``array`` must be writeable, in native byte order and have non-negative strides (``torch.from_numpy``'s
    rules). Raises ``TypeError`` for a dtype torch cannot hold (as ``torch.from_numpy`` does).
    """
    import torch

    name = array.dtype.name
    if name in _ML_DTYPES:  # ml_dtypes' (kind "V" or "f"): torch.from_numpy knows none of them
        ints = array.view(np.int16 if name == "bfloat16" else np.uint8)
        return (torch.from_numpy(ints) if ints.ndim else torch.as_tensor(ints)).view(getattr(torch, name))
    return torch.from_numpy(array) if array.ndim else torch.as_tensor(array)
