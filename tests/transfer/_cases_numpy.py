"""Scenario ``numpy`` of _worker.py: one NumPy process (rank 0, 4 virtual devices) sends to torch ranks 1 and 2."""

from __future__ import annotations

from typing import Any

import layoutcore as lc
from layoutcore import Layout, Mesh, transfer

SHAPES = {"f32": ((8, 6), "float32"), "bf16": ((5, 4), "bfloat16"), "i32": ((4, 7), "int32")}


def run(w: Any) -> None:
    w.torch_groups([1, 2])
    link = transfer.Link(senders=[0], receivers=[1, 2], timeout=60)
    cols = Layout((None, "x"), w.torch_mesh([1, 2]))
    if w.rank == 0:
        rows = Layout(("x", None), Mesh((4,), ("x",)))
        tree = {k: lc.distribute_tensor(w.oracle(k, s, d), rows, driver="numpy") for k, (s, d) in SHAPES.items()}
        c = w.counted(lambda: link.send(tree))
        c.pop("out")
    else:
        c = w.counted(lambda: link.receive({k: cols for k in SHAPES}, driver="torch"))
        out = c.pop("out")
        c["ok"] = {k: w.shards_ok(out[k], w.oracle(k, *SHAPES[k]), cols, "torch") for k in SHAPES}
    c["report"] = w.report(link)
    w.RESULT["numpy_torch"] = c
