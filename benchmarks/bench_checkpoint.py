"""layoutcore.checkpoint against the physical bounds, NumPy driver, contenders interleaved.

    python benchmarks/bench_checkpoint.py [--quick] [--out results/bench_checkpoint.json]

* **save** vs ``ndarray.tofile`` of the same blocks (one file per block, the bytes a save must
  write): throughput ratio ``tofile_s / save_s`` (target >= 0.8). Both without fsync (page cache),
  and ``save(sync=True)`` vs ``tofile`` + ``fsync``. ``save`` writes on ``checkpoint_threads()``
  threads; ``tofile_threads`` is ``tofile`` on as many threads, reported beside as a stricter bound.
* **load into another layout** (rows over 8 -> columns over 8) vs ``np.fromfile`` of every shard
  file (the same bytes), keeping the arrays it read as a load keeps what it loads:
  ``fromfile_s / load_s`` (target >= 0.8). Measured twice: **warm** (every file already in the
  page cache: memory copies and page faults only) and **cold** (files written back and dropped
  with ``posix_fadvise(DONTNEED)`` before each contender: the disk). Also reported: the same
  ratio against ``np.fromfile`` that drops each array before reading the next
  (``fromfile_reused``, the bound of the earlier runs: its pages are recycled, so it pays no
  page faults, which no load returning 1 GiB can avoid), ``np.fromfile`` of the files on as many
  threads as ``load`` reads with (``fromfile_threads``: ``LAYOUTCORE_CHECKPOINT_THREADS``, by
  default the cores, at most 4), and ``verify=False``.
* **peak extra RSS during load** beyond the loaded data (target <= one target shard + 64 MiB),
  sampled from ``/proc/self/statm`` by a thread.
* **read_plan** for 10 000 tensors on a 1 024-device mesh (32 x 32), target < 2 s.
* **bytes / floor** for the 7 relayout cases of ``bench_relayout_bytes.py`` done through a
  checkpoint, every device as its own process (``process_devices=[d]``): layoutcore's exact reads,
  undeclared and declared (``read_layouts``), and what a whole-chunk reader (TensorStore /
  Orbax's default of one chunk per saved block) reads.

Statistic: the minimum over repetitions (the least disturbed run on a shared machine), with the
medians beside them (``seconds_median``, ``median_ratios``). Contenders are interleaved, in
alternating order from one repetition to the next.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
os.environ.setdefault("LAYOUTCORE_CPU_DEVICES", "8")

from _timing import peak_rss_growth

import layoutcore as lc
from layoutcore import Layout, Mesh, checkpoint
from layoutcore._config import checkpoint_threads
from layoutcore.checkpoint import _save as ck_save
from layoutcore.checkpoint._format import FORMAT_NAME, FORMAT_VERSION

RESULTS = Path(__file__).resolve().parent / "results"
MESH8 = Mesh((8,), ("x",))
ROWS = Layout(("x", None), MESH8)
COLS = Layout((None, "x"), MESH8)


def _state(total: int, n: int) -> dict[str, Any]:
    rows = int(np.sqrt(total // 4 // n))
    rows -= rows % 8
    rng = np.random.default_rng(0)
    return {f"t{i}": lc.distribute_tensor(rng.standard_normal((rows, rows), dtype=np.float32), ROWS) for i in range(n)}


def _evict(path: Path) -> None:
    """Write back and drop every file under ``path`` from the page cache (a cold read)."""
    for p in path.rglob("*"):
        if p.is_file():
            fd = os.open(p, os.O_RDONLY)
            os.fsync(fd)
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
            os.close(fd)


def bench_save_load(root: Path, total: int, n: int, reps: int) -> dict[str, Any]:
    tree = _state(total, n)
    nbytes = sum(int(np.prod(t.shape)) * 4 for t in tree.values())
    times: dict[str, list[float]] = {
        k: [] for k in ("tofile", "tofile_threads", "save", "save_declared", "tofile_fsync", "save_sync")
    }

    def tofile(dst: Path, sync: bool) -> None:
        dst.mkdir()
        for name, t in tree.items():
            for i, comp in enumerate(lc.unpack(t)):
                f = dst / f"{name}.{i}"
                np.asarray(comp).tofile(f)
                if sync:
                    fd = os.open(f, os.O_RDONLY)
                    os.fsync(fd)
                    os.close(fd)

    threads = checkpoint_threads()

    def tofile_threads(dst: Path) -> None:  # the same parallelism as save's writers: a stricter bound
        dst.mkdir()
        jobs = [(dst / f"{name}.{i}", comp) for name, t in tree.items() for i, comp in enumerate(lc.unpack(t))]
        with ThreadPoolExecutor(threads) as pool:
            list(pool.map(lambda job: np.asarray(job[1]).tofile(job[0]), jobs))

    contenders = {
        "tofile": lambda d: tofile(d, False),
        "tofile_threads": tofile_threads,
        "save": lambda d: checkpoint.save(d, tree),
        "save_declared": lambda d: checkpoint.save(d, tree, read_layouts={k: COLS for k in tree}),
        "tofile_fsync": lambda d: tofile(d, True),
        "save_sync": lambda d: checkpoint.save(d, tree, sync=True),
    }
    for r in range(reps):
        for name, fn in contenders.items() if r % 2 == 0 else reversed(contenders.items()):
            d = root / f"{name}-{r}"
            start = time.perf_counter()
            fn(d)
            times[name].append(time.perf_counter() - start)
            if not (name == "save" and r == reps - 1) and not (name == "save_declared" and r == reps - 1):
                shutil.rmtree(d)
    saved, declared = root / f"save-{reps - 1}", root / f"save_declared-{reps - 1}"
    # load into columns vs np.fromfile of the same files. The bound keeps what it reads, as a load
    # must (1 GiB of fresh memory, page faults included); "fromfile_reused" drops each array before
    # reading the next, so glibc hands the same warm pages back every time (no page faults): the
    # bound the earlier runs compared against, reported for comparison.
    files = [saved / f for f in checkpoint.inspect(saved).files if "/c/" in f]
    target = {k: COLS for k in tree}

    def fromfile_kept() -> Any:
        return [np.fromfile(f, dtype=np.uint8) for f in files]

    def fromfile_reused() -> None:
        for f in files:
            np.fromfile(f, dtype=np.uint8)

    # load reads on checkpoint_threads() threads (page-cache copies, page faults and checksums
    # run with the GIL released): the same parallelism given to np.fromfile, as a stricter bound
    def fromfile_threads() -> Any:
        with ThreadPoolExecutor(threads) as pool:
            return list(pool.map(lambda f: np.fromfile(f, dtype=np.uint8), files))

    warm = {
        "fromfile": fromfile_kept,
        "fromfile_reused": fromfile_reused,
        "fromfile_threads": fromfile_threads,
        "load": lambda: checkpoint.load(saved, target),
        "load_declared": lambda: checkpoint.load(declared, target),
        "load_noverify": lambda: checkpoint.load(saved, target, verify=False),
        "load_declared_noverify": lambda: checkpoint.load(declared, target, verify=False),
    }
    cold = {
        "fromfile_cold": (saved, fromfile_kept),
        "fromfile_threads_cold": (saved, fromfile_threads),
        "load_cold": (saved, warm["load"]),
        "load_declared_cold": (declared, warm["load_declared"]),
    }
    load_t: dict[str, list[float]] = {k: [] for k in (*warm, *cold)}
    load_reps = reps + 2
    for r in range(load_reps):  # cold: every file written back and dropped from the page cache first
        for name, (where, fn) in cold.items() if r % 2 == 0 else reversed(cold.items()):
            _evict(where)
            start = time.perf_counter()
            out = fn()
            load_t[name].append(time.perf_counter() - start)
            del out
    for fn in warm.values():  # one untimed warm-up each: the files in the page cache
        fn()
    for r in range(load_reps):
        for name, fn in warm.items() if r % 2 == 0 else reversed(warm.items()):
            start = time.perf_counter()
            out = fn()
            load_t[name].append(time.perf_counter() - start)
            del out
    # peak RSS during a load, beyond the loaded data
    extra = peak_rss_growth(lambda: checkpoint.load(saved, target)) - nbytes
    target_shard = nbytes // n // 8
    best = {k: min(v) for k, v in {**times, **load_t}.items()}
    median = {k: statistics.median(v) for k, v in {**times, **load_t}.items()}
    ratios = {
        "save_vs_tofile": ("tofile", "save"),
        "save_vs_tofile_threads": ("tofile_threads", "save"),
        "save_declared_vs_tofile": ("tofile", "save_declared"),
        "save_sync_vs_tofile_fsync": ("tofile_fsync", "save_sync"),
        "load_vs_fromfile": ("fromfile", "load"),
        "load_declared_vs_fromfile": ("fromfile", "load_declared"),
        "load_noverify_vs_fromfile": ("fromfile", "load_noverify"),
        "load_declared_noverify_vs_fromfile": ("fromfile", "load_declared_noverify"),
        "load_vs_fromfile_reused": ("fromfile_reused", "load"),
        "load_declared_vs_fromfile_reused": ("fromfile_reused", "load_declared"),
        "load_vs_fromfile_threads": ("fromfile_threads", "load"),
        "load_declared_vs_fromfile_threads": ("fromfile_threads", "load_declared"),
        "load_cold_vs_fromfile_cold": ("fromfile_cold", "load_cold"),
        "load_declared_cold_vs_fromfile_cold": ("fromfile_cold", "load_declared_cold"),
        "load_cold_vs_fromfile_threads_cold": ("fromfile_threads_cold", "load_cold"),
    }
    return {
        "state_bytes": nbytes,
        "load_threads": threads,
        "tensors": n,
        "repetitions": {"save": reps, "load": load_reps},
        "seconds": best,
        "seconds_median": median,
        **{k: best[a] / best[b] for k, (a, b) in ratios.items()},
        "median_ratios": {k: median[a] / median[b] for k, (a, b) in ratios.items()},
        "save_GBps": nbytes / best["save"] / 1e9,
        "load_GBps": nbytes / best["load"] / 1e9,
        "peak_extra_rss_bytes": extra,
        "rss_budget_bytes": target_shard + (64 << 20),
    }


def bench_read_plan_scale(root: Path, n: int) -> dict[str, Any]:
    """read_plan over metadata written as save writes it (no tensor data is needed to plan)."""
    mesh = Mesh((32, 32), ("fsdp", "tp"))
    saved = Layout(("fsdp", None), mesh)
    path = root / "scale"
    path.mkdir()
    entries = {}
    for i in range(n):
        spec = lc.TensorSpec((4096, 1024), "bfloat16", saved)
        storage = ck_save._storage(f"layer{i}/w", spec, None)
        entries[f"layer{i}/w"] = {
            "chunk": list(storage.chunk),
            "node": storage.node,
            "plain": False,
            "shard": list(storage.shard),
            "spec": spec.to_dict(),
            "storage_dtype": "uint16",
        }
    meta = {
        "format": FORMAT_NAME,
        "format_version": FORMAT_VERSION,
        "tensors": entries,
        "total_bytes": 0,
        "tree": {"t": "dict", "k": [], "c": []},
        "files": [],
    }
    (path / "layoutcore.json").write_text(json.dumps(meta))
    target = {p: Layout((None, "tp"), mesh) for p in entries}
    best = float("inf")
    for _ in range(2):
        start = time.perf_counter()
        plan = checkpoint.read_plan(path, target)
        best = min(best, time.perf_counter() - start)
    one = checkpoint.read_plan(path, target, process_devices=range(8))
    return {
        "tensors": n,
        "mesh": [32, 32],
        "seconds": best,
        "read_bytes": plan.read_bytes,
        "floor_bytes": plan.floor_bytes,
        "one_process_of_128_amplification": one.amplification,
    }


def bench_relayout_cases(root: Path) -> dict[str, Any]:
    from bench_relayout_bytes import CASES

    out = {}
    for i, (case, (source, target, shape)) in enumerate(CASES.items()):
        value = np.arange(int(np.prod(shape)), dtype=np.float32).reshape(shape)
        t = lc.distribute_tensor(value, source)
        und, dec = root / f"case{i}-u", root / f"case{i}-d"
        checkpoint.save(und, {"w": t})
        checkpoint.save(dec, {"w": t}, read_layouts={"w": target})
        row: dict[str, Any] = {}
        for label, path in (("undeclared", und), ("declared", dec)):
            for gran in ("exact", "piece"):
                read = floor = 0
                for d in range(target.mesh.size):  # type: ignore[union-attr]
                    plan = checkpoint.read_plan(path, {"w": target}, process_devices=[d], granularity=gran)
                    read += plan.read_bytes
                    floor += plan.floor_bytes
                row[f"{label}_{gran}"] = round(read / floor, 4)
        assert np.array_equal(lc.to_numpy(checkpoint.load(dec, {"w": target})["w"]), value)
        out[case] = row
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true", help="128 MiB of state, 2 repetitions, 1 000 tensors to plan")
    ap.add_argument("--out", default=None)
    args = ap.parse_args()
    total, n, reps, plan_n = (128 << 20, 8, 2, 1000) if args.quick else (1 << 30, 16, 3, 10_000)
    root = Path(tempfile.mkdtemp(prefix="bench_ckpt_", dir=os.environ.get("BENCH_DIR", "/tmp")))
    try:
        result = {
            "benchmark": "bench_checkpoint",
            "statistic": "minimum",
            "quick": args.quick,
            "load_average": os.getloadavg()[0],
            "save_load": bench_save_load(root, total, n, reps),
            "read_plan_scale": bench_read_plan_scale(root, plan_n),
            "relayout_cases_bytes_over_floor": bench_relayout_cases(root),
        }
    finally:
        shutil.rmtree(root, ignore_errors=True)
    text = json.dumps(result, indent=1)
    print(text)
    out = (
        Path(args.out)
        if args.out
        else RESULTS / ("bench_checkpoint.quick.json" if args.quick else "bench_checkpoint.json")
    )
    out.write_text(text + "\n")


if __name__ == "__main__":
    main()
