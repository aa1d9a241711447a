"""Torch ops on the simulation's DTensors outside ``layoutcore_torch.spmd``: right, or a typed refusal.

Outside ``LocalTensorMode`` DTensor's Python code runs once, as rank 0 (``DeviceMesh.get_coordinate`` is
not patched there), so torch 2.13 silently gave wrong data: ``A @ B`` with ``A`` sharded on the
contracting axis moved rank 0's block of ``B`` to every rank, and a relayout to replicated then gave
``[[8, 14], ...]`` instead of ``a @ b = [[28, 34], ...]``. Every expected value here is NumPy's.
"""

from __future__ import annotations

import json
import textwrap
from collections.abc import Callable
from typing import Any

import layoutcore_torch
import numpy as np
import pytest
import torch
from conftest import run_python
from layoutcore_torch import TorchDriver
from torch.distributed.tensor import DTensor, Replicate, Shard

import layoutcore as lc
from layoutcore import Layout, Mesh, UnsupportedLayoutError
from layoutcore.driver import Limitation

MESH = Mesh((2,), ("x",))
A = np.arange(12.0).reshape(3, 4)
B = np.arange(8.0).reshape(4, 2)


def _operands(driver: TorchDriver) -> tuple[DTensor, DTensor]:
    """``A`` sharded on its contracting axis 1, ``B`` replicated."""
    a = lc.distribute_tensor(A, Layout((None, "x"), MESH), driver=driver)
    b = lc.distribute_tensor(B, Layout((None, None), MESH), driver=driver)
    return a, b


def _replicate(t: DTensor) -> Any:
    """``t``'s full value (pending sums summed), through torch's own redistribute under the mode."""
    with layoutcore_torch.spmd(MESH):
        full = t.redistribute(placements=[Replicate()])
    return lc.to_numpy(full, driver="torch")


# Each op involves what went wrong: a Replicate -> Shard step (rank-dependent chunk), a collective, or both.
OPS: dict[str, tuple[Callable[[DTensor, DTensor], DTensor], np.ndarray]] = {
    "matmul over the sharded contracting axis": (lambda a, b: a @ b, A @ B),
    "replicate -> shard": (lambda a, b: b.redistribute(placements=[Shard(0)]), B),
    "all-gather (full_tensor)": (lambda a, b: a.full_tensor(), A),
    "sharded + replicated": (lambda a, b: a + b[:, 0], A + B[:, 0]),
    "sum into a pending sum": (lambda a, b: a.sum(dim=1), A.sum(axis=1)),
}


@pytest.mark.parametrize("name", sorted(OPS))
def test_outside_spmd_refuses_with_a_typed_error_or_is_right(driver: TorchDriver, name: str) -> None:
    op, want = OPS[name]
    a, b = _operands(driver)
    try:
        got = op(a, b)
    except UnsupportedLayoutError as err:
        assert (err.driver, err.feature) == ("torch", Limitation.OUTSIDE_SPMD)
        assert "layoutcore_torch.spmd(mesh)" in str(err)
        return
    value = _replicate(got) if isinstance(got, DTensor) else np.asarray(got)
    np.testing.assert_allclose(value, want)


@pytest.mark.parametrize("name", sorted(OPS))
def test_inside_spmd_the_same_ops_are_right(driver: TorchDriver, name: str) -> None:
    op, want = OPS[name]
    a, b = _operands(driver)
    with layoutcore_torch.spmd(MESH):
        got = op(a, b)
    np.testing.assert_allclose(_replicate(got) if isinstance(got, DTensor) else got, want)


def test_the_reported_case_refuses_outside_and_is_right_inside(driver: TorchDriver) -> None:
    a, b = _operands(driver)
    with pytest.raises(UnsupportedLayoutError, match=r"layoutcore_torch\.spmd\(mesh\)") as err:
        a @ b  # torch 2.13 gave a partial sum that relayouts to [[8, 14], ...]
    assert err.value.feature is Limitation.OUTSIDE_SPMD
    with layoutcore_torch.spmd(MESH):
        c = a @ b
    np.testing.assert_allclose(lc.to_numpy(lc.relayout(c, Layout((None, None), MESH), driver=driver)), A @ B)


def test_driver_calls_and_rank_free_reads_work_outside_spmd(driver: TorchDriver) -> None:
    a, _ = _operands(driver)
    # The driver's own calls enter the mode themselves.
    np.testing.assert_array_equal(lc.to_numpy(lc.relayout(a, Layout(("x", None), MESH), driver=driver)), A)
    assert lc.fetch_layout(a, driver=driver) == Layout((None, "x"), MESH)
    # Reads that take nothing rank-dependent stay allowed: shape queries, to_local, nn.Parameter's detach.
    assert tuple(a.shape) == (3, 4) and a.to_local().shape == (3, 2) and a.ndim == 2
    param = torch.nn.Parameter(a)
    np.testing.assert_array_equal(lc.to_numpy(param, driver=driver), A)


def test_release_simulation_gives_localtensor_back_its_own_dispatch() -> None:
    code = textwrap.dedent(
        """
        import json
        import numpy as np, layoutcore as lc, layoutcore_torch, torch
        from torch.distributed._local_tensor import LocalTensor
        own = LocalTensor.__dict__["__torch_dispatch__"]
        d = lc.distribute_tensor(np.arange(4.0), lc.Layout(["x"], lc.Mesh((2,), ("x",))), driver="torch")
        try:
            d * 2
            refused = None
        except lc.UnsupportedLayoutError as err:
            refused = err.feature
        layoutcore_torch.release_simulation()
        restored = LocalTensor.__dict__["__torch_dispatch__"] is own
        # torch's own LocalTensor, used without layoutcore, computes per rank outside any mode again.
        lt = LocalTensor({0: torch.zeros(2), 1: torch.ones(2)}) + 1
        print(json.dumps({"refused": refused, "restored": restored,
                          "values": [lt._local_tensors[r].tolist() for r in (0, 1)]}))
        """
    )
    proc = run_python(code)
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert out == {"refused": "outside_spmd", "restored": True, "values": [[1.0, 1.0], [2.0, 2.0]]}


def test_to_numpy_outside_spmd_finishes_a_pending_collective(driver: TorchDriver) -> None:
    # RowwiseParallel(use_local_output=False) leaves its all-reduce pending (an AsyncCollectiveTensor) in the
    # output DTensor; reading it is waiting on that collective, a torch op the driver runs in the mode itself.
    from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, parallelize_module

    torch.manual_seed(0)
    base = torch.nn.Sequential(torch.nn.Linear(4, 6), torch.nn.Linear(6, 4))
    x = torch.randn(3, 4)
    want = base(x).detach().numpy()
    plan = {"0": ColwiseParallel(), "1": RowwiseParallel(use_local_output=False)}
    with layoutcore_torch.spmd(MESH):
        model = parallelize_module(base, layoutcore_torch.to_torch_mesh(MESH), plan)
        out = model(lc.distribute_tensor(x, Layout((None, None), MESH), driver=driver))
    assert type(out._local_tensor).__name__ == "AsyncCollectiveTensor"  # the case this test is about
    np.testing.assert_allclose(lc.to_numpy(out, driver=driver), want, rtol=1e-5, atol=1e-6)
