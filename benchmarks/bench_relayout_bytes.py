"""Bytes each framework really moves for a relayout, against the physical minimum (``floor_bytes``).

One process per framework, each in its own environment, on 8 CPU devices::

    PYTHONPATH=.:drivers .tox/jax/bin/python benchmarks/bench_relayout_bytes.py jax
    PYTHONPATH=.:drivers .tox/torch/bin/python benchmarks/bench_relayout_bytes.py torch
    python benchmarks/bench_relayout_bytes.py table     # merge into results/bench_relayout_bytes.md

*Moved bytes* are the bytes all devices together receive, as the floor counts them
(``floor_bytes = Σ_d |B_d \\ A_d|·itemsize``), so ``efficiency = floor_bytes / moved_bytes`` is 1.0
for a relayout that moves nothing it need not.

* **JAX**: the collectives of the compiled HLO of ``jax.jit(lambda a: a, out_shardings=...)``
  applied to an input with the source sharding. Each device runs the SPMD program, so a
  collective's per-device received bytes count once per device: an ``all-gather`` receives
  ``result - operand``; an ``all-to-all`` over a group of ``g`` receives ``(g-1)/g`` of its
  operands; a ``collective-permute`` sends its operand once per pair with ``source != target``;
  ``reduce-scatter`` ``(g-1)/g`` and ``all-reduce`` ``2(g-1)/g`` of the operand (ring lower bounds).
* **torch**: the collectives ``DTensor.redistribute`` issues under layoutcore's single-process
  simulation (``LocalTensorMode``), recorded by a ``CommDebugMode`` subclass with each rank's input
  size: ``all_gather_into_tensor`` receives ``(g-1)`` inputs, ``shard_dim_alltoall`` and
  ``all_to_all_single`` ``(g-1)/g`` of the input, ``reduce_scatter_tensor`` ``(g-1)/g``,
  ``all_reduce`` ``2(g-1)/g``, ``broadcast`` ``(g-1)/g`` (averaged over the group).
* **TF** DTensor is not measured: its relayout runs inside TF's runtime, which exposes no
  collective sizes to Python.
"""

from __future__ import annotations

import json
import math
import os
import re
import sys
from pathlib import Path
from typing import Any

os.environ.setdefault("LAYOUTCORE_CPU_DEVICES", "8")

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
    "cross-mesh 4x2 (x,None) → 8 (None,z)": (lc.Layout(["x", None], GRID), lc.Layout([None, "z"], FLAT), SHAPE),
}


def floor_bytes(source: lc.Layout, target: lc.Layout, shape: tuple[int, ...]) -> int:
    return lc.relayout_plan(source, target, shape, "float32").floor_bytes


def _refusal(floor: int, exc: Exception) -> dict[str, Any]:
    """A relayout the framework refuses is reported with its reason, never hidden or counted as 0 B."""
    reason = getattr(exc, "feature", None) or ("cross-mesh" if "mesh" in str(exc).lower() else type(exc).__name__)
    return {"floor_bytes": floor, "error": f"{type(exc).__name__}: {str(exc)[:160]}", "refused": reason}


# ------------------------------------------------------------------------------------------------
# JAX: collective sizes in the compiled HLO
# ------------------------------------------------------------------------------------------------
_DTYPE_BYTES = {"f32": 4, "f16": 2, "bf16": 2, "f64": 8, "s32": 4, "s64": 8, "u8": 1, "s8": 1, "pred": 1}
_ARRAY = re.compile(r"\b(f32|f16|bf16|f64|s32|s64|u8|s8|pred)\[([\d,]*)\]")
_DEF = re.compile(r"^\s*(?:ROOT\s+)?(%[\w.\-]+)\s*=\s*(.*?)\s+([\w\-]+)\(")


def _shape_bytes(text: str) -> int:
    """Bytes of an HLO shape (an array, or a tuple of arrays) written at the start of ``text``."""
    head = text if not text.startswith("(") else text[: text.index(")") + 1]
    if not text.startswith("("):
        head = text.split(" ", 1)[0]
    return sum(_DTYPE_BYTES[t] * math.prod(int(d) for d in dims.split(",") if d) for t, dims in _ARRAY.findall(head))


def _group_size(line: str, devices: int) -> int:
    groups = re.search(r"replica_groups=\{(\{[\d,]*\})", line)
    if groups:
        return len(groups.group(1).strip("{}").split(","))
    iota = re.search(r"replica_groups=\[([\d,]+)\]<=", line)
    if iota:
        return int(iota.group(1).split(",")[-1])
    mesh = re.search(r"replica_groups=mesh\[([^\]]*)\](?:, device_ids=\S+)?\s*\{([^}]*)\}", line)
    if mesh:  # {'a'} is all of axis a; {'a':(2)2} a sub-axis of size 2
        sizes = dict(re.findall(r"'(\w+)'=(\d+)", mesh.group(1)))
        return math.prod(
            int(sub) if sub else int(sizes[a]) for a, sub in re.findall(r"'(\w+)'(?::\(\d+\)(\d+))?", mesh.group(2))
        )
    return devices


def hlo_moved_bytes(hlo: str, devices: int) -> tuple[int, list[str]]:
    """Bytes all devices receive through the collectives of an SPMD-partitioned HLO module."""
    shapes: dict[str, int] = {}
    moved = 0
    seen: list[str] = []
    for line in hlo.splitlines():
        match = _DEF.match(line)
        if not match:
            continue
        name, shape, op = match.groups()
        shapes[name] = _shape_bytes(shape)
        op = op.removesuffix("-start")
        if op.endswith("-done") or op not in {
            "all-gather",
            "all-to-all",
            "collective-permute",
            "all-reduce",
            "reduce-scatter",
        }:
            continue
        args = line[match.end() :].split(")", 1)[0]
        names = re.findall(r"%[\w.\-]+", args)  # "/*index=5*/%x" too
        operand = sum(shapes[a] for a in names)
        # A tuple all-to-all sends operand i to group member i: the group is as long as the tuple.
        g = len(names) if op == "all-to-all" and len(names) > 1 else _group_size(line, devices)
        if op == "all-gather":
            per_device = shapes[name] - operand
            moved += per_device * devices
        elif op in ("all-to-all", "reduce-scatter"):
            moved += operand * (g - 1) // g * devices
        elif op == "all-reduce":
            moved += 2 * operand * (g - 1) // g * devices
        else:  # collective-permute: one operand per pair that leaves its device
            pairs = re.findall(r"\{(\d+),(\d+)\}", line.split("source_target_pairs=", 1)[1])
            moved += operand * sum(1 for s, t in pairs if s != t)
        seen.append(f"{op} g={g}")
    return moved, seen


def measure_jax() -> dict[str, Any]:
    import jax
    import numpy as np

    driver = lc.get_driver("jax")
    out: dict[str, Any] = {"statistic": "count", "framework": f"jax {jax.__version__}", "cases": {}}
    for case, (source, target, shape) in CASES.items():
        floor = floor_bytes(source, target, shape)
        try:
            value = lc.distribute_tensor(np.zeros(shape, np.float32), source, driver=driver)
            sharding = lc.relayout(value, target, driver=driver).sharding  # the driver's own target sharding
            compiled = jax.jit(lambda a: a, out_shardings=sharding).lower(value).compile()
            moved, ops = hlo_moved_bytes(compiled.as_text(), len(DEVICES))
            out["cases"][case] = {"floor_bytes": floor, "moved_bytes": moved, "collectives": ops}
        except Exception as exc:  # a relayout JAX cannot express is reported, not hidden
            out["cases"][case] = _refusal(floor, exc)
    return out


# ------------------------------------------------------------------------------------------------
# torch: collectives issued by DTensor.redistribute under the simulation
# ------------------------------------------------------------------------------------------------
def measure_torch() -> dict[str, Any]:
    import numpy as np
    import torch
    import torch.distributed as dist
    from layoutcore_torch import _convert, _private
    from torch.distributed.tensor.debug import CommDebugMode

    def group_size(name: Any) -> int:
        return int(dist.distributed_c10d._resolve_process_group(name).size())

    class Recorder(CommDebugMode):  # type: ignore[misc]
        """CommDebugMode that also keeps each collective's per-rank input bytes."""

        def __init__(self) -> None:
            super().__init__()
            self.moved = 0
            self.ops: list[str] = []

        def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
            if not isinstance(func, torch._ops.HigherOrderOperator) and not any(t.__name__ == "DTensor" for t in types):
                self._record(str(func._overloadpacket), args)
            return super().__torch_dispatch__(func, types, args, kwargs)

        def _record(self, op: str, args: Any) -> None:
            name = op.rsplit(".", 1)[-1]
            if name in {"wait_tensor", "_wrap_tensor_autograd"} or not (
                op.startswith(("_c10d_functional.", "c10d_functional.")) or name == "shard_dim_alltoall"
            ):
                return
            tensor = args[0]
            per_rank = (
                [t.numel() * t.element_size() for t in _private.local_tensors(tensor).values()]
                if _private.is_local_tensor(tensor)
                else [tensor.numel() * tensor.element_size()]
            )
            if name == "all_gather_into_tensor":
                g = int(args[1])
                moved = sum((g - 1) * b for b in per_rank)
            elif name in {"shard_dim_alltoall", "all_to_all_single"}:
                g = group_size(args[-1])
                moved = sum(b * (g - 1) // g for b in per_rank)
            elif name == "reduce_scatter_tensor":
                g = int(args[2])
                moved = sum(b * (g - 1) // g for b in per_rank)
            elif name == "all_reduce":
                g = group_size(args[-1])
                moved = sum(2 * b * (g - 1) // g for b in per_rank)
            elif name == "broadcast":
                g = group_size(args[-1])
                moved = sum(b * (g - 1) // g for b in per_rank)
            else:
                raise RuntimeError(f"unaccounted collective {op}")
            self.moved += moved
            self.ops.append(f"{name} g={g}")

    driver = lc.get_driver("torch")
    out: dict[str, Any] = {"statistic": "count", "framework": f"torch {torch.__version__}", "cases": {}}
    for case, (source, target, shape) in CASES.items():
        floor = floor_bytes(source, target, shape)
        try:
            value = lc.distribute_tensor(np.zeros(shape, np.float32), source, driver=driver)
            assert target.mesh is not None
            device_mesh = driver.device_mesh(target.mesh)  # type: ignore[attr-defined]
            with driver.spmd(target.mesh.size), Recorder() as recorder:  # type: ignore[attr-defined]
                value.redistribute(device_mesh, _convert.placements(target))
            out["cases"][case] = {"floor_bytes": floor, "moved_bytes": recorder.moved, "collectives": recorder.ops}
        except Exception as exc:
            out["cases"][case] = _refusal(floor, exc)
    return out


# ------------------------------------------------------------------------------------------------
# Table
# ------------------------------------------------------------------------------------------------
def _cell(case: dict[str, Any] | None) -> str:
    if case is None:
        return "not run"
    if "error" in case:
        return f"refused ({case.get('refused', 'error')})"
    moved = case["moved_bytes"]
    if moved == 0:
        return "1.00 (0 B)" if case["floor_bytes"] == 0 else "0 B moved?"
    return f"{case['floor_bytes'] / moved:.2f} ({moved // 1024} KiB)"


def table() -> str:
    runs = {}
    for framework in ("jax", "torch"):
        path = RESULTS / f"bench_relayout_bytes.{framework}.json"
        if path.exists():
            runs[framework] = json.loads(path.read_text("utf-8"))
    header = "| relayout (512x512 float32, 8 CPU devices) | floor |"
    rule = "| --- | ---: |"
    for data in runs.values():
        header += f" {data['framework']}: efficiency (moved) |"
        rule += " ---: |"
    lines = [header, rule]
    for case, (source, target, shape) in CASES.items():
        floor = floor_bytes(source, target, shape)
        row = f"| {case} | {floor // 1024} KiB |"
        for data in runs.values():
            row += f" {_cell(data['cases'].get(case))} |"
        lines.append(row)
    return "\n".join(lines) + "\n"


def main(argv: list[str]) -> int:
    what = argv[0] if argv else "table"
    if what in ("jax", "torch"):
        data = measure_jax() if what == "jax" else measure_torch()
        RESULTS.mkdir(exist_ok=True)
        (RESULTS / f"bench_relayout_bytes.{what}.json").write_text(json.dumps(data, indent=1) + "\n", "utf-8")
        for case, result in data["cases"].items():
            moved = result.get("moved_bytes")
            efficiency = "-" if not moved else f"{result['floor_bytes'] / moved:.3f}"
            detail = result.get("error") or ", ".join(result["collectives"]) or "no collective"
            print(
                f"{case:42s} floor {result['floor_bytes']:>9d}  moved {moved!s:>9s}  efficiency {efficiency:>6s}  {detail}"
            )
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
