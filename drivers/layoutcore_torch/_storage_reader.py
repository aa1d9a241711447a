"""A torch DCP ``StorageReader`` over any checkpoint layoutcore reads.

``torch.distributed.checkpoint.load(state_dict, storage_reader=LayoutcoreStorageReader(path))``
fills the state dict's tensors and DTensors -- any placements DCP's planner handles, on any
mesh -- from a layoutcore checkpoint, or from a safetensors file/index or another DCP directory
through layoutcore's readers. Each tensor is described to DCP as one stored chunk covering the
whole tensor; DCP's planner then asks, per local shard, for the box ``(storage_offsets,
lengths)``, and the reader reads exactly that box's byte runs (layoutcore's read core), not
whole stored items.

It needs a real process group (``torch.distributed.init_process_group``: gloo or NCCL, any world
size); in layoutcore's single-process simulation it raises ``CheckpointError`` naming the remedy,
``layoutcore.checkpoint.load(path, into=state_dict)``.

Limits (torch 2.13): state dict keys are DCP's flattened names, i.e. layoutcore tree paths with
``/`` replaced by ``.``; non-tensor values (``step``) are not offered (DCP would ask for
``BytesStorageMetadata``); Orbax directories are refused (their chunks are compressed; load
them with ``layoutcore.checkpoint.load``). A ``_StridedShard`` DTensor is filled by DCP's own
planner, which torch 2.13 supports for the placements it can save.
"""

from __future__ import annotations

import os
from typing import Any

import numpy as np

from layoutcore import CheckpointError
from layoutcore.driver import ML_DTYPES

__all__ = ["LayoutcoreStorageReader"]


def _tensors(path: str) -> dict[str, Any]:
    """DCP name -> ``(shape, dtype, read)`` with ``read((offsets, sizes)) -> ndarray``."""
    from layoutcore.checkpoint import _foreign
    from layoutcore.checkpoint._foreign._layoutcore import layoutcore_box_readers

    root = os.path.abspath(path)
    if os.path.isfile(os.path.join(root, "layoutcore.json")) or _foreign.detect(root) is None:
        readers, _ = layoutcore_box_readers(root)
        return {p.replace("/", "."): (spec.shape, spec.dtype, read) for p, (spec, read) in readers.items()}
    if _foreign.detect(root) == "orbax":
        raise CheckpointError(
            f"{root} is an Orbax checkpoint: its chunks are compressed, so no DCP byte-range reader serves it; "
            "load it with layoutcore.checkpoint.load",
            path=root,
        )
    ckpt = _foreign.open_foreign(root)
    fds: dict[str, int] = {}
    out: dict[str, Any] = {}
    for t in ckpt.tensors.values():

        def read_foreign(box: Any, t: Any = t) -> np.ndarray[Any, Any]:
            return ckpt.read(t, [box], fds)[0]

        out[t.key] = (t.shape, t.dtype, read_foreign)
    return out


def _refuse_simulation(path: str) -> None:
    """Refuse the single-process simulation's fake process group, where DCP cannot run.

    Raises:
        CheckpointError: the default group is the torch driver's simulation (naming the remedy).
    """
    import torch.distributed as dist

    from ._private import FAKE_BACKEND

    if dist.is_available() and dist.is_initialized() and dist.get_backend() == FAKE_BACKEND:
        raise CheckpointError(
            f"LayoutcoreStorageReader({path!r}) needs a real torch.distributed process group (gloo or NCCL, "
            "e.g. init_process_group('gloo', ...) with world size 1); torch.distributed.checkpoint cannot run in "
            "layoutcore's single-process simulation. There, fill the DTensors with "
            "layoutcore.checkpoint.load(path, into=state_dict).",
            path=path,
        )


def _base() -> type:
    from torch.distributed.checkpoint import StorageReader

    base: type = StorageReader
    return base


class LayoutcoreStorageReader(_base()):  # type: ignore[misc]  # torch's StorageReader, found at run time
    """DCP ``StorageReader`` reading a layoutcore (or safetensors / DCP) checkpoint by byte ranges.

    Args:
        path: the checkpoint directory (or safetensors file / index).

    Raises:
        CheckpointError: (at ``read_metadata``) no readable checkpoint at ``path``, or an Orbax one.
    """

    def __init__(self, path: str | os.PathLike[str]) -> None:
        super().__init__()
        self.path = os.fspath(path)
        _refuse_simulation(self.path)
        self._tensors: dict[str, Any] | None = None
        self.bytes_read = 0

    def reset(self, checkpoint_id: str | os.PathLike[str] | None = None) -> None:
        if checkpoint_id is not None:
            self.path = os.fspath(checkpoint_id)
        self._tensors = None

    @classmethod
    def validate_checkpoint_id(cls, checkpoint_id: str | os.PathLike[str]) -> bool:
        return os.path.exists(os.fspath(checkpoint_id))

    def _table(self) -> dict[str, Any]:
        if self._tensors is None:
            self._tensors = _tensors(self.path)
        return self._tensors

    def read_metadata(self, *args: Any, **kwargs: Any) -> Any:
        _refuse_simulation(self.path)
        import torch
        from torch.distributed.checkpoint.metadata import (
            ChunkStorageMetadata,
            Metadata,
            MetadataIndex,
            TensorProperties,
            TensorStorageMetadata,
        )

        entries: dict[str, Any] = {}
        storage: dict[Any, Any] = {}
        for name, (shape, dtype, _) in self._table().items():
            size = torch.Size(shape)
            chunk = ChunkStorageMetadata(offsets=torch.Size([0] * len(shape)), sizes=size)
            entries[name] = TensorStorageMetadata(TensorProperties(dtype=getattr(torch, dtype)), size, [chunk])
            storage[MetadataIndex(name, torch.Size([0] * len(shape)), 0)] = name
        return Metadata(state_dict_metadata=entries, storage_data=storage)

    def set_up_storage_reader(self, metadata: Any, is_coordinator: bool, *args: Any, **kwargs: Any) -> None:
        self._table()

    def prepare_local_plan(self, plan: Any) -> Any:
        return plan

    def prepare_global_plan(self, plans: list[Any]) -> list[Any]:
        return plans

    def read_data(self, plan: Any, planner: Any) -> Any:
        import torch
        from torch.futures import Future

        table = self._table()
        for req in plan.items:
            _, dtype, read = table[req.storage_index.fqn]
            box = (tuple(int(o) for o in req.storage_offsets), tuple(int(n) for n in req.lengths))
            block = read(box)
            self.bytes_read += block.nbytes
            if dtype in ML_DTYPES:
                # torch.from_numpy has no ml_dtypes: move the bits as same-width signed ints, then view
                tensor = torch.from_numpy(block.view(np.dtype(f"i{block.dtype.itemsize}"))).view(getattr(torch, dtype))
            else:
                tensor = torch.from_numpy(block)
            target = planner.resolve_tensor(req).detach()
            if tuple(target.size()) != box[1]:
                raise CheckpointError(
                    f"DCP asked for {req.storage_index.fqn!r} box {box} into a tensor of shape {tuple(target.size())}",
                    path=self.path,
                    tensor=req.storage_index.fqn,
                )
            target.copy_(tensor)
            planner.commit_tensor(req, target)
        fut: Future[None] = Future()
        fut.set_result(None)
        return fut
