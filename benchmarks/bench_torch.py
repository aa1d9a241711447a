"""Overhead of layoutcore's torch driver over torch DTensor's own calls.

Run from the repository root, in an environment with torch::

    python benchmarks/bench_torch.py            # 64 MiB float32 and 1 KiB, median of interleaved repeats
    python benchmarks/bench_torch.py --quick    # fewer repeats
    python benchmarks/bench_torch.py --check    # exit 1 when a target is missed

Simulated mode (fake process group + ``LocalTensorMode``), 8 ranks, a 4x2 mesh ``(x, y)``, a
2-D float32 tensor laid out ``("x", "y")``. Side by side, in turns, in one process:

* ``distribute_tensor``: ``layoutcore.distribute_tensor(t, layout)`` against
  ``torch.distributed.tensor.distribute_tensor(t, device_mesh, placements)`` run as a torch user
  runs it in the simulation (inside ``LocalTensorMode(8)``, plain input, default ``src_data_rank=0``),
  and against torch's cheapest simulated call (``LocalTensor`` input whose ranks all share the caller's
  tensor, ``src_data_rank=None``: what the driver called before it copied each rank's block). The driver now copies each
  rank's block and wraps the copies with ``DTensor.from_local``, so that no rank aliases the caller's
  memory or another rank's (docs/drivers/torch.md, "Whose memory"); the row shows what that costs;
* ``relayout`` ``("x", "y") -> ("y", "x")``: ``layoutcore.relayout`` against ``DTensor.redistribute``.

Targets (median time ratio layoutcore / torch): <= 1.10 at 64 MiB, <= 2 at 1 KiB. The clock is
this process's CPU time by default (``--clock wall`` for wall time): the machine is shared, and
waiting for a core is not work. Writes ``benchmarks/results/bench_torch.json``
(``bench_torch.wall.json`` with ``--clock wall``).

Allocator: each 64 MiB call allocates 8 MiB shards. With glibc's default dynamic thresholds a
freed shard sometimes goes back to the OS and is page-faulted in again by the next call, so the
same call takes 45 ms or 250 ms depending on allocator history (measured), whoever makes it. The
script therefore re-executes itself with fixed ``MALLOC_MMAP_THRESHOLD_``/``MALLOC_TRIM_THRESHOLD_``
so that both sides reuse heap memory; ``--default-malloc`` keeps glibc's defaults.
"""

from __future__ import annotations

import argparse
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

os.environ["LAYOUTCORE_CPU_DEVICES"] = "8"  # before the driver starts its simulation

import layoutcore as lc

RESULTS = Path(__file__).resolve().parent / "results"
TARGETS = {"64MiB": 1.10, "1KiB": 2.0}
SHAPES = {"64MiB": (4096, 4096), "1KiB": (16, 16)}  # float32: 64 MiB and 1024 bytes
CLOCKS: dict[str, Callable[[], float]] = {"cpu": time.process_time, "wall": time.perf_counter}
#: glibc: never mmap or trim for blocks below 4 GiB (see the module docstring).
MALLOC_ENV = {"MALLOC_MMAP_THRESHOLD_": str(1 << 32), "MALLOC_TRIM_THRESHOLD_": str(1 << 34)}


def interleaved(fns: dict[str, Callable[[], Any]], repeats: int, clock: Callable[[], float]) -> dict[str, list[float]]:
    """Times of each function over ``repeats`` rounds, calling them in turn (after one warm-up each)."""
    for fn in fns.values():
        fn()
    times: dict[str, list[float]] = {name: [] for name in fns}
    for _ in range(repeats):
        for name, fn in fns.items():
            start = clock()
            fn()
            times[name].append(clock() - start)
    return times


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="fewer repeats")
    parser.add_argument("--check", action="store_true", help="exit 1 when a target is missed")
    parser.add_argument("--clock", choices=sorted(CLOCKS), default="cpu")
    parser.add_argument("--default-malloc", action="store_true", help="keep glibc's dynamic malloc thresholds")
    args = parser.parse_args()
    if not args.default_malloc and any(k not in os.environ for k in MALLOC_ENV):
        os.execve(sys.executable, [sys.executable, *sys.argv], {**os.environ, **MALLOC_ENV})
    clock = CLOCKS[args.clock]

    import layoutcore_torch
    import torch
    from layoutcore_torch import _private
    from torch.distributed.tensor import distribute_tensor

    driver = layoutcore_torch.torch_driver()
    mesh = lc.Mesh((4, 2), ("x", "y"))
    source = lc.Layout(("x", "y"), mesh)
    target = lc.Layout(("y", "x"), mesh)
    lc.distribute_tensor(torch.zeros(8, 8), source, driver=driver)  # starts the simulation
    device_mesh = layoutcore_torch.to_torch_mesh(mesh)
    src_placements = layoutcore_torch.to_torch_placements(source)
    dst_placements = layoutcore_torch.to_torch_placements(target)
    n = mesh.size

    def torch_default(t: Any) -> Any:
        with _private.local_tensor_mode(n):
            return distribute_tensor(t, device_mesh, src_placements)

    def torch_as_driver(t: Any) -> Any:
        with _private.local_tensor_mode(n):
            return distribute_tensor(
                _private.make_local_tensor(dict.fromkeys(range(n), t)), device_mesh, src_placements, src_data_rank=None
            )

    def redistribute(d: Any) -> Any:
        with _private.local_tensor_mode(n):
            return d.redistribute(device_mesh, dst_placements)

    rows = []
    for size_name, shape in SHAPES.items():
        repeats = (3 if args.quick else 9) if size_name == "64MiB" else (10 if args.quick else 40)
        t = torch.arange(shape[0] * shape[1], dtype=torch.float32).reshape(shape)
        d = lc.distribute_tensor(t, source, driver=driver)
        times = interleaved(
            {
                "layoutcore.distribute_tensor": lambda t=t: lc.distribute_tensor(t, source, driver=driver),
                "torch distribute_tensor (user call)": lambda t=t: torch_default(t),
                "torch distribute_tensor (LocalTensor, shared)": lambda t=t: torch_as_driver(t),
                "layoutcore.relayout": lambda d=d: lc.relayout(d, target, driver=driver),
                "DTensor.redistribute": lambda d=d: redistribute(d),
            },
            repeats,
            clock,
        )
        med = {k: statistics.median(v) for k, v in times.items()}
        for ours, theirs in (
            ("layoutcore.distribute_tensor", "torch distribute_tensor (user call)"),
            ("layoutcore.distribute_tensor", "torch distribute_tensor (LocalTensor, shared)"),
            ("layoutcore.relayout", "DTensor.redistribute"),
        ):
            ratio = med[ours] / med[theirs]
            rows.append(
                {
                    "size": size_name,
                    "shape": list(shape),
                    "ours": ours,
                    "torch": theirs,
                    "ours_ms": med[ours] * 1e3,
                    "torch_ms": med[theirs] * 1e3,
                    "ratio": ratio,
                    "target": TARGETS[size_name],
                    "ok": ratio <= TARGETS[size_name],
                    "repeats": repeats,
                }
            )

    malloc = "glibc defaults" if args.default_malloc else "fixed malloc thresholds"
    print(
        f"torch {torch.__version__}, simulated 8 ranks, mesh 4x2, clock={args.clock}, {malloc}, "
        "median of interleaved repeats"
    )
    print(
        f"{'size':6} {'layoutcore call':30} {'torch call':46} {'ours ms':>10} {'torch ms':>10} {'ratio':>7} {'target':>7}"
    )
    for r in rows:
        mark = "" if r["ok"] else "  MISSED"
        print(
            f"{r['size']:6} {r['ours']:30} {r['torch']:46} {r['ours_ms']:10.3f} {r['torch_ms']:10.3f} "
            f"{r['ratio']:7.3f} {r['target']:7.2f}{mark}"
        )
    RESULTS.mkdir(exist_ok=True)
    out = quick_path(
        RESULTS / ("bench_torch.json" if args.clock == "cpu" else f"bench_torch.{args.clock}.json"), args.quick
    )
    out.write_text(
        json.dumps(
            {
                "statistic": "median",
                "torch": torch.__version__,
                "python": platform.python_version(),
                "machine": platform.machine(),
                "clock": args.clock,
                "malloc_env": {k: os.environ.get(k) for k in MALLOC_ENV},
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
