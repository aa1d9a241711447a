"""A foreign checkpoint opened for reading: its tensors, their stored pieces, and how to read boxes.

Formats whose tensors are uncompressed C-order boxes at byte offsets (safetensors, torch DCP)
describe each tensor as :class:`~layoutcore.checkpoint._read_plan.StoredPiece`s and go through
the format-neutral read core (``plan_tensor`` / ``read_boxes``): exact byte runs, each byte
once. Orbax overrides :meth:`ForeignCheckpoint.plan` / :meth:`ForeignCheckpoint.read` to read
through TensorStore.
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..._dtypes import itemsize, numpy_dtype
from ..._layout import Layout
from .._read_plan import StoredPiece, StoredTensor, plan_tensor, read_boxes

__all__ = ["Box", "ForeignCheckpoint", "ForeignTensor", "RefusedValue", "map_tree", "nest"]

#: ``(offsets, sizes)`` of a box of a tensor, one int per axis.
Box = tuple[tuple[int, ...], tuple[int, ...]]


@dataclass(frozen=True, slots=True)
class ForeignTensor:
    """One tensor of a foreign checkpoint.

    Attributes:
        path: its tree path (keys joined by ``/``).
        key: the format's own name for it (safetensors name, DCP fully qualified name, Orbax key).
        shape: global shape.
        dtype: canonical dtype name.
        layout: the saved layout where the format records one (Orbax), else ``None``.
        boxes: the saved blocks as ``(offsets, sizes)``, in storage order.
        pieces: where each block's bytes lie, absolute file paths (empty for Orbax).
    """

    path: str
    key: str
    shape: tuple[int, ...]
    dtype: str
    layout: Layout | None
    boxes: tuple[Box, ...]
    pieces: tuple[StoredPiece, ...] = ()

    @property
    def nbytes(self) -> int:
        """Bytes of the whole tensor."""
        return math.prod(self.shape) * itemsize(self.dtype)

    @property
    def stored(self) -> StoredTensor:
        """The tensor as the read core's :class:`StoredTensor`."""
        return StoredTensor(self.path, self.shape, self.dtype, self.pieces)


@dataclass(frozen=True, slots=True)
class RefusedValue:
    """A stored value that is not loaded: a non-tensor value outside the plain-data allow-list (not
    unpickled), or a tensor of a dtype layoutcore cannot hold (``dtype``: the format's own name,
    e.g. safetensors ``"F4"``).

    ``inspect`` lists it; ``load`` raises ``CheckpointError`` with ``message`` (naming ``file``), or
    for a tensor ``UnsupportedLayoutError(feature="dtype")`` naming its path and ``dtype``.
    """

    path: str
    message: str
    file: str
    dtype: str = ""


@dataclass(slots=True)
class ForeignCheckpoint:
    """A foreign checkpoint's contents.

    Attributes:
        format: ``"safetensors"``, ``"torch-dcp"`` or ``"orbax"``.
        path: the directory or file that was opened.
        tensors: tree path -> tensor, in storage order.
        values: tree path -> non-tensor leaf (DCP's pickled Python values, Orbax scalars).
        tree: the saved structure: nested dicts whose leaves are tree paths.
        files: every file the checkpoint consists of (absolute).
        metadata_bytes: bytes read to open it (headers, indexes, pickles).
        version: the format's version where it records one.
        metadata_files: the files its metadata was read from (absolute): a Source over it refuses
            to read once one of them has changed (a rewrite would move the tensors it describes).
    """

    format: str
    path: str
    tensors: dict[str, ForeignTensor]
    values: dict[str, Any] = field(default_factory=dict)
    tree: dict[str, Any] = field(default_factory=dict)
    files: tuple[str, ...] = ()
    metadata_bytes: int = 0
    version: str = ""
    metadata_files: tuple[str, ...] = ()

    def plan(self, tensor: ForeignTensor, boxes: Sequence[Box]) -> list[tuple[str, np.ndarray[Any, Any]]]:
        """Per file, the ``(offset, length)`` runs that reading ``boxes`` of ``tensor`` touches."""
        reads = plan_tensor(tensor.stored, boxes)
        return [(tensor.pieces[p.piece].file, p.runs) for p in reads.pieces]

    def read(self, tensor: ForeignTensor, boxes: Sequence[Box], fds: dict[str, int]) -> list[np.ndarray[Any, Any]]:
        """Each box of ``tensor`` as a new C-order NumPy array, each byte read once.

        Raises:
            CheckpointError: a file that ends early, or a box the pieces do not cover.
        """
        dtype = numpy_dtype(tensor.dtype)
        stored = tensor.stored
        done: dict[Box, np.ndarray[Any, Any]] = {}
        for o, s in boxes:
            box = (tuple(o), tuple(s))
            if box not in done:
                # one box per call: the read core then reads a box's runs straight into it (no
                # staging copy); a layout's distinct boxes are disjoint, so no byte is read twice
                out = np.empty(box[1], dtype=dtype)
                read_boxes(
                    "/", plan_tensor(stored, [box]), [out], checkpoint=self.path, fds=fds, tensor_path=tensor.path
                )
                done[box] = out
        return [done[(tuple(o), tuple(s))] for o, s in boxes]

    def read_into(self, tensor: ForeignTensor, boxes: Sequence[Box], out: Sequence[np.ndarray[Any, Any]]) -> None:
        """Fill ``out[i]`` with box ``boxes[i]`` of ``tensor`` (formats that decode chunks override it).

        Raises:
            CheckpointError: as :meth:`read`.
        """
        fds: dict[str, int] = {}
        try:
            for dst, value in zip(out, self.read(tensor, boxes, fds), strict=True):
                np.copyto(dst, value, casting="no")
        finally:
            for fd in fds.values():
                os.close(fd)

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
