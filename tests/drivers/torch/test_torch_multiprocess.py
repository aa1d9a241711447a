"""Two real gloo processes on 127.0.0.1: the driver's real-group mode.

Each child runs tests/drivers/torch/mp_torch_worker.py under a hard timeout and is killed with
SIGKILL on the way out. What each rank holds is checked against layoutcore.geometry.
"""

from __future__ import annotations

import json
import runpy
import sys
import time
from typing import Any

import numpy as np
import pytest
from conftest import HERE, REPO, clean_env, free_port

import layoutcore as lc

WORKER = HERE / "mp_torch_worker.py"
#: Hard limit for one child (import torch + init + the work; the 2 cores are shared).
CHILD_LIMIT_S = 75
# tests/ is not on sys.path for the driver tests: the shared process runner is loaded from its file.
run_processes = runpy.run_path(str(REPO / "tests" / "_support.py"))["run_processes"]


def argv(rank: int, port: int, world: int, timeout_s: float) -> list[str]:
    return [sys.executable, str(WORKER), str(rank), str(port), str(world), str(timeout_s)]


def run(argvs: list[list[str]]) -> list[tuple[int, str, str]]:
    """Run the ranks within one shared deadline (:data:`CHILD_LIMIT_S`); whatever is left is killed."""
    env = clean_env({"LAYOUTCORE_DRIVER": "torch"})
    return run_processes(argvs, env=env, timeout=CHILD_LIMIT_S, cwd=str(REPO))


@pytest.fixture(scope="module")
def two_ranks() -> list[dict[str, Any]]:
    port = free_port()
    results = run([argv(r, port, 2, 60) for r in range(2)])
    outs = []
    for rank, (rc, out, err) in enumerate(results):
        assert rc == 0, f"rank {rank} rc={rc}\n{err[-4000:]}"
        outs.append(json.loads(out.strip().splitlines()[-1]))
    return outs


X = np.arange(24, dtype=np.float32).reshape(6, 4)
FIVE = np.arange(5, dtype=np.float32)
CASES = {  # the worker's cases: (mesh, value, layout axes, relayout target axes)
    "1d": (lc.Mesh((2,), ("x",)), X, ("x", None), (None, "x")),
    "1d_uneven": (lc.Mesh((2,), ("x",)), FIVE, ("x",), (None,)),
    "2d_2x1": (lc.Mesh((2, 1), ("x", "y")), X, ("x", "y"), ("y", "x")),
    "2d_1x2": (lc.Mesh((1, 2), ("x", "y")), X, ("x", "y"), (None, ("x", "y"))),
}


def test_devices_are_the_ranks(two_ranks: list[dict[str, Any]]) -> None:
    assert [o["devices"] for o in two_ranks] == [["CPU:0", "CPU:1"]] * 2


@pytest.mark.parametrize("case", sorted(CASES))
def test_each_rank_holds_its_shard(two_ranks: list[dict[str, Any]], case: str) -> None:
    mesh, value, axes, other = CASES[case]
    devices = mesh.devices or ("CPU:0", "CPU:1")
    layout, target = lc.Layout(axes, mesh), lc.Layout(other, mesh)
    for rank, out in enumerate(two_ranks):
        got = out[case]
        position = devices.index(f"CPU:{rank}")  # device "CPU:r" is rank r
        assert got["positions"] == [position]
        np.testing.assert_array_equal(got["local"], [value[layout.device_slices(value.shape)[position]]])
        np.testing.assert_array_equal(got["relayout_local"], [value[target.device_slices(value.shape)[position]]])
        np.testing.assert_array_equal(got["global"], value)
        np.testing.assert_array_equal(got["relayout_global"], value)
        np.testing.assert_array_equal(got["packed_global"], value)
        assert got["fetch_ok"] is True


def test_permuted_rank_grid_is_refused(two_ranks: list[dict[str, Any]]) -> None:
    for out in two_ranks:
        feature, message = out["permuted"]
        assert feature == "permuted_devices"
        assert "[1, 0]" in message and "ascending" in message


def test_missing_peer_fails_in_bounded_time_with_torchs_error() -> None:
    timeout_s = 5
    started = time.monotonic()
    [(rc, _out, err)] = run([argv(0, free_port(), 2, timeout_s)])
    elapsed = time.monotonic() - started
    assert rc not in (0, -9), f"rc={rc}\n{err[-2000:]}"
    assert "DistStoreError" in err and "1/2 clients joined" in err, err[-2000:]
    # The store waits `timeout` for the peer; import time of torch on a loaded machine is the rest.
    assert elapsed < timeout_s + 45, elapsed
