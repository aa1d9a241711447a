"""Running a benchmark's torch gloo ranks as processes on 127.0.0.1 (bench_relayout_bytes, bench_relayout_wall)."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from typing import Any


def run_gloo_ranks(script: str, world: int, *args: str, timeout_s: float = 600) -> dict[str, Any]:
    """Run ``python script torch-gloo-worker RANK PORT WORLD *args`` once per rank and return rank 0's
    last stdout line, parsed as JSON.

    Each rank gets a clean environment for ``torch.distributed`` (no inherited ``LAYOUTCORE_*``,
    ``MASTER_*``, ``RANK``, ``WORLD_SIZE``) and ``LAYOUTCORE_DRIVER=torch``.

    Raises:
        RuntimeError: a rank exited non-zero (with the end of its stderr).
        subprocess.TimeoutExpired: a rank ran past ``timeout_s`` seconds.
    """
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    env = {k: v for k, v in os.environ.items() if not k.startswith(("LAYOUTCORE_", "MASTER_", "RANK", "WORLD_SIZE"))}
    env["LAYOUTCORE_DRIVER"] = "torch"
    procs = [
        subprocess.Popen(
            [sys.executable, script, "torch-gloo-worker", str(rank), str(port), str(world), *args],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for rank in range(world)
    ]
    try:
        outs = [p.communicate(timeout=timeout_s) for p in procs]
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
    for rank, (p, (_, err)) in enumerate(zip(procs, outs, strict=True)):
        if p.returncode:
            raise RuntimeError(f"gloo rank {rank} failed (rc {p.returncode}):\n{err[-3000:]}")
    result: dict[str, Any] = json.loads(outs[0][0].strip().splitlines()[-1])
    return result
