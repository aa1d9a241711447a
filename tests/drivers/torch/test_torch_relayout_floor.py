"""Relayout at the physical floor on torch: the bytes torch's collectives carry equal ``relayout_plan``'s
``floor_bytes``, and every rank's block equals NumPy's slice of the value (layoutcore.geometry).

Bytes are counted by ``CollectiveBytes`` from the collectives' own arguments (the simulation's
collective implementations, or ``CommDebugMode`` on a real group), never from the driver's plan.
The simulation runs in this process (8 ranks); two real gloo processes run
``mp_torch_relayout_worker.py``.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from typing import Any

import ml_dtypes
import numpy as np
import pytest
import torch
from conftest import HERE, REPO, clean_env, free_port
from layoutcore_torch import TorchDriver, _relayout
from layoutcore_torch._relayout import CollectiveBytes

import layoutcore as lc
from layoutcore import Layout, Mesh
from layoutcore.driver import RelayoutMove

DEVICES = [f"CPU:{i}" for i in range(8)]
LINE = Mesh((8,), ("x",), devices=DEVICES)
GRID = Mesh((4, 2), ("x", "y"), devices=DEVICES)
FLAT = Mesh((8,), ("z",), devices=DEVICES)
HALF = Mesh((2, 2), ("a", "b"), devices=DEVICES[4:])
PAIR = Mesh((2,), ("c",), devices=["CPU:1", "CPU:6"])

#: name -> (source, target, shape): the benchmark's cases (smaller), and sub/superset moves.
CASES: dict[str, tuple[Layout, Layout, tuple[int, ...]]] = {
    "x -> None": (Layout(["x", None], LINE), Layout([None, None], LINE), (16, 8)),
    "None -> x": (Layout([None, None], LINE), Layout(["x", None], LINE), (16, 8)),
    "S0 -> S1": (Layout(["x", None], LINE), Layout([None, "x"], LINE), (16, 16)),
    "(x,y) -> (y,x)": (Layout(["x", "y"], GRID), Layout(["y", "x"], GRID), (16, 16)),
    "uneven S0 -> S1": (Layout(["x", None], LINE), Layout([None, "x"], LINE), (10, 13)),
    "((x,y),None) -> (None,(x,y))": (Layout([("x", "y"), None], GRID), Layout([None, ("x", "y")], GRID), (16, 16)),
    "(x,y) -> (None,(x,y))": (Layout(["x", "y"], GRID), Layout([None, ("x", "y")], GRID), (16, 16)),
    "cross-mesh 4x2 -> 8": (Layout(["x", None], GRID), Layout([None, "z"], FLAT), (16, 16)),
    "superset 2x2 -> 4x2": (Layout(["a", "b"], HALF), Layout(["y", "x"], GRID), (8, 8)),
    "subset 4x2 -> 2 devices": (Layout(["x", "y"], GRID), Layout([None, "c"], PAIR), (8, 6)),
    "rank 3 uneven": (Layout(["x", None, "y"], GRID), Layout([None, ("x", "y"), None], GRID), (5, 16, 3)),
}


def values(shape: tuple[int, ...], dtype: str) -> np.ndarray:
    """Distinct bit patterns per element (int64 beyond float precision, bfloat16 with low mantissa bits)."""
    n = int(np.prod(shape))
    if dtype == "bool":
        return (np.arange(n) % 3 == 1).reshape(shape)
    if dtype == "int64":
        return (np.arange(n, dtype=np.int64) * (1 << 40) + 7).reshape(shape)
    if dtype == "bfloat16":
        return (np.arange(n, dtype=np.float32) * 1.0078125 + 0.5).astype(ml_dtypes.bfloat16).reshape(shape)
    return np.arange(n, dtype=dtype).reshape(shape)


def torch_value(x: np.ndarray) -> torch.Tensor:
    if x.dtype == ml_dtypes.bfloat16:  # torch.from_numpy has no bfloat16: the same bits
        return torch.from_numpy(x.view(np.uint16).astype(np.int16)).view(torch.bfloat16)
    return torch.from_numpy(x)


def blocks(driver: TorchDriver, tensor: Any) -> list[np.ndarray]:
    """Each rank's block, read with torch's own calls (the bits, bfloat16 as its uint16 pattern)."""
    out = []
    for component in lc.unpack(tensor, driver=driver):
        if component.dtype == torch.bfloat16:
            out.append(component.view(torch.int16).numpy().view(np.uint16))
        else:
            out.append(component.numpy())
    return out


def expected_blocks(x: np.ndarray, layout: Layout) -> list[np.ndarray]:
    """NumPy's slice of ``x`` for each device of ``layout`` (bfloat16 as its uint16 bits)."""
    bits = x.view(np.uint16) if x.dtype == ml_dtypes.bfloat16 else x
    return [bits[s] for s in layout.device_slices(x.shape)]


@pytest.mark.parametrize("case", list(CASES))
def test_relayout_moves_the_floor_and_the_data(driver: TorchDriver, case: str) -> None:
    source, target, shape = CASES[case]
    x = values(shape, "float32")
    tensor = lc.distribute_tensor(x, source, driver=driver)
    with CollectiveBytes() as counted:
        moved = lc.relayout(tensor, target, driver=driver)
    assert counted.moved == lc.relayout_plan(source, target, shape, "float32").floor_bytes, counted.ops
    assert lc.fetch_layout(moved, driver=driver) == target
    for got, want in zip(blocks(driver, moved), expected_blocks(x, target), strict=True):
        np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("dtype", ["bfloat16", "int64", "bool"])
@pytest.mark.parametrize("case", ["(x,y) -> (y,x)", "uneven S0 -> S1", "cross-mesh 4x2 -> 8"])
def test_dtypes_move_as_bits(driver: TorchDriver, case: str, dtype: str) -> None:
    source, target, shape = CASES[case]
    x = values(shape, dtype)
    tensor = lc.distribute_tensor(torch_value(x), source, driver=driver)
    with CollectiveBytes() as counted:
        moved = lc.relayout(tensor, target, driver=driver)
    assert moved.dtype == torch_value(x).dtype
    assert counted.moved == lc.relayout_plan(source, target, shape, dtype).floor_bytes
    for got, want in zip(blocks(driver, moved), expected_blocks(x, target), strict=True):
        assert got.dtype == want.dtype
        np.testing.assert_array_equal(got, want)


def test_the_driver_keeps_redistribute_where_torch_plans_the_floor(driver: TorchDriver) -> None:
    """The choice reads torch's planned steps: S0 -> S1 is one all-to-all at the floor (kept), (x,y) -> (y,x)
    gathers first (planned instead), and across meshes torch has no plan at all."""
    kept = {"x -> None": "all_gather_into_tensor", "S0 -> S1": "shard_dim_alltoall"}
    for case, op in kept.items():
        source, target, shape = CASES[case]
        tensor = lc.distribute_tensor(values(shape, "float32"), source, driver=driver)
        assert _relayout.native_is_at_floor(driver, tensor, RelayoutMove.between(source, target, shape, "float32"))
        with CollectiveBytes() as counted:
            lc.relayout(tensor, target, driver=driver)
        assert [o.split()[0] for o in counted.ops] == [op]
    for case in ("(x,y) -> (y,x)", "uneven S0 -> S1", "((x,y),None) -> (None,(x,y))"):
        source, target, shape = CASES[case]
        tensor = lc.distribute_tensor(values(shape, "float32"), source, driver=driver)
        move = RelayoutMove.between(source, target, shape, "float32")
        assert not _relayout.native_is_at_floor(driver, tensor, move), case
        # what torch would have moved: more than the floor (counted by running redistribute itself)
        with driver.spmd(8), CollectiveBytes() as native:
            tensor.redistribute(driver.device_mesh(target.mesh), driver.placements(target))
        assert native.moved > lc.relayout_plan(source, target, shape, "float32").floor_bytes


def test_pending_sums_are_reduced_first(driver: TorchDriver) -> None:
    """A ``Partial`` (torch's pending sum) relayout onto another mesh: reduced by torch, then planned."""
    from torch.distributed.tensor import DTensor, Partial, Replicate

    per_rank = {r: torch.full((4, 6), float(r // 2)) for r in range(8)}  # rank r is x = r // 2, y = r % 2
    with driver.spmd(8):
        from layoutcore_torch import _private

        local = _private.make_local_tensor(per_rank)
        pending = DTensor.from_local(local, driver.device_mesh(GRID), [Partial(), Replicate()], run_check=False)
    target = Layout([None, "z"], FLAT)
    moved = lc.relayout(pending, target, driver=driver)
    # Partial over x sums the x coordinates 0 + 1 + 2 + 3 (replicated over y).
    np.testing.assert_array_equal(lc.to_numpy(moved, driver=driver), np.full((4, 6), 6.0))
    assert lc.fetch_layout(moved, driver=driver) == target


@pytest.mark.parametrize("case", ["(x,y) -> (y,x)", "cross-mesh 4x2 -> 8"])
def test_a_tensor_that_requires_grad(driver: TorchDriver, case: str) -> None:
    """The plan is differentiable: forward at the floor, and the gradient returns laid out as the input."""
    import layoutcore_torch

    source, target, shape = CASES[case]
    x = values(shape, "float32")
    weights = np.arange(x.size, dtype=np.float32).reshape(shape) % 7 - 3
    tensor = lc.distribute_tensor(torch.from_numpy(x).requires_grad_(True), source, driver=driver)
    with CollectiveBytes() as counted:
        moved = lc.relayout(tensor, target, driver=driver)
    assert counted.moved == lc.relayout_plan(source, target, shape, "float32").floor_bytes
    assert moved.requires_grad
    w = lc.distribute_tensor(weights, target, driver=driver)
    with layoutcore_torch.spmd(target.mesh):  # type: ignore[arg-type]
        (moved * w).sum().backward()
    assert tensor.grad is not None
    np.testing.assert_array_equal(lc.to_numpy(tensor.grad, driver=driver), weights)
    assert lc.fetch_layout(tensor.grad, driver=driver) == source


# ------------------------------------------------------------------------------------------------
# Two real gloo processes
# ------------------------------------------------------------------------------------------------
WORKER = HERE / "mp_torch_relayout_worker.py"


def _run_two_ranks() -> list[dict[str, Any]]:
    port = free_port()
    procs = [
        subprocess.Popen(
            [sys.executable, str(WORKER), str(rank), str(port), "2", "60"],
            env=clean_env({"LAYOUTCORE_DRIVER": "torch"}),
            cwd=REPO,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for rank in range(2)
    ]
    deadline = time.monotonic() + 90
    outs = []
    try:
        for rank, p in enumerate(procs):
            try:
                out, err = p.communicate(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                p.kill()
                out, err = p.communicate()
            assert p.returncode == 0, f"rank {rank} rc={p.returncode}\n{err[-4000:]}"
            outs.append(json.loads(out.strip().splitlines()[-1]))
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
    return outs


def test_gloo_two_processes_move_the_floor() -> None:
    sys.path.insert(0, str(HERE))
    try:
        from mp_torch_relayout_worker import CASES as GLOO_CASES
        from mp_torch_relayout_worker import value
    finally:
        sys.path.remove(str(HERE))
    ranks = _run_two_ranks()
    for name, (source, target, shape, dtype) in GLOO_CASES.items():
        floor = lc.relayout_plan(source, target, shape, dtype).floor_bytes
        assert sum(r[name]["sent"] for r in ranks) == floor, (name, [r[name]["ops"] for r in ranks])
        x = value(shape, dtype)
        x = (x.float() if x.dtype == torch.bfloat16 else x).numpy()
        slices = target.device_slices(shape)
        for r in ranks:
            result = r[name]
            assert result["layout_ok"], name
            for position, block in zip(result["positions"], result["blocks"], strict=True):
                np.testing.assert_array_equal(
                    np.array(block, dtype=x.dtype).reshape(x[slices[position]].shape), x[slices[position]]
                )
            if result["global"] is not None:
                np.testing.assert_array_equal(np.array(result["global"], dtype=x.dtype), x)
