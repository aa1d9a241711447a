"""A foreign checkpoint opened for reading: its tensors, their stored pieces, and how to read a box."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..._dtypes import itemsize
from ..._layout import Layout
from ._pieces import Box, FileCache, Piece, Run, box_runs, read_box

__all__ = ["ForeignCheckpoint", "ForeignTensor"]


@dataclass(frozen=True, slots=True)
class ForeignTensor:
    """One tensor of a foreign checkpoint.

    Attributes:
        path: its tree path (keys joined by ``/``).
        key: the format's own name for it (safetensors name, DCP fully qualified name, Orbax key).
        shape: global shape.
        dtype: canonical dtype name (``layoutcore._dtypes.ALL_DTYPES``).
        layout: the saved layout where the format records one (Orbax), else ``None``.
        boxes: the saved blocks as ``(offsets, sizes)``, in storage order.
        pieces: where each block's bytes lie (empty where a library reads them, as for Orbax).
    """

    path: str
    key: str
    shape: tuple[int, ...]
    dtype: str
    layout: Layout | None
    boxes: tuple[Box, ...]
    pieces: tuple[Piece, ...] = ()

    @property
    def nbytes(self) -> int:
        """Bytes of the whole tensor."""
        return math.prod(self.shape) * itemsize(self.dtype)


@dataclass(slots=True)
class ForeignCheckpoint:
    """A foreign checkpoint's contents.

    Attributes:
        format: ``"safetensors"``, ``"torch-dcp"`` or ``"orbax"``.
        path: the directory or file that was opened.
        tensors: tree path -> tensor, in storage order.
        values: tree path -> non-tensor leaf (DCP's pickled Python values, read at open).
        tree: the saved structure: nested dicts whose leaves are tree paths.
        files: every file the checkpoint consists of.
        metadata_bytes: bytes read to open it (headers, indexes, pickles).
    """

    format: str
    path: str
    tensors: dict[str, ForeignTensor]
    values: dict[str, Any] = field(default_factory=dict)
    tree: dict[str, Any] = field(default_factory=dict)
    files: tuple[str, ...] = ()
    metadata_bytes: int = 0

    def runs(self, tensor: ForeignTensor, box: Box) -> list[Run]:
        """The byte runs that reading ``box`` of ``tensor`` touches (unmerged, may repeat)."""
        return box_runs(tensor.pieces, box, tensor.dtype)

    def read(self, tensor: ForeignTensor, box: Box, files: FileCache) -> np.ndarray[Any, Any]:
        """``box`` of ``tensor`` as a new NumPy array."""
        return read_box(tensor.pieces, box, tensor.dtype, files, path=tensor.path)

    def close(self) -> None:
        """Release anything held open (TensorStore handles)."""


def nest(paths: Sequence[tuple[str, ...]]) -> dict[str, Any]:
    """Nested dicts from key tuples; each leaf is its tuple joined by ``/``.

    Raises:
        ValueError: one key is both a leaf and a prefix of another.
    """
    tree: dict[str, Any] = {}
    for keys in paths:
        node = tree
        for k in keys[:-1]:
            child = node.setdefault(k, {})
            if not isinstance(child, dict):
                raise ValueError(f"{'/'.join(keys)!r} lies under the leaf {child!r}")
            node = child
        if keys[-1] in node:
            raise ValueError(f"{'/'.join(keys)!r} is both a leaf and a subtree")
        node[keys[-1]] = "/".join(keys)
    return tree


def map_tree(tree: Mapping[str, Any], fn: Any) -> dict[str, Any]:
    """``tree`` with each leaf (a path) replaced by ``fn(path)``."""
    return {k: map_tree(v, fn) if isinstance(v, Mapping) else fn(v) for k, v in tree.items()}
