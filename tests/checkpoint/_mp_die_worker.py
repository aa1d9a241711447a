"""Rank of a 2-process torch gloo save where rank 1 dies before saving (test_multiprocess.py).

Usage: python _mp_die_worker.py RANK PORT ROOT. Rank 0 prints ``RESULT <json>`` with the error
its ``save`` raised and how long that took.
"""

from __future__ import annotations

import datetime
import os
import sys
from pathlib import Path

import numpy as np
import torch.distributed as dist

import layoutcore as lc
from layoutcore import Layout, Mesh

sys.path.insert(0, str(Path(__file__).parent))
from _mp_common import save_without_peer_and_report

rank, port, root = int(sys.argv[1]), int(sys.argv[2]), Path(sys.argv[3])
dist.init_process_group(
    "gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=2, timeout=datetime.timedelta(seconds=20)
)
t = lc.distribute_tensor(
    np.arange(64, dtype=np.float32).reshape(8, 8), Layout(("x", None), Mesh((2,), ("x",))), driver="torch"
)
if rank == 1:
    os._exit(3)  # a peer that dies before its part of the save
save_without_peer_and_report(root, t)
