"""Cost of layoutcore's tree and traced JAX paths.

* ``layoutcore_jax.tree_shardings(layout_map, tree)`` for a 1 000-leaf parameter tree and a
  200-pattern map, cold (a new LayoutMap: every path is matched against every pattern) and warm
  (the map's lookup cache filled); target < 50 ms. ``jax.tree_util.tree_map`` building the same
  ``NamedSharding``s from a precomputed dict is timed beside it as the floor.
* A traced ``relayout`` inside ``jax.jit`` against JAX's own ``with_sharding_constraint``: the
  lowered StableHLO text (function name and source locations removed) must be identical, and the
  compiled HLO too; the trace+lower time of both is reported side by side.

Run: ``python benchmarks/bench_trees.py [--quick]``; writes ``benchmarks/results/bench_trees.json``
(``bench_trees.quick.json`` with ``--quick``: a smoke run, not a result).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import statistics
import time
from collections.abc import Callable
from pathlib import Path

os.environ.setdefault("LAYOUTCORE_CPU_DEVICES", "8")

import numpy as np
from _timing import quick_path, side_by_side  # benchmarks/ is sys.path[0] when a benchmark runs

import layoutcore as lc

RESULTS = Path(__file__).with_name("results") / "bench_trees.json"
TARGET_MS = 50.0
N_LAYERS = 100  # x 10 leaves = 1 000 leaves


def _tree(jax: object) -> dict[str, object]:
    """1 000 leaves: 100 layers of attention + MLP weights, as ShapeDtypeStructs (nothing allocated)."""
    sds = jax.ShapeDtypeStruct  # type: ignore[attr-defined]
    f32 = np.float32
    layer = {
        "attn": {
            "query": {"kernel": sds((64, 64), f32), "bias": sds((64,), f32)},
            "key": {"kernel": sds((64, 64), f32), "bias": sds((64,), f32)},
            "value": {"kernel": sds((64, 64), f32), "bias": sds((64,), f32)},
        },
        "mlp": {"up": {"kernel": sds((64, 256), f32)}, "down": {"kernel": sds((256, 64), f32)}},
        "norm": {"scale": sds((64,), f32), "bias": sds((64,), f32)},
    }
    return {"layers": [layer for _ in range(N_LAYERS)]}


def _map(mesh: lc.Mesh) -> lc.LayoutMap:
    """200 patterns, two per layer, each matching exactly its own layer's paths."""
    lm = lc.LayoutMap(mesh)
    for i in range(N_LAYERS):
        lm[rf"^layers/{i}/attn/(query|key|value)/kernel$"] = (None, "model")
        lm[rf"^layers/{i}/mlp/(up|down)/kernel$"] = (None, "model") if i % 2 else ("model", None)
    return lm


def _median_ms(fn: Callable[[], object], reps: int, clock: Callable[[], float] = time.perf_counter) -> float:
    times = []
    for _ in range(reps):
        start = clock()
        fn()
        times.append(clock() - start)
    return statistics.median(times) * 1e3


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer repetitions (a smoke run)")
    args = parser.parse_args()

    lc.set_driver("jax")
    import jax
    import layoutcore_jax

    mesh = lc.Mesh((4, 2), ("batch", "model"))
    driver = lc.get_driver()
    tree = _tree(jax)
    assert len(jax.tree_util.tree_leaves(tree)) == 1000
    reps = 5 if args.quick else 30

    # Cold: a fresh map each time (its pattern cache empty); warm: one map, cache filled. Wall time, and
    # this process's CPU time (less sensitive to other jobs on a shared machine).
    from layoutcore_jax import _trees as jax_trees

    def first_call() -> None:  # a structure never seen: jax's flatten_with_path runs too
        jax_trees._PATHS.clear()
        layoutcore_jax.tree_shardings(_map(mesh), tree)

    first_cpu_ms = _median_ms(first_call, reps, clock=time.process_time)
    cold_ms = _median_ms(lambda: layoutcore_jax.tree_shardings(_map(mesh), tree), reps)
    build_ms = _median_ms(lambda: _map(mesh), reps)
    cold_cpu_ms = _median_ms(lambda: layoutcore_jax.tree_shardings(_map(mesh), tree), reps, clock=time.process_time)
    build_cpu_ms = _median_ms(lambda: _map(mesh), reps, clock=time.process_time)
    warm_map = _map(mesh)
    shardings = layoutcore_jax.tree_shardings(warm_map, tree)
    warm_ms = _median_ms(lambda: layoutcore_jax.tree_shardings(warm_map, tree), reps)
    warm_cpu_ms = _median_ms(lambda: layoutcore_jax.tree_shardings(warm_map, tree), reps, clock=time.process_time)
    # The floor: JAX's own tree_map over precomputed shardings (what hand-written glue does at best).
    paths = [p for p, _ in layoutcore_jax.tree_paths(tree)[0]]
    by_path = dict(zip(paths, jax.tree_util.tree_leaves(shardings), strict=True))
    _, treedef = jax.tree_util.tree_flatten(tree)
    floor_ms = _median_ms(lambda: jax.tree_util.tree_unflatten(treedef, [by_path[p] for p in paths]), reps)
    assert shardings["layers"][3]["mlp"]["up"]["kernel"].spec == jax.sharding.PartitionSpec(None, "model")

    # Traced relayout vs with_sharding_constraint: HLO text and trace+lower time.
    target = lc.Layout((None, "model"), mesh)
    sharding = driver.named_sharding(target)
    x = lc.distribute_tensor(np.ones((64, 64), np.float32), lc.Layout(("batch", None), mesh))

    def ours(v: jax.Array) -> jax.Array:
        return lc.relayout(v, target) * 2

    def theirs(v: jax.Array) -> jax.Array:
        return jax.lax.with_sharding_constraint(v, sharding) * 2

    def clean(text: str) -> str:
        """The program without its name, source locations and stack-frame tables (debug metadata)."""
        text = re.sub(r"@jit_\w+|loc\(.*?\)|jit_\w+|, metadata=\{[^}]*\}", "", text)
        return "\n".join(
            line for line in text.splitlines() if " = " in line or line.startswith(("ENTRY", "func", "  %"))
        )

    lowered_ours, lowered_theirs = jax.jit(ours).lower(x), jax.jit(theirs).lower(x)
    stablehlo_identical = clean(lowered_ours.as_text()) == clean(lowered_theirs.as_text())
    compiled_identical = clean(lowered_ours.compile().as_text()) == clean(lowered_theirs.compile().as_text())
    # Fresh function objects each time, so that jax's trace cache does not answer.
    lower = side_by_side(
        lambda: jax.jit(lambda v: theirs(v)).lower(x),
        lambda: jax.jit(lambda v: ours(v)).lower(x),
        20 if args.quick else 200,
        5,
    )

    result = {
        "tree_shardings_cold_ms": cold_ms - build_ms,
        "tree_shardings_cold_incl_map_build_ms": cold_ms,
        "tree_shardings_warm_ms": warm_ms,
        "tree_shardings_cold_cpu_ms": cold_cpu_ms - build_cpu_ms,
        "tree_shardings_warm_cpu_ms": warm_cpu_ms,
        "tree_shardings_new_structure_cpu_ms": first_cpu_ms - build_cpu_ms,
        "layout_map_build_ms": build_ms,
        "tree_map_floor_ms": floor_ms,
        "leaves": 1000,
        "patterns": len(warm_map),
        "target_ms": TARGET_MS,
        "traced_relayout_stablehlo_identical": stablehlo_identical,
        "traced_relayout_compiled_hlo_identical": compiled_identical,
        "trace_lower_native_ms": lower["native_s"] * 1e3,
        "trace_lower_layoutcore_ms": lower["layoutcore_s"] * 1e3,
        "trace_lower_ratio": lower["ratio"],
    }
    print(f"tree_shardings, 1000 leaves, {len(warm_map)} patterns:")
    print(
        f"  cold (fresh map, every path matched): {cold_ms - build_ms:7.2f} ms wall, {cold_cpu_ms - build_cpu_ms:7.2f} ms "
        f"CPU  (+{build_ms:.2f} ms building the map)"
    )
    print(f"  warm (map's lookup cache filled):     {warm_ms:7.2f} ms wall, {warm_cpu_ms:7.2f} ms CPU")
    print(
        f"  cold and a tree structure never seen (jax flatten_with_path too): {first_cpu_ms - build_cpu_ms:.2f} ms CPU"
    )
    print(f"  floor (jax tree_unflatten of ready shardings): {floor_ms:.2f} ms   target < {TARGET_MS:.0f} ms")
    print(
        f"traced relayout vs with_sharding_constraint: StableHLO identical={stablehlo_identical}, "
        f"compiled HLO identical={compiled_identical}"
    )
    print(
        f"  jit+lower: jax {lower['native_s'] * 1e3:.2f} ms, layoutcore {lower['layoutcore_s'] * 1e3:.2f} ms "
        f"({lower['ratio']:.2f}x)"
    )
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    out = quick_path(RESULTS, args.quick)
    meta = {
        "jax": jax.__version__,
        "python": platform.python_version(),
        "cpus": os.cpu_count(),
        "quick": args.quick,
        "load_average_1min": os.getloadavg()[0],
    }
    out.write_text(json.dumps({"statistic": "median", "meta": meta, **result}, indent=2) + "\n")
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
