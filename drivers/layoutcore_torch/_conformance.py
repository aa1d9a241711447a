"""The conformance suite's raw-data adapter for the torch driver.

It reads per-device data and device names with torch's own calls only: ``DTensor.device_mesh``
(its rank grid and device type) names mesh position ``p`` as ``"<TYPE>:<rank>"``, and
``DTensor.to_local()`` gives the data. In the single-process simulation the local tensor is a
``LocalTensor`` holding one tensor per simulated rank (torch's private ``_local_tensors``); in a
real process group it is this rank's shard.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, cast

import numpy as np
from layoutcore_conformance import ConformanceAdapter

__all__ = ["TorchAdapter"]


class TorchAdapter(ConformanceAdapter):
    """Reads ``DTensor`` shards straight from torch. In-place writes are ``Tensor.sub_``; the compiler is
    ``torch.compile`` on the ``eager`` backend (dynamo's tracing without code generation). Dynamo may run a
    call it cannot trace outside its graph, on concrete values, as users get it; ``fullgraph=True`` would
    turn every refusal into dynamo's own ``Unsupported`` error instead of layoutcore's."""

    def relayout_bytes(self, relayout: Callable[[], Any]) -> tuple[Any, int] | None:
        """Counted from the arguments of every collective torch runs meanwhile (CollectiveBytes)."""
        from ._relayout import CollectiveBytes

        with CollectiveBytes() as counted:
            result = relayout()
        return result, counted.moved

    def device_data(self, tensor: Any) -> list[tuple[str, np.ndarray]]:
        import torch.distributed as dist
        from torch.distributed._local_tensor import LocalTensor
        from torch.distributed.tensor import DTensor

        assert isinstance(tensor, DTensor), type(tensor)
        device_mesh = tensor.device_mesh
        kind = str(device_mesh.device_type).upper()
        grid = [int(r) for r in device_mesh.mesh.flatten().tolist()]
        # The DTensor's stored local tensor, read without dispatching an op: any op on a LocalTensor (to_local,
        # detach) enters a process-global LocalTensorMode, which breaks the driver's work in other threads.
        local = tensor._local_tensor
        if not isinstance(local, LocalTensor):
            local = tensor.to_local().detach()
        if isinstance(local, LocalTensor):  # the simulation: one tensor per simulated rank
            per_rank = local._local_tensors
            return [(f"{kind}:{r}", _numpy(per_rank[r])) for r in grid]
        if dist.get_backend() == "fake":  # simulated, all ranks hold this one plain tensor
            return [(f"{kind}:{r}", _numpy(local)) for r in grid]
        me = dist.get_rank()
        return [(f"{kind}:{r}", _numpy(local)) for r in grid if r == me]

    def from_numpy(self, array: np.ndarray) -> Any:
        """``torch.from_numpy`` of a copy; bfloat16 and float8 (ml_dtypes, which NumPy's buffer protocol does not
        name to torch) travel as their same-width integer bits and are viewed back as torch's dtype."""
        import torch

        array = np.array(array)
        special = _VIEWED.get(array.dtype.name)
        if special is None:
            return torch.from_numpy(array)
        bits, torch_name = special
        return torch.from_numpy(array.view(bits)).view(getattr(torch, torch_name))

    def ones_fn(self) -> Callable[..., Any]:
        import torch

        return cast("Callable[..., Any]", torch.ones)

    # A torch op on simulated DTensors runs under spmd: outside it the driver refuses (see _spmd below).
    def identity_op(self, tensor: Any) -> Any:
        with self._spmd(tensor):
            return tensor + 0

    def subtract(self, a: Any, b: Any) -> Any:
        with self._spmd(a):
            return a - b

    def subtract_inplace(self, target: Any, value: Any) -> bool:
        import torch

        with self._spmd(target), torch.no_grad():  # a Variable's value is a Parameter that may require grad
            target.sub_(value)
        return True

    # arithmetic_dtypes: the default; torch 2.13 has no CPU addition for uint16/32/64 or float8 ("add_stub").

    def add_inplace(self, target: Any, delta: Any) -> bool:
        """``Tensor.add_`` on the DTensor itself, or on a Variable's DTensor Parameter (what an optimizer updates)."""
        import torch

        from layoutcore import Variable

        tensor = target.value if isinstance(target, Variable) else target
        with self._spmd(tensor), torch.no_grad():
            tensor.add_(delta)
        return True

    def compile(self, fn: Callable[..., Any]) -> Callable[..., Any] | None:
        import torch

        return cast("Callable[..., Any] | None", torch.compile(fn, backend="eager"))

    # -- SPMD section: torch's operations on DTensors ---------------------------------------------
    # Run inside the driver's spmd context (LocalTensorMode in the simulation): outside it, a
    # redistribution inside the op chunks every simulated rank as rank 0 (wrong data).
    def _spmd(self, tensor: Any) -> Any:
        driver: Any = self.driver  # the torch driver (spmd is its own)
        return driver.spmd(tensor.device_mesh.size())

    def matmul(self, a: Any, b: Any) -> Any:
        import torch

        with self._spmd(a):
            return torch.matmul(a, b)

    def einsum(self, subscripts: str, *operands: Any) -> Any:
        import torch

        with self._spmd(operands[0]):
            return torch.einsum(subscripts, *operands)

    def add(self, a: Any, b: Any) -> Any:
        with self._spmd(a):
            return a + b

    def sum(self, tensor: Any, axis: int | tuple[int, ...] | None = None) -> Any:
        with self._spmd(tensor):
            return tensor.sum() if axis is None else tensor.sum(dim=axis)

    def output_layout(self, tensor: Any) -> tuple[tuple[Any, ...] | None, tuple[str, ...], str]:
        """``Shard(d)`` on mesh dim ``m`` puts mesh axis ``m`` on tensor axis ``d`` (mesh order, major
        first); ``Partial`` is a pending sum over that mesh axis; other placements are no layout."""
        mesh = tensor.device_mesh
        names = mesh.mesh_dim_names or tuple(f"dim{i}" for i in range(mesh.ndim))
        per_axis: list[list[str]] = [[] for _ in range(tensor.ndim)]
        pending: list[str] = []
        exact = True
        for name, placement in zip(names, tensor.placements, strict=True):
            if placement.is_partial():
                pending.append(name)
            elif placement.is_shard() and type(placement).__name__ == "Shard":
                per_axis[placement.dim].append(name)
            elif not placement.is_replicate():
                exact = False  # e.g. _StridedShard: not a mesh-axis layout
        axes = tuple(None if not n else n[0] if len(n) == 1 else tuple(n) for n in per_axis)
        return (axes if exact else None), tuple(pending), str(tuple(tensor.placements))

    def reduce_pending(self, tensor: Any) -> Any:
        from torch.distributed.tensor import Replicate

        placements = [Replicate() if p.is_partial() else p for p in tensor.placements]
        with self._spmd(tensor):
            return tensor.redistribute(tensor.device_mesh, placements)


#: NumPy (ml_dtypes) dtype name -> (same-width integer NumPy dtype, torch dtype name): the dtypes whose
#: bits cross between torch and NumPy through an integer view.
_VIEWED: dict[str, tuple[np.dtype[Any], str]] = {
    "bfloat16": (np.dtype("int16"), "bfloat16"),
    "float8_e4m3fn": (np.dtype("uint8"), "float8_e4m3fn"),
    "float8_e5m2": (np.dtype("uint8"), "float8_e5m2"),
    "float8_e8m0fnu": (np.dtype("uint8"), "float8_e8m0fnu"),
}


def _numpy(tensor: Any) -> np.ndarray:
    """A copy of a plain torch tensor's data in its own dtype (ml_dtypes' for bfloat16 and float8), bit for bit:
    never through a float conversion, which would widen the dtype."""
    import torch

    tensor = tensor.detach().cpu()
    name = str(tensor.dtype).removeprefix("torch.")
    if name in _VIEWED:
        import ml_dtypes

        bits, _ = _VIEWED[name]
        raw = tensor.view(torch.int16 if bits.itemsize == 2 else torch.uint8).numpy()
        return np.array(raw.view(getattr(ml_dtypes, name)))
    return np.array(tensor.numpy())
