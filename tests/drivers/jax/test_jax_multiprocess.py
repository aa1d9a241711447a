"""Two JAX processes on 127.0.0.1 (jax.distributed), 2 CPU devices each, one 4-device mesh.

Every child runs under a hard deadline and is SIGKILLed on the way out, so a hang can never
outlive the test.
"""

from __future__ import annotations

import json
import os
import runpy
import signal
import socket
import sys
import time
from pathlib import Path

import pytest
from layoutcore_jax import ABORT_GRACE_S

WORKER = Path(__file__).with_name("jax_mp_worker.py")
REPO = Path(__file__).resolve().parents[3]
# tests/ is not on sys.path for the driver tests: the shared process runner is loaded from its file.
run_processes = runpy.run_path(str(REPO / "tests" / "_support.py"))["run_processes"]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _argv(process_id: int, port: int, timeout_s: int) -> list[str]:
    return [sys.executable, str(WORKER), str(process_id), str(port), str(timeout_s)]


def _env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("LAYOUTCORE_", "JAX_", "XLA_FLAGS"))}
    env["LAYOUTCORE_DRIVER"] = "jax"
    env["JAX_PLATFORMS"] = "cpu"  # the CPU devices these tests mean, also on a GPU host
    return env


def test_two_processes_form_one_mesh_distribute_unpack_relayout() -> None:
    port = _free_port()
    results = run_processes([_argv(i, port, 60) for i in (0, 1)], env=_env(), timeout=90, cwd=str(REPO))
    seen = []
    for rc, out, err in results:
        assert rc == 0, f"worker failed (rc {rc}):\n{out}\n{err[-3000:]}"
        line = next(line for line in out.splitlines() if line.startswith("RESULT "))
        seen.append(json.loads(line[len("RESULT ") :]))
    for i, r in enumerate(seen):
        assert r["process_index"] == i
        # 4 global devices; the abstract mesh binds to them in JAX's global order.
        assert len(r["devices"]) == 4 and r["bound"] == r["devices"]
        assert r["local_positions"] == [2 * i, 2 * i + 1]  # row x=i of the 2x2 mesh is this process's
        assert r["fully_addressable"] is False
        assert len(r["rows_local"]) == 2 and r["rows_local"] == r["rows_expected"]
        assert len(r["cols_local"]) == 2 and r["cols_local"] == r["cols_expected"]
        assert r["fetch_layout_ok"] and r["global_ok"] and r["repacked_ok"]
        assert r["sum"] == float(sum(range(16)))
        # a large input JAX may alias (aligned in process 0 only) placed with the same collectives
        assert r["aligned_input"] is (i == 0)
        assert r["aligned_ok"] and r["after_ok"]
    # Each process holds different rows before the relayout, and pieces of every row after it.
    assert seen[0]["rows_local"] != seen[1]["rows_local"]
    assert seen[0]["cols_local"][0] == [[0.0], [4.0], [8.0], [12.0]]


@pytest.mark.parametrize("process_id", [0, 1], ids=["coordinator-alone", "client-alone"])
def test_a_missing_peer_ends_the_process_in_bounded_time_with_a_message(process_id: int) -> None:
    timeout_s = 3
    started = time.monotonic()
    ((rc, out, err),) = run_processes(
        [_argv(process_id, _free_port(), timeout_s)], env=_env(), timeout=60, cwd=str(REPO)
    )
    elapsed = time.monotonic() - started
    assert rc == -signal.SIGABRT, f"rc {rc}\n{out}\n{err[-2000:]}"
    assert elapsed < timeout_s + ABORT_GRACE_S + 10, elapsed  # + interpreter and JAX start-up
    assert f"layoutcore_jax: process {process_id} of 2 found no peer" in err
    assert "within timeout_s=3 s" in err and "SIGABRT" in err
    assert "RESULT" not in out
