"""Scenario ``tf_mc`` of _worker.py: torch ranks 0 and 1, and a TensorFlow job of two processes (ranks 2 and 3), the
two clients of one multi-client DTensor cluster (2 logical CPUs each), so a 2x2 mesh spans both TF processes."""

from __future__ import annotations

import os
from typing import Any

from _cases_tf import GRID, SHAPES, TF_TARGET

import layoutcore as lc
from layoutcore import Layout, transfer


def run(w: Any) -> None:
    if w.rank >= 2:
        import layoutcore_tensorflow as lctf

        ports = os.environ["TF_MC_PORTS"].split(",")
        lctf.initialize_multi_client(w.rank - 2, [f"localhost:{p}" for p in ports], num_cpu_devices=2, timeout=90)
    w.torch_groups([0, 1])
    to_tf = transfer.Link(senders=[0, 1], receivers=[2, 3], timeout=60)
    from_tf = transfer.Link(senders=[2, 3], receivers=[0, 1], timeout=60)
    cols = Layout((None, "x"), w.torch_mesh([0, 1]))
    if w.rank < 2:
        rows = Layout(("x", None), w.torch_mesh([0, 1]))
        tree = {k: lc.distribute_tensor(w.oracle(k, s, d), rows, driver="torch") for k, (s, d) in SHAPES.items()}
        c = w.counted(lambda: to_tf.send(tree))
        c.pop("out")
        c["report"] = w.report(to_tf)
        w.RESULT["to_tf"] = c
        c = w.counted(lambda: from_tf.receive({k: cols for k in SHAPES}, driver="torch"))
        out = c.pop("out")
        c["report"] = w.report(from_tf)
        c["ok"] = {k: w.shards_ok(out[k], w.oracle(k, *SHAPES[k]), cols, "torch") for k in SHAPES}
        w.RESULT["from_tf"] = c
        return
    c = w.counted(lambda: to_tf.receive(TF_TARGET, driver="tensorflow"))
    out = c.pop("out")
    c["report"] = w.report(to_tf)
    c["ok"] = {k: w.shards_ok(out[k], w.oracle(k, *SHAPES[k]), TF_TARGET[k], "tensorflow") for k in SHAPES}
    c["devices"] = list(lc.get_driver("tensorflow").bind_mesh(GRID))
    w.RESULT["to_tf"] = c
    c = w.counted(lambda: from_tf.send(out))  # the received DTensors, from this client's components
    c.pop("out")
    c["report"] = w.report(from_tf)
    w.RESULT["from_tf"] = c
