"""Overhead of layoutcore's TensorFlow driver over DTensor's own calls for the same work.

Side by side in one run, on 8 logical CPUs and a 4x2 mesh:

* ``layoutcore.distribute_tensor(x, layout)`` vs ``dtensor.relayout(dtensor.copy_to_mesh(x, replicated), layout)``;
* ``layoutcore.relayout(t, layout2)`` vs ``dtensor.relayout(t, layout2)``;

for a 64 MiB float32 array (4096 x 4096) and a 1 KiB one (16 x 16), each under two layouts. The
native side uses ``dtensor.Layout`` objects built once, so the figure is what layoutcore adds:
validation, conversion lookups, and (for distribute) its choice of placement path. The two calls
alternate within every repetition (which goes first alternates too). DTensor runs each device's
part of an eager op on that device's own executor and returns before they finish (a 64 MiB relayout
returns in 0.4 ms, measured), so each timed call ends by reading every component of its result
(``sync``): without that, a call paid for the work its predecessor queued. The table shows medians
and the ratio of medians, and the JSON the minima too. Targets: <= 1.10x at 64 MiB, <= 2x at 1 KiB.

Run: ``python benchmarks/bench_tensorflow.py [--quick] [--size "1 KiB"] [--out PATH]``; writes
``benchmarks/results/bench_tensorflow.json`` by default.
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

RESULTS = Path(__file__).with_name("results") / "bench_tensorflow.json"
TARGETS = {"64 MiB": 1.10, "1 KiB": 2.0}
SIZES = {"64 MiB": (4096, 4096), "1 KiB": (16, 16)}
#: (source layout, relayout target) pairs; distribute uses the source layout.
LAYOUTS = [(("x", "y"), ("y", None)), (("x", None), (None, "y"))]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="fewer repetitions (a smoke run)")
    parser.add_argument("--size", choices=list(SIZES), action="append", help="only these sizes (repeatable)")
    parser.add_argument("--out", type=Path, default=RESULTS, help="where to write the JSON results")
    args = parser.parse_args()

    lc.set_driver("tensorflow")
    driver = lc.get_driver()
    from layoutcore_tensorflow import to_tensorflow_layout
    from tensorflow.experimental import dtensor

    def sync(result: Any) -> None:
        for component in dtensor.unpack(result):
            component.numpy()  # waits for this device's part (a view of the CPU buffer, not a copy)

    mesh = lc.Mesh((4, 2), ("x", "y"))
    rows = []
    for size_name, shape in SIZES.items():
        if args.size and size_name not in args.size:
            continue
        big = size_name == "64 MiB"
        reps, warmup = (5, 2) if args.quick else ((31, 3) if big else (301, 20))
        x = np.random.default_rng(0).random(shape, dtype=np.float32)
        replicated = to_tensorflow_layout(lc.Layout.replicated(mesh, 2))
        for source_axes, target_axes in LAYOUTS:
            source, target = lc.Layout(source_axes, mesh), lc.Layout(target_axes, mesh)
            n_source, n_target = to_tensorflow_layout(source), to_tensorflow_layout(target)
            stats = side_by_side(
                lambda x=x, n_source=n_source, r=replicated: dtensor.relayout(dtensor.copy_to_mesh(x, r), n_source),
                lambda x=x, source=source: lc.distribute_tensor(x, source),
                reps,
                warmup,
                sync=sync,
            )
            rows.append({"op": "distribute_tensor", "size": size_name, "layout": str(source_axes), **stats})
            t = lc.distribute_tensor(x, source)
            stats = side_by_side(
                lambda t=t, n_target=n_target: dtensor.relayout(t, n_target),
                lambda t=t, target=target: lc.relayout(t, target),
                reps,
                warmup,
                sync=sync,
            )
            rows.append({"op": "relayout", "size": size_name, "layout": f"{source_axes}->{target_axes}", **stats})

    print(f"layoutcore tensorflow driver vs DTensor, {len(driver.list_devices())} logical CPUs, 4x2 mesh")
    print(f"{'op':18} {'size':7} {'layout':30} {'DTensor ms':>11} {'layoutcore ms':>14} {'ratio':>6} {'target':>7}")
    for r in rows:
        target = TARGETS[r["size"]]
        flag = "ok" if r["ratio"] <= target else "OVER"
        print(
            f"{r['op']:18} {r['size']:7} {r['layout']:30} {r['native_s'] * 1e3:11.3f} {r['layoutcore_s'] * 1e3:14.3f} "
            f"{r['ratio']:6.2f} {'<=' + str(target):>7} {flag}  (min ratio {r['ratio_min']:.2f})"
        )
    args.out.parent.mkdir(exist_ok=True)
    if args.out == RESULTS:  # a --quick smoke run goes beside the committed result
        args.out = quick_path(RESULTS, args.quick)
    args.out.write_text(
        json.dumps(
            {
                "benchmark": "bench_tensorflow",
                "statistic": "median",
                "quick": args.quick,
                "python": platform.python_version(),
                "tensorflow": __import__("tensorflow").__version__,
                "devices": len(driver.list_devices()),
                "mesh": "x=4,y=2",
                "targets": TARGETS,
                "rows": rows,
            },
            indent=2,
        )
        + "\n"
    )
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
