"""Scenarios ``die`` and ``hang`` of _worker.py: sender rank 1 dies (or hangs) after packing two buckets of a
many-bucket transfer; the survivors (sender 0, NumPy receiver 2) must raise TransferError within the timeout."""

from __future__ import annotations

import json
import os
import time
from typing import Any

import numpy as np

import layoutcore as lc
from layoutcore import Layout, Mesh, TransferError, transfer
from layoutcore.transfer import _schedule

TIMEOUT = 10.0


def run(w: Any) -> None:
    w.torch_groups([0, 1])
    link = transfer.Link(senders=[0, 1], receivers=[2], timeout=TIMEOUT, bucket_bytes=4096)
    value = np.arange(256 * 256, dtype=np.float32).reshape(256, 256)
    if w.rank == 1:
        real, calls = _schedule.pack, []

        def failing_pack(*args: Any) -> Any:
            calls.append(1)
            if len(calls) > 2:
                if w.scenario == "die":
                    os._exit(3)
                time.sleep(3600)
            return real(*args)

        _schedule.pack = failing_pack  # type: ignore[assignment]
    start = time.monotonic()
    error = None
    try:
        if w.rank < 2:
            link.send({"w": lc.distribute_tensor(value, Layout(("x", None), w.torch_mesh([0, 1])), driver="torch")})
        else:
            link.receive({"w": Layout((None, "x"), Mesh((2,), ("x",)))}, driver="numpy")
    except TransferError as exc:
        error = str(exc)[:2000]
    print(
        "RESULT "
        + json.dumps({"rank": w.rank, "error": error, "seconds": time.monotonic() - start, "timeout": TIMEOUT}),
        flush=True,
    )
    os._exit(0)  # the group cannot shut down cleanly without its peer
