"""The one planner: (saved specs, target, this process's devices) -> per tensor, the blocks and bytes to read.

Every format goes through it (:class:`~._source.Source`): a format only says where each tensor's
bytes lie (:meth:`~._source.Source.stored_key` / :meth:`~._source.Source.stored_tensor`: stored
pieces at byte offsets) or, for formats that decode whole chunks (Orbax), which chunks a box meets
(:meth:`~._source.Source.chunk_runs`). The target forms and their checks are here once:
:func:`flat_target` (a ``LayoutMap``, a mapping, a tree of layouts, specs or tensors),
:func:`target_layout` (shape, dtype and rank against the saved spec), :func:`positions_of` (this
process's devices on a mesh).
"""

from __future__ import annotations

import contextlib
import functools
import gc
from collections.abc import Callable, Hashable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np

from .._dtypes import itemsize
from .._errors import LayoutcoreError, LayoutError, LayoutMismatchError, UnsupportedLayoutError
from .._layout import Layout
from .._layout_map import LayoutMap
from .._tensor_spec import TensorSpec, device_bounds
from ._read_plan import Box, StoredTensor, TensorReads, direct_slots, merge_ranges, plan_tensor
from ._tree import walk

__all__ = ["Geometry", "Stored", "TensorLoad", "flat_target", "gc_paused", "plan", "positions_of", "target_layout"]


class Stored(Protocol):
    """What the planner and the reader ask of a format (:class:`~._source.Source` implements it)."""

    path: str

    @property
    def specs(self) -> dict[str, TensorSpec]: ...
    @property
    def root(self) -> str: ...
    def stored_key(self, path: str) -> Hashable: ...
    def stored_tensor(self, key: Any) -> StoredTensor | None: ...
    def node(self, path: str) -> str: ...
    def chunk_runs(self, path: str, boxes: Sequence[Box]) -> list[tuple[str, np.ndarray[Any, Any]]]: ...
    def decode(self, path: str, boxes: Sequence[Box], out: Sequence[np.ndarray[Any, Any]]) -> None: ...


# -- targets -----------------------------------------------------------------------------------
def flat_target(target: Any, saved: Mapping[str, TensorSpec]) -> dict[str, Any]:
    """path -> target leaf (Layout, TensorSpec or distributed tensor) for the target forms.

    Raises:
        LayoutError: the target names a path the checkpoint does not hold (naming it).
    """
    if target is None:
        return {}
    if isinstance(target, LayoutMap):
        return {p: target.layout_for(p, s.shape, kind="tensor") for p, s in saved.items()}
    if isinstance(target, Mapping) and all(
        isinstance(k, str) and isinstance(v, (Layout, TensorSpec)) for k, v in target.items()
    ):
        out = dict(target)  # a flat mapping path -> Layout / TensorSpec (what the tree walk gives, faster)
    else:
        flat: list[tuple[str, Any]] = []
        walk(target, flat)
        out = dict(flat)
        if isinstance(target, Mapping):  # a flat mapping path -> Layout / TensorSpec
            for key, value in target.items():
                if isinstance(key, str) and key in saved:
                    out[key] = value
    unknown = sorted(p for p in out if p not in saved)
    if unknown:  # most likely a typo: loading without it would silently keep the saved layout
        raise unknown_paths(unknown, saved)
    return out


def unknown_paths(unknown: list[str], saved: Mapping[str, Any]) -> LayoutError:
    """The error for target paths the checkpoint lacks (naming them, and some it holds)."""
    return LayoutError(
        f"checkpoint.load: the target names {len(unknown)} path(s) the checkpoint does not hold: "
        f"{unknown[:10]}. Saved paths include: {sorted(saved)[:10]}",
        value=unknown,
    )


def target_layout(path: str, saved: TensorSpec, want: Any) -> Layout:
    """The layout tensor ``path`` loads under, for one target leaf (``None``: the saved one).

    Raises:
        LayoutMismatchError: a TensorSpec of another shape or dtype, a layout of another rank, a
            tensor of another shape (naming ``path``). LayoutError: a layout without mesh.
    """
    if want is None:
        return saved.layout
    if isinstance(want, TensorSpec):
        if want.shape != saved.shape or want.dtype != saved.dtype:
            raise LayoutMismatchError(
                f"checkpoint.load: tensor {path!r} was saved with shape {saved.shape} and dtype {saved.dtype}; "
                f"the target TensorSpec has shape {want.shape} and dtype {want.dtype}. A load never casts: ask for "
                "the saved dtype (the driver's own storage rule, e.g. JAX without jax_enable_x64, applies after).",
                expected=want,
                actual=saved,
            )
        return want.layout
    if isinstance(want, Layout):
        if want.mesh is None:
            raise LayoutError(f"checkpoint.load: the target layout for {path!r} has no mesh: {want!r}", value=want)
        if want.rank != len(saved.shape):
            raise LayoutMismatchError(
                f"checkpoint.load: tensor {path!r} has rank {len(saved.shape)} (shape {saved.shape}); the target "
                f"layout {want} has rank {want.rank}.",
                expected=want,
                actual=saved,
            )
        return want
    # a distributed tensor (or Variable): its layout; its shape must match
    from ..driver._frontend import HoldsValue
    from ..driver._registry import driver_for

    value = want.value if isinstance(want, HoldsValue) else want
    drv = driver_for(value)
    layout = drv.fetch_layout(value)
    shape = drv.shape_of(value)
    if tuple(shape) != saved.shape:
        raise LayoutMismatchError(
            f"checkpoint.load: tensor {path!r} was saved with shape {saved.shape}; the target tensor has shape {shape}.",
            expected=shape,
            actual=saved.shape,
        )
    return layout


def check_spec_dtype(path: str, want: Any, driver: Any) -> None:
    """Refuse a ``TensorSpec`` target asking ``driver`` for a dtype it does not hold (JAX's 64-bit ones
    with ``jax_enable_x64`` off): a spec is an explicit request, never narrowed to fit.

    Raises:
        UnsupportedLayoutError: ``feature="dtype"``, naming the tensor path and the dtype.
    """
    if driver is None or not isinstance(want, TensorSpec) or want.dtype in driver.supported_dtypes():
        return
    refusal = driver.dtype_refusal(want.dtype)
    raise UnsupportedLayoutError(
        f"checkpoint.load: the target TensorSpec of tensor {path!r} asks for dtype {want.dtype}: {refusal}",
        driver=refusal.driver,
        feature=refusal.feature,
        value=want.dtype,
    )


@functools.lru_cache(maxsize=64)
def _all_positions(size: int) -> list[int]:
    return list(range(size))


def positions_of(layout: Layout, process_devices: Any, driver: Any) -> list[int]:
    """Mesh positions (row-major) whose blocks this process reads.

    ``process_devices`` (positions or device names) when given; else ``driver``'s
    ``local_positions`` on the mesh bound to it (a mesh larger than the driver's devices, which no
    load here could bind, is planned for all its devices: a single process holds them all); else all.
    """
    mesh = layout.mesh
    assert mesh is not None
    if process_devices is None and driver is not None:
        try:
            devices = driver.bind_mesh(mesh)
        except LayoutcoreError:
            return _all_positions(mesh.size)
        positions: list[int] = driver.local_positions(mesh, devices)
        return positions if isinstance(positions, list) else list(positions)
    if process_devices is None:
        return _all_positions(mesh.size)
    out = []
    for d in process_devices:
        if isinstance(d, str):
            if mesh.devices is not None and d in mesh.devices:
                out.append(mesh.devices.index(d))
            elif mesh.devices is None and d.rsplit(":", 1)[-1].isdigit() and int(d.rsplit(":", 1)[-1]) < mesh.size:
                out.append(int(d.rsplit(":", 1)[-1]))
        elif 0 <= int(d) < mesh.size:
            out.append(int(d))
    return sorted(set(out))


# -- geometry ----------------------------------------------------------------------------------
@functools.lru_cache(maxsize=256)
def _bounds_cached(shape: tuple[int, ...], mesh_shape: tuple[int, ...], dim_axes: Any) -> tuple[Any, Any]:
    return device_bounds(shape, mesh_shape, dim_axes)


@dataclass(frozen=True, slots=True)
class Geometry:
    """A tensor's reads for one target, independent of its name: shared by every tensor alike.

    Attributes:
        boxes: the distinct blocks this process needs, ``(offsets, sizes)``, in order of first use.
        box_of: per local position, the index of its block in ``boxes`` (replicas share one).
        floor_bytes: the blocks' bytes, each distinct element once.
        reads: the byte runs per stored piece, or ``None`` where the source decodes chunks itself.
        ranges: merged ``(file index, offset, length)`` rows (what a read plan lists).
        files: the files of ``ranges`` (relative to the tensor's node, or absolute).
        read_bytes: total bytes of ``ranges``.
        direct: :func:`direct_slots` of ``reads``, for a load.
        phase: where new blocks' data start past a 64-byte boundary (``aligned_empty``'s
            ``phase``): 0, or, for a tensor read whole onto NumPy, its file offset's phase.
    """

    boxes: tuple[Box, ...]
    box_of: tuple[int, ...]
    floor_bytes: int
    reads: TensorReads | None
    ranges: np.ndarray[Any, Any]
    files: tuple[str, ...]
    read_bytes: int
    direct: tuple[tuple[int, int, int] | None, ...] | None = None
    phase: int = 0


@dataclass(slots=True)
class TensorLoad:
    """One tensor of a plan: its path, saved spec, target layout, this process's positions, reads."""

    path: str
    saved: TensorSpec
    layout: Layout
    positions: list[int]
    node: str
    geometry: Geometry

    @property
    def host_bytes(self) -> int:
        """Bytes of its distinct host blocks."""
        return self.geometry.floor_bytes


def _needed(
    shape: tuple[int, ...], mesh_shape: Any, dim_axes: Any, positions: list[int]
) -> tuple[list[Box], tuple[int, ...]]:
    """The distinct blocks of ``positions`` (first-appearance order) and each position's index among them."""
    if not positions:
        return [], ()
    starts, stops = _bounds_cached(shape, mesh_shape, dim_axes)
    pos = np.asarray(positions, dtype=np.int64)
    both = np.concatenate([starts[pos], stops[pos] - starts[pos]], axis=1)
    uniq, first, inverse = np.unique(both, axis=0, return_index=True, return_inverse=True)
    order = np.argsort(first)  # boxes in order of first appearance
    rank_of = np.empty_like(order)
    rank_of[order] = np.arange(len(order))
    rank = len(shape)
    boxes = [(tuple(r[:rank]), tuple(r[rank:])) for r in uniq[order].tolist()]
    return boxes, tuple(rank_of[np.asarray(inverse).reshape(-1)].tolist())


def _file_ranges(
    runs_by_file: Mapping[str, list[np.ndarray[Any, Any]]],
) -> tuple[np.ndarray[Any, Any], tuple[str, ...]]:
    files = sorted(runs_by_file)
    rows = []
    for i, f in enumerate(files):
        merged = merge_ranges(np.concatenate(runs_by_file[f]))
        rows.append(np.column_stack([np.full(len(merged), i, dtype=np.int64), merged]))
    ranges = np.concatenate(rows) if rows else np.zeros((0, 3), dtype=np.int64)
    return ranges, tuple(files)


def _geometry(source: Stored, path: str, key: tuple[Any, ...], positions: list[int], with_copies: bool) -> Geometry:
    stored_key, shape, dtype, mesh_shape, dim_axes, _, granularity = key
    boxes, box_of = _needed(shape, mesh_shape, dim_axes, positions)
    stored = source.stored_tensor(stored_key)
    runs_by_file: dict[str, list[np.ndarray[Any, Any]]] = {}
    if stored is None:  # a format that decodes whole chunks (Orbax): its chunks, read whole
        reads = None
        floor = sum(int(np.prod(s)) for _, s in boxes) * itemsize(dtype)
        for file, runs in source.chunk_runs(path, boxes):
            runs_by_file.setdefault(file, []).append(runs)
    else:
        reads = plan_tensor(stored, boxes, granularity=granularity, with_copies=with_copies)
        floor = reads.floor_bytes
        for pr in reads.pieces:
            runs_by_file.setdefault(stored.pieces[pr.piece].file, []).append(pr.runs)
    ranges, files = _file_ranges(runs_by_file)
    rel = tuple(f[2:] if f.startswith("./") else f for f in files)
    direct = direct_slots(reads) if with_copies and reads is not None else None
    read_bytes = int(ranges[:, 2].sum()) if len(ranges) else 0
    return Geometry(tuple(boxes), box_of, floor, reads, ranges, rel, read_bytes, direct)


@contextlib.contextmanager
def gc_paused() -> Any:
    """The cyclic garbage collector off for a burst of allocation that makes no cycles.

    Parsing and planning 10 000 tensors allocates a few million small objects (the JSON, the
    ranges); each 700 of them start a collection that walks the young ones, and the older
    generations are walked again and again: that was a third of ``read_plan``'s time.
    """
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def plan(
    source: Stored,
    target: Any,
    positions_for: Callable[[str, Layout], list[int]],
    *,
    granularity: str = "exact",
    with_copies: bool = True,
    only: Sequence[str] | None = None,
    driver: Any = None,
) -> list[TensorLoad]:
    """The reads of every tensor of ``source`` (or of ``only``) under ``target``, for this process.

    Args:
        source: the opened checkpoint.
        target: any target form of ``load`` (``None``: the saved layouts).
        positions_for: ``(path, layout) -> mesh positions`` whose blocks this process reads.
        granularity: ``"exact"`` or ``"piece"`` (what whole-chunk readers read).
        with_copies: also plan where each piece's bytes land (a load needs it; a read plan does not).
        only: the paths to plan (default: all, in saved order).
        driver: the driver that will hold the tensors: a ``TensorSpec`` target of a dtype it does not
            hold is refused (:func:`check_spec_dtype`).

    Raises:
        LayoutError, LayoutMismatchError: as :func:`flat_target` and :func:`target_layout`.
        UnsupportedLayoutError: as :func:`check_spec_dtype`.
    """
    specs = source.specs
    wanted = flat_target(target, specs)
    plans = []
    # models repeat (shape, dtype, layout): the geometry of each distinct one is computed once. The
    # key holds small ints for the device positions (1 024 of them on a big mesh: a tuple of them
    # would be rebuilt and rehashed per tensor) and the mesh-axis indices of the layout.
    cache: dict[Any, Geometry] = {}
    position_ids: dict[tuple[int, ...], int] = {}
    by_object: dict[int, tuple[list[int], int]] = {}  # id(positions list) -> (the list, its id)
    dim_axes: dict[Any, Any] = {}
    for p in specs if only is None else only:
        saved = specs[p]
        check_spec_dtype(p, wanted.get(p), driver)
        layout = target_layout(p, saved, wanted.get(p))
        positions = positions_for(p, layout)
        known = by_object.get(id(positions))
        if known is None or known[0] is not positions:
            known = by_object[id(positions)] = (positions, position_ids.setdefault(tuple(positions), len(position_ids)))
        mesh = layout.mesh
        assert mesh is not None
        axes_key = (layout.axes, mesh.axis_names)
        axes = dim_axes.get(axes_key)
        if axes is None:
            axes = dim_axes[axes_key] = layout.dim_axes
        stored_key: Hashable = source.stored_key(p)
        key = (stored_key, saved.shape, saved.dtype, mesh.shape, axes, known[1], granularity)
        geo = cache.get(key)
        if geo is None:
            geo = cache[key] = _geometry(source, p, key, positions, with_copies)
        plans.append(TensorLoad(p, saved, layout, positions, source.node(p), geo))
    return plans
