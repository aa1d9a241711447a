"""``checkpoint.save``: a tree of distributed tensors to a layoutcore (zarr v3) checkpoint, committed atomically."""

from __future__ import annotations

import functools
import math
import os
import shutil
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from .. import geometry
from .._config import checkpoint_threads
from .._dtypes import dtype_name, numpy_dtype
from .._errors import CheckpointError, LayoutError
from .._layout import Layout
from .._layout_map import LayoutMap
from .._mesh import Mesh
from .._tensor_spec import TensorSpec, device_bounds
from ..driver._registry import framework_driver
from ._commit import commit, fsync_path, make_tmp, remove_stale
from ._engine import Engine, engine_for
from ._format import (
    FORMAT_NAME,
    FORMAT_VERSION,
    ArrayStorage,
    choose_chunks,
    encode_key,
    storage_dtype,
    write_json,
    write_shard,
)
from ._meta import META, CheckpointInfo, _info_from_meta
from ._progress import progress
from ._save_stream import StagedBlock, reads_rows, save_staged, stages
from ._threads import WriteQueue
from ._tree import walk

__all__ = ["PLAIN_MESH", "BlockWrite", "SavePlan", "plan_save", "save"]

#: The mesh a plain (undistributed) array is recorded on: one abstract device, replicated.
PLAIN_MESH = Mesh((1,), ("replica",))


# -- leaves ------------------------------------------------------------------------------------
@dataclass(slots=True)
class _Leaf:
    spec: TensorSpec
    plain: bool
    components: list[Any]  # local components, row-major over `positions`
    positions: list[int]
    driver: Any
    tensor: Any = None  # the distributed tensor (a staged save's staging buffers are made for it)


def _leaf(path: str, value: Any) -> _Leaf:
    from ..driver._frontend import HoldsValue
    from ..driver._registry import driver_for

    if isinstance(value, HoldsValue):
        value = value.value
    if isinstance(value, (np.ndarray, np.generic, bool, int, float, complex)) or not hasattr(value, "shape"):
        return _plain_leaf(path, value)
    drv = driver_for(value)
    if not drv.is_distributed(value):
        return _plain_leaf(path, value)
    layout = drv.fetch_layout(value)
    shape = drv.shape_of(value)
    spec = TensorSpec(shape, dtype_name(value.dtype), layout)
    devices = drv.bind_mesh(spec.mesh)
    positions = list(drv.local_positions(spec.mesh, devices))
    return _Leaf(spec, False, drv.unpack(value), positions, drv, value)


def _plain_leaf(path: str, value: Any) -> _Leaf:
    if isinstance(value, (str, bytes)):
        raise CheckpointError(
            f"checkpoint.save: leaf {path!r} is {type(value).__name__}; a checkpoint holds arrays, tensors and numbers.",
            path=path,
            tensor=path,
        )
    staged = _device_plain_leaf(value)
    if staged is not None:
        return staged
    array = _host_array(value)
    try:
        name = dtype_name(array.dtype)
    except LayoutError as exc:
        raise CheckpointError(
            f"checkpoint.save: leaf {path!r} has dtype {array.dtype}, which a checkpoint cannot hold: {exc}",
            path=path,
            tensor=path,
        ) from exc
    spec = TensorSpec(array.shape, name, Layout.replicated(PLAIN_MESH, array.ndim))
    return _Leaf(spec, True, [array], [0], None)


def _device_plain_leaf(value: Any) -> _Leaf | None:
    """A plain framework tensor in device memory that its driver copies to host by rows
    (``native_staged_save``), kept as it is so the save streams it; else ``None``."""
    if isinstance(value, (np.ndarray, np.generic, bool, int, float, complex, list, tuple)):
        return None
    drv = framework_driver(value)
    if drv is None or not reads_rows(drv) or not drv.native_staged_save(value):
        return None
    try:
        name = dtype_name(value.dtype)
    except LayoutError:
        return None  # the host copy's path names the dtype in its error
    shape = tuple(int(n) for n in value.shape)
    return _Leaf(TensorSpec(shape, name, Layout.replicated(PLAIN_MESH, len(shape))), True, [value], [0], drv, value)


def _host_array(value: Any) -> np.ndarray[Any, Any]:
    """A plain value in host memory, bit for bit: a NumPy array as it is, a framework's tensor through the
    host-copy hook of its framework's driver (:meth:`~layoutcore.driver.DriverHooks.component_to_host`)."""
    if isinstance(value, np.ndarray):
        return value
    if not isinstance(value, (np.generic, bool, int, float, complex, list, tuple)):
        drv = framework_driver(value)
        if drv is not None:
            return np.asarray(drv.component_to_host(value))
    return np.asarray(value)


def _host_component(target: str, path: str, leaf: _Leaf, component: Any) -> np.ndarray[Any, Any]:
    """A local component in host memory, bit for bit, through its driver's host-copy hook (no cast).

    Raises:
        CheckpointError: the driver's copy has another dtype than the tensor (a driver's defect).
    """
    array = component if leaf.driver is None else np.asarray(leaf.driver.component_to_host(component))
    want = numpy_dtype(leaf.spec.dtype)
    if array.dtype == want:
        return array
    if array.dtype.newbyteorder("=") == want:
        return array.astype(want)  # another byte order: the file holds little-endian bytes
    raise CheckpointError(
        f"checkpoint.save({target!r}): the {leaf.driver.name if leaf.driver else 'numpy'} driver copied a "
        f"component of {path!r} ({leaf.spec.dtype}) to host as {array.dtype}; nothing was committed.",
        path=target,
        tensor=path,
    )


# -- read layouts ------------------------------------------------------------------------------
def _read_layouts_for(read_layouts: Any, path: str, rank: int) -> list[Layout]:
    if read_layouts is None:
        return []
    sources = read_layouts if isinstance(read_layouts, (list, tuple)) else [read_layouts]
    out = []
    for source in sources:
        if isinstance(source, LayoutMap):
            layout = source[path]
            if layout is not None and layout.mesh is None and source.mesh is not None:
                layout = layout.with_mesh(source.mesh)
        elif isinstance(source, Mapping):
            layout = source.get(path)
        else:
            raise LayoutError(
                "read_layouts is a LayoutMap, a mapping path -> Layout, or a list of them. "
                f"Received: {type(source).__name__}",
                value=source,
            )
        if layout is None:
            continue
        if not isinstance(layout, Layout) or layout.mesh is None:
            raise LayoutError(
                f"read_layouts entry for {path!r} must be a Layout with a mesh. Received: {layout!r}", value=layout
            )
        if layout.rank == rank:
            out.append(layout)
    return out


def _block_shape(shape: Sequence[int], layout: Layout) -> tuple[int, ...]:
    return tuple(max(1, geometry.chunk_size(n, layout.num_shards(d))) for d, n in enumerate(shape))


def _storage(path: str, spec: TensorSpec, read_layouts: Any) -> ArrayStorage:
    shard = list(_block_shape(spec.shape, spec.layout))
    blocks = [_block_shape(spec.shape, r) for r in _read_layouts_for(read_layouts, path, len(spec.shape))]
    for d, n in enumerate(spec.shape):
        splits = [b[d] for b in blocks if 0 < b[d] < n]
        if spec.layout.num_shards(d) == 1 and splits:
            # an axis the save does not split is one shard of any size >= d: round it up to a multiple
            # of the read blocks' gcd, so uneven read blocks (500 in 8: 63, ..., 59) align with chunks
            g = functools.reduce(math.gcd, splits)
            shard[d] = (n + g - 1) // g * g
    chunk = choose_chunks(spec.shape, tuple(shard), blocks, spec.itemsize)
    node = "/".join(encode_key(c) for c in path.split("/")) if path else "%00root"
    return ArrayStorage(node, spec.shape, spec.dtype, tuple(shard), chunk)


def _owners(spec: TensorSpec) -> dict[int, tuple[int, ...]]:
    """For each distinct non-empty block: its lowest holder's position -> the shard index."""
    starts, stops = device_bounds(spec.shape, spec.mesh.shape, spec.layout.dim_axes)
    if spec.shape and not np.all(stops > starts, axis=1).any():
        return {}
    _, first = np.unique(starts, axis=0, return_index=True) if spec.shape else (None, np.array([0]))
    shard = _block_shape(spec.shape, spec.layout)
    out = {}
    for p in sorted(first.tolist()):
        if spec.shape and not np.all(stops[p] > starts[p]):
            continue
        out[p] = tuple(int(a) // s for a, s in zip(starts[p].tolist(), shard, strict=True))
    return out


# -- plan: which blocks this process writes, where, and the metadata (pure) ----------------------
@dataclass(frozen=True, slots=True)
class BlockWrite:
    """One shard file this process writes: leaf ``leaf``'s local component ``component`` as shard ``index``."""

    leaf: int
    component: int
    index: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class SavePlan:
    """What a save writes, computed before any byte is written and alike on every process but for ``writes``.

    Attributes:
        storages: per leaf, its stored array (node, shard and chunk shapes).
        writes: the blocks this process writes (each distinct block by one process only).
        groups: the zarr group nodes above the arrays.
        meta: the content of ``layoutcore.json``.
    """

    storages: tuple[ArrayStorage, ...]
    writes: tuple[BlockWrite, ...]
    groups: tuple[str, ...]
    meta: dict[str, Any]


def plan_save(leaves: Sequence[tuple[str, _Leaf]], structure: Any, read_layouts: Any, rank: int) -> SavePlan:
    """The :class:`SavePlan` of ``leaves`` for process ``rank`` (no I/O, no framework call).

    Every distinct block is written by the process holding its lowest-numbered replica; a plain
    value (the same on every process) by process 0.

    Raises:
        LayoutError: a bad ``read_layouts`` entry.
    """
    storages: list[ArrayStorage] = []
    writes: list[BlockWrite] = []
    files: list[str] = []
    entries: dict[str, Any] = {}
    groups: set[str] = set()
    for i, (path, leaf) in enumerate(leaves):
        storage = _storage(path, leaf.spec, read_layouts)
        storages.append(storage)
        local = {p: k for k, p in enumerate(leaf.positions)}
        for p, index in _owners(leaf.spec).items():
            if p in local and (not leaf.plain or rank == 0):
                writes.append(BlockWrite(i, local[p], index))
            files.append(storage.shard_file(index))
        parts = storage.node.split("/")
        groups.update("/".join(parts[:k]) for k in range(1, len(parts)))
        files.append(storage.node + "/zarr.json")
        entries[path] = {
            "chunk": list(storage.chunk),
            "node": storage.node,
            "plain": leaf.plain,
            "shard": list(storage.shard),
            "spec": leaf.spec.to_dict(),
            "storage_dtype": storage_dtype(leaf.spec.dtype),
        }
    files += [g + "/zarr.json" for g in sorted(groups)] + ["zarr.json", META]
    meta = {
        "format": FORMAT_NAME,
        "format_version": FORMAT_VERSION,
        "tensors": entries,
        "total_bytes": sum(leaf.spec.nbytes for _, leaf in leaves),
        "tree": structure,
        "files": sorted(files),
    }
    return SavePlan(tuple(storages), tuple(writes), tuple(sorted(groups)), meta)


# -- save --------------------------------------------------------------------------------------
def save(
    path: str | os.PathLike[str],
    tree: Any,
    *,
    read_layouts: Any = None,
    overwrite: bool = False,
    sync: bool = False,
) -> CheckpointInfo:
    """Save a tree of distributed tensors (any driver), Variables, arrays and numbers.

    Args:
        path: the checkpoint directory to create.
        tree: dicts, lists, tuples and namedtuples of leaves; paths are keys joined by ``/``.
        read_layouts: the layouts it will be loaded under (a ``LayoutMap``, a mapping
            path -> ``Layout``, or a list of them); the inner chunks refine each of them, so
            such a load reads whole chunks only.
        overwrite: replace an existing checkpoint atomically (readers see the old or the new).
        sync: ``fsync`` every file before the commit (durable across power loss; slower).

    Three steps. **Plan** (:func:`plan_save`): which blocks this process writes, where, and the
    metadata. **Write**: every distinct block once, by the process holding its lowest-numbered
    replica, from that device's local component, copied to host by the driver's host-copy hook
    (on the calling thread) and written on ``LAYOUTCORE_CHECKPOINT_THREADS`` threads into a hidden
    sibling directory ``.NAME.tmp-*``; nothing is gathered. A block in device memory (torch CUDA)
    is instead streamed band by band through a small reused (pinned) staging ring, its copies
    overlapping the checksums and writes (``layoutcore/checkpoint/_save_stream.py``). **Commit**:
    in a multi-process run (the driver's process group: ``jax.distributed``, a torch process
    group, DTensor clients) every process calls ``save`` and the commit follows a barrier; process
    0 writes the metadata last and commits, and every process returns after a second barrier.

    The commit is atomic: a reader, or a save killed at any point, sees the complete old
    checkpoint or the complete new one. A new ``path`` appears by one ``rename``. An existing one
    is swapped with the new one by Linux ``renameat2(RENAME_EXCHANGE)``; where no atomic exchange
    exists (macOS, Windows, some file systems), the new checkpoint moves into ``path/.v-ID`` and
    ``path/layoutcore.json`` is atomically replaced by metadata pointing into it (a commit
    pointer), before the old files go. Temporary directories of killed saves of ``path`` are
    removed by the next save where their process is gone, or named in a ``RuntimeWarning``.

    Raises:
        CheckpointError: ``path`` exists and ``overwrite`` is false, a leaf is not an array, a
            driver failed to copy rows of a staged device block (naming the tensor and its shard
            file) or copied a block to host as another dtype, or a peer process died or hung at a
            barrier (nothing committed).
        OSError: a shard file could not be written (nothing committed).
        ConfigurationError: ``LAYOUTCORE_CHECKPOINT_THREADS`` is not a positive integer, or (several
            processes) ``LAYOUTCORE_CHECKPOINT_BARRIER_TIMEOUT`` is not a positive number.
    """
    target = os.path.abspath(os.fspath(path))
    if os.path.exists(target) and not overwrite:
        raise CheckpointError(
            f"Checkpoint {target} already exists; pass overwrite=True to replace it.", path=target, file=None
        )
    found: list[tuple[str, Any]] = []
    structure = walk(tree, found)
    leaves = [(p, _leaf(p, v)) for p, v in found]
    engine = engine_for(next((lf.driver for _, lf in leaves if lf.driver is not None and not lf.plain), None))
    plan = plan_save(leaves, structure, read_layouts, engine.rank)
    tmp = _start(target, engine)
    writers = WriteQueue(checkpoint_threads(), "layoutcore-save")
    try:
        _write(plan, leaves, tmp, engine.rank, writers, target)
        meta = _commit_step(plan, tmp, target, engine, sync)
    except BaseException:
        writers.close()  # no writer may still be writing into tmp while it is removed
        if engine.size == 1:
            shutil.rmtree(tmp, ignore_errors=True)
        raise
    finally:
        writers.close()
    return _info_from_meta(target, meta)


def _start(target: str, engine: Engine) -> str:
    """Create the temporary directory this save writes into (shared by all processes), after removing
    those of killed saves."""
    os.makedirs(os.path.dirname(target), exist_ok=True)
    if engine.size == 1:
        tmp = make_tmp(target)
        remove_stale(target)
        os.makedirs(tmp)
        return tmp
    # every process writes into one directory, named alike by all; process 0 clears a stale one
    tmp = make_tmp(target, f"{engine.name}-{engine.size}")
    if engine.rank == 0:
        remove_stale(target, keep=tmp)
        shutil.rmtree(tmp, ignore_errors=True)
        os.makedirs(tmp)
    engine.barrier(f"layoutcore.checkpoint.save:start:{target}", path=target)
    return tmp


# -- write -------------------------------------------------------------------------------------
def _write(
    plan: SavePlan, leaves: Sequence[tuple[str, _Leaf]], tmp: str, rank: int, writers: WriteQueue, target: str
) -> None:
    """Write this process's blocks (host copies on this thread, files on the writer threads) and, on
    process 0, each array's ``zarr.json``; returns once every file is written.

    A block in device memory the driver copies by rows (:func:`._save_stream.stages`) is streamed
    through the staging ring after the others were handed to the writers; the others are copied to
    host whole (``component_to_host``: their own memory on the CPU)."""
    by_leaf: dict[int, list[BlockWrite]] = {}
    for w in plan.writes:
        by_leaf.setdefault(w.leaf, []).append(w)
    advance = writers.enter(progress("saving", plan.meta["total_bytes"]))
    staged: list[StagedBlock] = []
    for i, (path, leaf) in enumerate(leaves):
        storage = plan.storages[i]
        for w in by_leaf.get(i, ()):
            component = leaf.components[w.component]
            if leaf.driver is not None and stages(leaf.driver, component, storage, w.index):  # on this thread: drivers
                staged.append(StagedBlock(path, leaf.driver, leaf.tensor, component, storage, w.index))
                continue
            block = _host_component(target, path, leaf, component)
            writers.submit(block.nbytes, _write_block, writers, tmp, storage, w.index, block)
        if rank == 0:
            node_dir = os.path.join(tmp, storage.node)
            os.makedirs(node_dir, exist_ok=True)
            attrs = {"layoutcore": {"dtype": leaf.spec.dtype, "path": path, "spec": leaf.spec.to_dict()}}
            write_json(os.path.join(node_dir, "zarr.json"), storage.zarr_metadata(attrs))
        advance(leaf.spec.nbytes)
    save_staged(staged, tmp, writers.pool, target)
    writers.wait()


def _write_block(writers: WriteQueue, tmp: str, storage: ArrayStorage, index: tuple[int, ...], block: Any) -> None:
    """One shard file, on a writer thread, gathering chunks into that thread's reusable buffer."""
    write_shard(tmp, storage, index, block, writers.state()[1])


# -- commit ------------------------------------------------------------------------------------
def _commit_step(plan: SavePlan, tmp: str, target: str, engine: Engine, sync: bool) -> dict[str, Any]:
    """After every process has written: process 0 writes the groups, the root and the metadata (the
    marker: a directory without ``layoutcore.json`` is no checkpoint) and commits; returns the metadata."""
    if sync:
        _fsync_tree(tmp)
    engine.barrier(f"layoutcore.checkpoint.save:written:{target}", path=target)  # every shard is on disk
    meta = plan.meta
    if engine.rank == 0:
        for g in plan.groups:
            write_json(os.path.join(tmp, g, "zarr.json"), {"zarr_format": 3, "node_type": "group", "attributes": {}})
        root_attrs = {"layoutcore": {"format": FORMAT_NAME, "format_version": FORMAT_VERSION}}
        write_json(os.path.join(tmp, "zarr.json"), {"zarr_format": 3, "node_type": "group", "attributes": root_attrs})
        if sync:
            _fsync_tree(tmp)
        write_json(os.path.join(tmp, META), meta)
        if sync:
            fsync_path(os.path.join(tmp, META))
            fsync_path(tmp)
        meta = commit(tmp, target, sync=sync)
        if sync:
            fsync_path(os.path.dirname(target))
    engine.barrier(f"layoutcore.checkpoint.save:committed:{target}", path=target)
    return meta


def _fsync_tree(root: str) -> None:
    for dirpath, _, filenames in os.walk(root):
        for f in filenames:
            fsync_path(os.path.join(dirpath, f))
        fsync_path(dirpath)
