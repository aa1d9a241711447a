"""Bytes each framework really moves for a relayout, against the physical minimum (``floor_bytes``).

Two contenders per framework: the framework's own move (*native*: ``jax.device_put`` /
``DTensor.redistribute``, what layoutcore's drivers ran before they planned relayouts) and
layoutcore's ``relayout`` (*layoutcore*: the driver keeps the native move where it is at the floor
and runs ``relayout_plan``'s transfers elsewhere). On 8 CPU devices, each framework in its own
environment::

    PYTHONPATH=.:drivers .tox/jax/bin/python benchmarks/bench_relayout_bytes.py jax
    PYTHONPATH=.:drivers .tox/torch/bin/python benchmarks/bench_relayout_bytes.py torch        # simulation
    PYTHONPATH=.:drivers .tox/torch/bin/python benchmarks/bench_relayout_bytes.py torch-gloo   # 8 gloo processes
    python benchmarks/bench_relayout_bytes.py tensorflow-estimate   # TF: from the plan (see below)
    python benchmarks/bench_relayout_bytes.py table     # merge into results/bench_relayout_bytes.md

*Moved bytes* are the bytes all devices together receive, as the floor counts them
(``floor_bytes = Σ_d |B_d \\ A_d|·itemsize``), so ``efficiency = floor_bytes / moved_bytes`` is 1.0
for a relayout that moves nothing it need not.

* **JAX** (``layoutcore_jax._relayout.CollectiveBytes``): the collectives of the compiled HLO of
  every program executed (and, for ``device_put``, of ``jax.jit(lambda a: a, out_shardings=...)``,
  the program XLA runs for that move), and the bytes the driver's ``host_copy`` move copies from
  one CPU device's shard into another's block, as it copies them. The driver's one-time
  measurement of its candidate moves (first relayout of a pair) is not counted; ``chosen`` names
  the move it picked. Each device runs the SPMD program, so a collective's
  per-device bytes count once per device: an ``all-gather`` receives ``result - operand``; an
  ``all-to-all`` over ``g`` receives ``(g-1)/g`` of its operands; a ``collective-permute`` carries
  its operand once per pair with ``source != target``; ``reduce-scatter`` ``(g-1)/g`` and
  ``all-reduce`` ``2(g-1)/g`` of the operand (ring lower bounds).
* **torch** (``layoutcore_torch._relayout.CollectiveBytes``): the collectives issued, with their
  own arguments: under the simulation (``LocalTensorMode``) the simulated collective
  implementations, on gloo a ``CommDebugMode`` per rank (each rank's sent bytes, summed over the
  ranks). ``all_to_all_single`` with split sizes counts its splits to other ranks exactly,
  ``all_gather_into_tensor`` ``(g-1)`` inputs, ``shard_dim_alltoall`` ``(g-1)/g`` of the input.
* **TF** DTensor is not measured: its relayout is expanded to collectives inside TF's C++ runtime
  (the DTensor MLIR SPMD expansion), which exposes no collective sizes to Python; the
  ``tensorflow-estimate`` run prices its gather-then-slice expansion with ``relayout_plan``
  (:func:`estimate_tensorflow`). layoutcore's TF driver relayouts with ``dtensor.relayout``.
"""

from __future__ import annotations

import json
import math
import os
import sys
from pathlib import Path
from typing import Any

os.environ.setdefault("LAYOUTCORE_CPU_DEVICES", "8")

from _processes import run_gloo_ranks  # benchmarks/ is sys.path[0] when a benchmark runs

import layoutcore as lc

RESULTS = Path(__file__).resolve().parent / "results"
DEVICES = [f"CPU:{i}" for i in range(8)]
LINE = lc.Mesh((8,), ("x",), devices=DEVICES)
GRID = lc.Mesh((4, 2), ("x", "y"), devices=DEVICES)
FLAT = lc.Mesh((8,), ("z",), devices=DEVICES)
SHAPE = (512, 512)
UNEVEN = (500, 500)

#: name -> (source layout, target layout, shape)
CASES: dict[str, tuple[lc.Layout, lc.Layout, tuple[int, ...]]] = {
    "x → None (all-gather)": (lc.Layout(["x", None], LINE), lc.Layout([None, None], LINE), SHAPE),
    "None → x (slice)": (lc.Layout([None, None], LINE), lc.Layout(["x", None], LINE), SHAPE),
    "S0 → S1 (x,None → None,x)": (lc.Layout(["x", None], LINE), lc.Layout([None, "x"], LINE), SHAPE),
    "(x,y) → (y,x) on 4x2": (lc.Layout(["x", "y"], GRID), lc.Layout(["y", "x"], GRID), SHAPE),
    "uneven S0 → S1 (500x500 on 8)": (lc.Layout(["x", None], LINE), lc.Layout([None, "x"], LINE), UNEVEN),
    "multi-axis ((x,y),None) → (None,(x,y))": (
        lc.Layout([("x", "y"), None], GRID),
        lc.Layout([None, ("x", "y")], GRID),
        SHAPE,
    ),
    "(x,y) → (None,(x,y)) on 4x2": (lc.Layout(["x", "y"], GRID), lc.Layout([None, ("x", "y")], GRID), SHAPE),
    "cross-mesh 4x2 (x,None) → 8 (None,z)": (lc.Layout(["x", None], GRID), lc.Layout([None, "z"], FLAT), SHAPE),
}


def floor_bytes(source: lc.Layout, target: lc.Layout, shape: tuple[int, ...]) -> int:
    return lc.relayout_plan(source, target, shape, "float32").floor_bytes


def _refusal(floor: int, exc: Exception) -> dict[str, Any]:
    """A relayout the framework refuses is reported with its reason, never hidden or counted as 0 B."""
    reason = getattr(exc, "feature", None) or ("cross-mesh" if "mesh" in str(exc).lower() else type(exc).__name__)
    return {"floor_bytes": floor, "error": f"{type(exc).__name__}: {str(exc)[:160]}", "refused": reason}


def _contender(floor: int, count: Any) -> dict[str, Any]:
    """``count()`` -> (moved bytes, collectives); a refusal (typed error, torch's NotImplementedError) is reported."""
    try:
        moved, ops = count()
    except Exception as exc:
        return _refusal(floor, exc)
    return {"moved_bytes": moved, "collectives": ops}


# ------------------------------------------------------------------------------------------------
# JAX: collective sizes in the compiled HLO
# ------------------------------------------------------------------------------------------------
def measure_jax() -> dict[str, Any]:
    import jax
    import numpy as np
    from layoutcore_jax._relayout import CollectiveBytes, hlo_moved_bytes
    from layoutcore_jax._relayout_choice import chosen

    driver = lc.get_driver("jax")
    out: dict[str, Any] = {"statistic": "count", "framework": f"jax {jax.__version__}", "cases": {}}
    for case, (source, target, shape) in CASES.items():
        floor = floor_bytes(source, target, shape)
        try:
            value = lc.distribute_tensor(np.zeros(shape, np.float32), source, driver=driver)
        except Exception as exc:  # a layout JAX cannot express is reported, not hidden
            out["cases"][case] = _refusal(floor, exc)
            continue

        def native(value: Any = value, target: lc.Layout = target) -> tuple[int, list[str]]:
            sharding = driver.named_sharding(target)  # type: ignore[attr-defined]
            compiled = jax.jit(lambda a: a, out_shardings=sharding).lower(value).compile()
            return hlo_moved_bytes(compiled.as_text(), len(DEVICES))

        def planned(value: Any = value, target: lc.Layout = target) -> tuple[int, list[str]]:
            with CollectiveBytes() as counted:
                lc.relayout(value, target, driver=driver)
            return counted.moved, counted.ops

        out["cases"][case] = {
            "floor_bytes": floor,
            "native": _contender(floor, native),
            "layoutcore": _contender(floor, planned),
        }
        if "error" not in out["cases"][case]["layoutcore"]:
            # the driver's move, chosen by its one-time measurement (not counted: only the relayout is)
            out["cases"][case]["layoutcore"]["chosen"] = chosen(value, driver.named_sharding(target))  # type: ignore[attr-defined]
    return out


# ------------------------------------------------------------------------------------------------
# torch: collectives issued by DTensor.redistribute and by layoutcore's relayout
# ------------------------------------------------------------------------------------------------
def _torch_cases(driver: Any) -> dict[str, Any]:
    """Per case: floor, native (``DTensor.redistribute``) and layoutcore bytes as this process counts them."""
    import numpy as np
    from layoutcore_torch import _convert
    from layoutcore_torch._relayout import CollectiveBytes

    cases: dict[str, Any] = {}
    for case, (source, target, shape) in CASES.items():
        floor = floor_bytes(source, target, shape)
        value = lc.distribute_tensor(np.zeros(shape, np.float32), source, driver=driver)
        assert target.mesh is not None

        def native(value: Any = value, target: lc.Layout = target) -> tuple[int, list[str]]:
            device_mesh = driver.device_mesh(target.mesh)
            with driver.spmd(target.mesh.size), CollectiveBytes() as counted:  # type: ignore[union-attr]
                value.redistribute(device_mesh, _convert.placements(target))
            return counted.moved, counted.ops

        def planned(value: Any = value, target: lc.Layout = target) -> tuple[int, list[str]]:
            with CollectiveBytes() as counted:
                lc.relayout(value, target, driver=driver)
            return counted.moved, counted.ops

        cases[case] = {
            "floor_bytes": floor,
            "native": _contender(floor, native),
            "layoutcore": _contender(floor, planned),
        }
    return cases


def measure_torch() -> dict[str, Any]:
    import torch

    driver = lc.get_driver("torch")
    return {
        "statistic": "count",
        "framework": f"torch {torch.__version__} (simulation)",
        "cases": _torch_cases(driver),
    }


def _gloo_worker(rank: int, port: int, world: int) -> None:
    """One of ``world`` gloo ranks: count this rank's bytes, sum them over the ranks, rank 0 prints JSON."""
    import datetime

    import torch
    import torch.distributed as dist

    dist.init_process_group(
        "gloo",
        init_method=f"tcp://127.0.0.1:{port}",
        rank=rank,
        world_size=world,
        timeout=datetime.timedelta(seconds=120),
    )
    mine = _torch_cases(lc.get_driver("torch"))
    everyone: list[Any] = [None] * world
    dist.all_gather_object(everyone, mine)
    if rank == 0:
        cases = {}
        for case, first in mine.items():
            merged = {"floor_bytes": first["floor_bytes"]}
            for who in ("native", "layoutcore"):
                if "error" in first[who]:
                    merged[who] = first[who]
                else:
                    merged[who] = {
                        "moved_bytes": sum(r[case][who]["moved_bytes"] for r in everyone),
                        "collectives": first[who]["collectives"],
                    }
            cases[case] = merged
        data = {
            "statistic": "count",
            "framework": f"torch {torch.__version__} (gloo, {world} processes)",
            "cases": cases,
        }
        print(json.dumps(data), flush=True)
    dist.barrier()
    dist.destroy_process_group()


def measure_torch_gloo(world: int = 8) -> dict[str, Any]:
    """The same cases on ``world`` real gloo processes on 127.0.0.1 (one rank each)."""
    return run_gloo_ranks(__file__, world, timeout_s=600)


def _bounds(block: tuple[slice, ...], shape: tuple[int, ...]) -> list[slice]:
    return [slice(*b.indices(n)[:2]) for b, n in zip(block, shape, strict=True)]


# ------------------------------------------------------------------------------------------------
# TF: an estimate from the plan (TF's runtime shows Python no collective)
# ------------------------------------------------------------------------------------------------
def estimate_tensorflow() -> dict[str, Any]:
    """What TF DTensor's relayout moves, estimated: not measured (module docstring).

    TF 2.21 expands ``dtensor.relayout`` into collectives in C++ (the DTensor MLIR SPMD expansion of
    one eager ``Relayout`` op); neither the expanded program nor collective sizes reach Python
    (``TF_DUMP_GRAPH_PREFIX``, ``TF_CPP_MAX_VLOG_LEVEL=1`` and ``DTENSOR_LOG_OP_BY_OP=1`` printed none).
    Its relayout expander unshards first and slices after: every tensor axis whose mesh axes change
    is all-gathered, then each device keeps its target block. The estimate is the floor of that
    first step, ``relayout_plan(source, source with those axes unsharded)``; the slice moves nothing.
    Layouts TF cannot hold (several mesh axes on one tensor axis, uneven) are refusals, as TF raises
    them. TF's ``relayout`` stays on one mesh; layoutcore's TF driver moves to another mesh through host
    memory (every block read once, then each device's target block placed): estimated as both.
    """
    out: dict[str, Any] = {
        "statistic": "count",
        "framework": "tensorflow 2.21 (estimate from the plan, not measured)",
        "estimate": True,
        "cases": {},
    }
    for case, (source, target, shape) in CASES.items():
        floor = floor_bytes(source, target, shape)
        multi = any(len(source.mesh_axes(d)) > 1 or len(target.mesh_axes(d)) > 1 for d in range(len(shape)))
        uneven = any(n % source.num_shards(d) or n % target.num_shards(d) for d, n in enumerate(shape))
        if multi or uneven:
            reason = "multi_axis" if multi else "uneven"
            out["cases"][case] = {"floor_bytes": floor, "error": f"TF DTensor refuses ({reason})", "refused": reason}
            continue
        if source.mesh != target.mesh:  # dtensor.relayout stays on one mesh; the driver goes through the host
            host = math.prod(shape) * 4 + sum(
                math.prod(b.stop - b.start for b in _bounds(block, shape)) * 4 for block in target.device_slices(shape)
            )
            out["cases"][case] = {
                "floor_bytes": floor,
                "native": {"error": "dtensor.relayout works within one mesh", "refused": "cross-mesh"},
                "layoutcore": {"moved_bytes": host, "collectives": ["through host memory (estimated)"]},
            }
            continue
        gathered = lc.Layout(
            [None if source.mesh_axes(d) != target.mesh_axes(d) else source.axes[d] for d in range(len(shape))],
            source.mesh,
        )
        moved = lc.relayout_plan(source, gathered, shape, "float32").floor_bytes
        result = {"moved_bytes": moved, "collectives": ["all-gather (estimated)"] if moved else []}
        out["cases"][case] = {"floor_bytes": floor, "native": result, "layoutcore": result}
    return out


# ------------------------------------------------------------------------------------------------
# Table
# ------------------------------------------------------------------------------------------------
def _cell(case: dict[str, Any] | None, floor: int) -> str:
    if case is None:
        return "not run"
    if "error" in case:
        return f"refused ({case.get('refused', 'error')})"
    moved = case["moved_bytes"]
    if moved == 0:
        return "1.00 (0 B)" if floor == 0 else "0 B moved?"
    return f"{floor / moved:.2f} ({moved // 1024} KiB)"


RUNS = ("jax", "torch", "torch-gloo", "tensorflow-estimate")


def table() -> str:
    runs = {}
    for name in RUNS:
        path = RESULTS / f"bench_relayout_bytes.{name}.json"
        if path.exists():
            runs[name] = json.loads(path.read_text("utf-8"))
    header = "| relayout (512x512 float32, 8 CPU devices) | floor |"
    rule = "| --- | ---: |"
    for data in runs.values():
        header += f" {data['framework']}: native | layoutcore |"
        rule += " ---: | ---: |"
    lines = [header, rule]
    for case, (source, target, shape) in CASES.items():
        floor = floor_bytes(source, target, shape)
        row = f"| {case} | {floor // 1024} KiB |"
        for data in runs.values():
            result = data["cases"].get(case)
            if result is not None and "error" in result:  # the framework cannot hold the source layout
                row += f" {_cell(result, floor)} | {_cell(result, floor)} |"
            else:
                row += (
                    f" {_cell(result and result['native'], floor)} | {_cell(result and result['layoutcore'], floor)} |"
                )
        lines.append(row)
    return "\n".join(lines) + "\n"


def main(argv: list[str]) -> int:
    what = argv[0] if argv else "table"
    if what == "torch-gloo-worker":
        _gloo_worker(int(argv[1]), int(argv[2]), int(argv[3]))
        return 0
    if what in RUNS:
        measure = {
            "jax": measure_jax,
            "torch": measure_torch,
            "torch-gloo": measure_torch_gloo,
            "tensorflow-estimate": estimate_tensorflow,
        }[what]
        data = measure()
        RESULTS.mkdir(exist_ok=True)
        (RESULTS / f"bench_relayout_bytes.{what}.json").write_text(json.dumps(data, indent=1) + "\n", "utf-8")
        for case, result in data["cases"].items():
            floor = result["floor_bytes"]
            cells = [f"{who} {_cell(result.get(who, result), floor):>22s}" for who in ("native", "layoutcore")]
            print(f"{case:42s} floor {floor:>9d}  " + "  ".join(cells))
        return 0
    if what == "table":
        text = table()
        (RESULTS / "bench_relayout_bytes.md").write_text(text, "utf-8")
        print(text)
        return 0
    print(__doc__)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
