"""Wall time of layoutcore's relayout at the floor against the framework's own move, contenders interleaved.

::

    PYTHONPATH=.:drivers .tox/jax/bin/python benchmarks/bench_relayout_wall.py jax           # 8 CPU devices
    PYTHONPATH=.:drivers .tox/jax/bin/python benchmarks/bench_relayout_wall.py jax-64mib     # the same, 64 MiB
    PYTHONPATH=.:drivers .tox/torch/bin/python benchmarks/bench_relayout_wall.py torch-gloo  # 4 gloo processes
    PYTHONPATH=.:drivers .tox/torch/bin/python benchmarks/bench_relayout_wall.py torch-simulation

* **JAX** (one process, 8 CPU devices, 2048x2048 float32 = 16 MiB): ``lc.relayout`` against
  ``jax.device_put`` to the target sharding, against *jit_reshard*, JAX's own compiled move
  (``jax.jit(identity, out_shardings=target)``, what XLA runs for the move inside ``jax.jit``; where
  JAX can compile it), and against *before*: the same driver with its choice switched off
  (``device_put``, what the driver ran before it planned relayouts). ``device_put`` of a fully
  addressable array that no source shard already holds takes another path, through host memory
  (jax 0.10.2 ``shard_sharded_device_array_slow_path`` gathers the whole array with ``x._value``
  and scatters it again), so on CPU devices it runs no collective at all. Each round runs every
  contender once in a shuffled order (seeded; see ``_interleaved``), each call waited for
  (``block_until_ready``), on a new Array over the same buffers; the minimum and the median over
  rounds are reported (the machine is shared: ratios of minima judge the target). The warm-up call makes the driver's one-time
  choice among its moves at the floor (``layoutcore_jax._relayout_choice``: ``device_put``,
  ``jit_reshard``, the ``collective`` plan, ``host_copy``), recorded per case as *chosen*. Target:
  ``layoutcore / best_native <= 1.1``, *best_native* the faster of ``device_put`` and
  *jit_reshard*. 100 rounds: at 30, two contenders running the same move (*layoutcore* and *before* where
  ``device_put`` is chosen) differed by up to 18% at the minimum on the shared 2-core host, more than the
  target's margin. ``jax-64mib`` runs the same at 4096x4096 (64 MiB, the torch gloo size), 30 rounds.
* **torch gloo** (4 processes on 127.0.0.1, one rank each, 4096x4096 float32 = 64 MiB):
  ``lc.relayout`` against ``DTensor.redistribute`` on a 2x2 mesh; each call starts after a barrier
  and its time is the slowest rank's. Target ``layoutcore / redistribute <= 1.0`` on the changed
  cases; x -> None (an all-gather, already at the floor, kept) ``<= 1.05``.

* **torch simulation** (8 simulated ranks, 1 KiB and 1 MiB): where torch's own plan is kept (x -> None,
  S0 -> S1), ``lc.relayout`` against *before* (plan off): the cost of reading torch's plan, target ``<= 1.05``.

Results: ``results/bench_relayout_wall.<jax|jax-64mib|torch-gloo|torch-simulation>.json``.
"""

from __future__ import annotations

import functools
import json
import os
import random
import statistics
import sys
import time
import timeit
from collections.abc import Callable
from pathlib import Path
from typing import Any

os.environ.setdefault("LAYOUTCORE_CPU_DEVICES", "8")

from _processes import run_gloo_ranks  # benchmarks/ is sys.path[0] when a benchmark runs

import layoutcore as lc

RESULTS = Path(__file__).resolve().parent / "results"


def _interleaved(
    contenders: dict[str, Callable[..., Any]], rounds: int, fresh: Callable[[], Any] | None = None
) -> dict[str, list[float]]:
    """Seconds of each call per contender; each round runs every contender once, in an order of its own.

    The order is shuffled per round (seeded: the same sequence every run), so that each contender follows
    each other about equally often. Rotating one fixed order (round ``r`` starting at contender ``r mod n``)
    kept the cyclic order, so a contender always ran right after the same one. With the dict order of
    ``measure_jax``, *layoutcore* always followed *jit_reshard* (1-2 ms of XLA work): on None -> x its median
    was 311 us against device_put's 243 us; with the order reversed, *before* followed *jit_reshard* and took
    the 60-70 us instead, and layoutcore's median was 1.07x device_put's (measured, jax 0.10.2, 2 cores).

    With ``fresh``, every call gets ``fresh()``'s result as its argument, made before the clock starts.
    """
    names = list(contenders)
    times: dict[str, list[float]] = {n: [] for n in names}
    order = random.Random(0)

    def arguments() -> tuple[Any, ...]:
        return () if fresh is None else (fresh(),)

    for n in names:  # warm-up (compilation, caches)
        contenders[n](*arguments())
    for _ in range(rounds):
        for name in order.sample(names, len(names)):
            call_args = arguments()
            start = time.perf_counter()
            contenders[name](*call_args)
            times[name].append(time.perf_counter() - start)
    return times


def _call_seconds(call: Callable[[], Any]) -> float:
    """Seconds per call of a cheap deterministic ``call`` (best of 5 runs of 100)."""
    return min(timeit.repeat(call, number=100, repeat=5)) / 100


def _summary(times: dict[str, list[float]], pairs: list[tuple[str, str]]) -> dict[str, Any]:
    """Median and minimum per contender, and the ratios of both for each ``(a, b)`` pair (``a/b``).

    The machine these run on is shared: the minimum is the least disturbed call, the median what a
    user would see under the same load; both are kept, and the ratios of minima judge the targets.
    """
    median = {n: statistics.median(t) for n, t in times.items()}
    best = {n: min(t) for n, t in times.items()}
    out: dict[str, Any] = {"seconds_median": median, "seconds_min": best}
    for a, b in pairs:
        out[f"{a}/{b}"] = best[a] / best[b]
        out[f"{a}/{b} (median)"] = median[a] / median[b]
    return out


# ------------------------------------------------------------------------------------------------
# JAX
# ------------------------------------------------------------------------------------------------
def measure_jax(rounds: int = 100, shape: tuple[int, int] = (2048, 2048)) -> dict[str, Any]:
    import jax
    import numpy as np
    from layoutcore_jax import _relayout, _relayout_choice

    devices = [f"CPU:{i}" for i in range(8)]
    line = lc.Mesh((8,), ("x",), devices=devices)
    grid = lc.Mesh((4, 2), ("x", "y"), devices=devices)
    flat = lc.Mesh((8,), ("z",), devices=devices)
    cases = {
        "(x,y) -> (y,x) on 4x2": (lc.Layout(["x", "y"], grid), lc.Layout(["y", "x"], grid)),
        "(x,y) -> (None,(x,y)) on 4x2": (lc.Layout(["x", "y"], grid), lc.Layout([None, ("x", "y")], grid)),
        "cross-mesh 4x2 (x,None) -> 8 (None,z)": (lc.Layout(["x", None], grid), lc.Layout([None, "z"], flat)),
        "x -> None": (lc.Layout(["x", None], line), lc.Layout([None, None], line)),
        "None -> x": (lc.Layout([None, None], line), lc.Layout(["x", None], line)),
        "S0 -> S1": (lc.Layout(["x", None], line), lc.Layout([None, "x"], line)),
        "((x,y),None) -> (None,(x,y))": (lc.Layout([("x", "y"), None], grid), lc.Layout([None, ("x", "y")], grid)),
    }
    driver = lc.get_driver("jax")
    planned = _relayout_choice.relayout_at_floor
    out: dict[str, Any] = {
        "statistic": {"target ratios": "minimum", "(median) ratios": "median"},
        "framework": f"jax {jax.__version__}",
        "target": "layoutcore/best_native <= 1.1 (best_native: min of device_put and jit_reshard per statistic)",
        "devices": 8,
        "shape": list(shape),
        "dtype": "float32",
        "rounds": rounds,
        "cases": {},
    }
    x = np.arange(np.prod(shape), dtype=np.float32).reshape(shape)
    for case, (source, target) in cases.items():
        value = lc.distribute_tensor(x, source, driver=driver)
        sharding = driver.named_sharding(target)  # type: ignore[attr-defined]
        floor = lc.relayout_plan(source, target, shape, "float32").floor_bytes
        native = _relayout.native_moved_bytes(value, sharding)
        shards = [shard.data for shard in value.addressable_shards]

        def fresh(value: Any = value, shards: list[Any] = shards) -> Any:
            # A new Array over the same device buffers (no copy) for every call: jax.Array caches its
            # host copy (`_value`) and device_put reuses it, so a second device_put of one array skips
            # the gather to host that a relayout of a new value (a training step's output) pays.
            return jax.make_array_from_single_device_arrays(value.shape, value.sharding, shards)

        def layoutcore(value: Any, target: lc.Layout = target) -> None:
            lc.relayout(value, target, driver=driver).block_until_ready()

        def before(value: Any, target: lc.Layout = target) -> None:
            _relayout_choice.relayout_at_floor = lambda *a, **k: None  # type: ignore[assignment]
            try:
                lc.relayout(value, target, driver=driver).block_until_ready()
            finally:
                _relayout_choice.relayout_at_floor = planned

        def device_put(value: Any, sharding: Any = sharding) -> None:
            jax.device_put(value, sharding).block_until_ready()

        contenders = {"layoutcore": layoutcore, "device_put": device_put, "before": before}
        pairs = [("layoutcore", "device_put"), ("layoutcore", "before")]
        if native is not None:
            # JAX's own compiled reshard (what XLA runs for this move inside jax.jit): device_put of a
            # fully addressable array takes another path, through host memory (see the module docstring).
            reshard = jax.jit(lambda a: a, out_shardings=sharding)

            def jit_reshard(value: Any, reshard: Any = reshard) -> None:
                reshard(value).block_until_ready()

            contenders["jit_reshard"] = jit_reshard
            pairs.append(("layoutcore", "jit_reshard"))
        times = _interleaved(contenders, rounds, fresh)  # its warm-up makes the driver's one-time choice
        plan_runs = native is None or native > floor
        summary = _summary(times, pairs)
        for statistic, suffix in (("seconds_min", ""), ("seconds_median", " (median)")):
            seconds = summary[statistic]
            best_native = min(seconds[n] for n in ("device_put", "jit_reshard") if n in seconds)
            summary[f"layoutcore/best_native{suffix}"] = seconds["layoutcore"] / best_native
        bound = driver.bind_mesh(target.mesh)  # type: ignore[arg-type]
        chosen = _relayout_choice.chosen(value, sharding)
        # where device_put is chosen, the front-end's move and the choice (a cached lookup) are all it adds
        check = (
            None
            if chosen != "device_put"
            else _call_seconds(
                lambda v=value, t=target, b=bound, s=sharding: planned(driver, v, driver.relayout_move(v, t, b), s)
            )
        )
        out["cases"][case] = {
            "floor_bytes": floor,
            "device_put_bytes": native,
            "plan_runs": plan_runs,
            "chosen": chosen,  # the driver's measured choice (made once, in the warm-up)
            **summary,
            "check_seconds": check,  # device_put chosen: the choice alone (a cached lookup), the only added cost
        }
    return out


# ------------------------------------------------------------------------------------------------
# torch gloo
# ------------------------------------------------------------------------------------------------
def _gloo_worker(rank: int, port: int, world: int, rounds: int) -> None:
    import datetime

    import numpy as np
    import torch
    import torch.distributed as dist

    dist.init_process_group(
        "gloo",
        init_method=f"tcp://127.0.0.1:{port}",
        rank=rank,
        world_size=world,
        timeout=datetime.timedelta(seconds=300),
    )
    driver = lc.get_driver("torch")
    devices = [f"CPU:{i}" for i in range(world)]
    grid = lc.Mesh((2, 2), ("x", "y"), devices=devices)
    line = lc.Mesh((4,), ("x",), devices=devices)
    shape = (4096, 4096)
    cases = {
        "(x,y) -> (y,x) on 2x2": (lc.Layout(["x", "y"], grid), lc.Layout(["y", "x"], grid)),
        "((x,y),None) -> (None,(x,y)) on 2x2": (
            lc.Layout([("x", "y"), None], grid),
            lc.Layout([None, ("x", "y")], grid),
        ),
        "x -> None on 4 (all-gather, kept)": (lc.Layout(["x", None], line), lc.Layout([None, None], line)),
    }
    x = torch.from_numpy(np.arange(np.prod(shape), dtype=np.float32).reshape(shape))
    result: dict[str, Any] = {}
    for case, (source, target) in cases.items():
        value = lc.distribute_tensor(x, source, driver=driver)
        device_mesh = driver.device_mesh(target.mesh)  # type: ignore[attr-defined]
        placements = driver.placements(target)  # type: ignore[attr-defined]

        def timed(fn: Callable[[], Any]) -> float:
            dist.barrier()
            start = time.perf_counter()
            fn()
            elapsed = torch.tensor([time.perf_counter() - start])
            dist.all_reduce(elapsed, op=dist.ReduceOp.MAX)  # the slowest rank's time
            return float(elapsed)

        contenders = {
            "layoutcore": lambda value=value, target=target: lc.relayout(value, target, driver=driver),
            "redistribute": lambda value=value, dm=device_mesh, pl=placements: value.redistribute(dm, pl),
        }
        names = list(contenders)
        times: dict[str, list[float]] = {n: [] for n in names}
        for n in names:
            timed(contenders[n])  # warm-up
        for r in range(rounds):
            for k in range(len(names)):
                name = names[(r + k) % len(names)]
                times[name].append(timed(contenders[name]))
        result[case] = {
            "floor_bytes": lc.relayout_plan(source, target, shape, "float32").floor_bytes,
            **_summary(times, [("layoutcore", "redistribute")]),
        }
    if rank == 0:
        data = {
            "statistic": {"target ratios": "minimum", "(median) ratios": "median"},
            "framework": f"torch {torch.__version__} gloo, {world} processes",
            "shape": list(shape),
            "dtype": "float32",
            "rounds": rounds,
            "target": "layoutcore/redistribute <= 1.0 on the changed cases, <= 1.05 on the kept all-gather",
            "cases": result,
        }
        print(json.dumps(data), flush=True)
    dist.barrier()
    dist.destroy_process_group()


def measure_torch_gloo(world: int = 4, rounds: int = 5) -> dict[str, Any]:
    return run_gloo_ranks(__file__, world, str(rounds), timeout_s=900)


# ------------------------------------------------------------------------------------------------
# torch simulation: the relayouts torch already moves at the floor keep their speed
# ------------------------------------------------------------------------------------------------
def measure_torch_simulation(rounds: int = 30) -> dict[str, Any]:
    """``lc.relayout`` against *before* (the driver with the plan switched off: ``redistribute``) where torch's
    own plan is kept, 1 KiB and 1 MiB float32 on 8 simulated ranks: the cost of the floor check."""
    import numpy as np
    import torch
    from layoutcore_torch import _relayout

    devices = [f"CPU:{i}" for i in range(8)]
    line = lc.Mesh((8,), ("x",), devices=devices)
    driver = lc.get_driver("torch")
    planned = _relayout.relayout_at_floor
    out: dict[str, Any] = {
        "statistic": {"target ratios": "minimum", "(median) ratios": "median"},
        "framework": f"torch {torch.__version__} (simulation, 8 ranks)",
        "rounds": rounds,
        "target": "layoutcore/before <= 1.05",
        "cases": {},
    }
    for size, shape in (("1 KiB", (16, 16)), ("1 MiB", (512, 512))):
        for name, (src, dst) in {
            "x -> None": (["x", None], [None, None]),
            "S0 -> S1": (["x", None], [None, "x"]),
        }.items():
            source, target = lc.Layout(src, line), lc.Layout(dst, line)
            value = lc.distribute_tensor(np.ones(shape, np.float32), source, driver=driver)

            def layoutcore(value: Any = value, target: lc.Layout = target) -> None:
                lc.relayout(value, target, driver=driver)

            def before(value: Any = value, target: lc.Layout = target) -> None:
                _relayout.relayout_at_floor = lambda *a, **k: None  # type: ignore[assignment]
                try:
                    lc.relayout(value, target, driver=driver)
                finally:
                    _relayout.relayout_at_floor = planned

            times = _interleaved({"layoutcore": layoutcore, "before": before}, rounds)
            bound = driver.bind_mesh(line)
            # the floor check alone, which decides to keep redistribute (its only added cost)
            check = _call_seconds(lambda v=value, t=target, b=bound: planned(driver, v, driver.relayout_move(v, t, b)))
            out["cases"][f"{name}, {size}"] = {
                **_summary(times, [("layoutcore", "before")]),
                "check_seconds": check,
                "check/before": check / min(times["before"]),
            }
    return out


def main(argv: list[str]) -> int:
    what = argv[0] if argv else ""
    if what == "torch-gloo-worker":
        _gloo_worker(int(argv[1]), int(argv[2]), int(argv[3]), int(argv[4]))
        return 0
    measures = {
        "jax": measure_jax,
        "jax-64mib": functools.partial(measure_jax, 30, (4096, 4096)),
        "torch-gloo": measure_torch_gloo,
        "torch-simulation": measure_torch_simulation,
    }
    if what not in measures:
        print(__doc__)
        return 2
    data = measures[what]()
    data["load_average"] = list(os.getloadavg())
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / f"bench_relayout_wall.{what}.json").write_text(json.dumps(data, indent=1) + "\n", "utf-8")
    for case, result in data["cases"].items():
        ratios = {k: round(v, 3) for k, v in result.items() if "/" in k}
        seconds = {k: f"{v * 1e3:.2f} ms" for k, v in result["seconds_min"].items()}
        print(f"{case:42s} {result.get('chosen')} {ratios} {seconds}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
