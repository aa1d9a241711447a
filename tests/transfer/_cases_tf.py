"""Scenario ``tf`` of _worker.py: torch ranks 0 and 1 (rows on a 2-rank mesh) and one TensorFlow process (rank 2,
4 logical CPUs, TF DTensor on a 2x2 mesh) that imports torch only for the wire.

Links both ways: torch -> TF as new DTensors (``target=``) and into an existing ``DVariable`` and a
``layoutcore.Variable`` (assigned, same objects) and a DTensor (replaced, same layout); TF DTensors and a ``DVariable`` -> torch; and a target layout TF cannot hold
(one tensor axis over two mesh axes), refused on every rank before any byte moves.
"""

from __future__ import annotations

from typing import Any

import numpy as np

import layoutcore as lc
from layoutcore import Layout, Mesh, transfer

SHAPES = {"f32": ((6, 4), "float32"), "bf16": ((4, 6), "bfloat16"), "i32": ((8, 2), "int32")}
GRID = Mesh((2, 2), ("a", "b"))  # abstract: bound to TF's first 4 logical CPUs
TF_TARGET = {
    "f32": Layout(("a", "b"), GRID),
    "bf16": Layout(("b", None), GRID),
    "i32": Layout((None, "b"), GRID),
}
MULTI_AXIS = {"f32": Layout((("a", "b"), None), GRID)}  # TF DTensor has no tensor axis over two mesh axes


def run(w: Any) -> None:
    w.torch_groups([0, 1])
    to_tf = transfer.Link(senders=[0, 1], receivers=[2], timeout=60)
    from_tf = transfer.Link(senders=[2], receivers=[0, 1], timeout=60)
    if w.rank < 2:
        torch_side(w, to_tf, from_tf)
    else:
        tf_side(w, to_tf, from_tf)


def torch_side(w: Any, to_tf: Any, from_tf: Any) -> None:
    rows = Layout(("x", None), w.torch_mesh([0, 1]))
    for name in ("to_tf", "tf_into", "tf_refused"):
        tree = {k: lc.distribute_tensor(w.oracle(k, s, d), rows, driver="torch") for k, (s, d) in SHAPES.items()}
        c = w.counted(lambda tree=tree: to_tf.send(tree))
        c.pop("out")
        if c["error"] is None:
            c["report"] = w.report(to_tf)
        w.RESULT[name] = c
    cols = Layout((None, "x"), w.torch_mesh([0, 1]))
    c = w.counted(lambda: from_tf.receive({k: cols for k in SHAPES}, driver="torch"))
    out = c.pop("out")
    c["report"] = w.report(from_tf)
    c["ok"] = {k: w.shards_ok(out[k], w.oracle(k, *SHAPES[k]), cols, "torch") for k in SHAPES}
    w.RESULT["from_tf"] = c


def adopted_blocks(w: Any, receive: Any) -> tuple[dict[str, Any], bool]:
    """Run ``receive``; whether TF adopted every receive block as a component buffer (no copy after the wire)."""
    import tensorflow as tf

    from layoutcore.transfer import _into

    made: list[int] = []
    real = _into.aligned_empty

    def recording(shape: Any, dtype: Any) -> Any:
        block = real(shape, dtype)
        made.append(block.ctypes.data)
        return block

    _into.aligned_empty = recording  # type: ignore[assignment]
    try:
        c = w.counted(receive)
    finally:
        _into.aligned_empty = real  # type: ignore[assignment]
    out = c["out"] or {}
    drv = lc.get_driver("tensorflow")
    held = {np.from_dlpack(tf.bitcast(comp, tf.uint16) if comp.dtype == tf.bfloat16 else comp).ctypes.data
            for v in out.values() for comp in drv.unpack(v)}  # fmt: skip
    return c, bool(made) and set(made) <= held


def tf_side(w: Any, to_tf: Any, from_tf: Any) -> None:
    import tensorflow as tf
    from tensorflow.experimental import dtensor

    c, c["adopted"] = adopted_blocks(w, lambda: to_tf.receive(TF_TARGET, driver="tensorflow"))
    out = c.pop("out")
    c["report"] = w.report(to_tf)
    c["ok"] = {k: w.shards_ok(out[k], w.oracle(k, *SHAPES[k]), TF_TARGET[k], "tensorflow") for k in SHAPES}
    c["tf_dtensors"] = all(dtensor.is_dtensor(v) and v.dtype.name == SHAPES[k][1] for k, v in out.items())
    w.RESULT["to_tf"] = c

    zeros = {k: lc.distribute_tensor(np.zeros(s, w.oracle(k, s, d).dtype), TF_TARGET[k], driver="tensorflow")
             for k, (s, d) in SHAPES.items()}  # fmt: skip
    i32 = np.zeros(SHAPES["i32"][0], np.int32)
    into = {  # TF's own variable, a DTensor, and a layoutcore.Variable
        "f32": dtensor.DVariable(zeros["f32"]),
        "bf16": zeros["bf16"],
        "i32": lc.Variable(i32, TF_TARGET["i32"], driver="tensorflow"),
    }
    c = w.counted(lambda: to_tf.receive(into=into))
    out = c.pop("out")
    c["report"] = w.report(to_tf)
    value = {"f32": out["f32"], "bf16": out["bf16"], "i32": out["i32"].value}
    c["ok"] = {k: w.shards_ok(value[k], w.oracle(k, *SHAPES[k]), TF_TARGET[k], "tensorflow") for k in SHAPES}
    c["variables_assigned"] = out["f32"] is into["f32"] and out["i32"] is into["i32"]
    c["variables_hold"] = all(
        w.shards_ok(v, w.oracle(k, *SHAPES[k]), TF_TARGET[k], "tensorflow")
        for k, v in (("f32", into["f32"].read_value()), ("i32", into["i32"].value))
    )
    c["tensor_replaced"] = out["bf16"] is not into["bf16"] and dtensor.fetch_layout(
        out["bf16"]
    ) == dtensor.fetch_layout(into["bf16"])
    w.RESULT["tf_into"] = c

    c = w.counted(lambda: to_tf.receive(MULTI_AXIS, driver="tensorflow"))
    c.pop("out")
    w.RESULT["tf_refused"] = c
    w.RESULT["tf_dtype_refused"] = refused_dtype()

    tree: dict[str, Any] = {
        k: lc.distribute_tensor(w.oracle(k, s, d), TF_TARGET[k], driver="tensorflow") for k, (s, d) in SHAPES.items()
    }
    tree["i32"] = dtensor.DVariable(tree["i32"])  # a variable sends its current value
    assert isinstance(tree["i32"], tf.Variable)
    c = w.counted(lambda: from_tf.send(tree))
    c.pop("out")
    c["report"] = w.report(from_tf)
    c["no_copy"] = all(sends_from_tf_memory(tf, k, v) for k, v in tree.items())
    w.RESULT["from_tf"] = c


def refused_dtype() -> dict[str, Any] | None:
    """What making receive blocks of a dtype TF has no tensor of (float8_e8m0fnu) raises, before any byte."""
    from layoutcore import TensorSpec, TransferError
    from layoutcore.transfer._into import fresh_local

    try:
        fresh_local("scales", TensorSpec((4,), "float8_e8m0fnu", Layout((None,), GRID)), lc.get_driver("tensorflow"))
    except TransferError as exc:
        return {"message": str(exc), "paths": list(exc.paths)}
    return None


def sends_from_tf_memory(tf: Any, path: str, value: Any) -> bool:
    """Whether the sender reads ``value``'s components where TF keeps them (DLPack), not from copies."""
    from layoutcore.transfer._local import sender_local

    drv = lc.get_driver("tensorflow")
    arrays = sender_local(path, value).arrays
    comps = drv.unpack(value.read_value() if isinstance(value, tf.Variable) else value)
    words = [tf.bitcast(c, tf.uint16) if c.dtype == tf.bfloat16 else c for c in comps]
    return [a.ctypes.data for a in arrays] == [np.from_dlpack(c).ctypes.data for c in words]
