"""Two processes on each framework's own engine (JAX jax.distributed, torch gloo, two TF DTensor clients).

Both save one checkpoint together (each its own blocks, the commit after a barrier), then each
loads it under another mesh shape reading only its devices' byte ranges, measured by the kernel
(``/proc/self/io`` ``rchar``, files evicted from the page cache first) against ``read_plan``.
A checkpoint saved by one process loads in two, and the one saved by two loads in one.
Every child runs under a deadline and is killed on the way out.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import layoutcore as lc
from layoutcore import Layout, Mesh, checkpoint

sys.path.insert(0, str(Path(__file__).parent))
from _mp_common import oracle, targets
from _support import run_processes
from test_matrix import _python

WORKER = Path(__file__).with_name("_mp_worker.py")
DEVICES = {"jax": 8, "torch": 2, "tensorflow": 4}


def _free_port() -> int:
    return _free_ports(1)[0]


def _free_ports(count: int) -> list[int]:
    """``count`` distinct free TCP ports on 127.0.0.1 (bound at once, then released)."""
    sockets = [socket.socket() for _ in range(count)]
    try:
        for s in sockets:
            s.bind(("127.0.0.1", 0))
        return [int(s.getsockname()[1]) for s in sockets]
    finally:
        for s in sockets:
            s.close()


def _run_pair(framework: str, root: Path) -> list[dict[str, object]]:
    python = _python(framework)
    if python is None:
        pytest.skip(f"no interpreter with {framework} installed")
    # a DTensor cluster listens on one port per client
    port = ",".join(map(str, _free_ports(2))) if framework == "tensorflow" else str(_free_port())
    env = {k: v for k, v in os.environ.items() if not k.startswith(("LAYOUTCORE_", "JAX_", "XLA_FLAGS", "DTENSOR_"))}
    env["JAX_PLATFORMS"] = "cpu"
    env["TF_CPP_MIN_LOG_LEVEL"] = "3"
    argvs = [[python, str(WORKER), framework, str(i), port, str(root)] for i in (0, 1)]
    outputs = run_processes(argvs, env=env, timeout=420)
    # every worker's output on a failure: the one that died first is often not the one that reports it
    assert all(rc == 0 for rc, _, _ in outputs), f"{framework} worker(s) failed:\n" + "\n".join(
        f"worker {i} (rc {rc}):\n{out[-2000:]}\n{err[-8000:]}" for i, (rc, out, err) in enumerate(outputs)
    )
    results = []
    for _, out, err in outputs:
        line = next((x for x in out.splitlines() if x.startswith("RESULT ")), None)
        assert line is not None, f"{framework} worker printed no RESULT:\n{out[-2000:]}\n{err[-4000:]}"
        results.append(json.loads(line[len("RESULT ") :]))
    return results


@pytest.mark.parametrize("framework", ["jax", "torch", "tensorflow"])
def test_two_processes_save_and_load_reading_only_their_bytes(framework: str, tmp_path: Path) -> None:
    n = DEVICES[framework]
    declared, _ = targets(n, multi_axis=framework != "tensorflow")
    one_mesh = Mesh((8,), ("x",))
    checkpoint.save(  # saved by one process (this one, NumPy driver, 8 devices)
        tmp_path / "one",
        {k: lc.distribute_tensor(oracle(k), Layout(("x", None), one_mesh)) for k in ("w", "u", "r")},
        read_layouts={"w": declared["w"]},
    )
    results = _run_pair(framework, tmp_path)
    print(json.dumps(results))
    assert sorted(r["process"] for r in results) == [0, 1]
    for r in results:
        assert r["devices"] == n
        for case in ("declared", "undeclared", "from_one"):
            m = r[case]
            assert all(m["ok"].values()), (framework, case, m["ok"])  # per device, bit for bit, with layout
            predicted = m["plan_read"] + m["plan_meta"]
            assert abs(m["rchar"] - predicted) <= 0.01 * predicted, (case, m)
            assert m["plan_read"] < sum(v.nbytes for v in map(oracle, ("w", "u", "r")))  # only its share
        decl = r["declared"]
        assert decl["plan_read"] <= 1.05 * decl["plan_floor"], decl
    # the replicated tensor's block is on disk once; every shard was written by one process
    assert [p.name for p in (tmp_path / "two" / "r" / "c").rglob("*") if p.is_file()] == ["0"]
    assert not list(tmp_path.glob(".two.tmp-*"))
    # the checkpoint two processes saved loads in one, on another mesh
    grid = Mesh((2, 2), ("p", "q"))
    out = checkpoint.load(tmp_path / "two", {k: Layout(("q", "p"), grid) for k in ("w", "u", "r")})
    for k in ("w", "u", "r"):
        assert np.array_equal(lc.to_numpy(out[k]), oracle(k))


@pytest.mark.parametrize("case", ["torch", "tensorflow-dies", "tensorflow-hangs"])
def test_a_peer_dying_before_its_save_gives_checkpoint_error_and_no_checkpoint(case: str, tmp_path: Path) -> None:
    framework = case.split("-")[0]
    python = _python(framework)
    if python is None:
        pytest.skip(f"no interpreter with {framework} installed")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("LAYOUTCORE_", "DTENSOR_"))}
    if framework == "torch":
        args = [str(Path(__file__).with_name("_mp_die_worker.py")), str(_free_port()), str(tmp_path)]
        bound = 60.0  # the gloo group's timeout is 20 s
    else:
        ports = ",".join(map(str, _free_ports(2)))
        args = [str(Path(__file__).with_name("_mp_tf_die_worker.py")), ports, str(tmp_path), case.split("-")[1]]
        # a dead client: TF's coordination service notices within ~10 s; a hung one: the barrier's timeout
        env["LAYOUTCORE_CHECKPOINT_BARRIER_TIMEOUT"] = "5" if case.endswith("hangs") else "60"
        env["TF_CPP_MIN_LOG_LEVEL"] = "3"
        bound = 60.0
    procs = [
        subprocess.Popen(
            [python, args[0], str(i), *args[1:]],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
        )
        for i in (0, 1)
    ]
    try:
        out, err = procs[0].communicate(timeout=150)
    finally:
        for p in procs:
            if p.poll() is None:
                p.send_signal(signal.SIGKILL)
            p.wait()
    line = next((x for x in out.splitlines() if x.startswith("RESULT ")), None)
    assert line is not None, f"process 0 gave no result (rc {procs[0].returncode}):\n{err[-8000:]}"
    result = json.loads(line[len("RESULT ") :])
    assert result["error"] is not None and result["error"]["type"] == "CheckpointError", result
    assert "barrier" in result["error"]["message"] and "nothing was committed" in result["error"]["message"]
    if case.endswith("hangs"):
        assert "within 5 s" in result["error"]["message"], result
    assert result["seconds"] < bound
    assert not (tmp_path / "dead").exists()
