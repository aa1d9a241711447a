"""Loads onto the device a user trains on, against the host's own bounds, every loader in one run.

    python benchmarks/bench_device_load.py [--quick] [--size-mib N] [--reps N] [--no-orbax] [--select interchange] [--out PATH]

Run it in an environment with JAX, torch, safetensors and (optionally) Orbax: the ``checkpoint``
tox env. One process, contenders **interleaved** (each round runs every contender once, the
starting contender rotating from round to round), warm page cache unless named ``cold`` (every
file written back and dropped with ``posix_fadvise(DONTNEED)`` before each such contender).
Statistic: the **minimum** over rounds; the medians are recorded beside them (the development
machine is shared by several jobs: the medians move with their load). glibc's free memory is
handed back to the kernel before every run (``malloc_trim``), so no contender allocates from pages
the previous one faulted and dropped; the minor page faults of each contender's fastest run are
recorded (``minor_faults_at_min``).

The state: ``--size-mib`` (default 1024) of float32 in 16 square tensors, saved by
``checkpoint.save`` rows over 8 devices, and the same arrays by ``safetensors.numpy.save_file``
(and by Orbax, where installed). Loaded under **rows** (the saved layout) and **columns** over 8
(every block cuts across every saved block: a reshard).

Where the destination is (``device`` in the results): a GPU where ``torch.cuda.is_available()``
or ``jax.devices("gpu")`` (one-rank NCCL group for torch DTensors, a 1-device mesh), else host
memory (8 simulated CPU devices on every driver).

**Bounds** (what the host can do, no layoutcore):

* ``preadv_fresh_tN`` -- ``os.preadv`` of the bytes a load reads (its read plan) on N threads
  (1, 2, 4, 8) into new memory that is kept (page faults included);
* ``preadv_prealloc_tN`` -- the same into memory allocated and touched before the clock starts;
* ``preadv_crc_prealloc_tT`` -- the same plus CRC-32C of the bytes, on the load's threads T;
* ``fromfile_kept`` -- ``np.fromfile`` of every shard file, arrays kept (one thread);
* ``st_scatter_fresh_tT`` -- the safetensors file's tensors read into new column blocks (one
  64-byte aligned allocation per tensor) by libc ``preadv``, one iovec per row part, the tables
  built per call (``_raw_reshard.fresh_scatter``): the least a load of new JAX or torch tensors,
  which need each device's block dense, does without layoutcore;
* the reshard's own bounds (``_raw_reshard``: rows -> columns without layoutcore, on the load's
  threads T): ``scatter_prealloc[_aligned]_tT`` (libc ``preadv``, one iovec per 2 KiB row part
  straight into its block) and ``slab_crc_gather[_aligned]_tT`` (4 MiB slabs, CRC-32C, ``np.copyto``
  of the parts), into ``np.zeros`` blocks (the memory of ``into_cols``) and into 64-byte aligned
  huge-page blocks (``_aligned``: the memory of ``into_loaded_cols``);
* on a GPU: ``h2d_pinned`` / ``h2d_pageable`` (torch ``copy_`` of the bytes from pinned /
  pageable host memory), ``jax_device_put`` (from pageable NumPy).

**Loaders**: ``checkpoint.load`` into new tensors (NumPy, JAX, torch) and ``into=`` existing
ones (``verify`` on and off): NumPy tensors made of ``np.zeros`` components (``into_rows``,
``into_cols``: NumPy's own allocations, 16 bytes past a page) and the tensors of a previous load
(``into_loaded_*``: what a loop that reloads every step passes; the loader's blocks are 64-byte
aligned, on transparent huge pages). Safetensors: layoutcore loading the file under columns onto NumPy,
JAX and torch, against ``safetensors.numpy.load_file`` plus the move onto the same layouts
(``distribute_tensor`` onto NumPy, whose blocks are views of the arrays; ``jax.device_put`` to the
column sharding; ``distribute_tensor`` onto torch DTensors) and against the bounds
``st_preadv_fresh_tN`` (the file's tensors on the load's threads into new memory), ``st_scatter_fresh_tN`` and
``st_fromfile_kept``; ``safetensors.torch.load_file`` (onto the GPU where there is one). Orbax:
layoutcore loading onto JAX under the saved rows and under columns, and onto NumPy under columns,
against ``StandardCheckpointer.restore`` under the saved shardings, with the column shardings as
its target, and ``PyTreeCheckpointer.restore`` as NumPy arrays + ``distribute_tensor`` (NumPy).
``--select interchange`` runs only the safetensors and Orbax targets' contenders (no cold rounds,
no RSS) into ``bench_device_load.<device>.interchange.json``.

Peak RSS growth during a load (``/proc/self/statm`` sampled by a thread) is recorded for the
``into=`` loads (target: <= 64 MiB) and, beyond the loaded bytes, for new tensors.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import resource
import shutil
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np

os.environ.setdefault("LAYOUTCORE_CPU_DEVICES", "8")
os.environ.setdefault("XLA_FLAGS", "--xla_force_host_platform_device_count=8")
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "drivers"))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import _raw_reshard
from _timing import malloc_trim, peak_rss_growth

import layoutcore as lc
from layoutcore import Layout, Mesh, checkpoint
from layoutcore._config import checkpoint_threads
from layoutcore._crc import crc32c
from layoutcore.driver import aligned_empty

RESULTS = Path(__file__).resolve().parent / "results"
PIECE = 16 << 20  # bytes per preadv of the bounds (a load's task size)


# -- environment --------------------------------------------------------------------------------
def _has(module: str) -> bool:
    import importlib.util

    return importlib.util.find_spec(module) is not None


def _device() -> dict[str, Any]:
    """Where loads go: a GPU (torch / JAX) or host memory, and its name."""
    info: dict[str, Any] = {"kind": "host", "name": _cpu_name(), "cpu_cores": len(os.sched_getaffinity(0))}
    if _has("torch"):
        import torch

        if torch.cuda.is_available():
            info.update(kind="gpu", name=torch.cuda.get_device_name(0), torch_cuda=True)
    if _has("jax"):
        import jax

        try:
            gpus = jax.devices("gpu")
        except RuntimeError:
            gpus = []
        if gpus:
            info.update(
                kind="gpu", name=info.get("name") if info["kind"] == "gpu" else gpus[0].device_kind, jax_gpu=True
            )
    return info


def _cpu_name() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return "cpu"


def _evict(paths: list[Path]) -> None:
    for root in paths:
        for p in [root] if root.is_file() else root.rglob("*"):
            if p.is_file():
                fd = os.open(p, os.O_RDONLY)
                os.fsync(fd)
                os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
                os.close(fd)


# -- bounds -------------------------------------------------------------------------------------
def _pieces(reads: tuple[tuple[str, int, int], ...], root: Path) -> list[tuple[str, int, int, int]]:
    """The read plan's ranges cut into pieces of at most PIECE bytes: (file, offset, length, dst offset)."""
    out, at = [], 0
    for name, offset, length in reads:
        file = name if os.path.isabs(name) else str(root / name)
        for o in range(0, length, PIECE):
            n = min(PIECE, length - o)
            out.append((file, offset + o, n, at))
            at += n
    return out


def _preadv(pieces: list[tuple[str, int, int, int]], threads: int, dst: np.ndarray | None, crc: bool) -> Any:
    """Read every piece on ``threads`` threads into ``dst`` (preallocated) or new kept arrays."""
    fds: dict[str, int] = {}
    lock = threading.Lock()

    def fd_of(file: str) -> int:
        with lock:
            if file not in fds:
                fds[file] = os.open(file, os.O_RDONLY)
            return fds[file]

    def one(job: tuple[str, int, int, int]) -> Any:
        file, offset, length, at = job
        buf = np.empty(length, np.uint8) if dst is None else dst[at : at + length]
        got = os.preadv(fd_of(file), [buf], offset)
        assert got == length
        if crc:
            crc32c(buf)
        return buf if dst is None else None

    try:
        if threads == 1:
            return [one(j) for j in pieces]
        with ThreadPoolExecutor(threads) as pool:
            return list(pool.map(one, pieces))
    finally:
        for fd in fds.values():
            os.close(fd)


# -- the state ----------------------------------------------------------------------------------
def _arrays(total: int, n: int) -> dict[str, np.ndarray]:
    rows = int(np.sqrt(total // 4 // n))
    rows -= rows % 8
    rng = np.random.default_rng(0)
    return {f"t{i}": rng.standard_normal((rows, rows), dtype=np.float32) for i in range(n)}


class Setup:
    """The files, layouts and preallocated destinations shared by every contender."""

    def __init__(self, root: Path, total: int, n: int, orbax: bool) -> None:
        mesh = Mesh((8,), ("x",))
        self.rows, self.cols = Layout(("x", None), mesh), Layout((None, "x"), mesh)
        arrays = _arrays(total, n)
        self.names = list(arrays)
        self.shape = next(iter(arrays.values())).shape
        self.nbytes = sum(a.nbytes for a in arrays.values())
        self.ckpt = root / "ckpt"
        checkpoint.save(self.ckpt, {k: lc.distribute_tensor(v, self.rows, driver="numpy") for k, v in arrays.items()})
        self.st = root / "model.safetensors"
        import safetensors.numpy as stn

        stn.save_file(arrays, str(self.st))
        self.orbax = None
        if orbax and _has("orbax.checkpoint"):
            self.orbax = root / "orbax"
            _orbax_save(self.orbax, arrays, self.rows)
        del arrays
        self.rows_t = {k: self.rows for k in self.names}
        self.cols_t = {k: self.cols for k in self.names}
        self.plan = checkpoint.read_plan(self.ckpt, self.rows_t, driver="numpy")
        self.st_plan = checkpoint.read_plan(self.st, self.cols_t, driver="numpy")
        self.threads = checkpoint_threads()
        self.open_jobs: list[Any] = []  # the reshard bounds' open files (closed by ``close``)
        self.open_fds: list[int] = []

    def close(self) -> None:
        for work in self.open_jobs:
            _raw_reshard.close(work)
        for fd in self.open_fds:
            os.close(fd)

    def numpy_zeros(self, layout: Layout) -> dict[str, Any]:
        """Existing NumPy tensors with C-contiguous components, every page touched."""
        shapes = layout.local_shapes(self.shape)
        return {
            k: lc.pack([np.zeros(s, np.float32) for s in shapes], layout, global_shape=self.shape, driver="numpy")
            for k in self.names
        }


def _orbax_save(path: Path, arrays: dict[str, np.ndarray], rows: Layout) -> None:
    import orbax.checkpoint as ocp

    tree = {k: lc.distribute_tensor(v, rows, driver="jax") for k, v in arrays.items()}
    ckptr = ocp.StandardCheckpointer()
    ckptr.save(path, tree)
    ckptr.wait_until_finished()


# -- contenders ---------------------------------------------------------------------------------
def _bounds(s: Setup, device: dict[str, Any]) -> dict[str, Callable[[], Any]]:
    import safetensors.numpy as stn

    pieces = _pieces(s.plan.reads, s.ckpt)
    total = sum(p[2] for p in pieces)
    dst = np.ones(total, np.uint8)  # allocated and touched once, outside every clock
    out: dict[str, Callable[[], Any]] = {}
    for t in (1, 2, 4, 8):
        out[f"preadv_fresh_t{t}"] = lambda t=t: _preadv(pieces, t, None, False)
        out[f"preadv_prealloc_t{t}"] = lambda t=t: _preadv(pieces, t, dst, False)
    out[f"preadv_crc_prealloc_t{s.threads}"] = lambda: _preadv(pieces, s.threads, dst, True)
    shard_files = [s.ckpt / f for f in checkpoint.inspect(s.ckpt).files if "/c/" in f]
    out["fromfile_kept"] = lambda: [np.fromfile(f, dtype=np.uint8) for f in shard_files]
    st_pieces = _pieces(s.st_plan.reads, s.st.parent)
    out[f"st_preadv_fresh_t{s.threads}"] = lambda: _preadv(st_pieces, s.threads, None, False)
    out["st_fromfile_kept"] = lambda: np.fromfile(s.st, dtype=np.uint8)
    s.open_fds.append(os.open(s.st, os.O_RDONLY))
    st_scatter = _raw_reshard.fresh_scatter(s.st, s.open_fds[-1], 8, s.threads)
    _raw_reshard.check(st_scatter(), stn.load_file(str(s.st)))
    out[f"st_scatter_fresh_t{s.threads}"] = st_scatter
    out.update(_reshard_bounds(s))
    if device.get("torch_cuda"):
        out.update(_gpu_copies(total))
    return out


def _reshard_bounds(s: Setup) -> dict[str, Callable[[], Any]]:
    """The reshard's own bounds (``_raw_reshard``: the same row parts moved without layoutcore) into
    ``np.zeros`` blocks (the memory of ``into_cols``) and into 64-byte aligned huge-page blocks (the
    memory of ``into_loaded_cols``); checked against ``safetensors.numpy.load_file`` first."""
    import safetensors.numpy as stn

    t = s.threads
    shapes = s.cols.local_shapes(s.shape)
    zeros = {k: [np.zeros(sh, np.float32) for sh in shapes] for k in s.names}
    aligned = {k: [aligned_empty(sh, np.float32) for sh in shapes] for k in s.names}
    out: dict[str, Callable[[], Any]] = {}
    expected = stn.load_file(str(s.st))
    for kind, blocks in (("", zeros), ("_aligned", aligned)):
        work = _raw_reshard.jobs(s.ckpt, s.plan.reads, blocks)
        s.open_jobs.append(work)
        scatter, slab = _raw_reshard.scatter(work, t), _raw_reshard.slab_gather(work, t, crc32c)
        for fn in (scatter, slab):
            fn()
            _raw_reshard.check(blocks, expected)
        out[f"scatter_prealloc{kind}_t{t}"] = scatter
        out[f"slab_crc_gather{kind}_t{t}"] = slab
    return out


def _gpu_copies(total: int) -> dict[str, Callable[[], Any]]:
    import torch

    pinned = torch.ones(total, dtype=torch.uint8, pin_memory=True)
    pageable = torch.ones(total, dtype=torch.uint8)
    gpu = torch.empty(total, dtype=torch.uint8, device="cuda")

    def copy(src: Any) -> None:
        gpu.copy_(src, non_blocking=True)
        torch.cuda.synchronize()

    out: dict[str, Callable[[], Any]] = {"h2d_pinned": lambda: copy(pinned), "h2d_pageable": lambda: copy(pageable)}
    if _has("jax"):
        import jax

        host = pageable.numpy()
        out["jax_device_put"] = lambda: jax.device_put(host, jax.devices()[0]).block_until_ready()
    return out


def _ours(s: Setup) -> tuple[dict[str, Callable[[], Any]], dict[str, Any]]:
    into_rows, into_cols = s.numpy_zeros(s.rows), s.numpy_zeros(s.cols)
    # what a loop that loads every step passes: the arrays of the previous load
    loaded_rows = checkpoint.load(s.ckpt, s.rows_t, driver="numpy")
    loaded_cols = checkpoint.load(s.ckpt, s.cols_t, driver="numpy")
    out: dict[str, Callable[[], Any]] = {
        "into_loaded_rows": lambda: checkpoint.load(s.ckpt, into=loaded_rows),
        "into_loaded_cols": lambda: checkpoint.load(s.ckpt, into=loaded_cols),
        "into_loaded_rows_noverify": lambda: checkpoint.load(s.ckpt, into=loaded_rows, verify=False),
        "into_loaded_cols_noverify": lambda: checkpoint.load(s.ckpt, into=loaded_cols, verify=False),
        "load_new_rows": lambda: checkpoint.load(s.ckpt, s.rows_t, driver="numpy"),
        "load_new_cols": lambda: checkpoint.load(s.ckpt, s.cols_t, driver="numpy"),
        "into_rows": lambda: checkpoint.load(s.ckpt, into=into_rows),
        "into_cols": lambda: checkpoint.load(s.ckpt, into=into_cols),
        "into_rows_noverify": lambda: checkpoint.load(s.ckpt, into=into_rows, verify=False),
        "into_cols_noverify": lambda: checkpoint.load(s.ckpt, into=into_cols, verify=False),
        "st_load_numpy_cols": lambda: checkpoint.load(s.st, s.cols_t, driver="numpy"),
    }
    return out, {"into_rows": into_rows, "into_cols": into_cols, "loaded": (loaded_rows, loaded_cols)}


def _frameworks(s: Setup, device: dict[str, Any]) -> dict[str, Callable[[], Any]]:
    out: dict[str, Callable[[], Any]] = {}
    import safetensors.numpy as stn

    out["st_numpy_load_file"] = lambda: stn.load_file(str(s.st))
    out["st_numpy_load_file+distribute_tensor_numpy"] = lambda: {  # components: views of load_file's arrays
        k: lc.distribute_tensor(v, s.cols, driver="numpy") for k, v in stn.load_file(str(s.st)).items()
    }
    if _has("jax"):
        out.update(_jax_contenders(s, stn))
    if s.orbax is not None:
        out.update(_orbax_contenders(s))
    if _has("torch"):
        import safetensors.torch as stt

        dev = "cuda" if device.get("torch_cuda") else "cpu"
        out["st_torch_load_file"] = lambda: stt.load_file(str(s.st), device=dev)
        out["st_numpy_load_file+distribute_tensor_torch"] = lambda: [
            lc.distribute_tensor(v, s.cols, driver="torch") for v in stn.load_file(str(s.st)).values()
        ]
        out["st_load_torch_cols"] = lambda: checkpoint.load(s.st, s.cols_t, driver="torch")
        out["load_new_cols_torch"] = lambda: checkpoint.load(s.ckpt, s.cols_t, driver="torch")
        zeros = np.zeros(s.shape, np.float32)
        into_torch = {k: lc.distribute_tensor(zeros, s.cols, driver="torch") for k in s.names}
        out["into_cols_torch"] = lambda: checkpoint.load(s.ckpt, into=into_torch)
    return out


def _jax_ready(tree: Any) -> Any:
    return [a.block_until_ready() for a in tree.values()]


def _jax_contenders(s: Setup, stn: Any) -> dict[str, Callable[[], Any]]:
    import jax

    cols = _jax_sharding(s, (None, "x"))

    def st_jax() -> Any:
        arrays = stn.load_file(str(s.st))
        return [a.block_until_ready() for a in (jax.device_put(v, cols) for v in arrays.values())]

    return {
        "st_numpy_load_file+device_put_cols": st_jax,
        "st_load_jax_cols": lambda: _jax_ready(checkpoint.load(s.st, s.cols_t, driver="jax")),
        "load_new_cols_jax": lambda: _jax_ready(checkpoint.load(s.ckpt, s.cols_t, driver="jax")),
    }


def _jax_sharding(s: Setup, spec: tuple[Any, ...]) -> Any:
    import jax
    from jax.sharding import NamedSharding
    from jax.sharding import PartitionSpec as P

    devices = jax.devices()[:8]
    return NamedSharding(jax.make_mesh((len(devices),), ("x",), devices=devices), P(*spec))


def _orbax_contenders(s: Setup) -> dict[str, Callable[[], Any]]:
    """Orbax's own restores against layoutcore reading the same Orbax checkpoint, per destination:
    JAX under the saved shardings (rows) and under columns (Orbax restores with those target
    shardings), NumPy under columns (Orbax restores NumPy arrays, then ``distribute_tensor``: views)."""
    import jax
    import orbax.checkpoint as ocp

    path = s.orbax
    assert path is not None
    cols = _jax_sharding(s, (None, "x"))
    abstract = {k: jax.ShapeDtypeStruct(s.shape, np.float32, sharding=cols) for k in s.names}
    as_numpy = {k: ocp.RestoreArgs(restore_type=np.ndarray) for k in s.names}

    def restore_numpy() -> Any:
        arrays = ocp.PyTreeCheckpointer().restore(path, restore_args=as_numpy)
        return {k: lc.distribute_tensor(v, s.cols, driver="numpy") for k, v in arrays.items()}

    return {
        "orbax_restore": lambda: _jax_ready(ocp.StandardCheckpointer().restore(path)),
        "orbax_load_jax_rows": lambda: _jax_ready(checkpoint.load(path, s.rows_t, driver="jax")),
        "orbax_restore_cols": lambda: _jax_ready(ocp.StandardCheckpointer().restore(path, abstract)),
        "orbax_load_jax_cols": lambda: _jax_ready(checkpoint.load(path, s.cols_t, driver="jax")),
        "orbax_restore_numpy+distribute_tensor_numpy": restore_numpy,
        "orbax_load_numpy_cols": lambda: checkpoint.load(path, s.cols_t, driver="numpy"),
    }


# -- the run ------------------------------------------------------------------------------------
def _rounds(
    contenders: dict[str, Callable[[], Any]], reps: int, cold: list[Path] | None
) -> tuple[dict[str, list[float]], dict[str, list[int]]]:
    """Seconds and minor page faults of every run of each contender, interleaved (see the module docstring).

    Before each run, glibc's free memory is handed back to the kernel (``malloc_trim``): otherwise
    the arrays the previous contender dropped serve the next one's allocations with pages already
    faulted, so a contender that allocates (``np.fromfile`` keeping its arrays, a load of new
    arrays) ran at the speed of a read into preallocated memory in some rounds and paid for 1 GiB of
    fresh pages in others, by the luck of the order (the faults of each run are recorded beside).
    """
    names = list(contenders)
    times: dict[str, list[float]] = {k: [] for k in names}
    faults: dict[str, list[int]] = {k: [] for k in names}
    if cold is None:
        for fn in contenders.values():  # warm-up: the files in the page cache, code paths compiled
            fn()
    for r in range(reps):
        order = names[r % len(names) :] + names[: r % len(names)]
        for name in order if r % 2 == 0 else order[::-1]:
            if cold is not None:
                _evict(cold)
            gc.collect()
            malloc_trim()
            before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
            start = time.perf_counter()
            out = contenders[name]()
            times[name].append(time.perf_counter() - start)
            faults[name].append(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
            del out
    return times, faults


def _targets(t: int) -> dict[str, tuple[str, str, float, str]]:
    """name: (bound or native, contender, target, kind) -- "ge": bound/contender >= target; "le":
    contender/native <= target; "reported": bound/contender, no target. ``t``: the load's reader threads."""
    pre, crc, st_pre = f"preadv_prealloc_t{t}", f"preadv_crc_prealloc_t{t}", f"st_preadv_fresh_t{t}"
    return {
        "into_rows_noverify_vs_preadv_prealloc": (pre, "into_rows_noverify", 0.9, "ge"),
        "into_cols_noverify_vs_preadv_prealloc": (pre, "into_cols_noverify", 0.9, "ge"),
        "into_rows_vs_preadv_crc_prealloc": (crc, "into_rows", 0.9, "ge"),
        "into_cols_vs_preadv_crc_prealloc": (crc, "into_cols", 0.9, "ge"),
        "into_cols_noverify_cold_vs_preadv_prealloc_cold": (f"{pre}_cold", "into_cols_noverify_cold", 0.9, "ge"),
        "into_loaded_rows_noverify_vs_preadv_prealloc": (pre, "into_loaded_rows_noverify", 0.9, "ge"),
        "into_loaded_cols_noverify_vs_preadv_prealloc": (pre, "into_loaded_cols_noverify", 0.9, "ge"),
        "into_loaded_rows_vs_preadv_crc_prealloc": (crc, "into_loaded_rows", 0.9, "ge"),
        "into_loaded_cols_vs_preadv_crc_prealloc": (crc, "into_loaded_cols", 0.9, "ge"),
        # the reshard against its own bounds (the same parts moved without layoutcore), and those
        # bounds against the contiguous read: how far a reshard of 2 KiB parts is from it at all
        "into_cols_noverify_vs_scatter_prealloc": (f"scatter_prealloc_t{t}", "into_cols_noverify", 0.9, "ge"),
        "into_cols_vs_slab_crc_gather": (f"slab_crc_gather_t{t}", "into_cols", 0.9, "ge"),
        "into_loaded_cols_noverify_vs_scatter_prealloc_aligned": (
            f"scatter_prealloc_aligned_t{t}",
            "into_loaded_cols_noverify",
            0.9,
            "ge",
        ),
        "into_loaded_cols_vs_slab_crc_gather_aligned": (f"slab_crc_gather_aligned_t{t}", "into_loaded_cols", 0.9, "ge"),
        "scatter_prealloc_vs_preadv_prealloc": (pre, f"scatter_prealloc_t{t}", 0.0, "reported"),
        "scatter_prealloc_aligned_vs_preadv_prealloc": (pre, f"scatter_prealloc_aligned_t{t}", 0.0, "reported"),
        "slab_crc_gather_vs_preadv_crc_prealloc": (crc, f"slab_crc_gather_t{t}", 0.0, "reported"),
        "slab_crc_gather_aligned_vs_preadv_crc_prealloc": (crc, f"slab_crc_gather_aligned_t{t}", 0.0, "reported"),
        "load_new_rows_vs_fromfile_kept": ("fromfile_kept", "load_new_rows", 0.8, "ge"),
        "load_new_cols_vs_fromfile_kept": ("fromfile_kept", "load_new_cols", 0.8, "ge"),
        "load_new_rows_cold_vs_fromfile_kept_cold": ("fromfile_kept_cold", "load_new_rows_cold", 0.8, "ge"),
        "load_new_cols_cold_vs_fromfile_kept_cold": ("fromfile_kept_cold", "load_new_cols_cold", 0.8, "ge"),
        **_interchange_targets(st_pre),
    }


#: The targets ``--select interchange`` runs: safetensors and Orbax read by layoutcore.
INTERCHANGE_PREFIXES = ("st_", "orbax_")


def _interchange_targets(st_pre: str) -> dict[str, tuple[str, str, float, str]]:
    """The safetensors and Orbax targets. Each native contender is the native load plus the move onto
    the same layouts: NumPy's ``distribute_tensor`` (views), ``jax.device_put``, torch ``distribute_tensor``;
    Orbax restores with the target shardings (JAX) or as NumPy arrays, then ``distribute_tensor`` (NumPy)."""
    out = {}
    st_scatter = st_pre.replace("st_preadv_fresh", "st_scatter_fresh")
    for drv in ("numpy", "jax", "torch"):
        out[f"st_{drv}_cols_vs_preadv_fresh"] = (st_pre, f"st_load_{drv}_cols", 0.8, "ge")
        out[f"st_{drv}_cols_vs_fromfile_kept"] = ("st_fromfile_kept", f"st_load_{drv}_cols", 0.8, "ge")
    for drv in ("jax", "torch"):  # frameworks that need each device's block dense in its own memory
        out[f"st_{drv}_cols_vs_scatter_fresh"] = (st_scatter, f"st_load_{drv}_cols", 0.9, "ge")
    out["st_scatter_fresh_vs_preadv_fresh"] = (st_pre, st_scatter, 0.0, "reported")
    return {
        **out,
        "st_numpy_cols_over_load_file_distribute": (
            "st_numpy_load_file+distribute_tensor_numpy",
            "st_load_numpy_cols",
            1.2,
            "le",
        ),
        "st_jax_cols_over_load_file_device_put": ("st_numpy_load_file+device_put_cols", "st_load_jax_cols", 1.2, "le"),
        "st_torch_cols_over_load_file_distribute": (
            "st_numpy_load_file+distribute_tensor_torch",
            "st_load_torch_cols",
            1.2,
            "le",
        ),
        "orbax_jax_rows_over_restore": ("orbax_restore", "orbax_load_jax_rows", 1.2, "le"),
        "orbax_jax_cols_over_restore_cols": ("orbax_restore_cols", "orbax_load_jax_cols", 1.2, "le"),
        "orbax_numpy_cols_over_restore_distribute": (
            "orbax_restore_numpy+distribute_tensor_numpy",
            "orbax_load_numpy_cols",
            1.2,
            "le",
        ),
    }


def _target_rows(
    targets: dict[str, tuple[str, str, float, str]], best: dict[str, float], median: dict[str, float]
) -> dict[str, dict[str, Any]]:
    """Each target whose both sides ran: the ratio of minima, of medians, and whether it is met."""
    rows = {}
    for key, (a, b, target, kind) in targets.items():
        if a not in best or b not in best:
            continue
        ratio = best[b] / best[a] if kind == "le" else best[a] / best[b]
        med = median[b] / median[a] if kind == "le" else median[a] / median[b]
        met = None if kind == "reported" else ratio >= target if kind == "ge" else ratio <= target
        rows[key] = {
            "bound": a,
            "contender": b,
            "ratio": round(ratio, 3),
            "median_ratio": round(med, 3),
            "target": None if kind == "reported" else target,
            "kind": kind,
            "met": met,
        }
    return rows


def _selected(contenders: dict[str, Callable[[], Any]], t: int) -> dict[str, Callable[[], Any]]:
    """The contenders of the interchange targets (``--select interchange``)."""
    names = {
        name for key, (a, b, _, _) in _targets(t).items() if key.startswith(INTERCHANGE_PREFIXES) for name in (a, b)
    }
    return {k: v for k, v in contenders.items() if k in names}


def _measure(
    s: Setup, device: dict[str, Any], reps: int, select: str | None
) -> tuple[dict[str, list[float]], dict[str, list[int]], Any]:
    """Every contender's times and minor faults (warm, then cold), and the peak RSS growths (``None``
    with ``select``)."""
    t = s.threads
    bounds = _bounds(s, device)
    ours, into = _ours(s)
    frameworks = _frameworks(s, device)
    contenders = {**bounds, **ours, **frameworks}
    if select is not None:
        return (*_rounds(_selected(contenders, t), reps, None), None)
    warm, warm_faults = _rounds(contenders, reps, None)
    cold_set = {
        "fromfile_kept_cold": bounds["fromfile_kept"],
        f"preadv_prealloc_t{t}_cold": bounds[f"preadv_prealloc_t{t}"],
        "load_new_cols_cold": ours["load_new_cols"],
        "load_new_rows_cold": ours["load_new_rows"],
        "into_cols_noverify_cold": ours["into_cols_noverify"],
    }
    cold, cold_faults = _rounds(cold_set, max(2, reps - 2), [s.ckpt])
    rss = {
        "into_cols_noverify": peak_rss_growth(ours["into_cols_noverify"]),
        "into_cols": peak_rss_growth(ours["into_cols"]),
        "into_rows": peak_rss_growth(ours["into_rows"]),
        "into_loaded_cols": peak_rss_growth(ours["into_loaded_cols"]),
        "load_new_cols_beyond_data": peak_rss_growth(ours["load_new_cols"]) - s.nbytes,
    }
    if "into_cols_torch" in frameworks:
        rss["into_cols_torch"] = peak_rss_growth(frameworks["into_cols_torch"])
    del into
    return {**warm, **cold}, {**warm_faults, **cold_faults}, rss


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true", help="32 MiB, 2 rounds: a smoke run (ratios are not meaningful)")
    ap.add_argument("--size-mib", type=int, default=None)
    ap.add_argument("--reps", type=int, default=None)
    ap.add_argument("--no-orbax", action="store_true")
    ap.add_argument(
        "--select",
        choices=["interchange"],
        default=None,
        help="only the safetensors and Orbax targets' contenders (warm; no cold rounds, no RSS); "
        "results in bench_device_load.<device>.interchange.json",
    )
    ap.add_argument("--out", default=None)
    args = ap.parse_args()
    size = (args.size_mib or (32 if args.quick else 1024)) << 20
    reps = args.reps or (2 if args.quick else 5)
    device = _device()
    root = Path(tempfile.mkdtemp(prefix="bench_device_load_", dir=os.environ.get("BENCH_DIR", "/tmp")))
    try:
        s = Setup(root, size, 16, orbax=not args.no_orbax and not args.quick)
        try:
            times, faults, rss = _measure(s, device, reps, args.select)
        finally:
            s.close()
    finally:
        shutil.rmtree(root, ignore_errors=True)
    t = s.threads
    best = {k: min(v) for k, v in times.items()}
    median = {k: statistics.median(v) for k, v in times.items()}
    faults_at_min = {k: faults[k][v.index(min(v))] for k, v in times.items()}
    gib = s.nbytes / 2**30
    result = {
        "benchmark": "bench_device_load",
        "statistic": "minimum",
        "quick": args.quick,
        "select": args.select,
        "device": device,
        "load_average": os.getloadavg()[0],
        "state_bytes": s.nbytes,
        "tensors": len(s.names),
        "load_threads": t,
        "rounds": {"warm": reps, "cold": 0 if args.select else max(2, reps - 2)},
        "seconds": {k: round(v, 4) for k, v in best.items()},
        "seconds_median": {k: round(v, 4) for k, v in median.items()},
        "GiB_per_s": {k: round(gib / v, 3) for k, v in best.items()},
        "minor_faults_at_min": faults_at_min,
        "targets": _target_rows(_targets(t), best, median),
    }
    if rss is not None:
        result.update(peak_rss_growth_bytes=rss, rss_budget_bytes=64 << 20)
    text = json.dumps(result, indent=1)
    print(text)
    suffix = (".quick" if args.quick else "") + (f".{args.select}" if args.select else "")
    out = Path(args.out) if args.out else RESULTS / f"bench_device_load.{device['kind']}{suffix}.json"
    out.write_text(text + "\n")


if __name__ == "__main__":
    main()
