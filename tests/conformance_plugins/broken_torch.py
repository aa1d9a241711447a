"""Mutants of the torch DTensor driver for the conformance meta-test (a pytest plugin: ``-p broken_torch``).

Each is the real :class:`layoutcore_torch.TorchDriver` (single-process simulation) with one defect,
registered under its own name; select one with ``LAYOUTCORE_DRIVER``. Placement is built here from
torch's own API (``DeviceMesh``, ``distribute_tensor``, ``DTensor.from_local`` and the simulation's
``LocalTensorMode``), so a mutant keeps its defect whatever the real driver's internals become:

* ``torch-reversed-devices``: mesh position ``p`` is simulated by rank ``n - 1 - p``.
* ``torch-swapped-placements``: the placements are swapped end for end (``x`` <-> ``y``).
* ``torch-lying-fetch``: ``native_fetch_layout`` reads every tensor as replicated.
* ``torch-shared-replicas``: the simulated ranks that hold the same block share one tensor, so an
  in-place update runs once per replica on the same storage.
* ``torch-narrowed-int64``: declares int64 but holds an int64 value as int32 (``2**40`` wraps).
* ``torch-one-replica-inplace``: a Variable's ``value`` is a DTensor whose first replica of each block is
  the Variable's own storage and whose other replicas are copies, so an in-place update through it
  (``v.value.add_(d)``, as an optimizer does) reaches one replica only; ``assign`` and reads look right.
"""

from __future__ import annotations

from typing import Any

from _mutation import replicated_like, swapped
from layoutcore_torch import TorchDriver

import layoutcore as lc
from layoutcore import Layout


def _torch_placements(layout: Layout) -> list[Any]:
    from torch.distributed.tensor import Replicate, Shard

    mesh = layout.mesh
    assert mesh is not None
    per_axis: list[Any] = [Replicate() for _ in mesh.axis_names]
    for dim, entry in enumerate(layout.axes):
        for name in () if entry is None else (entry,) if isinstance(entry, str) else entry:
            per_axis[mesh.axis_names.index(name)] = Shard(dim)
    return per_axis


def place(value: Any, layout: Layout, *, reverse: bool = False) -> Any:
    """``distribute_tensor`` by ``layout`` in the simulation, every rank given the global value (rank grid
    reversed on request), from torch's API alone."""
    import torch
    from torch.distributed._local_tensor import LocalTensor, LocalTensorMode
    from torch.distributed.device_mesh import DeviceMesh
    from torch.distributed.tensor import distribute_tensor

    mesh = layout.mesh
    assert mesh is not None
    n = mesh.size
    ranks = torch.arange(n - 1, -1, -1) if reverse else torch.arange(n)
    value = value if isinstance(value, torch.Tensor) else torch.as_tensor(value)
    with LocalTensorMode(n):
        device_mesh = DeviceMesh("cpu", ranks.reshape(mesh.shape), mesh_dim_names=mesh.axis_names)
        source = LocalTensor({r: value.clone() for r in range(n)})
        return distribute_tensor(source, device_mesh, _torch_placements(layout), src_data_rank=None)


def _plain(driver: TorchDriver, tensor: Any) -> Any:
    return driver.to_numpy(tensor) if driver.is_distributed(tensor) else tensor


class ReversedDevicesTorch(TorchDriver):
    name = "torch-reversed-devices"

    def native_distribute(self, value: Any, layout: Layout, devices: tuple[str, ...]) -> Any:
        self.world()  # the simulation's fake group, as the real driver starts it
        return place(value, layout, reverse=True)

    def native_relayout(self, tensor: Any, layout: Layout, devices: tuple[str, ...]) -> Any:
        return place(_plain(self, tensor), layout, reverse=True)


class SwappedPlacementsTorch(TorchDriver):
    name = "torch-swapped-placements"

    def native_distribute(self, value: Any, layout: Layout, devices: tuple[str, ...]) -> Any:
        return super().native_distribute(value, swapped(layout), devices)

    def native_relayout(self, tensor: Any, layout: Layout, devices: tuple[str, ...]) -> Any:
        return super().native_relayout(tensor, swapped(layout), devices)


class LyingFetchTorch(TorchDriver):
    name = "torch-lying-fetch"

    def native_fetch_layout(self, tensor: Any) -> Layout:
        return replicated_like(super().native_fetch_layout(tensor), tensor.ndim)


class SharedReplicasTorch(TorchDriver):
    name = "torch-shared-replicas"

    def native_distribute(self, value: Any, layout: Layout, devices: tuple[str, ...]) -> Any:
        from torch.distributed._local_tensor import LocalTensor, LocalTensorMode
        from torch.distributed.tensor import DTensor

        out = super().native_distribute(value, layout, devices)
        per_rank = out.to_local()._local_tensors
        first: dict[tuple[int, ...], Any] = {}
        shared = {p: first.setdefault(block, per_rank[p]) for p, block in enumerate(layout.offset_to_shard())}
        with LocalTensorMode(len(shared)):
            return DTensor.from_local(
                LocalTensor(shared),
                out.device_mesh,
                out.placements,
                run_check=False,
                shape=out.shape,
                stride=out.stride(),
            )


class NarrowedInt64Torch(TorchDriver):
    name = "torch-narrowed-int64"

    def native_distribute(self, value: Any, layout: Layout, devices: tuple[str, ...]) -> Any:
        import torch

        if str(value.dtype) in ("int64", "torch.int64"):
            value = value.to(torch.int32) if isinstance(value, torch.Tensor) else value.astype("int32")  # the defect
        return super().native_distribute(value, layout, devices)


class OneReplicaInplaceTorch(TorchDriver):
    name = "torch-one-replica-inplace"

    def variable_read(self, handle: Any) -> Any:
        from torch.distributed._local_tensor import LocalTensor, LocalTensorMode
        from torch.distributed.tensor import DTensor

        param = super().variable_read(handle)
        per_rank = param._local_tensor._local_tensors  # the stored tensors, read without dispatching an op
        ranks = [int(r) for r in param.device_mesh.mesh.flatten().tolist()]
        blocks = self.native_fetch_layout(param).offset_to_shard()
        first: dict[tuple[int, ...], int] = {}
        local = {}
        for rank, block in zip(ranks, blocks, strict=True):
            own = per_rank[rank].detach()
            local[rank] = own if first.setdefault(block, rank) == rank else own.clone()  # the defect: a copy
        with LocalTensorMode(len(local)):
            return DTensor.from_local(
                LocalTensor(local),
                param.device_mesh,
                param.placements,
                run_check=False,
                shape=param.shape,
                stride=param.stride(),
            )


MUTANTS = (
    ReversedDevicesTorch,
    SwappedPlacementsTorch,
    LyingFetchTorch,
    SharedReplicasTorch,
    NarrowedInt64Torch,
    OneReplicaInplaceTorch,
)

for _cls in MUTANTS:
    lc.driver.register_driver(_cls.name, _cls, replace=True)
