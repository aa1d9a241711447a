"""The foreign formats as :class:`~layoutcore.checkpoint._source.Source`s: torch DCP, Orbax, safetensors.

Each only says where a tensor's bytes lie: safetensors and DCP as stored pieces at byte offsets of
their files (read by the shared threaded reader, exact runs, whole pieces in slabs), Orbax as
compressed chunks decoded through TensorStore. The planner, reader and hand-over to the driver
are the layoutcore format's own. What differs is the saved layout: Orbax records one, torch DCP
records only boxes (the smallest layout with those blocks is inferred,
:func:`~._boxes.layout_from_boxes`), safetensors records one whole block per tensor (replicated
on a one-device mesh).
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..._capabilities import Limitation
from ..._errors import UnsupportedLayoutError
from ..._layout import Layout
from ..._mesh import Mesh
from ..._tensor_spec import TensorSpec
from .._meta import CheckpointInfo
from .._read_plan import StoredTensor
from .._source import ReadPlan, Source
from ._boxes import layout_from_boxes
from ._errors import checkpoint_error
from ._model import Box, ForeignCheckpoint, ForeignTensor, RefusedValue, map_tree

__all__ = ["ForeignInfo", "ForeignReadPlan", "ForeignSource", "inspect", "load", "read_plan", "saved_spec"]

#: The mesh of a tensor stored as one block with no recorded layout.
ONE_DEVICE = Mesh((1,), ("d",))


@dataclass(frozen=True, slots=True)
class ForeignInfo(CheckpointInfo):
    """A foreign checkpoint's :class:`CheckpointInfo` (``format_version`` is 0; see ``format``).

    Attributes:
        format: ``"torch-dcp"``, ``"orbax"`` or ``"safetensors"``, with the format's own
            version where it records one (``"torch-dcp 1.0.0"``, ``"orbax zarr+ocdbt"``).
        layout_known: tensor path -> whether the format recorded the layout (``False``: the
            ``TensorSpec``'s layout is inferred from the saved boxes, on an abstract mesh).
        boxes: tensor path -> the saved blocks, ``(offsets, sizes)``, in storage order.
        values: tree path -> non-tensor leaves (DCP's Python values, Orbax scalars).
    """

    format: str = ""
    layout_known: dict[str, bool] = field(default_factory=dict)
    boxes: dict[str, tuple[Box, ...]] = field(default_factory=dict)
    values: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class ForeignReadPlan(ReadPlan):
    """A foreign checkpoint's :class:`ReadPlan`.

    Attributes:
        exact: whether ``read_bytes`` are the bytes read. ``False`` for Orbax: its reads are
            whole stored chunks, named ``<dir>/<array>/<chunk index>`` with offset 0 and their
            uncompressed size (the chunks are zstd-compressed, so fewer bytes reach the disk).
    """

    exact: bool = True


def saved_spec(tensor: ForeignTensor) -> tuple[TensorSpec, bool]:
    """The tensor's saved :class:`TensorSpec` and whether its layout was recorded (not inferred)."""
    if tensor.layout is not None:
        return TensorSpec(tensor.shape, tensor.dtype, tensor.layout), True
    inferred = layout_from_boxes(tensor.shape, tensor.boxes)
    if inferred is None:  # irregular boxes: no layout has them; describe the tensor as one block
        inferred = Layout((None,) * len(tensor.shape), ONE_DEVICE)
    return TensorSpec(tensor.shape, tensor.dtype, inferred), False


def inspect(ckpt: ForeignCheckpoint) -> ForeignInfo:
    """The :class:`ForeignInfo` of an opened foreign checkpoint (metadata only)."""
    specs: dict[str, TensorSpec] = {}
    known: dict[str, bool] = {}
    for path, t in ckpt.tensors.items():
        specs[path], known[path] = saved_spec(t)
    root = ckpt.path if os.path.isdir(ckpt.path) else os.path.dirname(ckpt.path)
    files = tuple(os.path.relpath(f, os.path.realpath(root)) for f in ckpt.files)
    return ForeignInfo(
        ckpt.path,
        specs,
        sum(t.nbytes for t in ckpt.tensors.values()),
        files,
        0,
        format=f"{ckpt.format} {ckpt.version}".strip(),
        layout_known=known,
        boxes={p: t.boxes for p, t in ckpt.tensors.items()},
        values=dict(ckpt.values),
    )


#: ``Source.format`` of each foreign format (``ForeignCheckpoint.format`` names DCP ``torch-dcp``).
SOURCE_FORMATS = {"torch-dcp": "dcp", "orbax": "orbax", "safetensors": "safetensors"}


class ForeignSource(Source):
    """A foreign checkpoint as a :class:`Source` (its files are absolute paths).

    New NumPy tensors are read whole and distributed as views (:mod:`.._whole`), as
    ``safetensors.numpy.load_file`` + ``distribute_tensor`` gives them.
    """

    whole_reads = True

    def __init__(self, ckpt: ForeignCheckpoint) -> None:
        specs = {p: saved_spec(t)[0] for p, t in ckpt.tensors.items()}
        super().__init__(ckpt.path, specs, metadata_bytes=ckpt.metadata_bytes, metadata_files=ckpt.metadata_files)
        self.format = SOURCE_FORMATS[ckpt.format]
        self.checkpoint = ckpt

    @property
    def root(self) -> str:
        return "/"

    def stored_tensor(self, key: Any) -> StoredTensor | None:
        if self.format == "orbax":
            return None  # compressed chunks: decoded through TensorStore
        return self.checkpoint.tensors[key].stored

    def chunk_runs(self, path: str, boxes: Sequence[Box]) -> list[tuple[str, np.ndarray[Any, Any]]]:
        return self.checkpoint.plan(self.checkpoint.tensors[path], boxes)

    def decode(self, path: str, boxes: Sequence[Box], out: Sequence[np.ndarray[Any, Any]]) -> None:
        self.checkpoint.read_into(self.checkpoint.tensors[path], boxes, out)

    def inspect(self) -> CheckpointInfo:
        self._check_open()
        return inspect(self.checkpoint)

    def _values(self, driver: Any) -> dict[str, Any]:
        for value in self.checkpoint.values.values():
            if isinstance(value, RefusedValue) and value.dtype:  # a tensor of a dtype layoutcore cannot hold
                raise UnsupportedLayoutError(
                    f"checkpoint.load: {self.path}: tensor {value.path!r} has dtype {value.dtype}: {value.message}",
                    driver=driver.name,
                    feature=Limitation.DTYPE,
                    value=value.dtype,
                )
            if isinstance(value, RefusedValue):
                raise checkpoint_error(
                    f"{self.path}: value {value.path!r} was not loaded: {value.message}", file=value.file
                )
        return dict(self.checkpoint.values)

    def _rebuild(self, values: Mapping[str, Any]) -> Any:
        return map_tree(self.checkpoint.tree, values.__getitem__)

    def _read_plan(self, **fields: Any) -> ReadPlan:
        return ForeignReadPlan(**fields, exact=self.format != "orbax")

    def _close(self) -> None:
        self.checkpoint.close()


def read_plan(
    ckpt: ForeignCheckpoint,
    target: Any = None,
    *,
    process_devices: Iterable[int | str] | None = None,
    driver: Any = None,
) -> ForeignReadPlan:
    """The byte runs one process reads to load ``ckpt`` under ``target`` (nothing is read):
    :meth:`Source.read_plan` of :class:`ForeignSource` (default: this process's devices)."""
    plan = ForeignSource(ckpt).read_plan(target, process_devices=process_devices, driver=driver)
    assert isinstance(plan, ForeignReadPlan)
    return plan


def load(ckpt: ForeignCheckpoint, target: Any = None, *, driver: Any = None, **kwargs: Any) -> Any:
    """The checkpoint's tree, each tensor a distributed tensor of ``driver`` under its target layout
    (:meth:`Source.load` of :class:`ForeignSource`; the checkpoint is closed afterwards).

    ``target=None`` loads each tensor on its saved layout (Orbax), on the inferred layout of its
    saved boxes (DCP), or replicated on one device (safetensors). Non-tensor leaves come back as saved.
    """
    with ForeignSource(ckpt) as source:
        return source.load(target, driver=driver, **kwargs)
