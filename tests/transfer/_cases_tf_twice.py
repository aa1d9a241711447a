"""Scenario ``tf_twice`` of _worker.py: torch rank 0 and two single-client TF processes (ranks 1 and 2, 2 logical CPUs
each). Both TF processes name their devices ``/job:localhost/replica:0/task:0/device:CPU:i``, so neither a receiver
side nor a sender side made of both can say which process holds a block: refused on every rank, 0 bytes."""

from __future__ import annotations

from typing import Any

from _cases_tf import SHAPES

import layoutcore as lc
from layoutcore import Layout, Mesh, transfer


def run(w: Any) -> None:
    w.torch_groups([0])
    to_tf = transfer.Link(senders=[0], receivers=[1, 2], timeout=60)
    from_tf = transfer.Link(senders=[1, 2], receivers=[0], timeout=60)
    pair = Layout(("a", None), Mesh((2,), ("a",)))  # abstract: each TF process binds its own CPU:0 and CPU:1
    solo = Layout((None, None), w.torch_mesh([0]))
    if w.rank == 0:
        tree = {k: lc.distribute_tensor(w.oracle(k, s, d), solo, driver="torch") for k, (s, d) in SHAPES.items()}
        w.RESULT["to_tf"] = w.counted(lambda: to_tf.send(tree))
        w.RESULT["from_tf"] = w.counted(lambda: from_tf.receive({k: solo for k in SHAPES}, driver="torch"))
    else:
        w.RESULT["to_tf"] = w.counted(lambda: to_tf.receive({k: pair for k in SHAPES}, driver="tensorflow"))
        tree = {k: lc.distribute_tensor(w.oracle(k, s, d), pair, driver="tensorflow") for k, (s, d) in SHAPES.items()}
        w.RESULT["from_tf"] = w.counted(lambda: from_tf.send(tree))
    for case in w.RESULT.values():
        if isinstance(case, dict):
            case.pop("out", None)
