"""Hugging Face safetensors: read one file or an indexed set of shards; write sharded exports.

The format: an 8-byte little-endian header length ``n``, ``n`` bytes of JSON
(``{name: {"dtype", "shape", "data_offsets": [begin, end]}, "__metadata__": {...}}``), then the
data; offsets count from the end of the header. Every tensor is one C-order piece, so a row
range of it is one byte range of the file. The header is parsed here (no ``safetensors``
import) and every offset checked against the file's size before anything is read.
"""

from __future__ import annotations

import json
import math
import os
import struct
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from ..._dtypes import itemsize
from .._read_plan import StoredPiece
from ._errors import checkpoint_error
from ._model import ForeignCheckpoint, ForeignTensor, RefusedValue

__all__ = ["INDEX_NAME", "SAFETENSORS_DTYPES", "is_safetensors", "open_safetensors", "safetensors_dtype"]

INDEX_NAME = "model.safetensors.index.json"
#: safetensors dtype code -> canonical name; the codes layoutcore cannot hold are refused by name.
SAFETENSORS_DTYPES: dict[str, str] = {
    "BOOL": "bool",
    "I8": "int8",
    "I16": "int16",
    "I32": "int32",
    "I64": "int64",
    "U8": "uint8",
    "U16": "uint16",
    "U32": "uint32",
    "U64": "uint64",
    "F16": "float16",
    "BF16": "bfloat16",
    "F32": "float32",
    "F64": "float64",
    "C64": "complex64",
    "C128": "complex128",
    "F8_E4M3": "float8_e4m3fn",
    "F8_E5M2": "float8_e5m2",
    "F8_E8M0": "float8_e8m0fnu",
}
_CODES = {name: code for code, name in SAFETENSORS_DTYPES.items()}
#: Bits per element of the safetensors dtypes layoutcore cannot hold (sub-byte MX element types).
#: A tensor of one, or of a code unknown here, is listed and refused by itself, not the whole file.
UNHELD_BITS: dict[str, int] = {"F4": 4, "F6_E2M3": 6, "F6_E3M2": 6}
#: The safetensors crate refuses headers above 100 MB; so do we, before allocating them.
_MAX_HEADER = 100_000_000


def safetensors_dtype(name: str) -> str:
    """The safetensors dtype code of a canonical dtype name (``"bfloat16"`` -> ``"BF16"``)."""
    return _CODES[name]


def is_safetensors(path: Path) -> bool:
    """Whether ``path`` is a ``.safetensors`` file, an index file, or a directory holding either."""
    if path.is_file():
        return path.name.endswith(".safetensors") or path.name.endswith(".safetensors.index.json")
    if path.is_dir():
        return any(_index_files(path)) or any(path.glob("*.safetensors"))
    return False


def _index_files(directory: Path) -> Iterator[Path]:
    return (p for p in sorted(directory.glob("*.safetensors.index.json")) if p.is_file())


def read_header(file: Path) -> tuple[dict[str, Any], int, int]:
    """The parsed JSON header of ``file``, the byte where its data begins, and the file's size.

    Raises:
        CheckpointError: the file is shorter than its header claims, the header is not JSON
            object text, or it is larger than 100 MB.
    """
    name = str(file)
    try:
        size = file.stat().st_size
        with open(file, "rb") as f:
            head = f.read(8)
            if len(head) < 8:
                raise checkpoint_error(
                    f"safetensors file {name} is {size} bytes: too short for its header length", file=name
                )
            (n,) = struct.unpack("<Q", head)
            if n > _MAX_HEADER or 8 + n > size:
                raise checkpoint_error(
                    f"safetensors file {name} claims a {n}-byte header but is {size} bytes (truncated or not safetensors)",
                    file=name,
                )
            text = f.read(n)
    except OSError as err:
        raise checkpoint_error(f"cannot read {name}: {err.strerror}", file=name) from None
    try:
        header = json.loads(text)
    except (UnicodeDecodeError, json.JSONDecodeError) as err:
        raise checkpoint_error(f"safetensors file {name}: header is not valid JSON ({err})", file=name) from None
    if not isinstance(header, dict):
        raise checkpoint_error(f"safetensors file {name}: header is not a JSON object", file=name)
    return header, 8 + n, size


def _refused(name: str, key: str, code: Any, shape: tuple[int, ...], span: tuple[int, int], size: int) -> RefusedValue:
    """The :class:`RefusedValue` of a tensor whose dtype layoutcore cannot hold (its bytes checked to lie in the file).

    Raises:
        CheckpointError: the dtype is no text, or the tensor's bytes lie outside the file.
    """
    begin, end = span
    bits = UNHELD_BITS.get(code) if isinstance(code, str) else None
    need = None if bits is None else (math.prod(shape) * bits + 7) // 8  # whole bytes: sub-byte elements pack
    if not isinstance(code, str) or not 0 <= begin <= end or end > size or (need is not None and end - begin != need):
        raise checkpoint_error(
            f"safetensors file {name}: tensor {key!r} of dtype {code!r} claims bytes [{begin}, {end}) of the "
            f"{size} data bytes{'' if need is None else f' but needs {need}'}",
            file=name,
        )
    return RefusedValue(
        key,
        f"safetensors dtype {code} (shape {list(shape)}) is no dtype layoutcore holds "
        f"({', '.join(SAFETENSORS_DTYPES)}); load the other tensors without it",
        name,
        code,
    )


def _tensors_of(file: Path, only: set[str] | None) -> tuple[list[ForeignTensor | RefusedValue], int]:
    header, data_start, size = read_header(file)
    name = str(file)
    out: list[ForeignTensor | RefusedValue] = []
    for key, entry in header.items():
        if key == "__metadata__" or (only is not None and key not in only):
            continue
        try:
            code, shape, (begin, end) = entry["dtype"], tuple(entry["shape"]), entry["data_offsets"]
            if not all(type(s) is int and s >= 0 for s in shape) or type(begin) is not int or type(end) is not int:
                raise TypeError
        except (KeyError, TypeError, ValueError):
            raise checkpoint_error(
                f"safetensors file {name}: malformed header entry for {key!r}: {entry!r}", file=name
            ) from None
        dtype = SAFETENSORS_DTYPES.get(code) if isinstance(code, str) else None
        if dtype is None:  # refused for this tensor alone (docs/design.md#dtypes)
            out.append(_refused(name, key, code, shape, (begin, end), size - data_start))
            continue
        nbytes = math.prod(shape) * itemsize(dtype)
        if not 0 <= begin <= end or end - begin != nbytes or data_start + end > size:
            raise checkpoint_error(
                f"safetensors file {name}: tensor {key!r} claims bytes [{begin}, {end}) of the data, but needs "
                f"{nbytes} bytes and the file holds {size - data_start} data bytes",
                file=name,
            )
        piece = StoredPiece(str(file.resolve()), data_start + begin, (0,) * len(shape), shape)
        out.append(ForeignTensor(key, key, shape, dtype, None, (((0,) * len(shape), shape),), (piece,)))
    return out, data_start


def open_safetensors(path: Path) -> ForeignCheckpoint:
    """Open a ``.safetensors`` file, an index, or a directory holding one of them.

    A directory with an index reads the index (the first ``*.safetensors.index.json``, sorted);
    one without reads its single ``*.safetensors`` file (more than one without an index is
    ambiguous and refused). Tree paths are the tensor names, unchanged (``a.b.weight``).

    Raises:
        CheckpointError: a malformed header or index, a shard the index names that is missing,
            or a tensor the index places in a file whose header lacks it.
    """
    index: Path | None = None
    if path.is_dir():
        indexes = list(_index_files(path))
        if indexes:
            index = indexes[0]
        else:
            singles = sorted(path.glob("*.safetensors"))
            if len(singles) != 1:
                raise checkpoint_error(
                    f"{path} holds {len(singles)} .safetensors files and no {INDEX_NAME}: which to read is ambiguous",
                    file=str(path),
                )
            path = singles[0]
    elif path.name.endswith(".index.json"):
        index = path
    files: tuple[str, ...]
    if index is None:
        tensors, meta = _tensors_of(path, None)
        files = (str(path.resolve()),)
        root = str(path)
    else:
        weight_map, meta = _read_index(index)
        by_file: dict[str, set[str]] = {}
        for key, shard in weight_map.items():
            by_file.setdefault(shard, set()).add(key)
        tensors = []
        for shard, keys in by_file.items():
            file = index.parent / shard
            if not file.is_file():
                raise checkpoint_error(f"{index} names shard {shard!r}, which is missing", file=str(file))
            found, data_start = _tensors_of(file, keys)
            meta += data_start
            missing = keys - {t.key if isinstance(t, ForeignTensor) else t.path for t in found}
            if missing:
                raise checkpoint_error(
                    f"{index} places {sorted(missing)[:5]} in {shard}, whose header lacks them", file=str(file)
                )
            tensors.extend(found)
        files = (*tuple(str((index.parent / s).resolve()) for s in by_file), str(index.resolve()))
        root = str(index.parent)
    by_path = {t.path: t for t in tensors if isinstance(t, ForeignTensor)}
    refused = {t.path: t for t in tensors if isinstance(t, RefusedValue)}
    return ForeignCheckpoint(
        "safetensors",
        root,
        by_path,
        values=dict(refused),
        tree={t.path: t.path for t in tensors},
        files=files,
        metadata_bytes=meta,
        metadata_files=files,  # each shard's header says where its tensors lie
    )


def _read_index(index: Path) -> tuple[dict[str, str], int]:
    name = str(index)
    try:
        text = index.read_bytes()
        data = json.loads(text)
        weight_map = data["weight_map"]
        if not isinstance(weight_map, dict) or not all(
            isinstance(k, str) and isinstance(v, str) and "/" not in v and v not in ("", ".", "..")
            for k, v in weight_map.items()
        ):
            raise TypeError
    except OSError as err:
        raise checkpoint_error(f"cannot read {name}: {err.strerror}", file=name) from None
    except (UnicodeDecodeError, json.JSONDecodeError, KeyError, TypeError):
        raise checkpoint_error(
            f"{name} is not a safetensors index (a JSON object whose 'weight_map' maps names to shard file names)",
            file=name,
        ) from None
    return weight_map, len(text)


def header_bytes(
    entries: list[tuple[str, str, tuple[int, ...]]], metadata: dict[str, str] | None = None
) -> tuple[bytes, list[int]]:
    """The header (length prefix included) for tensors ``(name, dtype, shape)`` laid out in order.

    Returns the header bytes and each tensor's data start, relative to the end of the header.
    The JSON is padded with spaces to a multiple of 8 bytes, as the safetensors writer does.
    """
    header: dict[str, Any] = {}
    if metadata:
        header["__metadata__"] = metadata
    starts: list[int] = []
    pos = 0
    for name, dtype, shape in entries:
        n = math.prod(shape) * itemsize(dtype)
        header[name] = {"dtype": safetensors_dtype(dtype), "shape": list(shape), "data_offsets": [pos, pos + n]}
        starts.append(pos)
        pos += n
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)
    return struct.pack("<Q", len(text)) + text, starts


def fsync_dir(directory: str) -> None:
    """Flush a directory entry (after a rename) where the platform allows it."""
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)
