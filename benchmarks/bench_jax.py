"""Overhead of layoutcore's JAX driver over JAX's own calls for the same work.

Side by side in one run, on 8 CPU devices and a 4x2 mesh:

* ``layoutcore.distribute_tensor(x, layout)`` vs ``jax.device_put(x, NamedSharding)``;
* ``layoutcore.relayout(a, layout2)`` vs ``jax.device_put(a, other NamedSharding)``, each call on a
  new Array over the same buffers (``jax.Array`` caches its host copy, and ``device_put`` of the
  same array again reuses it); (x, y) -> (y, x) is a move where the driver runs its own plan at the
  relayout floor (``docs/before-you-run.md``), so this row is that plan's cost, not a wrapper's;

for a 64 MiB float32 array and a 1 KiB one. The two calls alternate within every repetition
(which goes first alternates too), each timed to ``block_until_ready``; the table shows medians
and the ratio of medians. Targets: <= 1.10x at 64 MiB, <= 2x at 1 KiB.

Run: ``python benchmarks/bench_jax.py [--quick]``; writes ``benchmarks/results/bench_jax.json``.
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

RESULTS = Path(__file__).with_name("results") / "bench_jax.json"
TARGETS = {"64 MiB": 1.10, "1 KiB": 2.0}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer repetitions (a smoke run)")
    parser.add_argument("--size", choices=["64 MiB", "1 KiB"], action="append", help="only these sizes (repeatable)")
    parser.add_argument("--out", type=Path, default=RESULTS, help="where to write the JSON results")
    args = parser.parse_args()

    lc.set_driver("jax")
    import jax
    from jax.sharding import NamedSharding, PartitionSpec

    devices = lc.list_devices()
    assert len(devices) >= 8, f"needs 8 devices, JAX has {devices}"
    mesh = lc.Mesh((4, 2), ("x", "y"))
    src = lc.Layout(("x", "y"), mesh)
    dst = lc.Layout(("y", "x"), mesh)
    jmesh = jax.sharding.Mesh(np.array(jax.devices()[:8]).reshape(4, 2), ("x", "y"))
    s_src, s_dst = NamedSharding(jmesh, PartitionSpec("x", "y")), NamedSharding(jmesh, PartitionSpec("y", "x"))

    sizes = {"64 MiB": (4096, 4096), "1 KiB": (16, 16)}
    sizes = {k: v for k, v in sizes.items() if not args.size or k in args.size}
    reps = {"64 MiB": 6 if args.quick else 60, "1 KiB": 200 if args.quick else 3000}
    rows = []
    for label, shape in sizes.items():
        x = np.random.default_rng(0).standard_normal(shape, dtype=np.float32)
        a = lc.distribute_tensor(x, src)
        assert np.array_equal(lc.to_numpy(lc.relayout(a, dst)), x)
        warm = 3 if label == "64 MiB" else 50
        shards = [shard.data for shard in a.addressable_shards]

        def fresh(a: Any = a, shards: list[Any] = shards) -> Any:
            # A new Array over a's buffers (no copy) per call: a jax.Array caches its host copy, and
            # device_put of the same array again reuses it, skipping the gather a new value pays.
            return jax.make_array_from_single_device_arrays(a.shape, a.sharding, shards)

        cases = {
            "distribute_tensor": (
                lambda x=x: jax.device_put(x, s_src),
                lambda x=x: lc.distribute_tensor(x, src),
                None,
            ),
            "relayout": (lambda b: jax.device_put(b, s_dst), lambda b: lc.relayout(b, dst), fresh),
        }
        for op, (native, ours, inputs) in cases.items():
            r = side_by_side(
                native, ours, reps[label], warm, sync=lambda result: result.block_until_ready(), fresh=inputs
            )
            rows.append({"op": op, "size": label, "shape": list(shape), "reps": reps[label], **r})

    print(f"{'op':<18} {'size':>7} {'jax (median)':>14} {'layoutcore':>14} {'+us':>8} {'ratio':>7} {'target':>7}")
    for r in rows:
        unit, k = ("ms", 1e3) if r["native_s"] > 1e-3 else ("us", 1e6)
        target = TARGETS[r["size"]]
        print(
            f"{r['op']:<18} {r['size']:>7} {r['native_s'] * k:>11.1f} {unit} {r['layoutcore_s'] * k:>11.1f} {unit} "
            f"{r['overhead_us']:>8.0f} "
            f"{r['ratio']:>6.2f}x {'<=' + str(target):>7}{'' if r['ratio'] <= target else '  MISSED'}"
        )
    args.out.parent.mkdir(parents=True, exist_ok=True)
    meta = {
        "jax": jax.__version__,
        "python": platform.python_version(),
        "machine": platform.machine(),
        "cpus": os.cpu_count(),
        "devices": len(devices),
        "mesh": "x=4,y=2",
        "layouts": ["('x','y') -> ('y','x')"],
        "quick": args.quick,
        "load_average_1min": os.getloadavg()[0],  # other jobs on the machine: ratios are noisy when high
    }
    if args.out == RESULTS:  # a --quick smoke run goes beside the committed result
        args.out = quick_path(RESULTS, args.quick)
    args.out.write_text(
        json.dumps({"statistic": "median", "meta": meta, "rows": rows, "targets": TARGETS}, indent=2) + "\n"
    )
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
