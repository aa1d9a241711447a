"""``checkpoint.load`` onto the JAX and torch drivers: this checkout against another, interleaved.

    python benchmarks/bench_load_drivers.py --compare /path/to/other/checkout [--rounds 3] [--reps 3]

Loads 4 tensors of 16 MiB (float32, 2048 x 2048, saved rows over 8) onto 8 CPU devices under three
targets -- rows -> columns from a layoutcore checkpoint, fully replicated (each block handed to 8
devices) from the same checkpoint, and columns over 8 from a safetensors file -- on each driver,
each checkout in its own process (``PYTHONPATH`` = the checkout, its ``drivers``), the checkouts
alternating in order from one round to the next. It measures what the hand-over of the loaded
blocks to the driver costs (copies, replica checks) next to the reads, so it is run against the
checkout before a change to that step. Warm page cache; JAX loads wait for ``block_until_ready``.

Statistic: minimum and median over every repetition of every round, per checkout; prints JSON.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve()
CASES = ("lc_rows_to_cols", "lc_replicated", "st_cols")


def _setup(data: str) -> None:
    import numpy as np
    import safetensors.numpy as stn

    import layoutcore as lc
    from layoutcore import checkpoint

    mesh = lc.Mesh((8,), ("x",))
    values = {f"t{i}": np.random.default_rng(i).standard_normal((2048, 2048)).astype(np.float32) for i in range(4)}
    tree = {k: lc.distribute_tensor(v, lc.Layout(("x", None), mesh), driver="numpy") for k, v in values.items()}
    checkpoint.save(f"{data}/lc", tree, overwrite=True)
    stn.save_file(values, f"{data}/model.safetensors")


def _measure(driver: str, data: str, reps: int) -> dict[str, list[float]]:
    import layoutcore as lc
    from layoutcore import checkpoint

    mesh = lc.Mesh((8,), ("x",))
    names = [f"t{i}" for i in range(4)]
    cases = {
        "lc_rows_to_cols": (f"{data}/lc", {n: lc.Layout((None, "x"), mesh) for n in names}),
        "lc_replicated": (f"{data}/lc", {n: lc.Layout((None, None), mesh) for n in names}),
        "st_cols": (f"{data}/model.safetensors", {n: lc.Layout((None, "x"), mesh) for n in names}),
    }
    checkpoint.load(*cases["lc_rows_to_cols"], driver=driver)  # warm: imports, page cache
    out: dict[str, list[float]] = {}
    for _ in range(reps):
        for case, (path, target) in cases.items():
            t0 = time.perf_counter()
            loaded = checkpoint.load(path, target, driver=driver)
            if driver == "jax":
                for value in loaded.values():
                    value.block_until_ready()
            out.setdefault(case, []).append(time.perf_counter() - t0)
            del loaded
    return out


def _child(checkout: Path, *args: str) -> str:
    env = dict(os.environ, LAYOUTCORE_CPU_DEVICES="8")
    env["PYTHONPATH"] = os.pathsep.join([str(checkout), str(checkout / "drivers")])
    proc = subprocess.run([sys.executable, str(HERE), *args], env=env, capture_output=True, text=True, timeout=900)
    if proc.returncode != 0:
        raise RuntimeError(proc.stderr[-4000:])
    lines = proc.stdout.strip().splitlines()
    return lines[-1] if lines else ""  # --setup prints nothing


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--compare", type=Path, required=False, help="another checkout to interleave with")
    ap.add_argument("--drivers", default="torch,jax")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--child", nargs=3, metavar=("DRIVER", "DATA", "REPS"), help=argparse.SUPPRESS)
    ap.add_argument("--setup", metavar="DATA", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.setup:
        _setup(args.setup)
        return
    if args.child:
        driver, data, reps = args.child
        print(json.dumps(_measure(driver, data, int(reps))))
        return
    this = HERE.parents[1]
    checkouts = {"this": this, **({"other": args.compare.resolve()} if args.compare else {})}
    samples: dict[str, dict[str, dict[str, list[float]]]] = {}
    with tempfile.TemporaryDirectory() as data:
        _child(this, "--setup", data)
        for r in range(args.rounds):
            order = list(checkouts) if r % 2 == 0 else list(reversed(checkouts))
            for driver in args.drivers.split(","):
                for who in order:
                    got = json.loads(_child(checkouts[who], "--child", driver, data, str(args.reps)))
                    for case, seconds in got.items():
                        samples.setdefault(driver, {}).setdefault(case, {}).setdefault(who, []).extend(seconds)
    result: dict[str, Any] = {
        "benchmark": "bench_load_drivers",
        "statistic": "minimum",
        "checkouts": {k: str(v) for k, v in checkouts.items()},
    }
    for driver, cases in samples.items():
        for case, by in cases.items():
            result[f"{driver}/{case}"] = {
                who: {"min_s": round(min(s), 4), "median_s": round(statistics.median(s), 4)} for who, s in by.items()
            }
    print(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
