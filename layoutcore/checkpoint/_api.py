"""``open`` / ``inspect`` / ``read_plan`` / ``load``, and the layoutcore format's :class:`~._source.Source`.

``open(path)`` picks the Source by what the path holds (``layoutcore.json``: this format; DCP's
``.metadata``, Orbax's ``_METADATA``, ``.safetensors``: :mod:`._foreign`), reading metadata only;
the other three are ``open(path)`` then the Source's method. ``save`` lives in :mod:`._save`.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from typing import Any

from . import _foreign
from ._meta import META, CheckpointInfo, _info_from_meta, _read_meta, _stored_geometry
from ._planner import gc_paused
from ._read_plan import StoredTensor
from ._source import ReadPlan, Source
from ._tree import rebuild

__all__ = ["CheckpointInfo", "LayoutcoreSource", "ReadPlan", "Source", "inspect", "load", "open", "read_plan"]


class LayoutcoreSource(Source):
    """A layoutcore checkpoint (zarr v3 shards, ``layoutcore.json``): each tensor's inner chunks are
    stored pieces (with their CRC-32C), files named relative to the tensor's zarr node."""

    format = "layoutcore"

    def __init__(self, path: str) -> None:
        with gc_paused():  # parsing 10 000 tensors' metadata makes millions of objects and no cycle
            meta, meta_bytes = _read_meta(path)
            self._info = _info_from_meta(path, meta)
        super().__init__(
            path, self._info.tensors, metadata_bytes=meta_bytes, metadata_files=(os.path.join(path, META),)
        )
        self._entries: dict[str, Any] = meta["tensors"]
        self._tree = meta["tree"]

    def stored_key(self, path: str) -> tuple[Any, ...]:
        saved, entry = self._specs[path], self._entries[path]
        return (saved.shape, saved.dtype, tuple(entry["shard"]), tuple(entry["chunk"]))

    def stored_tensor(self, key: Any) -> StoredTensor:
        return _stored_geometry(*key)

    def node(self, path: str) -> str:
        node: str = self._entries[path]["node"]
        return node

    def inspect(self) -> CheckpointInfo:
        self._check_open()
        return self._info

    def _rebuild(self, values: Mapping[str, Any]) -> Any:
        return rebuild(self._tree, values)


def open(path: str | os.PathLike[str]) -> Source:
    """Open the checkpoint at ``path`` (any format ``load`` reads), reading its metadata only.

    Returns:
        A :class:`Source`: ``format``, ``specs``, ``read_plan``, ``load``; a context manager
        (``close()`` releases every file it holds). It is the checkpoint as opened: once a file its
        metadata was read from changes (a new save over it), its ``load`` and ``read_plan`` raise
        ``CheckpointError`` naming the file; open the checkpoint again to read the new version.

    Raises:
        CheckpointError: no checkpoint there, an incomplete one, or an unknown format/version.
    """
    target = os.path.abspath(os.fspath(path))
    foreign = os.path.exists(target) and not os.path.isfile(os.path.join(target, META))
    if foreign and _foreign.detect(target) is not None:
        return _foreign.ForeignSource(_foreign.open_foreign(target))
    return LayoutcoreSource(target)


def inspect(path: str | os.PathLike[str]) -> CheckpointInfo:
    """What the checkpoint at ``path`` holds (metadata only; no tensor data is read).

    Raises:
        CheckpointError: no checkpoint there, an incomplete one, or an unknown format/version.
    """
    with open(path) as source:
        return source.inspect()


def read_plan(
    path: str | os.PathLike[str],
    target: Any = None,
    *,
    process_devices: Iterable[int | str] | None = None,
    granularity: str = "exact",
    driver: Any = None,
) -> ReadPlan:
    """The byte ranges a load under ``target`` reads, from metadata only: ``open(path).read_plan(...)``.

    Args:
        path: the checkpoint.
        target: as :func:`load` (``None``: the saved layouts).
        process_devices: the devices of one process, as mesh positions (row-major) or device
            names; default: this process's devices under the selected driver (``driver=``,
            ``use_driver``, ``LAYOUTCORE_DRIVER``; in a multi-process run, this process's share).
        granularity: ``"exact"`` (layoutcore's reader) or ``"piece"``: what a reader that reads
            whole inner chunks (TensorStore, zarr-python, Orbax) would read.
        driver: the driver (name or object) whose ``local_positions`` give this process's devices.

    Raises:
        CheckpointError: as :func:`inspect`. LayoutMismatchError: a ``TensorSpec`` target of
            another shape or dtype.
    """
    with open(path) as source:
        return source.read_plan(target, process_devices=process_devices, driver=driver, granularity=granularity)


def load(
    path: str | os.PathLike[str],
    target: Any = None,
    *,
    into: Any = None,
    driver: Any = None,
    verify: bool = True,
) -> Any:
    """Load a checkpoint of any format into distributed tensors: ``open(path).load(...)``.

    Args:
        path: the checkpoint directory (or safetensors file / index).
        target: a ``LayoutMap`` (its ``on_missing`` applies), a mapping path -> ``Layout`` /
            ``TensorSpec``, a tree of the saved structure whose leaves are ``Layout``s,
            ``TensorSpec``s or distributed tensors (their layouts; never modified), or
            ``None`` (each tensor on its saved layout; plain arrays replicated on one device).
        into: a tree of existing distributed tensors to fill instead (any subset of the saved
            paths; exclusive with ``target``); see :meth:`Source.load`.
        driver: the driver name or object (default: the active driver).
        verify: check the CRC-32C of every inner chunk read whole (default). ``False`` trusts
            the files (sizes are still checked); it saves the checksum time, not bytes.

    Each process reads only the byte ranges its local devices need, each byte once, and checks
    the CRC-32C of every inner chunk it reads whole. Reads run on ``LAYOUTCORE_CHECKPOINT_THREADS``
    threads (default: the cores, at most 4); the driver packs each tensor on the calling thread.

    Returns:
        The saved tree structure with each leaf a distributed tensor of the driver (``into``: a
        tree of ``into``'s structure).

    Raises:
        CheckpointError: a missing, incomplete or corrupt checkpoint (naming the file and tensor).
        LayoutMismatchError: a ``TensorSpec`` target of another shape or dtype (naming the path).
        UnsupportedLayoutError: the driver cannot express a target layout.
        ConfigurationError: ``LAYOUTCORE_CHECKPOINT_THREADS`` is not a positive integer.
        TypeError: both ``target`` and ``into``.
    """
    with open(path) as source:
        return source.load(target, into=into, driver=driver, verify=verify)
