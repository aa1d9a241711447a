"""torch Distributed Checkpoint (DCP) directories, read without torch and without a process group.

A DCP directory holds ``.metadata`` (a pickle of ``torch.distributed.checkpoint.metadata.Metadata``)
and ``*.distcp`` files. With the default ``torch.save`` serialisation, each stored chunk is a
``torch.save`` zip archive at ``(offset, length)`` inside a ``.distcp`` file; zip entries are
stored uncompressed, so a chunk's elements are one C-order byte range of the ``.distcp``. With
the ``SAFETENSORS`` serialisation each file holds one safetensors blob of its rank's chunks
(which torch 2.13's own reader cannot read back: it records the blob's start as every item's
offset); the chunks are found by name in the blob.

Both pickles (``.metadata``, and each chunk's ``data.pkl``) are read by a restricted unpickler:
only the exact classes DCP and ``torch.save`` write are allowed, each rebuilt as a plain
stand-in (no torch import); any other global -- ``os.system``, ``builtins.eval``, a torch
function not on the list -- raises ``CheckpointError`` naming the file before anything runs.
"""

from __future__ import annotations

import io
import math
import pickle
import struct
import zipfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ..._dtypes import itemsize
from ..._errors import LayoutcoreError
from .._read_plan import StoredPiece
from ._dcp_safetensors import locate_safetensors_chunk
from ._errors import CheckpointError, checkpoint_error
from ._model import Box, ForeignCheckpoint, ForeignTensor, RefusedValue, nest

__all__ = ["is_dcp", "open_dcp"]

_META = "torch.distributed.checkpoint.metadata"
_FS = "torch.distributed.checkpoint.filesystem"
#: torch dtype attribute names -> canonical names (the torch names are the canonical ones).
_TORCH_DTYPES = {
    "bool": "bool",
    "int8": "int8",
    "int16": "int16",
    "int32": "int32",
    "int64": "int64",
    "uint8": "uint8",
    "uint16": "uint16",
    "uint32": "uint32",
    "uint64": "uint64",
    "float16": "float16",
    "half": "float16",
    "bfloat16": "bfloat16",
    "float32": "float32",
    "float": "float32",
    "float64": "float64",
    "double": "float64",
    "complex64": "complex64",
    "complex128": "complex128",
    "float8_e4m3fn": "float8_e4m3fn",
    "float8_e5m2": "float8_e5m2",
    "float8_e8m0fnu": "float8_e8m0fnu",
}
#: torch's legacy typed storage classes (``torch.FloatStorage``) -> canonical dtype.
_STORAGES = {
    "BoolStorage": "bool",
    "CharStorage": "int8",
    "ShortStorage": "int16",
    "IntStorage": "int32",
    "LongStorage": "int64",
    "ByteStorage": "uint8",
    "HalfStorage": "float16",
    "BFloat16Storage": "bfloat16",
    "FloatStorage": "float32",
    "DoubleStorage": "float64",
    "ComplexFloatStorage": "complex64",
    "ComplexDoubleStorage": "complex128",
}


class _Stub:
    """A plain stand-in for one allowed DCP class: attributes from the pickle's state, nothing run."""

    kind = ""

    def __setstate__(self, state: Any) -> None:
        if isinstance(state, tuple) and len(state) == 2 and (state[0] is None or isinstance(state[0], dict)):
            state = {**(state[0] or {}), **(state[1] or {})}  # (dict, slots) form
        if isinstance(state, dict):
            self.__dict__.update(state)
        elif self.kind == "TensorProperties" and isinstance(state, tuple) and state:
            self.__dict__["dtype"] = state[0]  # (dtype, layout, requires_grad, memory_format, pin_memory)
        else:
            raise pickle.UnpicklingError(f"unexpected state for {self.kind}: {type(state).__name__}")

    def __repr__(self) -> str:
        return f"{self.kind}({self.__dict__!r})"


def _stub(name: str) -> type[_Stub]:
    return type(name, (_Stub,), {"kind": name})


class _Dtype(str):
    """A torch dtype named in a pickle (``torch.float32``), kept as its canonical name."""


_META_CLASSES = {
    name: _stub(name)
    for name in (
        "Metadata",
        "TensorStorageMetadata",
        "TensorProperties",
        "ChunkStorageMetadata",
        "BytesStorageMetadata",
        "MetadataIndex",
        "StorageMeta",
    )
}
_FS_CLASSES = {name: _stub(name) for name in ("_StorageInfo", "_StoragePrefix")}


def _size(*args: Any) -> tuple[int, ...]:
    (values,) = args or ((),)
    return tuple(int(v) for v in values)


def _metadata_globals() -> dict[tuple[str, str], Any]:
    allowed: dict[tuple[str, str], Any] = {(_META, k): v for k, v in _META_CLASSES.items()}
    allowed.update({(_FS, k): v for k, v in _FS_CLASSES.items()})
    allowed[(_META, "_MEM_FORMAT_ENCODING")] = int
    allowed[("torch", "Size")] = _size
    allowed[("torch.serialization", "_get_layout")] = str
    allowed[("collections", "OrderedDict")] = dict
    for cls in ("PosixPath", "WindowsPath", "PurePosixPath", "PureWindowsPath", "Path"):
        allowed[("pathlib", cls)] = lambda *parts: "/".join(map(str, parts))
    allowed.update({("torch", k): _Dtype(v) for k, v in _TORCH_DTYPES.items()})
    return allowed


_METADATA_GLOBALS = _metadata_globals()


class _Restricted(pickle.Unpickler):
    def __init__(self, data: bytes, allowed: dict[tuple[str, str], Any], file: str) -> None:
        super().__init__(io.BytesIO(data))
        self._allowed = allowed
        self._file = file
        self.persistent: Callable[[Any], Any] | None = None

    def find_class(self, module: str, name: str) -> Any:
        try:
            return self._allowed[(module, name)]
        except KeyError:
            raise checkpoint_error(
                f"{self._file}: refused to unpickle {module}.{name}, which is not on the allow-list of torch DCP and torch.save classes "
                "(nothing was executed)",
                file=self._file,
            ) from None

    def persistent_load(self, pid: Any) -> Any:
        if self.persistent is None:
            raise pickle.UnpicklingError("persistent id in a pickle that has none")
        return self.persistent(pid)


def _unpickle(
    data: bytes, allowed: dict[tuple[str, str], Any], file: str, persistent: Callable[[Any], Any] | None = None
) -> Any:
    unpickler = _Restricted(data, allowed, file)
    unpickler.persistent = persistent
    try:
        return unpickler.load()
    except Exception as err:
        if type(err).__name__ == "CheckpointError":
            raise
        raise checkpoint_error(
            f"{file}: not a readable torch DCP pickle ({type(err).__name__}: {err})", file=file
        ) from None


def is_dcp(path: Path) -> bool:
    """Whether ``path`` is a directory holding a DCP ``.metadata`` file."""
    return path.is_dir() and (path / ".metadata").is_file()


class _Storage:
    __slots__ = ("dtype", "key", "numel")

    def __init__(self, dtype: str | None, key: str, numel: int) -> None:
        self.dtype, self.key, self.numel = dtype, key, numel


class _Tensor:
    __slots__ = ("dtype", "offset", "size", "storage", "stride")

    def __init__(
        self, storage: _Storage, offset: int, size: tuple[int, ...], stride: tuple[int, ...], dtype: str
    ) -> None:
        self.storage, self.offset, self.size, self.stride, self.dtype = storage, offset, size, stride, dtype


def _rebuild_v2(storage: _Storage, offset: int, size: Any, stride: Any, *rest: Any) -> _Tensor:
    if storage.dtype is None:
        raise pickle.UnpicklingError("_rebuild_tensor_v2 over an untyped storage")
    return _Tensor(storage, int(offset), _size(size), _size(stride), storage.dtype)


def _rebuild_v3(
    storage: _Storage, offset: int, size: Any, stride: Any, requires_grad: Any, hooks: Any, dtype: Any, *rest: Any
) -> _Tensor:
    if not isinstance(dtype, _Dtype):
        raise pickle.UnpicklingError(f"_rebuild_tensor_v3 with dtype {dtype!r}")
    return _Tensor(storage, int(offset), _size(size), _size(stride), str(dtype))


def _chunk_globals() -> dict[tuple[str, str], Any]:
    allowed: dict[tuple[str, str], Any] = {
        ("torch._utils", "_rebuild_tensor_v2"): _rebuild_v2,
        ("torch._utils", "_rebuild_tensor_v3"): _rebuild_v3,
        ("collections", "OrderedDict"): dict,
        ("torch.storage", "UntypedStorage"): ("untyped", None),
        ("torch", "UntypedStorage"): ("untyped", None),
    }
    allowed.update({("torch", k): ("typed", v) for k, v in _STORAGES.items()})
    allowed.update({("torch", k): _Dtype(v) for k, v in _TORCH_DTYPES.items()})
    return allowed


_CHUNK_GLOBALS = _chunk_globals()
# A non-tensor value DCP stored (``step``): plain Python data only.
_VALUE_GLOBALS: dict[tuple[str, str], Any] = {("collections", "OrderedDict"): dict}


class _Window(io.RawIOBase):
    """``length`` bytes of an open file from ``offset``, as a seekable read-only stream."""

    def __init__(self, f: io.BufferedReader, offset: int, length: int) -> None:
        self._f, self._offset, self._length, self._pos = f, offset, length, 0
        self.bytes_read = 0

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def tell(self) -> int:
        return self._pos

    def seek(self, pos: int, whence: int = 0) -> int:
        base = {0: 0, 1: self._pos, 2: self._length}[whence]
        self._pos = max(0, base + pos)
        return self._pos

    def readinto(self, b: Any) -> int:
        n = max(0, min(len(b), self._length - self._pos))
        self._f.seek(self._offset + self._pos)
        data = self._f.read(n)
        b[: len(data)] = data
        self._pos += len(data)
        self.bytes_read += len(data)
        return len(data)


def _is_c_contiguous(size: tuple[int, ...], stride: tuple[int, ...]) -> bool:
    expected = 1
    for n, s in zip(reversed(size), reversed(stride), strict=True):
        if n != 1 and s != expected:
            return False
        expected *= n
    return True


def _locate_chunk(
    f: io.BufferedReader, file: str, offset: int, length: int, what: str
) -> tuple[int, _Tensor | Any, int]:
    """Open one ``torch.save`` archive inside a ``.distcp``: (absolute data offset, tensor or value, bytes read)."""
    window = _Window(f, offset, length)
    try:
        archive = zipfile.ZipFile(io.BufferedReader(window, buffer_size=4096))
        infos = {i.filename.split("/", 1)[-1]: i for i in archive.infolist()}
        pkl = archive.read(infos["data.pkl"])
    except Exception as err:  # zipfile raises BadZipFile, NotImplementedError, zlib.error, struct.error, ...
        raise checkpoint_error(
            f"{file}: {what} at bytes [{offset}, {offset + length}) is not a torch.save archive ({err})", file=file
        ) from None
    storages: dict[str, _Storage] = {}

    def persistent(pid: Any) -> _Storage:
        if not (isinstance(pid, tuple) and len(pid) == 5 and pid[0] == "storage" and isinstance(pid[1], tuple)):
            raise pickle.UnpicklingError(f"unexpected persistent id {pid!r}")
        kind, dtype = pid[1]
        storage = _Storage(dtype if kind == "typed" else None, str(pid[2]), int(pid[4]))
        storages[storage.key] = storage
        return storage

    obj = _unpickle(pkl, _CHUNK_GLOBALS, file, persistent)
    if not isinstance(obj, _Tensor):
        if storages:
            raise checkpoint_error(
                f"{file}: {what} holds an object with tensor storage that is not one tensor", file=file
            )
        # A plain Python value: re-read with only plain data allowed (no tensor rebuilders).
        return -1, _unpickle(pkl, _VALUE_GLOBALS, file), window.bytes_read
    entry, item = _check_storage(obj, infos.get(f"data/{obj.storage.key}"), file, what)
    # The record's data starts after its local header: 30 fixed bytes, the name and the extra field.
    f.seek(offset + entry.header_offset)
    local = f.read(30)
    if len(local) < 30 or local[:4] != b"PK\x03\x04":
        raise checkpoint_error(f"{file}: {what} has a corrupt zip local header", file=file)
    name_len, extra_len = struct.unpack("<HH", local[26:30])
    data = offset + entry.header_offset + 30 + name_len + extra_len
    if data - offset + entry.file_size > length:
        raise checkpoint_error(f"{file}: {what}'s data runs past its region", file=file)
    return data + obj.offset * item, obj, window.bytes_read + 30


def _check_storage(obj: _Tensor, entry: zipfile.ZipInfo | None, file: str, what: str) -> tuple[zipfile.ZipInfo, int]:
    """Check tensor ``obj``'s storage record ``entry`` in its archive; returns it and the tensor's item size in bytes.

    Raises:
        CheckpointError: no uncompressed record, a storage of another dtype or size, or a tensor
            that is not C-contiguous within its storage.
    """
    storage = obj.storage
    if entry is None or entry.compress_type != zipfile.ZIP_STORED:
        raise checkpoint_error(f"{file}: {what} lacks an uncompressed data/{storage.key} record", file=file)
    item = itemsize(obj.dtype)
    storage_bytes = storage.numel * (1 if storage.dtype is None else itemsize(storage.dtype))
    if storage.dtype not in (None, obj.dtype) or entry.file_size != storage_bytes:
        raise checkpoint_error(
            f"{file}: {what} has a storage of {entry.file_size} bytes for {storage_bytes}", file=file
        )
    if not _is_c_contiguous(obj.size, obj.stride) or (obj.offset + math.prod(obj.size)) * item > storage_bytes:
        raise checkpoint_error(f"{file}: {what} is not a C-contiguous tensor within its storage", file=file)
    return entry, item


def _key_path(keys: Any, fqn: str) -> tuple[str, ...]:
    if isinstance(keys, (tuple, list)) and keys and all(isinstance(k, (str, int)) for k in keys):
        return tuple(str(k) for k in keys)
    return (fqn,)


#: ``fqn -> [(chunk offset, or None for a non-tensor value; its storage info)]``.
_ByFqn = dict[str, list[tuple[tuple[int, ...] | None, Any]]]


def _read_metadata(meta_file: Path) -> tuple[Any, bytes]:
    """Unpickle ``.metadata``; returns the ``Metadata`` stand-in and the file's raw bytes.

    Raises:
        CheckpointError: the file cannot be read, or does not hold a DCP ``Metadata`` record.
    """
    name = str(meta_file)
    try:
        raw = meta_file.read_bytes()
    except OSError as err:
        raise checkpoint_error(f"cannot read {name}: {err.strerror}", file=name) from None
    md = _unpickle(raw, _METADATA_GLOBALS, name)
    if not isinstance(md, _META_CLASSES["Metadata"]):
        raise checkpoint_error(f"{name} does not hold a DCP Metadata record", file=name)
    return md, raw


def _group_storage(storage: dict[Any, Any], name: str) -> _ByFqn:
    """Group the metadata's ``storage_data`` by fully qualified name.

    Raises:
        CheckpointError: a storage index whose offset is not a tuple.
    """
    by_fqn: _ByFqn = {}
    for index, info in storage.items():
        offset = getattr(index, "offset", None)
        if offset is not None and not isinstance(offset, tuple):
            raise checkpoint_error(f"{name}: malformed storage index {index!r}", file=name)
        by_fqn.setdefault(str(getattr(index, "fqn", "")), []).append((offset, info))
    return by_fqn


class _DcpReader:
    """The state of one ``open_dcp``: open ``.distcp`` handles, files seen, bytes read so far.

    ``name`` is the ``.metadata`` file's path, used in error messages; ``read`` counts bytes.
    """

    def __init__(self, path: Path, name: str, by_fqn: _ByFqn, files: set[str], read: int) -> None:
        self.path = path
        self.name = name
        self.by_fqn = by_fqn
        self.files = files
        self.read = read
        self.handles: dict[str, io.BufferedReader] = {}
        self.st_headers: dict[tuple[str, int], tuple[dict[str, Any], int]] = {}

    def close(self) -> None:
        """Close every handle opened so far."""
        for f in self.handles.values():
            f.close()

    def handle(self, rel: str) -> tuple[io.BufferedReader, str]:
        """The (cached) open handle of data file ``rel`` (relative to the directory), and its resolved path.

        Raises:
            CheckpointError: the file cannot be opened.
        """
        file = self.path / str(rel)
        key = str(file.resolve())
        if key not in self.handles:
            try:
                self.handles[key] = open(file, "rb")  # noqa: SIM115 - closed by close()
            except OSError as err:
                raise checkpoint_error(
                    f"{self.name} names {rel}, which cannot be opened: {err.strerror}", file=str(file)
                ) from None
            self.files.add(key)
        return self.handles[key], key

    def refuse_transforms(self, fqn: str) -> None:
        """Refuse ``fqn`` when any of its chunks is stored with a transform (compression, an extension)."""
        for _, info in self.by_fqn.get(fqn, []):
            if getattr(info, "transform_descriptors", None):
                raise checkpoint_error(
                    f"{self.name}: {fqn!r} is stored with transforms {info.transform_descriptors} (compression or "
                    "an extension), which layoutcore does not read; save without them",
                    file=self.name,
                )

    def read_value(self, fqn: str, tree_path: str) -> Any:
        """The plain-data value stored for ``fqn``, or a ``RefusedValue`` when it is not plain data.

        Raises:
            CheckpointError: no stored bytes for ``fqn``.
        """
        (_, info), *_ = self.by_fqn.get(fqn) or [(None, None)]
        if info is None:
            raise checkpoint_error(f"{self.name}: no stored bytes for value {fqn!r}", file=self.name)
        f, key = self.handle(info.relative_path)
        try:
            _, value, n = _locate_chunk(f, key, int(info.offset), int(info.length), f"value {fqn!r}")
        except CheckpointError as err:
            # a non-tensor value that is not plain data (a custom class): never unpickled;
            # the tensors stay inspectable, and loading the tree raises this error
            return RefusedValue(tree_path, str(err), key)
        self.read += n
        return value

    def read_tensor(self, fqn: str, tree_path: str, entry: Any) -> ForeignTensor:
        """Locate every stored chunk of tensor ``fqn`` (``entry``: its ``TensorStorageMetadata``).

        Raises:
            CheckpointError: a chunk the metadata lacks, one that disagrees with it, or chunks that
                do not tile the tensor.
        """
        shape = tuple(entry.size)
        dtype = str(entry.properties.dtype)
        chunk_boxes: dict[tuple[int, ...], Box] = {
            tuple(c.offsets): (tuple(c.offsets), tuple(c.sizes)) for c in entry.chunks
        }
        pieces: list[StoredPiece] = []
        for offset, info in self.by_fqn.get(fqn, []):
            box = chunk_boxes.get(tuple(offset or (0,) * len(shape)))
            if box is None:
                raise checkpoint_error(
                    f"{self.name}: {fqn!r} stores a chunk at {offset} that its metadata lacks", file=self.name
                )
            pieces.append(self._read_piece(fqn, info, box, dtype))
        _check_tiling(shape, [(p.start, p.shape) for p in pieces], fqn, self.name)
        return ForeignTensor(
            tree_path, fqn, shape, dtype, None, tuple((p.start, p.shape) for p in pieces), tuple(pieces)
        )

    def _read_piece(self, fqn: str, info: Any, box: Box, dtype: str) -> StoredPiece:
        """Locate one chunk (``box``, of ``dtype``) of ``fqn``, in either serialisation.

        Raises:
            CheckpointError: the stored chunk's dtype or size disagrees with the metadata.
        """
        f, key = self.handle(info.relative_path)
        f.seek(int(info.offset))
        if f.read(4) != b"PK\x03\x04":  # not a torch.save zip: DCP's SAFETENSORS serialisation
            start, n = locate_safetensors_chunk(f, key, int(info.offset), fqn, box, dtype, self.st_headers)
            self.read += n
            return StoredPiece(key, start, box[0], box[1])
        start, tensor, n = _locate_chunk(f, key, int(info.offset), int(info.length), f"chunk {fqn!r} at {box[0]}")
        self.read += n
        if not isinstance(tensor, _Tensor) or tensor.size != box[1] or tensor.dtype != dtype:
            raise checkpoint_error(
                f"{key}: chunk {fqn!r} at {box[0]} holds {getattr(tensor, 'dtype', '?')} "
                f"{getattr(tensor, 'size', '?')}, the metadata says {dtype} {box[1]}",
                file=key,
            )
        return StoredPiece(key, start, box[0], box[1])


def open_dcp(path: Path) -> ForeignCheckpoint:
    """Open a DCP directory saved with the default ``torch.save`` serialisation, or ``SAFETENSORS``.

    Tree paths are the state dict's nested keys joined by ``/`` (from DCP's planner data, where
    the saved dict was nested); non-tensor values (``step``) are read at open, as plain data.

    Raises:
        CheckpointError: a pickle with a class outside the allow-list, a missing ``.distcp``
            file, a chunk stored with a transform (compression),
            a chunk that is not one C-contiguous tensor, or chunks that do not tile their tensor.
    """
    meta_file = path / ".metadata"
    name = str(meta_file)
    md, raw = _read_metadata(meta_file)
    entries = getattr(md, "state_dict_metadata", None)
    storage = getattr(md, "storage_data", None)
    planner = getattr(md, "planner_data", None) or {}
    if not isinstance(entries, dict) or not isinstance(storage, dict):
        raise checkpoint_error(f"{name}: Metadata without state_dict_metadata/storage_data", file=name)
    reader = _DcpReader(path, name, _group_storage(storage, name), {str(meta_file.resolve())}, len(raw))
    tensors: dict[str, ForeignTensor] = {}
    values: dict[str, Any] = {}
    paths: list[tuple[str, ...]] = []
    try:
        for fqn, entry in entries.items():
            keys = _key_path(planner.get(fqn) if isinstance(planner, dict) else None, fqn)
            paths.append(keys)
            tree_path = "/".join(keys)
            reader.refuse_transforms(fqn)
            if entry.kind == "BytesStorageMetadata":
                values[tree_path] = reader.read_value(fqn, tree_path)
            elif entry.kind == "TensorStorageMetadata":
                tensors[tree_path] = reader.read_tensor(fqn, tree_path, entry)
            else:
                raise checkpoint_error(f"{name}: {fqn!r} has unknown storage metadata {entry.kind}", file=name)
    except (AttributeError, TypeError, KeyError, ValueError, IndexError, OverflowError) as err:
        # the stand-ins hold whatever the pickle gave them: a missing field or a wrong type is a
        # malformed checkpoint (layoutcore's own errors pass through untouched)
        if isinstance(err, LayoutcoreError):
            raise
        raise checkpoint_error(f"{name}: malformed DCP metadata ({type(err).__name__}: {err})", file=name) from None
    finally:
        reader.close()
    try:
        tree = nest(paths)
    except ValueError as err:
        raise checkpoint_error(f"{name}: inconsistent state dict keys ({err})", file=name) from None
    version = str(getattr(md, "version", "") or "")
    return ForeignCheckpoint(
        "torch-dcp",
        str(path),
        tensors,
        values,
        tree,
        tuple(sorted(reader.files)),
        reader.read,
        version,
        metadata_files=(str(meta_file.resolve()),),
    )


def _check_tiling(shape: tuple[int, ...], boxes: list[Box], fqn: str, file: str) -> None:
    """Refuse chunks that leave a hole or overlap (the global-shape tail-hole bug shows as a hole)."""
    total = sum(math.prod(s) for _, s in boxes)
    inside = all(all(o >= 0 and o + s <= d for o, s, d in zip(off, sz, shape, strict=True)) for off, sz in boxes)
    if not inside or total != math.prod(shape) or not _disjoint(boxes):
        raise checkpoint_error(
            f"{file}: the stored chunks of {fqn!r} do not tile its shape {shape} exactly "
            f"({total} elements stored in {len(boxes)} chunks)",
            file=file,
        )


def _disjoint(boxes: list[Box]) -> bool:
    ordered = sorted(b for b in boxes if math.prod(b[1]))
    for i, (oa, sa) in enumerate(ordered):
        for ob, sb in ordered[i + 1 :]:
            if ob and oa and ob[0] >= oa[0] + sa[0]:
                break
            if all(b < a + s and a < b + t for a, s, b, t in zip(oa, sa, ob, sb, strict=True)):
                return False
    return True
