"""``Source``: an opened checkpoint of any format, and the one load pipeline over it (docs/design.md#checkpoints).

A format subclass says only what the checkpoint holds and where each tensor's bytes lie
(:meth:`Source.stored_key` / :meth:`Source.stored_tensor`, or :meth:`Source.chunk_runs` and
:meth:`Source.decode` for a format that decodes chunks). Everything else is shared: the planner
(:mod:`._planner`), the threaded reader (:mod:`._reader`) and the hand-over of the blocks to the
driver (:mod:`layoutcore.driver._fill`: new tensors, or existing ones filled in place).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Hashable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from .._config import checkpoint_threads
from .._dtypes import X64_DTYPES
from .._errors import CheckpointError, LayoutError, UnsupportedLayoutError
from .._layout import Layout
from .._tensor_spec import TensorSpec
from ..driver._fill import fill_target, pack_owned  # at import: a load's reads are its data only
from ..driver._registry import get_driver
from ._meta import CheckpointInfo
from ._planner import TensorLoad, gc_paused, plan, positions_of, unknown_paths
from ._progress import progress
from ._read_plan import Box, StoredTensor
from ._reader import Readers
from ._stream import IntoState, stream_into, stream_new
from ._tree import rebuild, walk
from ._whole import whole_tensor_reads

__all__ = ["ReadPlan", "Source"]


@dataclass(frozen=True, slots=True)
class ReadPlan:
    """The bytes a load reads, computed from metadata before any data is read.

    Attributes:
        reads: ``(file, offset, length)`` per merged byte range: by tensor, then file and offset.
        read_bytes: total bytes of ``reads`` (data and chunk checksums).
        floor_bytes: each distinct element the devices need, once, times its item size.
        amplification: ``read_bytes / floor_bytes`` (1.0 when nothing is needed).
        metadata_bytes: bytes of metadata a load reads besides (``layoutcore.json``).
        tensors: tensor path -> ``(read_bytes, floor_bytes)``.
    """

    reads: tuple[tuple[str, int, int], ...]
    read_bytes: int
    floor_bytes: int
    amplification: float
    metadata_bytes: int = 0
    tensors: dict[str, tuple[int, int]] = field(default_factory=dict)


class Source:
    """An opened checkpoint (layoutcore, torch DCP, Orbax or safetensors): metadata read, no data.

    Attributes:
        format: ``"layoutcore"``, ``"dcp"``, ``"orbax"`` or ``"safetensors"``.
        path: the checkpoint (directory or file) as opened, absolute.
        specs: tensor path -> saved :class:`TensorSpec` (as ``inspect``).

    A context manager: :meth:`close` (also on leaving ``with``) releases every file and handle it
    holds; a closed Source raises :class:`CheckpointError`. Loads open their files on the reader
    threads and close them before returning.

    A Source describes the checkpoint as it was opened. Its metadata says where each tensor's bytes
    lie, so once a file that metadata was read from changes (rewritten in place, replaced, removed:
    its inode, size or modification time differ), :meth:`load` and :meth:`read_plan` raise
    :class:`CheckpointError` naming the file instead of reading the new bytes by the old offsets;
    open the checkpoint again to read the new version.
    """

    format: str = ""
    #: Whether a load of new tensors for a driver whose tensors are views of one array (NumPy)
    #: reads each tensor whose local blocks tile it as one array (:mod:`._whole`).
    whole_reads: bool = False

    def __init__(
        self,
        path: str,
        specs: dict[str, TensorSpec],
        *,
        metadata_bytes: int = 0,
        metadata_files: Iterable[str] = (),
    ) -> None:
        self.path = path
        self._specs = specs
        self.metadata_bytes = metadata_bytes
        self._closed = False
        #: the files the metadata was read from (absolute) -> their version when it was read
        self._versions = {f: _file_version(f) for f in metadata_files}

    # -- what a format says ---------------------------------------------------------------------
    @property
    def root(self) -> str:
        """The directory that relative piece files are under."""
        return self.path

    def stored_key(self, path: str) -> Hashable:
        """A hashable key of tensor ``path``'s stored geometry (equal keys: equal pieces)."""
        return path

    def stored_tensor(self, key: Any) -> StoredTensor | None:
        """The stored pieces for a :meth:`stored_key` (``None``: the format decodes chunks itself)."""
        raise NotImplementedError

    def node(self, path: str) -> str:
        """The directory of tensor ``path``'s relative piece files under :attr:`root` (``""``: none)."""
        return ""

    def chunk_runs(self, path: str, boxes: Sequence[Box]) -> list[tuple[str, np.ndarray[Any, Any]]]:
        """For a decoding format: per stored chunk the boxes meet, ``(name, [[0, decoded bytes]])``."""
        raise NotImplementedError

    def decode(self, path: str, boxes: Sequence[Box], out: Sequence[np.ndarray[Any, Any]]) -> None:
        """For a decoding format: fill ``out[i]`` with box ``boxes[i]`` of tensor ``path`` (thread-safe)."""
        raise NotImplementedError

    def inspect(self) -> CheckpointInfo:
        """What the checkpoint holds (as ``checkpoint.inspect``)."""
        raise NotImplementedError

    def _values(self, driver: Any) -> dict[str, Any]:
        """Non-tensor leaves by tree path, for a load on ``driver`` (refused ones raise ``CheckpointError``,
        tensors of a dtype layoutcore cannot hold ``UnsupportedLayoutError``)."""
        return {}

    def _rebuild(self, values: Mapping[str, Any]) -> Any:
        """The saved tree with leaves from ``values`` (tensor and non-tensor paths)."""
        raise NotImplementedError

    def _read_plan(self, **fields: Any) -> ReadPlan:
        return ReadPlan(**fields)

    def _close(self) -> None:
        """Release what the format holds open."""

    # -- the shared pipeline ---------------------------------------------------------------------
    @property
    def specs(self) -> dict[str, TensorSpec]:
        """Tensor path -> saved :class:`TensorSpec`."""
        self._check_open()
        return self._specs

    def _check_open(self) -> None:
        if self._closed:
            raise CheckpointError(f"Checkpoint {self.path}: this Source was closed; open it again.", path=self.path)

    def _check_current(self) -> None:
        """Refuse a Source whose metadata files changed since it was opened (one ``stat`` each).

        Raises:
            CheckpointError: a closed Source; a metadata file changed, replaced or removed (named).
        """
        self._check_open()
        for file, then in self._versions.items():
            now = _file_version(file)
            if now != then:
                raise CheckpointError(
                    f"Checkpoint {self.path}: file {file!r} {_how_changed(then, now)} since this Source was "
                    "opened; the metadata read then no longer says where the tensors lie. Open the "
                    "checkpoint again (checkpoint.open) to read the new version.",
                    path=self.path,
                    file=file,
                )

    def close(self) -> None:
        """Release every file and handle (idempotent); further use raises ``CheckpointError``."""
        if not self._closed:
            self._closed = True
            self._close()

    def __enter__(self) -> Source:
        self._check_open()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        state = "closed" if self._closed else f"{len(self._specs)} tensors"
        return f"<checkpoint.Source {self.format} {self.path!r} ({state})>"

    def read_plan(
        self,
        target: Any = None,
        *,
        process_devices: Iterable[int | str] | None = None,
        driver: Any = None,
        granularity: str = "exact",
    ) -> ReadPlan:
        """The byte ranges a load under ``target`` reads, from metadata only.

        Args:
            target: as :meth:`load`.
            process_devices: the devices of one process, as mesh positions (row-major) or device
                names; default: this process's devices under the selected driver (``driver``,
                ``use_driver``, ``LAYOUTCORE_DRIVER``), as ``load`` reads them.
            driver: the driver (name or object) that selects this process's devices.
            granularity: ``"exact"`` (layoutcore's reader) or ``"piece"``: what a reader that
                reads whole stored chunks (TensorStore, zarr-python, Orbax) would read.

        Raises:
            CheckpointError: a closed Source, or one whose files changed since it was opened.
            LayoutMismatchError: a target of another shape or dtype.
        """
        self._check_current()
        devices = None if process_devices is None else list(process_devices)
        drv = None
        if devices is None:
            drv = get_driver(driver)
        with gc_paused():
            plans = plan(
                self,
                target,
                _positions_per_mesh(devices, drv),
                granularity=granularity,
                with_copies=False,
                driver=drv,
            )
            return self._summarise(plans)

    def _summarise(self, plans: list[TensorLoad]) -> ReadPlan:
        tensors = {}
        floor = total = 0
        reads: list[tuple[str, int, int]] = []
        for tl in plans:
            geo = tl.geometry
            floor += geo.floor_bytes
            total += geo.read_bytes
            tensors[tl.path] = (geo.read_bytes, geo.floor_bytes)
            prefix = tl.node + "/" if tl.node else ""
            names = [prefix + f for f in geo.files]
            ranges = geo.ranges
            if len(ranges):
                reads.extend(
                    zip(
                        map(names.__getitem__, ranges[:, 0].tolist()),
                        ranges[:, 1].tolist(),
                        ranges[:, 2].tolist(),
                        strict=True,
                    )
                )
        amp = total / floor if floor else 1.0
        return self._read_plan(
            reads=tuple(reads),
            read_bytes=total,
            floor_bytes=floor,
            amplification=amp,
            metadata_bytes=self.metadata_bytes,
            tensors=tensors,
        )

    def load(self, target: Any = None, *, into: Any = None, driver: Any = None, verify: bool = True) -> Any:
        """Load the checkpoint: new distributed tensors (``target``), or existing ones filled (``into``).

        Args:
            target: a ``LayoutMap`` (its ``on_missing`` applies), a mapping path -> ``Layout`` /
                ``TensorSpec``, a tree of the saved structure whose leaves are ``Layout``s,
                ``TensorSpec``s or distributed tensors (their layouts; never modified), or
                ``None`` (each tensor on its saved layout).
            into: a tree of existing distributed tensors (any driver) or ``Variable``s, holding any
                subset of the saved paths: only those are read, into them (see :meth:`_load_into`).
            driver: the driver of new tensors (default: the active driver).
            verify: check the checksums the format stores (layoutcore's CRC-32C of every chunk
                read whole); ``False`` trusts the files (sizes are still checked).

        Returns:
            The saved tree (``target``), or a tree of ``into``'s structure: the given tensors
            where they are mutable, the tensors that replace them where not (JAX arrays, TF tensors).

        Raises:
            TypeError: both ``target`` and ``into``.
            CheckpointError: a missing, incomplete or corrupt checkpoint (naming the file and
                tensor); a closed Source; one whose files changed since it was opened (naming the file);
                a failure while filling ``into`` (listing partly written tensors).
            LayoutError: a target or ``into`` path the checkpoint lacks (naming it).
            LayoutMismatchError: a target or ``into`` tensor of another shape or dtype, before any read.
            UnsupportedLayoutError: the driver cannot express a target layout or hold a dtype.
        """
        self._check_current()
        if target is not None and into is not None:
            raise TypeError("checkpoint.load takes target= or into=, not both")
        if into is not None:
            return self._load_into(into, verify)
        drv = get_driver(driver)
        results = self._values(drv)
        with gc_paused():
            plans = plan(self, target, _positions_per_mesh(None, drv), driver=drv)
        _check_driver(drv, plans)
        pack: Callable[[Any, TensorLoad, list[np.ndarray[Any, Any]]], Any] = _pack_loaded
        if self.whole_reads:
            plans, pack = whole_tensor_reads(plans, drv, pack)
        with Readers(self, verify, checkpoint_threads()) as readers:
            advance = readers.enter(progress("loading", sum(tl.geometry.read_bytes for tl in plans)))
            stream_new(readers, plans, drv, results, advance, pack)
        return self._rebuild(results)

    def _load_into(self, into: Any, verify: bool) -> Any:
        """Fill the tensors of ``into``: every check before any byte is read or written.

        Tensors whose memory the loader can write (NumPy components, torch local tensors) are
        read straight into it, or through the staging ring (:mod:`._stream`); the others are read
        whole into host blocks first and then handed over. A failure lists every tensor that was
        partly written (and so may hold a mix of old and new values).
        """
        flat: list[tuple[str, Any]] = []
        structure = walk(into, flat)
        unknown = sorted(p for p, _ in flat if p not in self._specs)
        if unknown:
            raise unknown_paths(unknown, self._specs)
        targets = {}
        for p, value in flat:
            saved = self._specs[p]
            targets[p] = fill_target(p, value, shape=saved.shape, dtype=saved.dtype)
        layouts: dict[str, Layout] = {p: t.layout for p, t in targets.items()}
        with gc_paused():
            plans = plan(self, layouts, lambda p, _: list(targets[p].positions), only=list(targets))
        results: dict[str, Any] = {}
        state = IntoState()
        try:
            with Readers(self, verify, checkpoint_threads()) as readers:
                stream_into(readers, plans, targets, results, state)
        except Exception as err:
            raise self._into_error(err, state.partly(results), list(results)) from err
        return rebuild(structure, results)

    def _into_error(self, err: Exception, writing: list[str], done: list[str]) -> CheckpointError:
        tensor = getattr(err, "tensor", None) or (writing[0] if writing else None)
        file = getattr(err, "file", None)
        partly = f"partly written: {writing!r}" if writing else "no tensor of into was partly written"
        return CheckpointError(
            f"Checkpoint {self.path}: load(into=...) failed at tensor {tensor!r}"
            f"{f' (file {file!r})' if file else ''}: {type(err).__name__}: {err}. {partly}; "
            f"{len(done)} tensor(s) hold their new values ({done[:10]}); every other one holds its old values.",
            path=self.path,
            file=file,
            tensor=tensor,
        )


def _check_driver(drv: Any, plans: list[TensorLoad]) -> None:
    """Each target layout and dtype against the driver, before any data is read.

    Raises:
        UnsupportedLayoutError, LayoutError: as the driver raises them, the message naming the tensor.
    """
    seen: set[Any] = set()
    for tl in plans:
        key = (tl.layout, tl.saved.shape, tl.saved.dtype)
        if key in seen:
            continue
        seen.add(key)
        try:
            layout = drv.check_layout(tl.layout, tl.saved.shape)
            drv.bind_mesh(layout.mesh)
            if tl.saved.dtype not in drv.supported_dtypes() and tl.saved.dtype not in X64_DTYPES:
                raise drv.dtype_refusal(tl.saved.dtype)  # never held (a 64-bit one may narrow once read)
        except UnsupportedLayoutError as err:
            raise UnsupportedLayoutError(
                f"checkpoint.load: tensor {tl.path!r}: {err}", driver=err.driver, feature=err.feature, value=err.value
            ) from None
        except LayoutError as err:
            if type(err) is not LayoutError:
                err.add_note(f"checkpoint.load: tensor {tl.path!r}")
                raise
            raise LayoutError(f"checkpoint.load: tensor {tl.path!r}: {err}", value=err.value) from None


def _positions_per_mesh(devices: Any, drv: Any) -> Callable[[str, Layout], list[int]]:
    """:func:`positions_of` for the planner, computed once per mesh (a model has one or two meshes
    and thousands of tensors: binding a mesh, or learning that it cannot be bound, costs a call each)."""
    known: dict[Any, list[int]] = {}

    def positions(_: str, layout: Layout) -> list[int]:
        got = known.get(layout.mesh)
        if got is None:
            got = known[layout.mesh] = positions_of(layout, devices, drv)
        return got

    return positions


def _pack_loaded(drv: Any, tl: TensorLoad, blocks: list[np.ndarray[Any, Any]]) -> Any:
    """:func:`pack_owned` of a loaded tensor's blocks; a dtype refusal (values JAX without x64 cannot
    hold exactly) names the tensor's path.

    Raises:
        UnsupportedLayoutError: ``feature="dtype"``, naming the path.
    """
    try:
        return pack_owned(drv, blocks, tl.layout, tl.saved.shape)
    except UnsupportedLayoutError as err:
        if err.feature != "dtype":
            raise
        raise UnsupportedLayoutError(
            f"checkpoint.load: tensor {tl.path!r}: {err}", driver=err.driver, feature=err.feature, value=err.value
        ) from None


def _file_version(path: str) -> tuple[int, int, int, int] | None:
    """What tells one version of a file from the next: device, inode, size and modification time
    (ns); ``None`` for a file that is gone. Not the change time, which a ``chmod`` or a new hard
    link (a checkpoint manager's snapshot) moves without touching the bytes."""
    try:
        st = os.stat(path)
    except OSError:
        return None
    return (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns)


def _how_changed(then: tuple[int, ...] | None, now: tuple[int, ...] | None) -> str:
    if now is None:
        return "was removed"
    if then is None:
        return "appeared"
    if then[:2] != now[:2]:
        return "was replaced by another file"
    if then[2] != now[2]:
        return f"changed size ({then[2]} -> {now[2]} bytes)"
    return "was rewritten"
