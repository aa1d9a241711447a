"""A layoutcore checkpoint's metadata: reading ``layoutcore.json`` and what it says (:class:`CheckpointInfo`).

Its own module, below :mod:`._api` and the foreign readers alike, so that the safetensors export
(``_foreign/_layoutcore.py``) reads a layoutcore checkpoint without importing the API module that
imports it (the layer test refuses that cycle).
"""

from __future__ import annotations

import functools
import json
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from .._errors import CheckpointError, LayoutError
from .._tensor_spec import TensorSpec
from ._format import FORMAT_NAME, FORMAT_VERSION, ArrayStorage
from ._read_plan import StoredTensor

__all__ = ["META", "CheckpointInfo"]

META = "layoutcore.json"


@dataclass(frozen=True, slots=True)
class CheckpointInfo:
    """What a checkpoint holds, read from its metadata only.

    Attributes:
        path: the checkpoint directory.
        tensors: tensor path -> :class:`TensorSpec` (saved shape, dtype and layout; plain arrays
            are recorded as replicated on a one-device abstract mesh).
        total_bytes: bytes of all tensors (each once, replicas not repeated).
        files: every file of the checkpoint, relative to ``path``.
        format_version: the layoutcore format version.
        chunks: tensor path -> inner chunk shape (the read granularity of whole-chunk readers).
        plain: the paths saved from plain arrays and scalars.
    """

    path: str
    tensors: dict[str, TensorSpec]
    total_bytes: int
    files: tuple[str, ...]
    format_version: int
    chunks: dict[str, tuple[int, ...]] = field(default_factory=dict)
    plain: frozenset[str] = frozenset()


def _read_meta(path: str) -> tuple[dict[str, Any], int]:
    file = os.path.join(path, META)
    if not os.path.exists(path):
        raise CheckpointError(f"No checkpoint at {path}: the directory does not exist.", path=path)
    try:
        with open(file, "rb") as f:
            raw = f.read()
    except FileNotFoundError:
        raise CheckpointError(
            f"{path} is not a layoutcore checkpoint, or an incomplete one: {META} is missing.", path=path, file=META
        ) from None
    try:
        meta = json.loads(raw)
    except ValueError as exc:
        raise CheckpointError(f"Checkpoint {path}: {META} is corrupt ({exc}).", path=path, file=META) from exc
    if not isinstance(meta, dict) or meta.get("format") != FORMAT_NAME:
        raise CheckpointError(f"Checkpoint {path}: {META} is not a {FORMAT_NAME} file.", path=path, file=META)
    if meta.get("format_version") != FORMAT_VERSION:
        raise CheckpointError(
            f"Checkpoint {path} has format version {meta.get('format_version')!r}; this layoutcore reads "
            f"version {FORMAT_VERSION}.",
            path=path,
            file=META,
        )
    return meta, len(raw)


def _spec(data: Mapping[str, Any], memo: dict[Any, TensorSpec]) -> TensorSpec:
    mesh = data["layout"]["mesh"]
    devices = mesh["devices"]
    key = (
        tuple(data["shape"]),
        data["dtype"],
        tuple(tuple(a) for a in data["layout"]["axes"]),
        tuple(mesh["shape"]),
        tuple(mesh["axis_names"]),
        None if devices is None else tuple(devices),
        mesh["name"],
        data.get("version"),
        data.get("chunking"),
        data.get("format"),
    )
    spec = memo.get(key)
    if spec is None:
        spec = memo[key] = TensorSpec.from_dict(data)
    return spec


def _info_from_meta(path: str, meta: Mapping[str, Any]) -> CheckpointInfo:
    try:
        memo: dict[Any, TensorSpec] = {}  # models repeat (shape, dtype, layout): parse each once
        tensors = {p: _spec(e["spec"], memo) for p, e in meta["tensors"].items()}
        chunks = {p: tuple(e["chunk"]) for p, e in meta["tensors"].items()}
        plain = frozenset(p for p, e in meta["tensors"].items() if e.get("plain"))
    except (KeyError, TypeError, LayoutError) as exc:
        raise CheckpointError(f"Checkpoint {path}: {META} is corrupt ({exc!r}).", path=path, file=META) from exc
    return CheckpointInfo(
        path, tensors, int(meta["total_bytes"]), tuple(meta["files"]), int(meta["format_version"]), chunks, plain
    )


@functools.lru_cache(maxsize=256)
def _stored_geometry(
    shape: tuple[int, ...], dtype: str, shard: tuple[int, ...], chunk: tuple[int, ...]
) -> StoredTensor:
    """The pieces of a stored array, files named relative to its zarr node (shared by equal geometries)."""
    return ArrayStorage(".", shape, dtype, shard, chunk).stored_tensor("")
