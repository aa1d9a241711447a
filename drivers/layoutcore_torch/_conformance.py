"""The conformance suite's raw-data adapter for the torch driver.

It reads per-device data and device names with torch's own calls only: ``DTensor.device_mesh``
(its rank grid and device type) names mesh position ``p`` as ``"<TYPE>:<rank>"``, and
``DTensor.to_local()`` gives the data. In the single-process simulation the local tensor is a
``LocalTensor`` holding one tensor per simulated rank (torch's private ``_local_tensors``); in a
real process group it is this rank's shard.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
from layoutcore_conformance import ConformanceAdapter

__all__ = ["TorchAdapter"]


class TorchAdapter(ConformanceAdapter):
    """Reads ``DTensor`` shards straight from torch. In-place writes are ``Tensor.sub_``; the compiler
    is ``torch.compile(fullgraph=True)`` on the ``eager`` backend (dynamo's tracing, no code generation)."""

    def device_data(self, tensor: Any) -> list[tuple[str, np.ndarray]]:
        import torch.distributed as dist
        from torch.distributed._local_tensor import LocalTensor
        from torch.distributed.tensor import DTensor

        assert isinstance(tensor, DTensor), type(tensor)
        device_mesh = tensor.device_mesh
        kind = str(device_mesh.device_type).upper()
        grid = [int(r) for r in device_mesh.mesh.flatten().tolist()]
        local = tensor.to_local().detach()
        if isinstance(local, LocalTensor):  # the simulation: one tensor per simulated rank
            per_rank = local._local_tensors
            return [(f"{kind}:{r}", _numpy(per_rank[r])) for r in grid]
        if dist.get_backend() == "fake":  # simulated, all ranks hold this one plain tensor
            return [(f"{kind}:{r}", _numpy(local)) for r in grid]
        me = dist.get_rank()
        return [(f"{kind}:{r}", _numpy(local)) for r in grid if r == me]

    def from_numpy(self, array: np.ndarray) -> Any:
        import torch

        return torch.from_numpy(np.array(array))

    def ones_fn(self) -> Callable[..., Any]:
        import torch

        return torch.ones  # type: ignore[no-any-return]

    def identity_op(self, tensor: Any) -> Any:
        return tensor + 0

    def subtract(self, a: Any, b: Any) -> Any:
        return a - b

    def subtract_inplace(self, target: Any, value: Any) -> bool:
        import torch

        with torch.no_grad():  # a Variable's value is a Parameter that may require grad
            target.sub_(value)
        return True

    def compile(self, fn: Callable[..., Any]) -> Callable[..., Any] | None:
        import torch

        return torch.compile(fn, fullgraph=True, backend="eager")  # type: ignore[no-any-return]


def _numpy(tensor: Any) -> np.ndarray:
    import torch

    if tensor.dtype == torch.bfloat16:
        tensor = tensor.float()
    return np.array(tensor.cpu().numpy())
