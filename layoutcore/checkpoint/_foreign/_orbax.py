"""Orbax checkpoints (``PyTreeCheckpointer`` / ``StandardCheckpointer``), read through TensorStore only.

An Orbax directory holds ``_METADATA`` (the tree: each leaf's key path and value type),
``_sharding`` (per ``jax.Array`` leaf, its ``NamedSharding`` as JSON, keyed by the base64 of
the dot-joined key path) and the arrays, zarr v2 or v3, in an OCDBT database or one directory
per array. Orbax chunks each array by one device's block and compresses the chunks (zstd), so
no byte range of a file is an element range: reads go through TensorStore's slicing, and
``read_plan`` counts the uncompressed bytes of every chunk a box touches.

Rule for ``_sharding``: a ``jax.Array`` leaf needs its entry (the saved layout); a checkpoint
without the file, or without the leaf's entry, raises ``CheckpointError`` naming the file,
never silently loads replicated. NumPy and scalar leaves have no sharding and are saved whole.
"""

from __future__ import annotations

import base64
import json
import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from ..._dtypes import dtype_name, itemsize, numpy_dtype
from ..._layout import Layout
from ..._mesh import Mesh
from ._errors import checkpoint_error
from ._model import Box, ForeignCheckpoint, ForeignTensor, nest

__all__ = ["is_orbax", "layout_from_orbax_sharding", "open_orbax", "orbax_sharding_entry"]


def is_orbax(path: Path) -> bool:
    """Whether ``path`` is an Orbax PyTree checkpoint directory (it holds ``_METADATA``), or a
    ``CheckpointManager`` step directory holding exactly one such item (``<step>/default``)."""
    return _item_dir(path) is not None


def _item_dir(path: Path) -> Path | None:
    if not path.is_dir():
        return None
    if (path / "_METADATA").is_file():
        return path
    if (path / "_CHECKPOINT_METADATA").is_file():
        items = [p for p in sorted(path.iterdir()) if p.is_dir() and (p / "_METADATA").is_file()]
        if len(items) == 1:
            return items[0]
    return None


def layout_from_orbax_sharding(entry: str | dict[str, Any], *, file: str = "_sharding") -> Layout:
    """The :class:`Layout` an Orbax ``_sharding`` entry describes.

    A ``NamedSharding`` entry gives its partition spec over its mesh; the mesh is abstract
    where the stored device ids are ``0..n-1`` in row-major order, else it keeps the ids as
    ``CPU:<id>`` devices (Orbax records ids, not platforms). ``SingleDeviceSharding`` gives a
    one-device replicated layout of rank 0 (the caller re-ranks it).

    Raises:
        CheckpointError: an entry that is not JSON, another sharding type, or a partition spec
            naming an axis outside its mesh (naming ``file``).
    """
    try:
        data = json.loads(entry) if isinstance(entry, str) else dict(entry)
        kind = data["sharding_type"]
    except (json.JSONDecodeError, KeyError, TypeError, ValueError):
        raise checkpoint_error(
            f"{file}: sharding entry is not Orbax sharding JSON: {str(entry)[:200]}", file=file
        ) from None
    if kind == "SingleDeviceSharding":
        return Layout((), Mesh((1,), ("d",)))
    if kind != "NamedSharding":
        raise checkpoint_error(
            f"{file}: sharding type {kind!r} has no layoutcore Layout (only NamedSharding)", file=file
        )
    try:
        shape = tuple(int(s) for s in data["shape"])
        names = tuple(str(n) for n in data["axis_names"])
        spec = [tuple(e) if isinstance(e, list) else e for e in data["partition_spec"]]
        ids = _device_ids(data.get("device_mesh"))
        devices = None if ids is None or ids == list(range(len(ids))) else [f"CPU:{i}" for i in ids]
        return Layout(spec, Mesh(shape, names, devices))
    except Exception as err:  # a LayoutError from the values, or malformed fields
        raise checkpoint_error(
            f"{file}: cannot express Orbax sharding {data!r} as a Layout ({err})", file=file
        ) from None


def _device_ids(device_mesh: Any) -> list[int] | None:
    if not device_mesh:
        return None
    flat: list[int] = []

    def walk(node: Any) -> None:
        if isinstance(node, dict):
            flat.append(int(node["id"]))
        else:
            for child in node:
                walk(child)

    walk(device_mesh["mesh"])
    return flat


def orbax_sharding_entry(layout: Layout, *, device_ids: list[int] | None = None) -> dict[str, Any]:
    """The Orbax ``_sharding`` entry (``NamedShardingMetadata`` JSON) of ``layout``.

    Device ids are ``device_ids``, else the trailing numbers of the mesh's device names, else
    ``0..n-1``. Orbax's JSON has no uneven rule: Orbax and JAX use the same ceil chunks, so an
    uneven layout is written as is (JAX refuses non-divisible shapes when it restores).

    Raises:
        LayoutError: ``layout`` has no mesh.
    """
    mesh = layout._require_mesh("orbax_sharding_entry")
    if device_ids is None:
        if mesh.devices is None:
            device_ids = list(range(mesh.size))
        else:
            device_ids = [
                int("".join(c for c in d.rsplit(":", 1)[-1] if c.isdigit()) or i) for i, d in enumerate(mesh.devices)
            ]
    grid = np.array([{"id": i} for i in device_ids], dtype=object).reshape(mesh.shape).tolist()
    return {
        "sharding_type": "NamedSharding",
        "shape": list(mesh.shape),
        "axis_names": list(mesh.axis_names),
        "partition_spec": [list(a) if isinstance(a, tuple) else a for a in layout.axes],
        "device_mesh": {"mesh": grid},
    }


#: Bytes of decoded chunks TensorStore keeps per checkpoint (its ``cache_pool``). Without it, a chunk
#: that several blocks meet (a layout cutting across the saved one) was read and decoded again
#: whenever one block's read had finished and released it before the next block's read asked for it:
#: measured, 70 of 200 column loads of two row chunks read each chunk twice. Orbax leaves this pool
#: at 0; 64 MiB bounds the memory it may add.
CHUNK_CACHE_BYTES = 64 * 2**20
#: The TensorStore context of every array of one checkpoint, as Orbax's restore uses
#: (``orbax.checkpoint``'s ``get_ts_context``): one shared cache of OCDBT B-tree nodes (each
#: array's lookups then read the tree's nodes once, not once per array) and up to 128 concurrent file reads.
TS_CONTEXT = {
    "file_io_concurrency": {"limit": 128},
    "cache_pool#ocdbt": {"total_bytes_limit": 100_000_000},
    "cache_pool": {"total_bytes_limit": CHUNK_CACHE_BYTES},
}


class OrbaxCheckpoint(ForeignCheckpoint):
    """An Orbax checkpoint: tensors read through TensorStore handles (kept from opening) in one shared context."""

    __slots__ = ("_chunks", "_context", "_handles", "_specs")

    def __init__(
        self,
        *args: Any,
        specs: dict[str, dict[str, Any]],
        chunks: dict[str, tuple[int, ...]],
        context: Any,
        handles: dict[str, Any],
        **kwargs: Any,
    ) -> None:
        super().__init__(*args, **kwargs)
        self._specs = specs
        self._chunks = chunks
        self._context = context
        self._handles = dict(handles)

    def _store(self, tensor: ForeignTensor) -> Any:
        import tensorstore as ts  # lazily: import layoutcore.checkpoint imports no I/O library

        handle = self._handles.get(tensor.path)
        if handle is None:  # closed before (a ForeignCheckpoint outlives its Source): open it again
            try:
                handle = ts.open(self._specs[tensor.path], open=True, read=True, context=self._context).result()
            except Exception as err:  # TensorStore's ValueError/RuntimeError: corrupt or missing data
                raise checkpoint_error(
                    f"{self.path}: cannot open array {tensor.key!r} ({err})", file=self.path
                ) from None
            self._handles[tensor.path] = handle
        return handle

    def plan(self, tensor: ForeignTensor, boxes: Sequence[Box]) -> list[tuple[str, np.ndarray[Any, Any]]]:
        """Per stored chunk a box touches, ``(<dir>/<key>/<chunk index>, [[0, uncompressed bytes]])``.

        TensorStore decodes whole chunks, so every chunk a box meets is read whole; chunks are
        zstd-compressed, so the bytes on disk are fewer (the figure is an upper estimate). A chunk
        several boxes meet is listed once per box, though a load reads and decodes it once
        (:meth:`read_into`).
        """
        chunk = self._chunks[tensor.path]
        item = itemsize(tensor.dtype)
        out: list[tuple[str, np.ndarray[Any, Any]]] = []
        for offsets, sizes in boxes:
            if not math.prod(sizes) and tensor.shape:
                continue
            if not tensor.shape:
                out.append((f"{self.path}/{tensor.key}/0", np.array([[0, item]], dtype=np.int64)))
                continue
            ranges = [range(o // c, (o + s - 1) // c + 1) for o, s, c in zip(offsets, sizes, chunk, strict=True)]
            for index in np.ndindex(*[len(r) for r in ranges]):
                idx = tuple(r[i] for r, i in zip(ranges, index, strict=True))
                elems = math.prod(min(c, d - i * c) for i, c, d in zip(idx, chunk, tensor.shape, strict=True))
                name = f"{self.path}/{tensor.key}/{'.'.join(map(str, idx))}"
                out.append((name, np.array([[0, elems * item]], dtype=np.int64)))
        return out

    def read(self, tensor: ForeignTensor, boxes: Sequence[Box], fds: dict[str, int]) -> list[np.ndarray[Any, Any]]:
        out = [np.empty(sizes, dtype=numpy_dtype(tensor.dtype)) for _, sizes in boxes]
        self.read_into(tensor, boxes, out)
        return out

    def read_into(self, tensor: ForeignTensor, boxes: Sequence[Box], out: Sequence[np.ndarray[Any, Any]]) -> None:
        """Fill ``out[i]`` (of ``boxes[i]``'s sizes, any rank, 0-d included) through TensorStore.

        As Orbax's restore reads a shard: TensorStore copies each box's elements from the decoded
        chunks straight into ``out[i]`` (``ts.array(out[i]).write(store[box])``, no intermediate
        array), and every box's read is issued before any is awaited, so TensorStore reads and
        decodes the chunks concurrently on its own threads, and a chunk several boxes meet (a
        layout cutting across the saved one) once: the context's chunk cache
        (:data:`CHUNK_CACHE_BYTES`) keeps it for the boxes whose reads come later. Returns once every read has finished, failed
        or not: nothing writes into ``out`` afterwards.

        Raises:
            CheckpointError: a chunk TensorStore cannot read (corrupt or missing), naming the array.
        """
        import tensorstore as ts

        store = self._store(tensor)
        futures = []
        for (offsets, sizes), dst in zip(boxes, out, strict=True):
            if dst.shape != tuple(sizes):  # never a broadcast: TensorStore would fill a larger block silently
                raise ValueError(f"block of shape {dst.shape} for box {sizes} of {tensor.key!r}")
            index = tuple(slice(o, o + s) for o, s in zip(offsets, sizes, strict=True))
            futures.append(ts.array(dst, copy=False, write=True).write(store[index] if index else store))
        failed = None
        for future in futures:
            try:
                future.result()
            except Exception as err:  # TensorStore's own errors: corrupt or missing chunks
                failed = failed or err
        if failed is not None:
            raise checkpoint_error(
                f"{self.path}: reading {tensor.key!r} failed ({failed})", file=self.path, tensor=tensor.path
            )

    def close(self) -> None:
        self._handles.clear()


def open_orbax(path: Path) -> ForeignCheckpoint:
    """Open an Orbax PyTree checkpoint directory (no jax import).

    Raises:
        CheckpointError: unreadable ``_METADATA``, a ``jax.Array`` leaf without its ``_sharding``
            entry (or no ``_sharding`` file), or an array TensorStore cannot open.
    """
    path = _item_dir(path) or path  # a CheckpointManager step: its one item
    meta_file = path / "_METADATA"
    try:
        raw = meta_file.read_bytes()
        meta = json.loads(raw)
        tree_meta = meta["tree_metadata"]
    except OSError as err:
        raise checkpoint_error(f"cannot read {meta_file}: {err.strerror}", file=str(meta_file)) from None
    except (ValueError, KeyError, TypeError):
        raise checkpoint_error(f"{meta_file} is not Orbax tree metadata", file=str(meta_file)) from None
    read = len(raw)
    use_ocdbt = bool(meta.get("use_ocdbt", True))
    driver = "zarr3" if meta.get("use_zarr3") else "zarr"
    sharding_file = path / "_sharding"
    shardings, n = _read_shardings(sharding_file)
    read += n
    import tensorstore as ts

    context = ts.Context(TS_CONTEXT)
    base = path.resolve().as_uri()
    tensors: dict[str, ForeignTensor] = {}
    specs: dict[str, dict[str, Any]] = {}
    chunks: dict[str, tuple[int, ...]] = {}
    handles: dict[str, Any] = {}
    paths: list[tuple[str, ...]] = []
    values: dict[str, Any] = {}
    for entry in tree_meta.values() if isinstance(tree_meta, dict) else ():
        try:
            keys = tuple(str(k["key"]) for k in entry["key_metadata"])
            kind = str(entry.get("value_metadata", {}).get("value_type", ""))
        except (KeyError, TypeError, AttributeError):
            raise checkpoint_error(
                f"{meta_file}: malformed tree entry {str(entry)[:200]}", file=str(meta_file)
            ) from None
        paths.append(keys)
        tree_path, key = "/".join(keys), ".".join(keys)
        if kind == "None":  # Orbax's record of a None leaf or an empty node (optax's EmptyState): no array stored
            values[tree_path] = None
            continue
        kv = (
            {"driver": "ocdbt", "base": base, "path": key + "/"}
            if use_ocdbt
            else {"driver": "file", "path": str(path / key) + "/"}
        )
        spec = {"driver": driver, "kvstore": kv}
        try:
            store = ts.open(spec, open=True, read=True, context=context).result()
        except Exception as err:
            raise checkpoint_error(
                f"{path}: cannot open the stored array {key!r} ({err})", file=str(path / key)
            ) from None
        shape: tuple[int, ...] = tuple(int(s) for s in store.shape)
        dtype = dtype_name(store.dtype.numpy_dtype)
        read_chunk: Any = store.chunk_layout.read_chunk.shape
        chunk = tuple(int(c) for c in (read_chunk or shape))
        layout = _jax_array_layout(shardings, sharding_file, key, shape) if kind == "jax.Array" else None
        if kind == "scalar":
            values[tree_path] = np.asarray(store.read().result()).item()
            continue
        boxes = _chunk_boxes(shape, chunk)
        tensors[tree_path] = ForeignTensor(tree_path, key, shape, dtype, layout, boxes)
        specs[tree_path] = spec
        chunks[tree_path] = chunk
        handles[tree_path] = store
    try:
        tree = nest(paths)
    except ValueError as err:
        raise checkpoint_error(f"{meta_file}: inconsistent tree ({err})", file=str(meta_file)) from None
    files = tuple(sorted(str(p.resolve()) for p in path.rglob("*") if p.is_file()))
    version = driver + ("+ocdbt" if use_ocdbt else "")
    return OrbaxCheckpoint(
        "orbax",
        str(path),
        tensors,
        values,
        tree,
        files,
        read,
        version,
        metadata_files=tuple(str(f.resolve()) for f in (meta_file, sharding_file) if f.is_file()),
        specs=specs,
        chunks=chunks,
        context=context,
        handles=handles,
    )


def _read_shardings(sharding_file: Path) -> tuple[dict[str, str] | None, int]:
    """The ``_sharding`` file as {dotted key: sharding JSON} (None where there is no such file), and bytes read.

    Raises:
        CheckpointError: the file is not Orbax sharding JSON.
    """
    if not sharding_file.is_file():
        return None, 0
    try:
        text = sharding_file.read_bytes()
        return {base64.b64decode(k).decode(): v for k, v in json.loads(text).items()}, len(text)
    except (ValueError, TypeError, AttributeError):
        raise checkpoint_error(f"{sharding_file} is not Orbax sharding JSON", file=str(sharding_file)) from None


def _jax_array_layout(
    shardings: dict[str, str] | None, sharding_file: Path, key: str, shape: tuple[int, ...]
) -> Layout:
    """The layout of the ``jax.Array`` leaf ``key`` (of ``shape``), from its ``_sharding`` entry.

    A short partition spec (JAX's) leaves the trailing axes replicated.

    Raises:
        CheckpointError: no ``_sharding`` file, no entry for ``key``, or a spec longer than the shape.
    """
    if shardings is None:
        raise checkpoint_error(
            f"{sharding_file} is missing: the layout of jax.Array {key!r} is unknown (refusing to guess replicated)",
            file=str(sharding_file),
        )
    if key not in shardings:
        raise checkpoint_error(f"{sharding_file} has no entry for jax.Array {key!r}", file=str(sharding_file))
    layout = layout_from_orbax_sharding(shardings[key], file=str(sharding_file))
    assert layout is not None
    if layout.rank > len(shape):
        raise checkpoint_error(
            f"{sharding_file}: {key!r} has a {layout.rank}-entry partition spec for shape {shape}",
            file=str(sharding_file),
        )
    if layout.rank < len(shape):  # JAX's short PartitionSpec: trailing axes replicated
        layout = Layout(tuple(layout.axes) + (None,) * (len(shape) - layout.rank), layout.mesh)
    return layout


def _chunk_boxes(shape: tuple[int, ...], chunk: tuple[int, ...]) -> tuple[Box, ...]:
    if not shape:
        return (((), ()),)
    grid = [range(0, d, c) if d else range(1) for d, c in zip(shape, chunk, strict=True)]
    out = []
    for starts in np.ndindex(*[len(g) for g in grid]):
        off = tuple(g[i] for g, i in zip(grid, starts, strict=True))
        out.append((off, tuple(min(c, d - o) for o, c, d in zip(off, chunk, shape, strict=True))))
    return tuple(out)
