"""Saves from device memory: the staged ring against a whole host copy per block, in one run.

    python benchmarks/bench_device_save.py [--quick] [--size-mib N] [--devices N] [--reps N] [--out PATH]

Run it in the ``checkpoint`` tox env. One process, contenders **interleaved** (each round runs
every contender once, the starting one rotating), each save into a fresh directory (removed
after it, outside the clock). Statistic: the **minimum** over rounds, medians beside them.

The state: ``--size-mib`` (default 512) of float32 in 16 square tensors, rows over ``--devices``
(default 2: blocks of 16 MiB at the default size, two 8 MiB bands each).

Contenders (``checkpoint.save`` every time; what differs is how a block reaches the writers):

* ``host_zero_copy`` -- NumPy components written from their own memory (no device): the bound;
* ``device_whole_copy`` -- a fake device (the NumPy driver whose ``component_to_host`` returns a
  fresh copy, as torch's ``.cpu()`` of a CUDA tensor does): today's path for device memory;
* ``device_staged`` -- the same fake device through the staging ring (``native_read_rows`` copying
  each band into a reused buffer);
* ``torch_host_zero_copy`` / ``torch_whole_copy`` / ``torch_staged`` -- torch CPU DTensors
  (simulated ranks) as they are saved (their own memory), with a fresh ``clone()`` per block as
  host copy (what ``.cpu()`` of a CUDA tensor makes: torch's allocator, no huge pages), and forced
  through torch's own ``native_read_rows`` (torch on one intra-op thread where there is no GPU);
* on a GPU (``torch.cuda.is_available()``): ``cuda_whole_copy`` and ``cuda_staged`` -- the same
  values as plain CUDA tensors, ``.cpu()`` per tensor against the pinned ring.

Per contender: seconds, GiB/s, **minor page faults** per save and per saved GiB (``getrusage``;
fresh host pages: the whole copy faults every page it makes, so its count grows with the size;
the ring faults its own 32 MiB once per save, whatever the size -- a pinned ring from torch's
caching host allocator not even that) and peak RSS growth during the save (``/proc/self/statm``
sampled by a thread). Transparent huge pages (``always``) cut the fault counts of both by up to
512x where the kernel finds huge pages.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import resource
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np

os.environ.setdefault("LAYOUTCORE_CPU_DEVICES", "8")
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "drivers"))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from _timing import peak_rss_growth

import layoutcore as lc
from layoutcore import Layout, Mesh, checkpoint
from layoutcore._config import checkpoint_threads

RESULTS = Path(__file__).resolve().parent / "results"
GIB = 1 << 30


@contextlib.contextmanager
def _patched(cls: type, **methods: Any) -> Iterator[None]:
    saved = {name: cls.__dict__.get(name) for name in methods}
    for name, fn in methods.items():
        setattr(cls, name, fn)
    try:
        yield
    finally:
        for name, fn in saved.items():
            if fn is None:
                delattr(cls, name)
            else:
                setattr(cls, name, fn)


def _fake_device(staged: bool) -> contextlib.AbstractContextManager[None]:
    """The NumPy driver as a device: a fresh host copy per block, or rows copied into the ring."""
    drv = type(lc.get_driver("numpy"))

    def read_rows(self: Any, component: Any, rows: tuple[int, int], out: np.ndarray) -> None:
        np.copyto(out, component[rows[0] : rows[1]] if component.ndim else component)

    return _patched(
        drv,
        component_to_host=lambda self, c: np.array(c, copy=True),
        native_staged_save=lambda self, c: staged,
        native_read_rows=read_rows,
    )


def _values(size_mib: int) -> list[np.ndarray]:
    side = int(((size_mib << 20) // 16 // 4) ** 0.5)
    rng = np.random.default_rng(0)
    return [rng.standard_normal((side, side), dtype=np.float32) for _ in range(16)]


def _contenders(values: list[np.ndarray], devices: int) -> dict[str, Callable[[Path], Any]]:
    mesh = Mesh((devices,), ("x",))
    rows = Layout(("x", None), mesh)
    numpy_tree = {f"t{i}": lc.distribute_tensor(v, rows, driver="numpy") for i, v in enumerate(values)}

    def on(fake: bool | None, tree: dict[str, Any]) -> Callable[[Path], Any]:
        def run(path: Path) -> Any:
            with _fake_device(fake) if fake is not None else contextlib.nullcontext():
                return checkpoint.save(path, tree)

        return run

    out = {
        "host_zero_copy": on(None, numpy_tree),
        "device_whole_copy": on(False, numpy_tree),
        "device_staged": on(True, numpy_tree),
    }
    try:
        import torch
    except ImportError:
        return out
    if not torch.cuda.is_available():
        torch.set_num_threads(1)  # CPU copy_ on threads that spin against the writers: 8x slower on 2 busy cores
    torch_tree = {f"t{i}": lc.distribute_tensor(v, rows, driver="torch") for i, v in enumerate(values)}
    tdrv = type(lc.get_driver("torch"))

    def torch_staged(path: Path) -> Any:
        with _patched(tdrv, native_staged_save=lambda self, c: True):
            return checkpoint.save(path, torch_tree)

    to_host = tdrv.component_to_host

    def torch_whole(path: Path) -> Any:  # a fresh torch host tensor per block, as .cpu() of a CUDA one
        with _patched(tdrv, component_to_host=lambda self, c: to_host(self, c.clone())):
            return checkpoint.save(path, torch_tree)

    out["torch_host_zero_copy"] = lambda path: checkpoint.save(path, torch_tree)
    out["torch_whole_copy"] = torch_whole
    out["torch_staged"] = torch_staged
    if torch.cuda.is_available():
        cuda_tree = {f"t{i}": torch.from_numpy(v).cuda() for i, v in enumerate(values)}
        torch.cuda.synchronize()

        def cuda_whole(path: Path) -> Any:
            with _patched(tdrv, native_staged_save=lambda self, c: False):
                return checkpoint.save(path, cuda_tree)

        out["cuda_whole_copy"] = cuda_whole
        out["cuda_staged"] = lambda path: checkpoint.save(path, cuda_tree)
    return out


def _measure(fn: Callable[[Path], Any], root: Path) -> tuple[float, int, int]:
    """Seconds, minor page faults and peak RSS growth (bytes) of one save into a fresh directory."""
    path = Path(tempfile.mkdtemp(dir=root)) / "ck"
    times: list[float] = []
    faults: list[int] = []

    def timed() -> None:
        f0 = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
        t0 = time.perf_counter()
        fn(path)
        times.append(time.perf_counter() - t0)
        faults.append(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - f0)

    rss = peak_rss_growth(timed)
    shutil.rmtree(path.parent)
    return times[0], faults[0], rss


def run(size_mib: int, devices: int, reps: int) -> dict[str, Any]:
    values = _values(size_mib)
    nbytes = sum(v.nbytes for v in values)
    contenders = _contenders(values, devices)
    names = list(contenders)
    samples: dict[str, list[tuple[float, int, int]]] = {n: [] for n in names}
    with tempfile.TemporaryDirectory(prefix="bench-device-save-") as tmp:
        for name in names:  # warm-up: imports, first-touch of the values
            _measure(contenders[name], Path(tmp))
        for r in range(reps):
            for name in names[r % len(names) :] + names[: r % len(names)]:
                samples[name].append(_measure(contenders[name], Path(tmp)))
    results = {}
    for name, got in samples.items():
        secs = [s for s, _, _ in got]
        results[name] = {
            "seconds_min": min(secs),
            "seconds_median": statistics.median(secs),
            "gib_per_s": nbytes / GIB / min(secs),
            "minor_faults": statistics.median(f for _, f, _ in got),
            "minor_faults_per_gib": statistics.median(f for _, f, _ in got) * GIB / nbytes,
            "peak_rss_growth_mib": max(m for _, _, m in got) / (1 << 20),
        }
    bound = results["host_zero_copy"]["seconds_min"]
    for r in results.values():
        r["ratio_min_to_host_zero_copy"] = bound / r["seconds_min"]
    return {
        "statistic": "minimum",
        "bytes": nbytes,
        "devices": devices,
        "threads": checkpoint_threads(),
        "reps": reps,
        "load_average": os.getloadavg()[0],
        "results": results,
    }


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true", help="64 MiB, 2 rounds: a smoke run")
    ap.add_argument("--size-mib", type=int, default=None, help="default 512 (--quick: 64)")
    ap.add_argument("--devices", type=int, default=2)
    ap.add_argument("--reps", type=int, default=None, help="default 5 (--quick: 2)")
    ap.add_argument("--out", type=Path, default=None)
    args = ap.parse_args()
    size = args.size_mib or (64 if args.quick else 512)
    reps = args.reps or (2 if args.quick else 5)
    result = run(size, args.devices, reps)
    text = json.dumps(result, indent=1)
    print(text)
    if args.out is not None:
        args.out.write_text(text + "\n")


if __name__ == "__main__":
    main()
