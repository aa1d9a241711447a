"""The conformance suite's raw-data adapter for the torch driver.

It reads per-device data with torch's own calls only: ``DTensor.to_local()`` and, in the
simulation, the ``LocalTensor``'s per-rank tensors (simulated rank ``p`` is mesh position ``p``);
in a real process group, the local shard of this rank.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
from layoutcore_conformance import ConformanceAdapter

from . import _private

__all__ = ["TorchAdapter"]


class TorchAdapter(ConformanceAdapter):
    """Reads ``DTensor`` shards straight from torch."""

    def device_data(self, tensor: Any) -> list[tuple[str, np.ndarray]]:
        import torch
        import torch.distributed as dist
        from torch.distributed.tensor import DTensor

        assert isinstance(tensor, DTensor), type(tensor)
        # The device names are the layout's; the data comes from torch, keyed by rank.
        mesh = self.driver.fetch_layout(tensor).mesh
        assert mesh is not None
        devices = self.driver.bind_mesh(mesh)
        local = tensor.to_local().detach()
        grid = [int(r) for r in tensor.device_mesh.mesh.flatten().tolist()]
        if _private.is_local_tensor(local):
            per_rank = _private.local_tensors(local)
            return [(d, _numpy(torch, per_rank[r])) for d, r in zip(devices, grid, strict=True)]
        if dist.get_backend() == _private.FAKE_BACKEND:  # fully replicated shards are one plain tensor
            return [(d, _numpy(torch, local)) for d in devices]
        me = dist.get_rank()
        return [(d, _numpy(torch, local)) for d, r in zip(devices, grid, strict=True) if r == me]

    def from_numpy(self, array: np.ndarray) -> Any:
        import torch

        return torch.from_numpy(np.array(array))

    def ones_fn(self) -> Callable[..., Any]:
        import torch

        return torch.ones  # type: ignore[no-any-return]


def _numpy(torch: Any, tensor: Any) -> np.ndarray:
    if tensor.dtype == torch.bfloat16:
        tensor = tensor.float()
    return np.array(tensor.cpu().numpy())
