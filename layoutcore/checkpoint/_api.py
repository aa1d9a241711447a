"""load / inspect / read_plan of layoutcore checkpoints, and the dispatch to foreign formats (``docs/design.md#checkpoints``).

``save`` lives in :mod:`._save`, tree walking in :mod:`._tree`.
"""

from __future__ import annotations

import contextlib
import functools
import gc
import math
import os
from collections import deque
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from .._config import checkpoint_threads
from .._dtypes import numpy_dtype
from .._errors import LayoutError, LayoutMismatchError, UnsupportedLayoutError
from .._layout import Layout
from .._layout_map import LayoutMap
from .._tensor_spec import TensorSpec, device_bounds
from . import _threads
from ._meta import META, CheckpointInfo, _info_from_meta, _read_meta, _stored_geometry
from ._progress import progress
from ._read_plan import TensorReads, direct_slots, merge_ranges, plan_tensor, read_boxes
from ._threads import ThreadWork
from ._tree import rebuild, walk

__all__ = ["CheckpointInfo", "ReadPlan", "inspect", "load", "read_plan"]


# -- values ------------------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class ReadPlan:
    """The bytes a load reads, computed from metadata before any data is read.

    Attributes:
        reads: ``(file, offset, length)`` per merged byte range: by tensor, then file and offset.
        read_bytes: total bytes of ``reads`` (data and chunk checksums).
        floor_bytes: each distinct element the devices need, once, times its item size.
        amplification: ``read_bytes / floor_bytes`` (1.0 when nothing is needed).
        metadata_bytes: bytes of metadata a load reads besides (``layoutcore.json``).
        tensors: tensor path -> ``(read_bytes, floor_bytes)``.
    """

    reads: tuple[tuple[str, int, int], ...]
    read_bytes: int
    floor_bytes: int
    amplification: float
    metadata_bytes: int = 0
    tensors: dict[str, tuple[int, int]] = field(default_factory=dict)


# -- metadata ----------------------------------------------------------------------------------
#: The foreign-format readers (:mod:`layoutcore.checkpoint._foreign`: torch DCP, Orbax, safetensors),
#: plugged in by the package's ``__init__``: they build on this module, so it does not import them.
FOREIGN: Any = None


def _foreign(path: str) -> Any:
    """The opened foreign checkpoint (torch DCP, Orbax, safetensors) at ``path``, or ``None``."""
    if not os.path.exists(path) or os.path.isfile(os.path.join(path, META)):
        return None
    if FOREIGN.detect(path) is None:
        return None
    return FOREIGN.open_foreign(path)


def inspect(path: str | os.PathLike[str]) -> CheckpointInfo:
    """What the checkpoint at ``path`` holds (metadata only; no tensor data is read).

    Raises:
        CheckpointError: no checkpoint there, an incomplete one, or an unknown format/version.
    """
    target = os.path.abspath(os.fspath(path))
    foreign = _foreign(target)
    if foreign is not None:
        info: CheckpointInfo = FOREIGN.inspect(foreign)
        return info
    meta, _ = _read_meta(target)
    return _info_from_meta(target, meta)


@functools.lru_cache(maxsize=256)
def _bounds_cached(shape: tuple[int, ...], mesh_shape: tuple[int, ...], dim_axes: Any) -> tuple[Any, Any]:
    return device_bounds(shape, mesh_shape, dim_axes)


@dataclass(frozen=True, slots=True)
class _Geometry:
    """A tensor's reads for one target, independent of its name: shared by every tensor alike."""

    reads: TensorReads
    box_of: tuple[int, ...]  # per local position: index into reads.boxes
    ranges: np.ndarray[Any, Any]  # merged (file index, offset, length) rows
    files: tuple[str, ...]  # piece files relative to the node, indexed by ranges[:, 0]
    read_bytes: int
    direct: tuple[tuple[int, int, int] | None, ...] | None = None  # direct_slots(reads), for a load


# -- targets -----------------------------------------------------------------------------------
def _flat_target(target: Any, saved: Mapping[str, TensorSpec]) -> dict[str, Any]:
    """path -> target leaf (Layout, TensorSpec or distributed tensor) for the target forms."""
    if target is None:
        return {}
    if isinstance(target, LayoutMap):
        return {p: target.layout_for(p, s.shape, kind="tensor") for p, s in saved.items()}
    if isinstance(target, Mapping) and all(
        isinstance(k, str) and isinstance(v, (Layout, TensorSpec)) for k, v in target.items()
    ):
        out = dict(target)  # a flat mapping path -> Layout / TensorSpec (what the tree walk gives, faster)
        unknown = sorted(p for p in out if p not in saved)
        if unknown:
            raise _unknown_paths(unknown, saved)
        return out
    flat: list[tuple[str, Any]] = []
    walk(target, flat)
    out = dict(flat)
    if isinstance(target, Mapping):  # a flat mapping path -> Layout / TensorSpec
        for key, value in target.items():
            if isinstance(key, str) and key in saved:
                out[key] = value
    unknown = sorted(p for p in out if p not in saved)
    if unknown:  # most likely a typo: loading without it would silently keep the saved layout
        raise _unknown_paths(unknown, saved)
    return out


def _unknown_paths(unknown: list[str], saved: Mapping[str, TensorSpec]) -> LayoutError:
    return LayoutError(
        f"checkpoint.load: the target names {len(unknown)} path(s) the checkpoint does not hold: "
        f"{unknown[:10]}. Saved paths include: {sorted(saved)[:10]}",
        value=unknown,
    )


def _target_layout(path: str, saved: TensorSpec, want: Any) -> Layout:
    if want is None:
        return saved.layout
    if isinstance(want, TensorSpec):
        if want.shape != saved.shape or want.dtype != saved.dtype:
            raise LayoutMismatchError(
                f"checkpoint.load: tensor {path!r} was saved with shape {saved.shape} and dtype {saved.dtype}; "
                f"the target TensorSpec has shape {want.shape} and dtype {want.dtype}.",
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


@functools.lru_cache(maxsize=64)
def _all_positions(size: int) -> list[int]:
    return list(range(size))


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


def pack_loaded(driver: Any, path: str, components: list[Any], layout: Layout, shape: tuple[int, ...]) -> Any:
    """``driver.pack`` of a loaded tensor's components; a dtype refusal names the tensor's path.

    Raises:
        UnsupportedLayoutError: the driver cannot hold the tensor's values (``feature="dtype"``).
    """
    try:
        return driver.pack(components, layout, global_shape=shape)
    except UnsupportedLayoutError as err:
        if err.feature != "dtype":
            raise
        raise UnsupportedLayoutError(
            f"checkpoint.load: tensor {path!r}: {err}", driver=err.driver, feature=err.feature, value=err.value
        ) from None


def _positions(layout: Layout, process_devices: Any, driver: Any) -> list[int]:
    mesh = layout.mesh
    assert mesh is not None
    if driver is not None:
        return list(driver.local_positions(mesh, driver.bind_mesh(mesh)))
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


@dataclass(slots=True)
class _TensorLoad:
    path: str
    saved: TensorSpec
    layout: Layout
    positions: list[int]
    node: str
    geometry: _Geometry


@contextlib.contextmanager
def _gc_paused() -> Any:
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


def _plan_all(
    path: str,
    target: Any,
    *,
    process_devices: Any = None,
    driver: Any = None,
    granularity: str = "exact",
    with_copies: bool = True,
) -> tuple[dict[str, Any], list[_TensorLoad], int]:
    meta, meta_bytes = _read_meta(path)
    info = _info_from_meta(path, meta)
    wanted = _flat_target(target, info.tensors)
    plans = []
    # models repeat (shape, dtype, layout): the geometry of each distinct one is computed once. The
    # key holds small ints for the device positions (1 024 of them on a big mesh: a tuple of them
    # would be rebuilt and rehashed per tensor) and the mesh-axis indices of the layout.
    cache: dict[Any, _Geometry] = {}
    position_ids: dict[tuple[int, ...], int] = {}
    by_object: dict[int, tuple[list[int], int]] = {}  # id(positions list) -> (the list, its id)
    dim_axes: dict[Any, Any] = {}
    for p, saved in info.tensors.items():
        check_spec_dtype(p, wanted.get(p), driver)
        layout = _target_layout(p, saved, wanted.get(p))
        positions = _positions(layout, process_devices, driver)
        known = by_object.get(id(positions))
        if known is None or known[0] is not positions:
            known = by_object[id(positions)] = (positions, position_ids.setdefault(tuple(positions), len(position_ids)))
        entry = meta["tensors"][p]
        mesh = layout.mesh
        assert mesh is not None
        axes_key = (layout.axes, mesh.axis_names)
        axes = dim_axes.get(axes_key)
        if axes is None:
            axes = dim_axes[axes_key] = layout.dim_axes
        key = (
            saved.shape,
            saved.dtype,
            tuple(entry["shard"]),
            tuple(entry["chunk"]),
            mesh.shape,
            axes,
            known[1],
            granularity,
        )
        geo = cache.get(key)
        if geo is None:
            geo = cache[key] = _geometry(key, positions, with_copies)
        plans.append(_TensorLoad(p, saved, layout, positions, entry["node"], geo))
    return meta, plans, meta_bytes


def _geometry(key: tuple[Any, ...], positions: list[int], with_copies: bool) -> _Geometry:
    shape, dtype, shard, chunk, mesh_shape, dim_axes, _, granularity = key
    starts, stops = _bounds_cached(shape, mesh_shape, dim_axes)
    pos = np.asarray(positions, dtype=np.int64)
    both = np.concatenate([starts[pos], stops[pos] - starts[pos]], axis=1) if len(pos) else np.zeros((0, 0))
    if len(pos):
        uniq, first, inverse = np.unique(both, axis=0, return_index=True, return_inverse=True)
        order = np.argsort(first)  # boxes in order of first appearance
        rank_of = np.empty_like(order)
        rank_of[order] = np.arange(len(order))
        rank = len(shape)
        boxes = [(tuple(r[:rank]), tuple(r[rank:])) for r in uniq[order].tolist()]
        box_of = tuple(rank_of[np.asarray(inverse).reshape(-1)].tolist())
    else:
        boxes, box_of = [], ()
    stored = _stored_geometry(shape, dtype, shard, chunk)
    reads = plan_tensor(stored, boxes, granularity=granularity, with_copies=with_copies)
    files = sorted({stored.pieces[pr.piece].file for pr in reads.pieces})  # "./c/0/0" ...
    file_index = {f: i for i, f in enumerate(files)}
    rows = []
    for f in files:
        runs = [pr.runs for pr in reads.pieces if stored.pieces[pr.piece].file == f]
        merged = merge_ranges(np.concatenate(runs))
        rows.append(np.column_stack([np.full(len(merged), file_index[f], dtype=np.int64), merged]))
    ranges = np.concatenate(rows) if rows else np.zeros((0, 3), dtype=np.int64)
    rel = tuple(f[2:] if f.startswith("./") else f for f in files)
    direct = direct_slots(reads) if with_copies else None
    return _Geometry(reads, box_of, ranges, rel, int(ranges[:, 2].sum()) if len(ranges) else 0, direct)


def read_plan(
    path: str | os.PathLike[str],
    target: Any = None,
    *,
    process_devices: Iterable[int | str] | None = None,
    granularity: str = "exact",
    driver: Any = None,
) -> ReadPlan:
    """The byte ranges a load under ``target`` reads, from metadata only.

    Args:
        path: the checkpoint.
        target: as :func:`load` (``None``: the saved layouts).
        process_devices: the devices of one process, as mesh positions (row-major) or device
            names; default: this process's devices under ``driver`` when one is given (its
            ``local_positions``, as ``load`` reads them), else all (a single-process load).
        granularity: ``"exact"`` (layoutcore's reader) or ``"piece"``: what a reader that reads
            whole inner chunks (TensorStore, zarr-python, Orbax) would read.
        driver: the driver (name or object) whose ``local_positions`` give this process's devices.

    Raises:
        CheckpointError: as :func:`inspect`. LayoutMismatchError: a ``TensorSpec`` target of
            another shape or dtype.
    """
    target_path = os.path.abspath(os.fspath(path))
    devices = None if process_devices is None else list(process_devices)
    foreign = _foreign(target_path)
    if foreign is not None:
        plan: ReadPlan = FOREIGN.read_plan(foreign, target, process_devices=devices)
        return plan
    drv = None
    if driver is not None and devices is None:
        from ..driver._registry import get_driver

        drv = get_driver(driver)
    with _gc_paused():
        return _read_plan(target_path, target, devices, drv, granularity)


def _read_plan(target_path: str, target: Any, devices: Any, drv: Any, granularity: str) -> ReadPlan:
    _, plans, meta_bytes = _plan_all(
        target_path, target, process_devices=devices, driver=drv, granularity=granularity, with_copies=False
    )
    tensors = {}
    floor = total = 0
    reads: list[tuple[str, int, int]] = []
    for tl in plans:
        geo = tl.geometry
        floor += geo.reads.floor_bytes
        total += geo.read_bytes
        tensors[tl.path] = (geo.read_bytes, geo.reads.floor_bytes)
        prefix = tl.node + "/"
        names = [prefix + f for f in geo.files]
        ranges = geo.ranges
        if len(ranges):
            reads.extend(
                zip(
                    map(names.__getitem__, ranges[:, 0].tolist()),
                    ranges[:, 1].tolist(),
                    ranges[:, 2].tolist(),
                    strict=True,
                )
            )
    amp = total / floor if floor else 1.0
    return ReadPlan(tuple(reads), total, floor, amp, meta_bytes, tensors)


# -- load --------------------------------------------------------------------------------------
def _blocks(dtype: Any, shapes: list[tuple[int, ...]]) -> list[np.ndarray[Any, Any]]:
    """One allocation for a tensor's blocks, each a disjoint C-contiguous view of it.

    For a tensor whose chunks are copied out in slabs (a layout cutting across the saved blocks):
    the strided copies into fresh pages ran 0.57-0.63 of ``np.fromfile``'s throughput into one
    allocation per block and 0.72-0.82 into one allocation per tensor (512 MiB, interleaved; the
    big allocation's pages are huge-page aligned). Where every chunk is read straight into its
    block, one allocation per block measured as fast or faster, and each block owns its memory.
    """
    counts = [math.prod(s) for s in shapes]
    flat = np.empty(sum(counts), dtype=dtype)
    out, at = [], 0
    for shape, n in zip(shapes, counts, strict=True):
        out.append(flat[at : at + n].reshape(shape))
        at += n
    return out


class _Readers(ThreadWork):
    """Reader threads that fill each tensor's host blocks, handing the tensors back in order.

    Tensors are read ahead of the caller while they fit in :data:`_threads.AHEAD_BYTES`, and the caller
    packs them (on its own thread: drivers are not asked to be thread-safe), so host memory in
    flight beyond the tensor being handed over stays bounded. A large tensor is split into several
    tasks over disjoint sets of its stored pieces. Each thread keeps its own descriptors and read
    buffer (peak: one slab or stored piece per thread).
    """

    def __init__(self, root: str, verify: bool, threads: int) -> None:
        super().__init__(threads, "layoutcore-load")
        self.root, self.verify = root, verify

    def _fill(self, tl: _TensorLoad, outs: list[np.ndarray[Any, Any]], pieces: range | None) -> None:
        fds, scratch = self.state()
        read_boxes(
            self.root,
            tl.geometry.reads,
            outs,
            checkpoint=self.root,
            fds=fds,
            tensor_path=tl.path,
            node=tl.node,
            scratch=scratch,
            verify=self.verify,
            direct=tl.geometry.direct,
            pieces=pieces,
        )

    def _start(self, tl: _TensorLoad) -> tuple[_TensorLoad, list[np.ndarray[Any, Any]], list[Any]]:
        dtype = numpy_dtype(tl.saved.dtype)
        shapes = [sizes for _, sizes in tl.geometry.reads.boxes]
        if tl.geometry.direct is not None and None not in tl.geometry.direct:
            outs = [np.empty(sizes, dtype=dtype) for sizes in shapes]  # each chunk read straight into its block
        else:
            outs = _blocks(dtype, shapes)
        if self.pool is None or tl.geometry.reads.read_bytes < INLINE_BYTES:  # a thread hop costs more
            self._fill(tl, outs, None)
            return tl, outs, []
        parts = _piece_parts(tl.geometry.reads, self.threads)
        return tl, outs, [self.pool.submit(self._fill, tl, outs, part) for part in parts]

    def read(self, plans: Sequence[_TensorLoad]) -> Iterable[tuple[_TensorLoad, list[Any]]]:
        """Yield ``(tensor, its components in mesh-device order)`` for each of ``plans``, in order.

        Raises:
            CheckpointError: as :func:`read_boxes`; the first error in plan order, after which no
                further tensor is handed back.
        """
        ahead: deque[tuple[_TensorLoad, list[np.ndarray[Any, Any]], list[Any], int]] = deque()
        nxt, beyond = 0, 0  # beyond: host bytes of ahead[1:], the tensors read ahead of the caller
        while ahead or nxt < len(plans):
            while nxt < len(plans):
                size = _host_bytes(plans[nxt])
                if ahead and beyond + size > _threads.AHEAD_BYTES:
                    break
                beyond += size if ahead else 0
                ahead.append((*self._start(plans[nxt]), size))
                nxt += 1
            tl, outs, futures, _ = ahead.popleft()
            beyond -= ahead[0][3] if ahead else 0
            for f in futures:
                f.result()  # re-raises a reader's CheckpointError here
            used: set[int] = set()
            components = []
            for b in tl.geometry.box_of:
                # replicas get their own copy: a driver may keep the array, and must own each rank's storage
                components.append(outs[b] if b not in used else outs[b].copy())
                used.add(b)
            yield tl, components


def _host_bytes(tl: _TensorLoad) -> int:
    """Bytes of a tensor's distinct host blocks."""
    item = numpy_dtype(tl.saved.dtype).itemsize
    return sum(math.prod(sizes) for _, sizes in tl.geometry.reads.boxes) * item


def _piece_parts(reads: TensorReads, threads: int) -> list[range]:
    """The tensor's stored pieces split into runs of about :data:`TASK_BYTES` read bytes each.

    Pieces fill disjoint parts of the destination blocks (each element is read from one piece),
    so the runs can be read concurrently.
    """
    n = len(reads.pieces)
    if threads <= 1 or n <= 1 or reads.read_bytes <= TASK_BYTES:
        return [range(n)]
    parts, start, acc = [], 0, 0
    for i, pr in enumerate(reads.pieces):
        acc += int(pr.runs[:, 1].sum())
        if acc >= TASK_BYTES:
            parts.append(range(start, i + 1))
            start, acc = i + 1, 0
    if start < n:
        parts.append(range(start, n))
    return parts


#: A tensor reading fewer bytes is read on the calling thread.
INLINE_BYTES = 1 << 20
#: Bytes of stored pieces one reader task reads, at least (a large tensor is read as several tasks).
TASK_BYTES = 16 << 20


def load(path: str | os.PathLike[str], target: Any = None, *, driver: Any = None, verify: bool = True) -> Any:
    """Load a checkpoint into distributed tensors of the selected driver.

    Args:
        path: the checkpoint directory.
        target: a ``LayoutMap`` (its ``on_missing`` applies), a mapping path -> ``Layout`` /
            ``TensorSpec``, a tree of the saved structure whose leaves are ``Layout``s,
            ``TensorSpec``s or distributed tensors (their layouts; never modified), or
            ``None`` (each tensor on its saved layout; plain arrays replicated on one device).
        driver: the driver name or object (default: the active driver).
        verify: check the CRC-32C of every inner chunk read whole (default). ``False`` trusts
            the files (sizes are still checked); it saves the checksum time, not bytes.

    Each process reads only the byte ranges its local devices need, each byte once, and checks
    the CRC-32C of every inner chunk it reads whole. Reads run on ``LAYOUTCORE_CHECKPOINT_THREADS``
    threads (default: the cores, at most 4); the driver packs each tensor on the calling thread.

    Returns:
        The saved tree structure with each leaf a distributed tensor of the driver.

    Raises:
        CheckpointError: a missing, incomplete or corrupt checkpoint (naming the file and tensor).
        LayoutMismatchError: a ``TensorSpec`` target of another shape or dtype (naming the path).
        UnsupportedLayoutError: the driver cannot express a target layout.
        ConfigurationError: ``LAYOUTCORE_CHECKPOINT_THREADS`` is not a positive integer.
    """
    from ..driver._registry import get_driver

    target_path = os.path.abspath(os.fspath(path))
    foreign = _foreign(target_path)
    if foreign is not None:
        return FOREIGN.load(foreign, target, driver=driver)
    drv = get_driver(driver)
    with _gc_paused():
        meta, plans, _ = _plan_all(target_path, target, driver=drv)
    values: dict[str, Any] = {}
    with _Readers(target_path, verify, checkpoint_threads()) as readers:
        advance = readers.enter(progress("loading", sum(tl.geometry.read_bytes for tl in plans)))
        for tl, components in readers.read(plans):
            values[tl.path] = pack_loaded(drv, tl.path, components, tl.layout, tl.saved.shape)
            advance(tl.geometry.read_bytes)
    return rebuild(meta["tree"], values)
