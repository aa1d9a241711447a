"""Helpers shared by the TensorFlow driver's tests (tests/drivers/tensorflow is on sys.path under pytest)."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[3]

#: TF's full name of local CPU ``i``.
FULL = "/job:localhost/replica:0/task:0/device:CPU:{}".format


def child_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    """The environment of a child interpreter: no driver choice, quiet TF, plus ``extra``."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("LAYOUTCORE_", "DTENSOR_"))}
    env["TF_CPP_MIN_LOG_LEVEL"] = "3"
    env.update(extra or {})
    return env


def run_python(
    program: str, *, env: dict[str, str] | None = None, timeout: float = 120
) -> subprocess.CompletedProcess[str]:
    """Run ``program`` in a fresh interpreter; on timeout it is killed with SIGKILL (TF may ignore SIGTERM)."""
    proc = subprocess.Popen(
        [sys.executable, "-c", program], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=child_env(env)
    )
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.send_signal(signal.SIGKILL)
        out, err = proc.communicate()
        raise AssertionError(
            f"child did not finish within {timeout} s\nstdout:\n{out}\nstderr:\n{err[-3000:]}"
        ) from None
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)


def free_ports(count: int) -> list[int]:
    """``count`` distinct free TCP ports on 127.0.0.1 (bound at once, then released)."""
    sockets = [socket.socket() for _ in range(count)]
    try:
        for s in sockets:
            s.bind(("127.0.0.1", 0))
        return [s.getsockname()[1] for s in sockets]
    finally:
        for s in sockets:
            s.close()
