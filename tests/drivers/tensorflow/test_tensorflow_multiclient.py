"""Two DTensor clients on 127.0.0.1, and a lone client whose wait layoutcore bounds.

Every child runs under a hard deadline and is killed with SIGKILL on the way out: a DTensor
client stuck in its rendezvous ignores SIGTERM (docs/framework-facts.md#multi-process).
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import layoutcore_tensorflow as lctf
import pytest
from _tf_helpers import child_env, free_ports

import layoutcore as lc

WORKER = Path(__file__).with_name("tf_mc_worker.py")
DEADLINE_S = 90


def _finish(procs: list[subprocess.Popen[str]], deadline: float) -> list[tuple[int, str, str]]:
    results = []
    try:
        for proc in procs:
            out, err = proc.communicate(timeout=max(1.0, deadline - time.monotonic()))
            results.append((proc.returncode, out, err))
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()  # SIGKILL
                proc.communicate()
    return results


def test_two_clients_pack_relayout_and_read_the_global_value() -> None:
    ports = ",".join(str(p) for p in free_ports(2))
    deadline = time.monotonic() + DEADLINE_S
    procs = [
        subprocess.Popen(
            [sys.executable, str(WORKER), str(cid), ports],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=child_env(),
        )
        for cid in (0, 1)
    ]
    results = _finish(procs, deadline)
    for cid, (rc, out, err) in enumerate(results):
        assert rc == 0, f"client {cid} rc {rc}\n{out}\n{err[-3000:]}"
        assert f"client {cid} ok: positions [{2 * cid}, {2 * cid + 1}]" in out, out


def test_a_lone_client_ends_after_the_timeout_with_a_message() -> None:
    timeout_s = 5.0
    ports = free_ports(2)  # the second client never starts
    program = (
        "import sys, time, layoutcore_tensorflow as lctf\n"
        "import tensorflow  # imported first, so the wait below is the rendezvous alone\n"
        "print('waiting', time.monotonic(), flush=True)\n"
        f"lctf.initialize_multi_client(0, ['localhost:{ports[0]}', 'localhost:{ports[1]}'], num_cpu_devices=2, "
        f"timeout={timeout_s})\n"
        "print('joined: impossible', flush=True)\n"
    )
    start = time.monotonic()
    proc = subprocess.Popen(
        [sys.executable, "-c", program], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=child_env()
    )
    ((rc, out, err),) = _finish([proc], start + 60)
    ended = time.monotonic()
    assert rc == -9, f"rc {rc}\n{out}\n{err[-3000:]}"  # ended by the watchdog's SIGKILL
    assert "joined" not in out
    waited = ended - float(out.split()[1])
    assert timeout_s - 0.5 <= waited <= timeout_s + 15, waited
    assert "did not finish within 5 s" in err and "client 0 of 2" in err and "not every client joined" in err, err[
        -2000:
    ]


def test_bad_arguments_are_refused_before_anything_starts(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("DTENSOR_CLIENT_ID", "DTENSOR_JOBS"):
        monkeypatch.delenv(name, raising=False)
    jobs = ["localhost:1", "localhost:2"]
    for kwargs in (
        {"client_id": 2, "jobs": jobs},
        {"client_id": -1, "jobs": jobs},
        {"client_id": True, "jobs": jobs},
        {"client_id": 0, "jobs": []},
        {"client_id": 0, "jobs": ["localhost"]},
        {"client_id": 0, "jobs": ["a:1,b:2"]},
        {"client_id": 0, "jobs": jobs, "timeout": 0},
    ):
        with pytest.raises(lctf.MultiClientInitError):
            lctf.initialize_multi_client(**kwargs)  # type: ignore[arg-type]
    with pytest.raises(lc.ConfigurationError):
        lctf.initialize_multi_client(0, jobs, num_cpu_devices=0)
    assert "DTENSOR_JOBS" not in os.environ and "DTENSOR_CLIENT_ID" not in os.environ
