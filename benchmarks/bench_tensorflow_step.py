"""A training step over DVariables on the TF driver: ``tf.function`` against eager execution.

A two-layer MLP laid out Megatron style on a 2x4 mesh (``w1`` column-sharded and ``w2`` row-sharded
over ``model``, the batch sharded over ``batch``), its parameters ``layoutcore.Variable``\\ s (DTensor
``DVariable``\\ s). One step: ``relayout`` of the batch (DTensor's sharding constraint), forward, loss,
``tf.GradientTape`` gradients, and ``Variable.assign(relayout(p - lr * g, p.layout))`` per parameter.

Contenders, interleaved within every repetition (which goes first alternates):

* ``eager``: the step run op by op (under ``dtensor.default_mesh(mesh)``, which eager gradients need);
* ``tf.function``: the same Python step traced once by ``tf.function``; layoutcore's calls run at trace
  time only (they become ``Relayout`` ops), so each call is one DTensor function execution.

Both steps start from the same parameters and are checked to give the same loss. Medians in ms and
the ratio eager / tf.function, for a small (batch 64, width 256) and a larger (batch 512, width 2048)
model.

Run: ``python benchmarks/bench_tensorflow_step.py [--quick]``; writes
``benchmarks/results/bench_tensorflow_step.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
from pathlib import Path
from typing import Any

os.environ.setdefault("LAYOUTCORE_CPU_DEVICES", "8")

import numpy as np
from _timing import quick_path, side_by_side  # benchmarks/ is sys.path[0] when a benchmark runs

import layoutcore as lc

RESULTS = Path(__file__).with_name("results") / "bench_tensorflow_step.json"
#: (batch, features, hidden) per size.
SIZES = {"small": (64, 64, 256), "large": (512, 512, 2048)}


def build(mesh: lc.Mesh, features: int, hidden: int) -> dict[str, lc.Variable]:
    rng = np.random.default_rng(0)
    scale = 1.0 / np.sqrt(features)
    return {
        "w1": lc.Variable(
            (rng.standard_normal((features, hidden)) * scale).astype(np.float32), lc.Layout((None, "model"), mesh)
        ),
        "b1": lc.Variable(np.zeros(hidden, np.float32), lc.Layout(("model",), mesh)),
        "w2": lc.Variable(
            (rng.standard_normal((hidden, features)) * scale).astype(np.float32), lc.Layout(("model", None), mesh)
        ),
    }


def make_step(tf: Any, params: dict[str, lc.Variable], batch: lc.Layout, lr: float = 1e-3) -> Any:
    def step(x: Any, y: Any) -> Any:
        x = lc.relayout(x, batch)
        with tf.GradientTape() as tape:
            h = tf.nn.relu(tf.matmul(x, params["w1"].value) + params["b1"].value)
            error = tf.matmul(h, params["w2"].value) - y
            loss = tf.reduce_mean(error * error)
        grads = tape.gradient(loss, [p.handle for p in params.values()])
        for p, g in zip(params.values(), grads, strict=True):
            p.assign(lc.relayout(p.value - lr * g, p.layout))
        return loss

    return step


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="fewer repetitions (a smoke run)")
    args = parser.parse_args()

    lc.set_driver("tensorflow")
    import tensorflow as tf
    from layoutcore_tensorflow import to_tensorflow_mesh
    from tensorflow.experimental import dtensor

    mesh = lc.Mesh((2, 4), ("batch", "model"))
    batch_layout = lc.Layout(("batch", None), mesh)
    rows = []
    for size_name, (n, features, hidden) in SIZES.items():
        reps, warmup = (5, 2) if args.quick else ((51, 5) if size_name == "large" else (201, 10))
        rng = np.random.default_rng(1)
        x = lc.distribute_tensor(rng.standard_normal((n, features)).astype(np.float32), batch_layout)
        y = lc.distribute_tensor(rng.standard_normal((n, features)).astype(np.float32), batch_layout)
        eager = make_step(tf, build(mesh, features, hidden), batch_layout)
        graph = tf.function(make_step(tf, build(mesh, features, hidden), batch_layout), autograph=False)
        with dtensor.default_mesh(to_tensorflow_mesh(mesh)):
            first_eager = float(lc.to_numpy(eager(x, y)))
            first_graph = float(lc.to_numpy(graph(x, y)))  # traces once
            assert np.isclose(first_eager, first_graph, rtol=1e-5), (first_eager, first_graph)
            stats = side_by_side(lambda f=graph, x=x, y=y: f(x, y), lambda f=eager, x=x, y=y: f(x, y), reps, warmup)
        rows.append(
            {
                "size": size_name,
                "batch": n,
                "features": features,
                "hidden": hidden,
                "tf_function_s": stats["native_s"],
                "eager_s": stats["layoutcore_s"],
                "eager_over_tf_function": stats["ratio"],
            }
        )

    print(f"training step on the TF driver, {len(lc.list_devices())} logical CPUs, mesh batch=2 x model=4")
    print(
        f"{'size':6} {'batch x features x hidden':26} {'tf.function ms':>15} {'eager ms':>9} {'eager/tf.function':>18}"
    )
    for r in rows:
        dims = f"{r['batch']} x {r['features']} x {r['hidden']}"
        print(
            f"{r['size']:6} {dims:26} {r['tf_function_s'] * 1e3:15.3f} {r['eager_s'] * 1e3:9.3f} "
            f"{r['eager_over_tf_function']:18.2f}"
        )
    RESULTS.parent.mkdir(exist_ok=True)
    out = quick_path(RESULTS, args.quick)
    out.write_text(
        json.dumps(
            {
                "benchmark": "bench_tensorflow_step",
                "statistic": "median",
                "quick": args.quick,
                "python": platform.python_version(),
                "tensorflow": tf.__version__,
                "devices": len(lc.list_devices()),
                "mesh": "batch=2,model=4",
                "rows": rows,
            },
            indent=2,
        )
        + "\n"
    )
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
