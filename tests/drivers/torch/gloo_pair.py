"""Joining the 2-rank gloo group of a ``mp_torch_*_worker.py`` script (``RANK PORT TIMEOUT_S`` on its command line)."""

from __future__ import annotations

import datetime
import sys

import torch.distributed as dist


def join_gloo_pair() -> int:
    """Join the gloo group of 2 on 127.0.0.1 that ``sys.argv`` names (``RANK PORT TIMEOUT_S``); returns the rank."""
    rank, port, timeout_s = int(sys.argv[1]), sys.argv[2], float(sys.argv[3])
    dist.init_process_group(
        "gloo",
        init_method=f"tcp://127.0.0.1:{port}",
        rank=rank,
        world_size=2,
        timeout=datetime.timedelta(seconds=timeout_s),
    )
    return rank
