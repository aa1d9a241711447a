"""Per-forward overhead of ``layoutcore_torch.distribute_module`` against torch's ``parallelize_module``.

Run from the repository root, in an environment with torch::

    python benchmarks/bench_torch_module.py            # 64 MiB activation, median of interleaved repeats
    python benchmarks/bench_torch_module.py --quick    # fewer repeats
    python benchmarks/bench_torch_module.py --check    # exit 1 when the target is missed

The same two-layer MLP, the same tensor-parallel plan, in torch's single-process simulation (2 ranks,
mesh ``x``): ``Linear(8, 16)`` column-parallel then ``Linear(16, 8)`` row-parallel, input replicated, output
replicated (the second layer's pending sum reduced). torch: ``parallelize_module(model, mesh,
{"0": ColwiseParallel(), "1": RowwiseParallel(use_local_output=False)})``. layoutcore: ``distribute_module`` with the LayoutMap
``0.weight: (x, None)``, ``0.bias: (x,)``, ``1.weight: (None, x)``, ``input_layouts={"0": replicated}``,
``output_layouts={"1": replicated}``. The input is ``(2**21, 8)`` float32, 64 MiB, fed two ways:

* **DTensor input** (placed once, outside the timed call): both hooks find it laid out already, so the
  ratio is the hooks' own overhead around the same torch computation. Target: <= 1.05.
* **plain tensor input**: torch's ``PrepareModuleInput`` wraps it with ``DTensor.from_local`` (no copy;
  every rank aliases the caller's tensor), layoutcore's hook snapshots it (each rank copies its block,
  docs/design.md#data-functions-made-precise "Whose memory"). Reported, no target: the copy is the price of that rule.

Clock: this process's CPU time (``--clock wall`` for wall time). Writes ``benchmarks/results/bench_torch_module.json``.
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import platform
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from _timing import quick_path  # benchmarks/ is sys.path[0] when a benchmark runs

os.environ.setdefault("LAYOUTCORE_CPU_DEVICES", "8")

import layoutcore as lc

RESULTS = Path(__file__).resolve().parent / "results"
TARGET = 1.05
CLOCKS: dict[str, Callable[[], float]] = {"cpu": time.process_time, "wall": time.perf_counter}
ROWS, FEATURES, HIDDEN = 2**21, 8, 16  # float32 input: 2**21 * 8 * 4 bytes = 64 MiB


def interleaved(fns: dict[str, Callable[[], Any]], repeats: int, clock: Callable[[], float]) -> dict[str, list[float]]:
    """Times of each function over ``repeats`` rounds, in turns, the order rotating each round (after a warm-up)."""
    for fn in fns.values():
        fn()
    names = list(fns)
    times: dict[str, list[float]] = {name: [] for name in fns}
    for round_ in range(repeats):
        for name in names[round_ % len(names) :] + names[: round_ % len(names)]:
            start = clock()
            fns[name]()
            times[name].append(clock() - start)
    return times


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="fewer repeats")
    parser.add_argument("--check", action="store_true", help="exit 1 when the target is missed")
    parser.add_argument("--clock", choices=sorted(CLOCKS), default="cpu")
    args = parser.parse_args()
    clock = CLOCKS[args.clock]

    import layoutcore_torch
    import torch
    from layoutcore_torch import distribute_module, spmd
    from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, parallelize_module

    torch.manual_seed(0)
    mesh = lc.Mesh((2,), ("x",))
    replicated = lc.Layout((None, None), mesh)
    driver = layoutcore_torch.torch_driver()
    lc.distribute_tensor(torch.zeros(2, 2), replicated, driver=driver)  # starts the simulation
    device_mesh = layoutcore_torch.to_torch_mesh(mesh)

    base = torch.nn.Sequential(torch.nn.Linear(FEATURES, HIDDEN), torch.nn.Linear(HIDDEN, FEATURES))
    lm = lc.LayoutMap(mesh)
    lm["0.weight"] = ("x", None)
    lm["0.bias"] = ("x",)
    lm["1.weight"] = (None, "x")
    ours = distribute_module(
        copy.deepcopy(base),
        lm,
        input_layouts={"0": replicated},
        output_layouts={"1": replicated},
        activations="dtensor",
        driver=driver,
    )
    with spmd(mesh):
        theirs = parallelize_module(
            copy.deepcopy(base), device_mesh, {"0": ColwiseParallel(), "1": RowwiseParallel(use_local_output=False)}
        )

    x = torch.randn(ROWS, FEATURES)
    x_dtensor = lc.distribute_tensor(x, replicated, driver=driver)
    want = base(x[:4]).detach()

    def run(model: Any, value: Any) -> Any:
        with spmd(mesh), torch.no_grad():
            return model(value)

    for model in (ours, theirs):  # both compute the same function
        out = run(model, x_dtensor)
        assert torch.allclose(torch.from_numpy(lc.to_numpy(out, driver=driver)[:4]), want, atol=1e-5)

    repeats = 5 if args.quick else 15
    rows = []
    for feed, value in (("DTensor input", x_dtensor), ("plain tensor input", x)):
        times = interleaved(
            {"layoutcore": lambda v=value: run(ours, v), "torch": lambda v=value: run(theirs, v)}, repeats, clock
        )
        med = {k: statistics.median(v) for k, v in times.items()}
        ratio = med["layoutcore"] / med["torch"]
        target = TARGET if feed == "DTensor input" else None
        rows.append(
            {
                "input": feed,
                "layoutcore_ms": med["layoutcore"] * 1e3,
                "torch_ms": med["torch"] * 1e3,
                "ratio": ratio,
                "target": target,
                "ok": target is None or ratio <= target,
                "repeats": repeats,
            }
        )

    print(
        f"torch {torch.__version__}, simulated 2 ranks, input ({ROWS}, {FEATURES}) float32 = 64 MiB, "
        f"clock={args.clock}, median of {repeats} interleaved repeats"
    )
    print(f"{'input':20} {'distribute_module ms':>21} {'parallelize_module ms':>22} {'ratio':>7} {'target':>7}")
    for r in rows:
        target = "-" if r["target"] is None else f"{r['target']:.2f}"
        mark = "" if r["ok"] else "  MISSED"
        print(f"{r['input']:20} {r['layoutcore_ms']:21.1f} {r['torch_ms']:22.1f} {r['ratio']:7.3f} {target:>7}{mark}")
    RESULTS.mkdir(exist_ok=True)
    name = "bench_torch_module.json" if args.clock == "cpu" else f"bench_torch_module.{args.clock}.json"
    out = quick_path(RESULTS / name, args.quick)
    out.write_text(
        json.dumps(
            {
                "statistic": "median",
                "torch": torch.__version__,
                "python": platform.python_version(),
                "machine": platform.machine(),
                "clock": args.clock,
                "quick": args.quick,
                "rows": rows,
            },
            indent=2,
        )
        + "\n"
    )
    print(f"wrote {out}")
    return 1 if args.check and not all(r["ok"] for r in rows) else 0


if __name__ == "__main__":
    sys.exit(main())
