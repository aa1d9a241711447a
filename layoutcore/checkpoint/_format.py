"""layoutcore's checkpoint format: zarr v3 arrays with the ``sharding_indexed`` codec.

A checkpoint is a directory::

    PATH/
      zarr.json                 zarr v3 root group (attributes: {"layoutcore": {"format_version": 1}})
      layoutcore.json           the tree and one entry per tensor (TensorSpec, storage); written last
      <tensor path>/zarr.json   one zarr v3 array per tensor (groups for the path's parents)
      <tensor path>/c/i/j/...   one shard file per saved block (chunk key encoding "default", "/")

Each array's regular chunk grid is the save layout's block shape ``ceil(d / n)`` per axis,
which is exactly layoutcore's chunk rule: block ``i`` covers ``[i*c, min((i+1)*c, d))`` and
trailing empty blocks have no shard. Uneven layouts are therefore stored as they are.

A shard file is, byte for byte, what zarr v3's ``sharding_indexed`` codec with
``codecs=[bytes(little), crc32c]``, ``index_codecs=[bytes(little), crc32c]`` and
``index_location="end"`` describes: the inner chunks in C order of the inner grid, each
followed by its 4-byte CRC-32C; an inner chunk lying wholly outside the array is not stored
(index entry ``(2**64-1, 2**64-1)``, zarr's "missing"); an edge chunk is padded with zero bytes to
the full chunk shape (whatever the dtype: float8_e8m0fnu's 0 is NaN); then the index (``(offset, nbytes)`` uint64 pairs, C order) and its CRC.
Rank-0 tensors are arrays without sharding (``codecs=[bytes, crc32c]``, one chunk file ``c``).

bfloat16 and float8 are stored as the unsigned integer of the same width (zarr-python 3.1
cannot open them, and TensorStore aborts the process on zarr's raw-bits ``r16``); the true
dtype is in ``layoutcore.json`` and in the array's ``attributes["layoutcore"]``.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from .. import geometry
from .._crc import crc32c
from .._dtypes import int_view_dtype, itemsize
from ._read_plan import StoredPiece, StoredTensor
from ._slabs import CRC_BYTES

__all__ = [
    "FORMAT_NAME",
    "FORMAT_VERSION",
    "MIN_CHUNK_BYTES",
    "ArrayStorage",
    "choose_chunks",
    "encode_key",
    "storage_dtype",
    "write_shard",
]

FORMAT_NAME = "layoutcore.checkpoint"
FORMAT_VERSION = 1
#: Inner chunks smaller than this are grown (along trailing axes) so tiny refinements do not
#: make millions of chunks. layoutcore's own reader still reads only the needed bytes inside a
#: chunk; only whole-chunk readers (TensorStore, zarr-python) then read more. One page: a smaller
#: chunk would cost a syscall per less-than-a-page run, and tiny chunks rarely matter in bytes.
MIN_CHUNK_BYTES = 1 << 12
MISSING = 2**64 - 1
_INDEX_ENTRY = 16

#: Dtypes zarr v3 readers cannot take, stored as the same-width unsigned integer.
_BITS_ONLY = frozenset({"bfloat16", "float8_e4m3fn", "float8_e5m2", "float8_e8m0fnu"})


def storage_dtype(dtype: str) -> str:
    """The zarr ``data_type`` a tensor of canonical ``dtype`` is stored as."""
    return str(int_view_dtype(dtype)) if dtype in _BITS_ONLY else dtype


def _fill_value(data_type: str) -> Any:
    if data_type == "bool":
        return False
    if data_type.startswith("complex"):
        return [0.0, 0.0]
    if data_type.startswith("float"):
        return 0.0
    return 0


def _smallest_factor(n: int) -> int:
    f = 2
    while f * f <= n:
        if n % f == 0:
            return f
        f += 1
    return n


def choose_chunks(
    shape: Sequence[int], shard: Sequence[int], read_blocks: Sequence[Sequence[int]], item: int
) -> tuple[int, ...]:
    """The inner chunk shape: the common refinement of the shard and every declared read layout.

    Args:
        shape: the global shape.
        shard: the shard (save block) shape, ``max(1, ceil(d / n))`` per axis.
        read_blocks: per declared read layout, its block size ``ceil(d / n)`` per axis.
        item: bytes per element.

    Per axis the chunk is ``gcd(shard, every read block)`` (so every block boundary of every
    declared layout is a chunk boundary), then grown along trailing axes, by the smallest factor
    that keeps it dividing the shard, until a chunk holds at least :data:`MIN_CHUNK_BYTES`.
    """
    chunk = list(shard)
    for blocks in read_blocks:
        for d, (b, n) in enumerate(zip(blocks, shape, strict=True)):
            if 0 < b < n:  # a split axis; an unsplit one has boundaries 0 and d only
                chunk[d] = math.gcd(chunk[d], b)
    rank = len(chunk)
    d = rank - 1
    while d >= 0 and math.prod(chunk) * item < MIN_CHUNK_BYTES:
        if chunk[d] >= shard[d]:
            d -= 1
            continue
        chunk[d] *= _smallest_factor(shard[d] // chunk[d])
    return tuple(chunk)


def encode_key(component: str) -> str:
    """A tree key as a zarr node name: percent-encoded outside ``[A-Za-z0-9._-]``, never ``.``,
    ``..`` or a ``__`` prefix (reserved by zarr)."""
    out = []
    for ch in component:
        if ch.isascii() and (ch.isalnum() or ch in "._-"):
            out.append(ch)
        else:
            out.append("".join(f"%{b:02X}" for b in ch.encode("utf-8")))
    text = "".join(out)
    if text in ("", ".", "..") or text.startswith("__"):
        text = "%" + "".join(f"{b:02X}" for b in text[:1].encode()) + text[1:] if text else "%00"
    return text


@dataclass(frozen=True, slots=True)
class ArrayStorage:
    """How one tensor is stored: zarr node, shard and inner chunk shapes, storage dtype."""

    node: str  # the zarr node path relative to the checkpoint root, "/"-separated
    shape: tuple[int, ...]
    dtype: str  # canonical dtype
    shard: tuple[int, ...]
    chunk: tuple[int, ...]

    @property
    def item(self) -> int:
        return itemsize(self.dtype)

    @property
    def chunks_per_shard(self) -> tuple[int, ...]:
        return tuple(s // c for s, c in zip(self.shard, self.chunk, strict=True))

    @property
    def shard_grid(self) -> tuple[int, ...]:
        return tuple(geometry.chunk_size(n, s) for n, s in zip(self.shape, self.shard, strict=True))

    def shard_file(self, index: Sequence[int]) -> str:
        if not self.shape:
            return f"{self.node}/c"
        return f"{self.node}/c/" + "/".join(str(i) for i in index)

    def shard_start(self, index: Sequence[int]) -> tuple[int, ...]:
        return tuple(i * s for i, s in zip(index, self.shard, strict=True))

    def present_chunks(self, index: Sequence[int]) -> list[tuple[tuple[int, ...], bool]]:
        """Per inner chunk of shard ``index`` (C order): its start, and whether it is stored."""
        start = self.shard_start(index)
        out = []
        for local in np.ndindex(*self.chunks_per_shard):
            g = tuple(s + i * c for s, i, c in zip(start, local, self.chunk, strict=True))
            out.append((g, all(x < n for x, n in zip(g, self.shape, strict=True))))
        return out

    def shard_nbytes(self, index: Sequence[int]) -> int:
        """The exact size of shard ``index``'s file."""
        if not self.shape:
            return self.item + CRC_BYTES
        chunk_bytes = math.prod(self.chunk) * self.item + CRC_BYTES
        stored = sum(1 for _, present in self.present_chunks(index) if present)
        n = math.prod(self.chunks_per_shard)
        return stored * chunk_bytes + n * _INDEX_ENTRY + CRC_BYTES

    def pieces(self, index: Sequence[int]) -> list[StoredPiece]:
        """The stored pieces (one per present inner chunk) of shard ``index``."""
        file = self.shard_file(index)
        if not self.shape:
            return [StoredPiece(file, 0, (), (), self.item)]
        chunk_bytes = math.prod(self.chunk) * self.item
        out, offset = [], 0
        for g, present in self.present_chunks(index):
            if present:
                out.append(StoredPiece(file, offset, g, self.chunk, offset + chunk_bytes))
                offset += chunk_bytes + CRC_BYTES
        return out

    def stored_tensor(self, path: str) -> StoredTensor:
        """Every piece of every shard (shards with no stored chunk excluded)."""
        pieces: list[StoredPiece] = []
        for index in np.ndindex(*self.shard_grid) if self.shape else [()]:
            pieces.extend(self.pieces(index))
        return StoredTensor(path, self.shape, self.dtype, tuple(pieces))

    def zarr_metadata(self, attributes: dict[str, Any]) -> dict[str, Any]:
        data_type = storage_dtype(self.dtype)
        inner: list[dict[str, Any]] = [{"name": "bytes", "configuration": {"endian": "little"}}, {"name": "crc32c"}]
        if self.shape:
            codecs: list[dict[str, Any]] = [
                {
                    "name": "sharding_indexed",
                    "configuration": {
                        "chunk_shape": list(self.chunk),
                        "codecs": inner,
                        "index_codecs": [{"name": "bytes", "configuration": {"endian": "little"}}, {"name": "crc32c"}],
                        "index_location": "end",
                    },
                }
            ]
        else:
            codecs = inner
        return {
            "zarr_format": 3,
            "node_type": "array",
            "shape": list(self.shape),
            "data_type": data_type,
            "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": list(self.shard)}},
            "chunk_key_encoding": {"name": "default", "configuration": {"separator": "/"}},
            "fill_value": _fill_value(data_type),
            "codecs": codecs,
            "attributes": attributes,
        }


def write_shard(
    root: str,
    storage: ArrayStorage,
    index: Sequence[int],
    block: np.ndarray[Any, Any],
    scratch: list[np.ndarray[Any, Any]] | None = None,
) -> int:
    """Write shard ``index`` whole from ``block`` (the in-array part of the shard, C order).

    Returns the bytes written. The file is written with one ``writev`` per up to 512 chunks;
    chunks that need no reordering (the chunk is the shard, or spans its trailing axes) go
    to the kernel straight from ``block``'s memory; the others are gathered into ``scratch``
    (a one-element list holding a uint8 array, grown as needed and reused across shards, so a
    save pays the page faults of one shard, not of every chunk).
    """
    file = os.path.join(root, storage.shard_file(index))
    os.makedirs(os.path.dirname(file), exist_ok=True)
    item = storage.item
    buffers: list[Any] = []
    if not storage.shape:
        data = np.ascontiguousarray(block).reshape(1).view(np.uint8)
        buffers = [data, crc32c(data).to_bytes(4, "little")]
    else:
        start = storage.shard_start(index)
        chunk = storage.chunk
        index_arr = np.full((math.prod(storage.chunks_per_shard), 2), MISSING, dtype="<u8")
        offset = 0
        chunk_bytes = math.prod(chunk) * item
        whole = tuple(block.shape) == tuple(chunk)
        scratch = [np.empty(0, dtype=np.uint8)] if scratch is None else scratch
        total = math.prod(storage.chunks_per_shard) * chunk_bytes
        if not whole and scratch[0].nbytes < total:
            scratch[0] = np.empty(total, dtype=np.uint8)  # untouched pages cost nothing
        used = 0  # bytes of scratch holding gathered chunks of this shard
        for k, (g, present) in enumerate(storage.present_chunks(index)):
            if not present:
                continue
            rel = [a - s for a, s in zip(g, start, strict=True)]
            if whole:
                data = np.ascontiguousarray(block)
            else:
                sel = tuple(slice(r, min(r + c, n)) for r, c, n in zip(rel, chunk, block.shape, strict=True))
                part = block[sel]
                if part.shape == chunk and part.flags.c_contiguous:
                    data = part
                else:
                    data = scratch[0][used : used + chunk_bytes].view(block.dtype).reshape(chunk)
                    used += chunk_bytes
                    if part.shape != chunk:  # an edge chunk: zero bytes pad it to the full chunk shape
                        data.view(np.uint8).fill(0)  # bytes: a dtype's 0 need not be (float8_e8m0fnu's is NaN)
                        data[tuple(slice(0, n) for n in part.shape)] = part
                    else:
                        np.copyto(data, part)
            flat = data.reshape(-1).view(np.uint8)
            buffers.append(flat)
            buffers.append(crc32c(flat).to_bytes(4, "little"))
            index_arr[k] = (offset, chunk_bytes + CRC_BYTES)
            offset += chunk_bytes + CRC_BYTES
        index_bytes = index_arr.tobytes()
        buffers.append(index_bytes)
        buffers.append(crc32c(index_bytes).to_bytes(4, "little"))
    views = [memoryview(b).cast("B") for b in buffers]
    fd = os.open(file, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        return _writev_all(fd, views)
    finally:
        os.close(fd)


def _writev_all(fd: int, views: list[memoryview]) -> int:
    """``writev`` every buffer (at most 512 per call, under IOV_MAX), finishing short writes."""
    total, i = 0, 0
    while i < len(views):
        got = os.writev(fd, views[i : i + 512])
        total += got
        while got:
            if got >= len(views[i]):
                got -= len(views[i])
                i += 1
            else:
                views[i] = views[i][got:]
                got = 0
        while i < len(views) and len(views[i]) == 0:
            i += 1
    return total


def write_json(path: str, data: Any) -> None:
    """Write ``data`` as JSON (sorted keys, indented) to ``path``."""
    with open(path, "w", encoding="utf-8") as f:
        json.dump(data, f, sort_keys=True, indent=1)
        f.write("\n")
