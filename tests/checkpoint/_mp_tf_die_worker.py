"""Client of a 2-client TF DTensor save where client 1 dies or hangs before saving (test_multiprocess.py).

Usage: python _mp_tf_die_worker.py CLIENT_ID PORT0,PORT1 ROOT dies|hangs. Client 0 prints
``RESULT <json>`` with the error its ``save`` raised and how long that took. A dead peer is
reported by TF itself (its coordination service misses the peer's heartbeats and aborts the
collectives); a hung one, still sending heartbeats, only by the barrier's timeout
(``LAYOUTCORE_CHECKPOINT_BARRIER_TIMEOUT``, set by the test).
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

import layoutcore_tensorflow
import numpy as np

client_id, ports, root, mode = int(sys.argv[1]), sys.argv[2].split(","), Path(sys.argv[3]), sys.argv[4]
layoutcore_tensorflow.initialize_multi_client(
    client_id, [f"localhost:{p}" for p in ports], num_cpu_devices=2, timeout=120
)

import layoutcore as lc  # noqa: E402
from layoutcore import Layout, Mesh  # noqa: E402

sys.path.insert(0, str(Path(__file__).parent))
from _mp_common import save_without_peer_and_report  # noqa: E402

t = lc.distribute_tensor(
    np.arange(64, dtype=np.float32).reshape(8, 8), Layout(("x", None), Mesh((4,), ("x",))), driver="tensorflow"
)
if client_id == 1:
    if mode == "hangs":
        time.sleep(300)  # alive (TF's heartbeats go on), never reaching the save; the test kills it
    os._exit(3)  # a peer that dies before its part of the save
save_without_peer_and_report(root, t)
