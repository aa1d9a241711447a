"""Speed of the see-before-you-run functions: plan, relayout_plan and LayoutMap.explain.

Targets (pure Python, no framework; numbers are reported, not asserted in tests):

* ``plan`` over 10 000 variables and 200 patterns, half of the paths matching no pattern (each layer's
  biases: the renamed-variables case): < 0.5 s. A path that matches nothing is ruled out by one pass
  of one alternation of every pattern; a matched one tries only the patterns whose required literal
  text it contains.
* Inserting 100 000 patterns into a LayoutMap: CPU seconds and resident memory added (the earlier
  6 s and +99 MiB are the reference; the limit is 1.5x of each).
* ``relayout_plan`` on a 1 024-device mesh of rank 3 for a rank-4 tensor: < 2 s, with its transfer count.
* ``LayoutMap.explain`` of a path: < 1 ms.

Run from the repository root: ``PYTHONPATH=. python benchmarks/bench_plan.py [--check]``; it writes
``benchmarks/results/bench_plan.json``.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from typing import Any

import layoutcore as lc

RESULTS = Path(__file__).resolve().parent / "results"


def best(fn: Any, repeats: int = 5) -> float:
    """The minimum CPU time (this process's, as the other benchmarks here) of ``repeats`` calls, in seconds.

    CPU time, not wall time: on a shared machine wall time mostly measures waiting for a core.
    """
    times = []
    for _ in range(repeats):
        start = time.process_time()
        fn()
        times.append(time.process_time() - start)
    return min(times)


def model(layers: int = 200) -> tuple[lc.LayoutMap, dict[str, tuple[tuple[int, ...], str]]]:
    """200 patterns (one per layer) and 10 000 variables (50 per layer), each matching at most one pattern."""
    mesh = lc.Mesh((8, 4, 2), ("data", "model", "seq"))
    layout_map = lc.LayoutMap(mesh)
    variables: dict[str, tuple[tuple[int, ...], str]] = {}
    for layer in range(layers):
        layout_map[f"decoder/layer_{layer}/.*kernel"] = (None, "model")
        for i in range(25):
            variables[f"decoder/layer_{layer}/block_{i}/dense/kernel"] = ((1024, 4096), "bfloat16")
            variables[f"decoder/layer_{layer}/block_{i}/dense/bias"] = ((4096,), "float32")
    return layout_map, variables


def insert_patterns(count: int) -> dict[str, Any]:
    """CPU seconds and resident-memory growth of inserting ``count`` patterns into one LayoutMap."""
    import gc

    def rss_mib() -> float:
        with open("/proc/self/statm", encoding="ascii") as statm:
            return int(statm.read().split()[1]) * 4096 / 2**20

    mesh = lc.Mesh((8,), ("model",))
    layout_map = lc.LayoutMap(mesh)
    layout = lc.Layout((None, "model"), mesh)
    gc.collect()
    before = rss_mib()
    start = time.process_time()
    for i in range(count):
        layout_map[f"model/layer_{i}/.*kernel"] = layout
    seconds = time.process_time() - start
    return {
        "patterns": count,
        "seconds": round(seconds, 2),
        "rss_mib": round(rss_mib() - before, 1),
        "target_s": 9.0,
        "target_rss_mib": 148.5,
    }


def main(argv: list[str]) -> int:
    layout_map, variables = model()
    results: dict[str, Any] = {"statistic": "minimum"}

    fresh = [model()[0] for _ in range(3)]  # a fresh map each time: no warm lookup cache
    plan_s = best(lambda: lc.plan(fresh.pop(), variables), repeats=3)
    result = lc.plan(layout_map, variables)
    results["plan"] = {
        "variables": len(variables),
        "patterns": len(layout_map),
        "seconds": round(plan_s, 4),
        "unmatched": len(result.unmatched),
        "target_s": 0.5,
    }

    results["insert_100k"] = insert_patterns(100_000)

    mesh = lc.Mesh((16, 8, 8), ("x", "y", "z"))
    cases = {
        "(x,y,z,None) -> (None,x,(y,z),None)": (["x", "y", "z", None], [None, "x", ("y", "z"), None]),
        "(x,y,z,None) -> ((z,y),None,None,x)": (["x", "y", "z", None], [("z", "y"), None, None, "x"]),
        "((x,y),z,None,None) -> (None,None,None,None) [all-gather]": ([("x", "y"), "z", None, None], [None] * 4),
    }
    results["relayout_plan"] = {}
    for name, (source, target) in cases.items():
        src, dst = lc.Layout(source, mesh), lc.Layout(target, mesh)
        seconds = best(lambda s=src, d=dst: lc.relayout_plan(s, d, (256, 256, 128, 64), "bfloat16"), repeats=1)
        plan = lc.relayout_plan(src, dst, (256, 256, 128, 64), "bfloat16")
        results["relayout_plan"][name] = {
            "devices": mesh.size,
            "seconds": round(seconds, 3),
            "transfers": len(plan.transfers),
            "floor_bytes": plan.floor_bytes,
            "target_s": 2.0,
        }

    explain_map, _ = model(layers=50)
    explain_map["encoder/.*/attention/(query|key|value)/kernel"] = (None, "model")
    paths = {
        "matched": "decoder/layer_7/block_3/dense/kernel",
        "unmatched (near misses)": "encoder/layer_3/attention/qeury/kernel",
    }
    results["explain"] = {}
    for name, path in paths.items():
        per_call = best(lambda p=path: [explain_map.explain(p) for _ in range(100)]) / 100
        results["explain"][name] = {"patterns": len(explain_map), "ms": round(per_call * 1e3, 4), "target_ms": 1.0}

    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "bench_plan.json").write_text(json.dumps(results, indent=1) + "\n", "utf-8")
    print(f"plan: {len(variables)} variables, {len(layout_map)} patterns: {plan_s:.3f} s (target < 0.5 s)")
    for name, r in results["relayout_plan"].items():
        print(f"relayout_plan {name} on {r['devices']} devices: {r['seconds']:.3f} s, {r['transfers']} transfers")
    for name, r in results["explain"].items():
        print(f"explain ({name}, {r['patterns']} patterns): {r['ms']:.3f} ms (target < 1 ms)")
    ins = results["insert_100k"]
    print(
        f"insert {ins['patterns']} patterns: {ins['seconds']:.2f} s, +{ins['rss_mib']:.0f} MiB (targets < 9 s, < 148.5 MiB)"
    )
    ok = (
        plan_s < 0.5
        and all(r["seconds"] < 2.0 for r in results["relayout_plan"].values())
        and all(r["ms"] < 1.0 for r in results["explain"].values())
        and results["insert_100k"]["seconds"] < 9.0
        and results["insert_100k"]["rss_mib"] < 148.5
    )
    return 1 if "--check" in argv and not ok else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
