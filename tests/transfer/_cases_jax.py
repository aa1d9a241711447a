"""Scenario ``jax`` of _worker.py: torch senders 0 and 1 (rows on a 2-rank mesh), one JAX process (rank 2,
4 CPU devices) receiving on a 2x2 mesh, then NumPy 2-axis uneven targets, then JAX ``into=`` (arrays replaced,
a ``layoutcore.Variable`` assigned)."""

from __future__ import annotations

from typing import Any

import numpy as np

import layoutcore as lc
from layoutcore import Layout, Mesh, transfer

SHAPES = {"f32": ((6, 4), "float32"), "bf16": ((4, 6), "bfloat16"), "i32": ((8, 2), "int32")}
UNEVEN = {"u": ((7, 5), "float32")}
GRID = Mesh((2, 2), ("a", "b"))  # abstract: bound to each receiving driver's first 4 devices
JAX_TARGET = {
    "f32": Layout(("a", "b"), GRID),
    "bf16": Layout((("a", "b"), None), GRID),
    "i32": Layout((None, "b"), GRID),
}
NUMPY_TARGET = {"u": Layout((("b", "a"), None), GRID)}


def run(w: Any) -> None:
    w.torch_groups([0, 1])
    link = transfer.Link(senders=[0, 1], receivers=[2], timeout=60)
    rows = Layout(("x", None), w.torch_mesh([0, 1]))
    if w.rank < 2:
        for name, shapes in (("to_jax", SHAPES), ("to_numpy", UNEVEN), ("jax_into", SHAPES), ("numpy_into", UNEVEN)):
            tree = {k: lc.distribute_tensor(w.oracle(k, s, d), rows, driver="torch") for k, (s, d) in shapes.items()}
            c = w.counted(lambda tree=tree: link.send(tree))
            c.pop("out")
            c["report"] = w.report(link)
            w.RESULT[name] = c
        return
    import jax

    c = w.counted(lambda: link.receive(JAX_TARGET, driver="jax"))
    out = c.pop("out")
    c["report"] = w.report(link)
    c["ok"] = {k: w.shards_ok(out[k], w.oracle(k, *SHAPES[k]), JAX_TARGET[k], "jax") for k in SHAPES}
    c["jax_arrays"] = all(isinstance(v, jax.Array) for v in out.values())
    w.RESULT["to_jax"] = c

    c = w.counted(lambda: link.receive(NUMPY_TARGET, driver="numpy"))
    out = c.pop("out")
    c["report"] = w.report(link)
    c["ok"] = {k: w.shards_ok(out[k], w.oracle(k, *UNEVEN[k]), NUMPY_TARGET[k], "numpy") for k in UNEVEN}
    w.RESULT["to_numpy"] = c

    into: dict[str, Any] = {
        k: lc.distribute_tensor(np.zeros(s, w.oracle(k, s, d).dtype), JAX_TARGET[k], driver="jax")
        for k, (s, d) in SHAPES.items()
    }
    into["i32"] = lc.Variable(into["i32"], JAX_TARGET["i32"])  # assigned: the same object, holding the new value
    shardings = {k: into[k].sharding for k in ("f32", "bf16")}
    c = w.counted(lambda: link.receive(into=into))
    out = c.pop("out")
    c["report"] = w.report(link)
    value = {"f32": out["f32"], "bf16": out["bf16"], "i32": into["i32"].value}
    c["ok"] = {k: w.shards_ok(value[k], w.oracle(k, *SHAPES[k]), JAX_TARGET[k], "jax") for k in SHAPES}
    c["same_shardings"] = all(out[k].sharding == shardings[k] for k in shardings) and out["i32"] is into["i32"]
    w.RESULT["jax_into"] = c

    into_np = {"u": lc.distribute_tensor(np.zeros((7, 5), np.float32), NUMPY_TARGET["u"], driver="numpy")}
    c = w.counted(lambda: link.receive(into=into_np))
    out = c.pop("out")
    c["report"] = w.report(link)
    c["ok"] = {"u": w.shards_ok(into_np["u"], w.oracle("u", *UNEVEN["u"]), NUMPY_TARGET["u"], "numpy")}
    c["same_objects"] = out["u"] is into_np["u"]
    w.RESULT["numpy_into"] = c
