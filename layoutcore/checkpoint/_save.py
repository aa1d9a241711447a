"""``checkpoint.save``: a tree of distributed tensors to a layoutcore (zarr v3) checkpoint, committed atomically."""

from __future__ import annotations

import functools
import math
import os
import shutil
import uuid
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
from ._engine import engine_for
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
from ._threads import WriteQueue
from ._tree import walk

__all__ = ["PLAIN_MESH", "save"]

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
    return _Leaf(spec, False, drv.unpack(value), positions, drv)


def _plain_leaf(path: str, value: Any) -> _Leaf:
    if isinstance(value, (str, bytes)):
        raise CheckpointError(
            f"checkpoint.save: leaf {path!r} is {type(value).__name__}; a checkpoint holds arrays, tensors and numbers.",
            path=path,
            tensor=path,
        )
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


def _host_array(value: Any) -> np.ndarray[Any, Any]:
    """A component or plain value as a NumPy array of its own dtype (bfloat16 and float8 included)."""
    if isinstance(value, np.ndarray):
        return value
    module = type(value).__module__.split(".")[0]
    if module == "torch":
        import torch  # the value is a torch tensor: torch is imported already

        t = value.detach()
        if t.device.type != "cpu":
            t = t.cpu()
        name = dtype_name(t.dtype)
        if name in ("bfloat16", "float8_e4m3fn", "float8_e5m2"):
            signed = torch.int16 if name == "bfloat16" else torch.int8
            return np.asarray(t.view(signed).numpy()).view(numpy_dtype(name))
        return np.asarray(t.numpy())
    if hasattr(value, "numpy") and module.startswith("tensorflow"):
        return np.asarray(value.numpy())
    return np.asarray(value)


def _host_component(leaf: _Leaf, component: Any) -> np.ndarray[Any, Any]:
    array = _host_array(component)
    if leaf.driver is not None and dtype_name(array.dtype) != leaf.spec.dtype:
        array = np.asarray(leaf.driver.component_to_numpy(component))
    if dtype_name(array.dtype) != leaf.spec.dtype:
        array = array.astype(numpy_dtype(leaf.spec.dtype))  # exact: e.g. torch's bfloat16 read as float32
    return array


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

    Every distinct block is written once, by the process holding its lowest-numbered replica,
    from that device's local component; nothing is gathered. In a multi-process run (JAX
    ``jax.distributed``, a torch process group) every process calls ``save``; the commit
    follows a barrier on the framework's engine, and every process returns after it. The checkpoint appears at ``path``
    by one ``rename`` after everything is written, so a reader (or a save killed halfway)
    never leaves a partial checkpoint at ``path``. Shard files are written on
    ``LAYOUTCORE_CHECKPOINT_THREADS`` threads; blocks are fetched to host on the calling thread.

    Raises:
        CheckpointError: ``path`` exists and ``overwrite`` is false, or a leaf is not an array.
        ConfigurationError: ``LAYOUTCORE_CHECKPOINT_THREADS`` is not a positive integer.
    """
    target = os.path.abspath(os.fspath(path))
    if os.path.exists(target) and not overwrite:
        raise CheckpointError(
            f"Checkpoint {target} already exists; pass overwrite=True to replace it.", path=target, file=None
        )
    leaves: list[tuple[str, Any]] = []
    structure = walk(tree, leaves)
    prepared = [(p, _leaf(p, v)) for p, v in leaves]
    engine = engine_for(next((lf.driver.name for _, lf in prepared if lf.driver is not None), None))
    parent = os.path.dirname(target)
    os.makedirs(parent, exist_ok=True)
    if engine.size == 1:
        tmp = os.path.join(parent, f".{os.path.basename(target)}.tmp-{uuid.uuid4().hex[:12]}")
        os.makedirs(tmp)
    else:
        # every process writes into one directory, named alike by all; rank 0 clears a stale one
        tmp = os.path.join(parent, f".{os.path.basename(target)}.tmp-{engine.name}-{engine.size}")
        if engine.rank == 0:
            shutil.rmtree(tmp, ignore_errors=True)
            os.makedirs(tmp)
        engine.barrier(f"layoutcore.checkpoint.save:start:{target}", path=target)
    writers = WriteQueue(checkpoint_threads(), "layoutcore-save")
    try:
        entries, files, total = {}, [], 0
        groups: set[str] = set()
        advance = writers.enter(progress("saving", sum(lf.spec.nbytes for _, lf in prepared)))
        for leaf_path, leaf in prepared:
            spec = leaf.spec
            storage = _storage(leaf_path, spec, read_layouts)
            owners = _owners(spec)
            local = {p: i for i, p in enumerate(leaf.positions)}
            for p, index in owners.items():
                # plain values are the same on every process: the first process writes them
                if p in local and (not leaf.plain or engine.rank == 0):
                    block = _host_component(leaf, leaf.components[local[p]])  # on this thread: drivers
                    writers.submit(block.nbytes, _write_block, writers, tmp, storage, index, block)
                files.append(storage.shard_file(index))
            advance(spec.nbytes)
            total += spec.nbytes
            parts = storage.node.split("/")
            for i in range(1, len(parts)):
                groups.add("/".join(parts[:i]))
            entries[leaf_path] = {
                "chunk": list(storage.chunk),
                "node": storage.node,
                "plain": leaf.plain,
                "shard": list(storage.shard),
                "spec": spec.to_dict(),
                "storage_dtype": storage_dtype(spec.dtype),
            }
            if engine.rank == 0:
                node_dir = os.path.join(tmp, storage.node)
                os.makedirs(node_dir, exist_ok=True)
                attrs = {"layoutcore": {"dtype": spec.dtype, "path": leaf_path, "spec": spec.to_dict()}}
                write_json(os.path.join(node_dir, "zarr.json"), storage.zarr_metadata(attrs))
            files.append(storage.node + "/zarr.json")
        files += [g + "/zarr.json" for g in sorted(groups)] + ["zarr.json", META]
        meta = {
            "format": FORMAT_NAME,
            "format_version": FORMAT_VERSION,
            "tensors": entries,
            "total_bytes": total,
            "tree": structure,
            "files": sorted(files),
        }
        writers.wait()
        if sync:
            _fsync_tree(tmp, mine_only=engine.size > 1)
        engine.barrier(f"layoutcore.checkpoint.save:written:{target}", path=target)  # every shard is on disk
        if engine.rank == 0:
            for g in sorted(groups):
                write_json(
                    os.path.join(tmp, g, "zarr.json"), {"zarr_format": 3, "node_type": "group", "attributes": {}}
                )
            root_attrs = {"layoutcore": {"format": FORMAT_NAME, "format_version": FORMAT_VERSION}}
            write_json(
                os.path.join(tmp, "zarr.json"), {"zarr_format": 3, "node_type": "group", "attributes": root_attrs}
            )
            if sync:
                _fsync_tree(tmp)
            # the marker: a directory without layoutcore.json is not a checkpoint
            write_json(os.path.join(tmp, META), meta)
            if sync:
                _fsync_path(os.path.join(tmp, META))
                _fsync_path(tmp)
            _commit(tmp, target)
            if sync:
                _fsync_path(parent)
        engine.barrier(f"layoutcore.checkpoint.save:committed:{target}", path=target)
    except BaseException:
        writers.close()  # no writer may still be writing into tmp while it is removed
        if engine.size == 1:
            shutil.rmtree(tmp, ignore_errors=True)
        raise
    finally:
        writers.close()
    return _info_from_meta(target, meta)


def _write_block(writers: WriteQueue, tmp: str, storage: ArrayStorage, index: tuple[int, ...], block: Any) -> None:
    """One shard file, on a writer thread, gathering chunks into that thread's reusable buffer."""
    write_shard(tmp, storage, index, block, writers.state()[1])


def _fsync_path(p: str) -> None:
    fd = os.open(p, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _fsync_tree(root: str, mine_only: bool = False) -> None:
    del mine_only  # fsync is cheap on files already flushed; every process may sync the shared tree
    for dirpath, _, filenames in os.walk(root):
        for f in filenames:
            _fsync_path(os.path.join(dirpath, f))
        _fsync_path(dirpath)


def _exchange(a: str, b: str) -> bool:
    """Atomically swap two paths (Linux ``renameat2(RENAME_EXCHANGE)``); False where unavailable."""
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        fn = libc.renameat2
    except (OSError, AttributeError):
        return False
    at_fdcwd, rename_exchange = -100, 2
    res = fn(at_fdcwd, os.fsencode(a), at_fdcwd, os.fsencode(b), rename_exchange)
    return bool(res == 0)


def _commit(tmp: str, target: str) -> None:
    try:
        os.rename(tmp, target)  # fails if target exists and is not an empty directory
        return
    except OSError:
        if not os.path.isdir(target):
            raise
    if _exchange(tmp, target):
        shutil.rmtree(tmp, ignore_errors=True)  # now the old checkpoint
        return
    old = f"{tmp}.old"
    os.rename(target, old)  # without an atomic exchange: a short window with no checkpoint
    os.rename(tmp, target)
    shutil.rmtree(old, ignore_errors=True)
