"""Loading foreign checkpoints (safetensors, torch DCP, Orbax) with layoutcore, NumPy driver.

    python benchmarks/bench_interchange.py [--quick] [--out results/bench_interchange.json]

The inputs are written by each framework's own saver in a subprocess (``safetensors.numpy``,
``torch.distributed.checkpoint.save``, Orbax ``StandardCheckpointer`` on 8 JAX CPU devices,
rows over 8); the interpreters for torch and JAX, where
torch / JAX are not importable here: ``LAYOUTCORE_TORCH_PYTHON`` / ``LAYOUTCORE_JAX_PYTHON``, else
their venvs under /work/venvs.

Per format, contenders interleaved, warm page cache:

* **load throughput vs raw reads**: ``checkpoint.load`` of every tensor onto 8 devices (rows
  over 8, every byte needed) against reading the same bytes raw -- ``os.preadv`` of the read
  plan's ranges for safetensors and DCP, ``np.fromfile`` of every file for Orbax (the
  compressed bytes on disk) and TensorStore reading the arrays (Orbax's own engine); and, for
  safetensors and DCP, ``os.preadv`` of each device's block into its own new array (the work a
  load cannot avoid). Ratio ``raw_s / load_s`` (1.0 = at the speed of the raw read).
* **bytes read vs floor, one process of two** (mesh positions 0-3 of 8): ``read_plan`` under
  rows over 8 (row-contiguous: safetensors and DCP read exactly the rows) and columns over 8;
  the whole-item reads torch DCP's own loader does (``torch.load`` of every item it touches)
  and TensorStore's whole chunks for Orbax (uncompressed) for comparison.
* **two JAX processes** (4 CPU devices each) loading one safetensors tensor, rows or columns
  over 8, page cache dropped: per process ``rchar`` / floor (target <= 1.05).
* **plan vs the operating system**: ``rchar`` of ``/proc/self/io`` during a load against the
  plan's ``read_bytes`` (+ metadata).

Statistic: the minimum over repetitions.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import math
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

os.environ.setdefault("LAYOUTCORE_CPU_DEVICES", "8")

from layoutcore import Layout, Mesh, checkpoint
from layoutcore.checkpoint import _foreign

RESULTS = Path(__file__).resolve().parent / "results"
MESH8 = Mesh((8,), ("x",))

_MAKE = r"""
import os, sys, numpy as np
fmt, out, total, n = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
rows = int(np.sqrt(total // 4 // n)); rows -= rows % 8
rng = np.random.default_rng(0)
arrays = {f"t{i}": rng.standard_normal((rows, rows), dtype=np.float32) for i in range(n)}
if fmt == "safetensors":
    import safetensors.numpy as stn
    stn.save_file(arrays, out)
elif fmt == "torch-dcp":
    import warnings, torch, torch.distributed.checkpoint as dcp
    warnings.simplefilter("ignore")
    dcp.save({k: torch.from_numpy(v) for k, v in arrays.items()}, checkpoint_id=out)
else:
    os.environ["XLA_FLAGS"] = "--xla_force_host_platform_device_count=8"
    import jax, orbax.checkpoint as ocp
    from jax.sharding import NamedSharding, PartitionSpec as P
    mesh = jax.make_mesh((8,), ("x",), devices=jax.devices())
    tree = {k: jax.device_put(v, NamedSharding(mesh, P("x", None))) for k, v in arrays.items()}
    c = ocp.StandardCheckpointer(); c.save(out, tree); c.wait_until_finished()
"""


def _make(fmt: str, out: Path, total: int, n: int) -> None:
    python = sys.executable
    module, venv = {"torch-dcp": ("torch", "torch"), "orbax": ("jax", "jax")}.get(fmt, ("", ""))
    if module and importlib.util.find_spec(module) is None:
        fallback = Path("/work/venvs") / venv / "bin" / "python"
        python = os.environ.get(f"LAYOUTCORE_{module.upper()}_PYTHON", str(fallback))
    subprocess.run([python, "-c", _MAKE, fmt, str(out), str(total), str(n)], check=True, capture_output=True)


def _rchar() -> int:
    with open("/proc/self/io") as f:
        return int(next(line for line in f if line.startswith("rchar:")).split()[1])


def _raw_preadv(reads: tuple[tuple[str, int, int], ...]) -> int:
    """Read the plan's byte ranges raw, each into its own new buffer, all kept until the end (as
    a load keeps what it read): the physical bound."""
    got = 0
    fds: dict[str, int] = {}
    kept = []
    try:
        for file, offset, length in reads:
            fd = fds.get(file)
            if fd is None:
                fd = fds[file] = os.open(file, os.O_RDONLY)
            buf = np.empty(length, dtype=np.uint8)
            got += os.preadv(fd, [buf], offset)
            kept.append(buf)
    finally:
        for fd in fds.values():
            os.close(fd)
    return got


def _raw_files(path: Path) -> int:
    kept = [np.fromfile(p, dtype=np.uint8) for p in sorted(path.rglob("*")) if p.is_file()]
    return sum(k.nbytes for k in kept)


def _tensorstore_read(path: Path) -> int:
    ckpt = _foreign.open_foreign(path)
    total = 0
    for t in ckpt.tensors.values():
        (block,) = ckpt.read(t, [((0,) * len(t.shape), t.shape)], {})
        total += block.nbytes
    ckpt.close()
    return total


def _dcp_whole_items(path: Path, target: dict[str, Layout], positions: list[int]) -> int:
    """Bytes torch DCP's own loader reads: every stored item a needed box touches, whole."""
    ckpt = _foreign.open_foreign(path)
    total = 0
    for p, t in ckpt.tensors.items():
        boxes = {b for i, b in enumerate(_boxes(t.shape, target[p])) if i in positions}
        for piece in t.pieces:
            hit = any(
                all(o < po + ps and po < o + s for o, s, po, ps in zip(bo, bs, piece.start, piece.shape, strict=True))
                for bo, bs in boxes
            )
            total += math.prod(piece.shape) * t.nbytes // max(1, math.prod(t.shape)) if hit else 0
    return total


def _boxes(shape: tuple[int, ...], layout: Layout) -> list[tuple[tuple[int, ...], tuple[int, ...]]]:
    out = []
    for slices in layout.device_slices(shape):
        b = [s.indices(d)[:2] for s, d in zip(slices, shape, strict=True)]
        out.append((tuple(lo for lo, _ in b), tuple(hi - lo for lo, hi in b)))
    return out


def _row_box_ranges(path: Path, target: dict[str, Layout]) -> list[tuple[str, int, int]]:
    """Per tensor and device, the one byte range of its rows (single-piece, row-major tensors)."""
    ckpt = _foreign.open_foreign(path)
    out = []
    for p, t in ckpt.tensors.items():
        (piece,) = t.pieces
        row = math.prod(t.shape[1:]) * (t.nbytes // max(1, math.prod(t.shape)))
        for (r0, *_), (nr, *_) in dict.fromkeys(_boxes(t.shape, target[p])):
            out.append((piece.file, piece.offset + r0 * row, nr * row))
    return out


def bench_format(root: Path, fmt: str, total: int, n: int, reps: int) -> dict[str, Any]:
    path = root / ("model.safetensors" if fmt == "safetensors" else fmt)
    t0 = time.perf_counter()
    _make(fmt, path, total, n)
    make_s = time.perf_counter() - t0
    info = checkpoint.inspect(path)
    rows = {p: Layout(("x", None), MESH8) for p in info.tensors}
    cols = {p: Layout((None, "x"), MESH8) for p in info.tensors}
    full_plan = checkpoint.read_plan(path, rows)
    boxes = _row_box_ranges(path, rows) if fmt != "orbax" else []
    load_s, raw_s, ts_s, box_s = [], [], [], []
    measured = 0
    for _ in range(reps):
        before = _rchar()
        t0 = time.perf_counter()
        out = checkpoint.load(path, rows, driver="numpy")
        load_s.append(time.perf_counter() - t0)
        measured = _rchar() - before
        del out
        t0 = time.perf_counter()
        if fmt == "orbax":
            _raw_files(path)
        else:
            _raw_preadv(full_plan.reads)
        raw_s.append(time.perf_counter() - t0)
        if boxes:
            t0 = time.perf_counter()
            _raw_preadv(tuple(boxes))
            box_s.append(time.perf_counter() - t0)
        if fmt == "orbax":
            t0 = time.perf_counter()
            _tensorstore_read(path)
            ts_s.append(time.perf_counter() - t0)
    nbytes = info.total_bytes
    result: dict[str, Any] = {
        "total_bytes": nbytes,
        "tensors": len(info.tensors),
        "write_s_by_the_framework": round(make_s, 3),
        "load_s": round(min(load_s), 4),
        "raw_s": round(min(raw_s), 4),
        "load_GiB_per_s": round(nbytes / min(load_s) / 2**30, 3),
        "raw_over_load": round(min(raw_s) / min(load_s), 3),
        "plan_read_bytes": full_plan.read_bytes,
        "plan_metadata_bytes": full_plan.metadata_bytes,
        "measured_rchar_bytes": measured,
        "measured_over_plan": round(measured / (full_plan.read_bytes + full_plan.metadata_bytes), 4),
    }
    if fmt == "orbax":
        result["raw_is"] = "np.fromfile of every file (compressed bytes on disk)"
        result["tensorstore_read_s"] = round(min(ts_s), 4)
        result["tensorstore_over_load"] = round(min(ts_s) / min(load_s), 3)
    else:
        result["raw_is"] = "os.preadv of the read plan's ranges"
        result["raw_per_device_block_s"] = round(min(box_s), 4)
        result["raw_per_device_block_over_load"] = round(min(box_s) / min(load_s), 3)
    half = [0, 1, 2, 3]
    for label, target in (("rows", rows), ("cols", cols)):
        plan = checkpoint.read_plan(path, target, process_devices=half)
        result[f"half_{label}_read_over_floor"] = round(plan.amplification, 4)
        result[f"half_{label}_floor_bytes"] = plan.floor_bytes
        if fmt == "torch-dcp":
            result[f"half_{label}_dcp_native_over_floor"] = round(
                _dcp_whole_items(path, target, half) / plan.floor_bytes, 4
            )
        if fmt == "orbax":
            result[f"half_{label}_exact"] = False  # whole chunks, uncompressed size
    return result


def bench_two_processes(root: Path, total: int) -> dict[str, Any]:
    """Two JAX processes (4 CPU devices each) load one safetensors tensor, page cache dropped:
    per process ``rchar`` (bytes asked of the kernel) over its floor, and the disk's read_bytes
    of both together (one page cache: read-ahead lands in whichever process faults first)."""
    import socket

    import safetensors.numpy as stn

    worker = Path(__file__).resolve().parents[1] / "tests" / "interchange" / "frameworks" / "jax_mp_load_worker.py"
    python = sys.executable
    if importlib.util.find_spec("jax") is None:
        python = os.environ.get("LAYOUTCORE_JAX_PYTHON", "/work/venvs/jax/bin/python")
    rows = int(np.sqrt(total // 4)) // 8 * 8
    file = root / "mp.safetensors"
    stn.save_file({"w": np.arange(rows * rows, dtype=np.float32).reshape(rows, rows)}, str(file))
    out: dict[str, Any] = {"tensor_bytes": rows * rows * 4}
    env = {k: v for k, v in os.environ.items() if k != "LAYOUTCORE_CPU_DEVICES"}
    for kind in ("rows", "cols"):
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            port = str(sock.getsockname()[1])
        procs = [
            subprocess.Popen(
                [python, str(worker), str(p), port, str(file), kind],
                cwd=worker.parent,
                env=env,
                stdout=subprocess.PIPE,
                stderr=subprocess.DEVNULL,
                text=True,
            )
            for p in (0, 1)
        ]
        reports = [
            json.loads(next(x for x in p.communicate(timeout=300)[0].splitlines() if x.startswith("{"))) for p in procs
        ]
        out[kind] = {
            "rchar_over_floor": [round(r["rchar"] / r["floor_bytes"], 4) for r in reports],
            "plan_over_floor": [round(r["plan_read_bytes"] / r["floor_bytes"], 4) for r in reports],
            "disk_read_bytes_both_over_tensor": round(sum(r["read_bytes"] for r in reports) / (rows * rows * 4), 4),
        }
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true", help="64 MiB per format, 2 repetitions")
    ap.add_argument("--out", default=None)
    ap.add_argument("--formats", default="safetensors,torch-dcp,orbax")
    args = ap.parse_args()
    total, n, reps = (64 << 20, 4, 2) if args.quick else (256 << 20, 8, 3)
    root = Path(tempfile.mkdtemp(prefix="bench_interchange_", dir=os.environ.get("BENCH_DIR", "/tmp")))
    try:
        result: dict[str, Any] = {
            "benchmark": "bench_interchange",
            "statistic": "minimum",
            "quick": args.quick,
            "load_average": os.getloadavg()[0],
            "driver": "numpy",
            "formats": {fmt: bench_format(root, fmt, total, n, reps) for fmt in args.formats.split(",")},
            "safetensors_two_jax_processes": bench_two_processes(root, total),
        }
    finally:
        shutil.rmtree(root, ignore_errors=True)
    text = json.dumps(result, indent=1)
    print(text)
    out = (
        Path(args.out)
        if args.out
        else RESULTS / ("bench_interchange.quick.json" if args.quick else "bench_interchange.json")
    )
    out.write_text(text + "\n")


if __name__ == "__main__":
    main()
