"""``layoutcore.transfer``: plan at scale, packing against memcpy, and a sync over gloo against two baselines.

Run from the repository root (needs torch)::

    PYTHONPATH=.:drivers python benchmarks/bench_transfer.py [--quick]

* **Plan at scale** (one process): ``transfer.plan`` of 10 000 tensors from 256 sender devices (FSDP,
  rows) to 128 receiver devices (16 x 8, tensor-parallel columns and rows, replicated norms); the first
  call and the same call again (cached). Targets: < 2 s and < 0.1 s.
* **Packing** (one process): packing the pieces a sender of a rows -> columns sync sends (a column
  half of its rows) into a bucket, and unpacking a received bucket into the receiver's blocks, against
  ``np.copyto`` of the same number of contiguous bytes. Target: >= 0.7x memcpy.
* **Sync over gloo**: 2 -> 2 and 4 -> 4 processes on 127.0.0.1, one 128 MiB float32 tensor, rows on the
  senders, columns on the receivers (the floor is all of it: 128 MiB). Interleaved rounds of four
  contenders, each timed barrier to barrier on rank 0: ``Link.send``/``receive(into=...)`` (metadata,
  cached plan, packing, wire, unpacking, agreement; the receivers' existing weights filled in place);
  a raw ``batch_isend_irecv`` of the same per-pair byte counts from buffers made beforehand (the
  engine's own speed, nothing packed); the same after ``np.copyto`` of each sender's pieces into those
  buffers ("pack + raw": the copy a layout change needs, and nothing else); and gathering the tensor
  to sender rank 0 then broadcasting it to every receiver, which slices its columns (what naive RL
  stacks do). Targets: sync >= 0.8x raw, and >= 2x faster than gather-and-broadcast.
Writes ``benchmarks/results/bench_transfer.json`` (``--quick``: ``bench_transfer.quick.json``).
"""

from __future__ import annotations

import datetime
import json
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

from layoutcore import Layout, Mesh, TensorSpec, transfer

MIB = 2**20


# -- plan at scale -------------------------------------------------------------------------------
def plan_at_scale(tensors: int) -> dict[str, Any]:
    senders = Mesh((256,), ("fsdp",), [f"GPU:{i}" for i in range(256)])
    receivers = Mesh((16, 8), ("dp", "tp"), [f"GPU:{i}" for i in range(128)])
    kinds = [  # (shape, sender axes, receiver axes): colwise, rowwise, a norm, an expert
        ((4096, 4096), ("fsdp", None), ("tp", None)),
        ((4096, 4096), ("fsdp", None), (None, "tp")),
        ((4096,), ("fsdp",), (None,)),
        ((1408, 4096), ("fsdp", None), ("tp", None)),
    ]
    src, dst = {}, {}
    for i in range(tensors):
        shape, a, b = kinds[i % len(kinds)]
        src[f"layers.{i}.w"] = TensorSpec(shape, "bfloat16", Layout(a, senders))
        dst[f"layers.{i}.w"] = TensorSpec(shape, "bfloat16", Layout(b, receivers))
    sranks = {f"GPU:{i}": i for i in range(256)}
    tranks = {f"GPU:{i}": 256 + i for i in range(128)}
    firsts, agains = [], []
    for _ in range(3):  # minimum of 3 (the machine is shared): a cold plan, then the same call 5 times
        transfer._plan._CACHE.clear()
        start = time.perf_counter()
        p = transfer.plan(src, dst, source_ranks=sranks, target_ranks=tranks)
        firsts.append(time.perf_counter() - start)
        for _ in range(5):
            start = time.perf_counter()
            again = transfer.plan(src, dst, source_ranks=sranks, target_ranks=tranks)
            agains.append(time.perf_counter() - start)
            assert again is p
    first, second = min(firsts), min(agains)
    return {
        "tensors": tensors,
        "sender_devices": 256,
        "receiver_devices": 128,
        "first_s": first,
        "again_s": second,
        "first_s_all": firsts,
        "again_s_median": statistics.median(agains),
        "floor_bytes": p.floor_bytes,
        "target_first_s": 2.0,
        "target_again_s": 0.1,
    }


# -- packing against memcpy ----------------------------------------------------------------------
def packing(rows: int, cols: int, rounds: int) -> dict[str, Any]:
    """A sender of 2 -> 2 rows -> columns packs a column half of its row block; a receiver unpacks it."""
    from layoutcore.transfer import _schedule
    from layoutcore.transfer._local import Local

    smesh, tmesh = Mesh((2,), ("x",), ["CPU:0", "CPU:1"]), Mesh((2,), ("x",), ["CPU:0", "CPU:1"])
    src = TensorSpec((rows, cols), "float32", Layout(("x", None), smesh))
    dst = TensorSpec((rows, cols), "float32", Layout((None, "x"), tmesh))
    p = transfer.plan(
        {"w": src}, {"w": dst}, source_ranks={"CPU:0": 0, "CPU:1": 1}, target_ranks={"CPU:0": 2, "CPU:1": 3}
    )
    sender = _schedule.schedule(p, 0, 1 << 40)
    receiver = _schedule.schedule(p, 2, 1 << 40)
    items = sender.sends[3][0]  # rank 0's rows of rank 3's columns
    block = np.random.default_rng(0).standard_normal((rows // 2, cols), dtype=np.float32)
    senders = {"w": Local(src, [0], [src.boxes()[0]], [block])}
    target = np.empty((rows, cols // 2), dtype=np.float32)
    receivers = {"w": Local(dst, [0], [dst.boxes()[0]], [target])}
    nbytes = sum(i[4] for i in items)
    # real data in the baseline's source (an untouched np.empty reads the kernel's shared zero page, cache-hot)
    contiguous = np.random.default_rng(1).integers(0, 255, nbytes, dtype=np.uint8)
    out = np.ones(nbytes, dtype=np.uint8)
    recv_items = receiver.recvs[1][0]
    bucket = np.ones(nbytes, dtype=np.uint8)  # the Link keeps its bucket buffers between syncs too
    times: dict[str, list[float]] = {"pack": [], "unpack": [], "memcpy": []}
    for r in range(rounds + 1):
        for name in ("pack", "unpack", "memcpy") if r % 2 else ("memcpy", "unpack", "pack"):
            start = time.perf_counter()
            if name == "pack":
                buf = _schedule.pack(items, senders, False, lambda n: bucket[:n])
            elif name == "unpack":
                _schedule.unpack(recv_items, contiguous, receivers, False, 1)
            else:
                np.copyto(out, contiguous)
            if r:
                times[name].append(time.perf_counter() - start)
    assert buf.nbytes == nbytes
    best = {k: min(v) for k, v in times.items()}
    med = {k: statistics.median(v) for k, v in times.items()}
    return {
        "bytes": nbytes,
        "seconds_min": best,
        "seconds_median": med,
        "pack/memcpy": best["memcpy"] / best["pack"],
        "unpack/memcpy": best["memcpy"] / best["unpack"],
        "pack/memcpy (median)": med["memcpy"] / med["pack"],
        "unpack/memcpy (median)": med["memcpy"] / med["unpack"],
        "target": 0.7,
    }


# -- gloo workers --------------------------------------------------------------------------------
def worker(
    rank: int, port: int, world: int, nsend: int, rows: int, cols: int, rounds: int, bucket: int, columns: int
) -> None:
    import torch
    import torch.distributed as dist

    import layoutcore as lc

    dist.init_process_group(
        "gloo",
        init_method=f"tcp://127.0.0.1:{port}",
        rank=rank,
        world_size=world,
        timeout=datetime.timedelta(seconds=600),
    )
    senders, receivers = list(range(nsend)), list(range(nsend, world))
    smesh = Mesh((nsend,), ("x",), [f"CPU:{r}" for r in senders])
    tmesh = Mesh((len(receivers),), ("x",), [f"CPU:{r}" for r in receivers])
    # torch's DeviceMesh over part of the world makes a group every rank must create, in one order
    if rank in senders:
        lc.get_driver("torch").device_mesh(smesh)
    else:
        dist.new_group(senders)
    bcast = dist.new_group([0, *receivers])
    value = np.random.default_rng(0).standard_normal((rows, cols), dtype=np.float32)
    # columns=1: rows -> columns (every sender packs a strided column slab); 0: rows -> rows on the other ranks
    # (each piece contiguous on both sides: sent from and received into the tensors' memory)
    rows_layout = Layout(("x", None), smesh)
    cols_layout = Layout((None, "x"), tmesh) if columns else Layout(("x", None), tmesh)
    tree = {"w": lc.distribute_tensor(value, rows_layout, driver="torch")} if rank in senders else None
    link = transfer.Link(senders=senders, receivers=receivers, bucket_bytes=bucket, timeout=600)
    p = transfer.plan(
        {"w": TensorSpec((rows, cols), "float32", rows_layout)},
        {"w": TensorSpec((rows, cols), "float32", cols_layout)},
        source_ranks={f"CPU:{r}": r for r in senders},
        target_ranks={f"CPU:{r}": r for r in receivers},
    )
    pairs: dict[tuple[int, int], int] = {}
    for piece in p.pieces_of(rank):
        key = (piece.source_rank, piece.target_rank)
        pairs[key] = pairs.get(key, 0) + p.nbytes(piece)
    raw_bufs = {k: torch.empty(n, dtype=torch.uint8) for k, n in pairs.items()}

    # the receivers' existing weights, filled in place every sync (as a server's are)
    served = (
        {"w": lc.call_with_layout(torch.zeros, cols_layout, (rows, cols), driver="torch")}
        if rank in receivers
        else None
    )

    def sync() -> None:
        if rank in senders:
            link.send(tree)
        else:
            link.receive(into=served)

    def raw() -> None:
        ops = [
            dist.P2POp(dist.isend if s == rank else dist.irecv, buf, d if s == rank else s)
            for (s, d), buf in raw_bufs.items()
        ]
        for work in dist.batch_isend_irecv(ops):
            work.wait()

    gather_broadcast = _gather_broadcast(rank, senders, receivers, tree, bcast, rows, cols, columns)

    packed_raw = _pack_then_raw(rank, p, tree, raw_bufs, rows // nsend)
    contenders = {
        "sync": sync,
        "raw batch_isend_irecv": raw,
        "pack + raw": packed_raw,
        "gather+broadcast": gather_broadcast,
    }
    times: dict[str, list[float]] = {k: [] for k in contenders}
    names = list(contenders)
    for r in range(rounds + 1):  # round 0 warms up
        order = names[r % len(names) :] + names[: r % len(names)]
        for name in order:
            dist.barrier()
            start = time.perf_counter()
            contenders[name]()
            dist.barrier()
            if r:
                times[name].append(time.perf_counter() - start)
    reports: list[Any] = [None] * world
    dist.all_gather_object(reports, _report(link.last_report))
    if rank == 0:
        best = {k: min(v) for k, v in times.items()}
        med = {k: statistics.median(v) for k, v in times.items()}
        print(
            json.dumps(
                {
                    "processes": f"{nsend} -> {len(receivers)}",
                    "layouts": "rows -> columns" if columns else "rows -> rows (other ranks)",
                    "floor_bytes": p.floor_bytes,
                    "bucket_bytes": bucket,
                    "seconds_min": best,
                    "seconds_median": med,
                    "raw/sync": best["raw batch_isend_irecv"] / best["sync"],
                    "gather+broadcast/sync": best["gather+broadcast"] / best["sync"],
                    "raw/(pack + raw)": best["raw batch_isend_irecv"] / best["pack + raw"],
                    "(pack + raw)/sync": best["pack + raw"] / best["sync"],
                    "raw/sync (median)": med["raw batch_isend_irecv"] / med["sync"],
                    "gather+broadcast/sync (median)": med["gather+broadcast"] / med["sync"],
                    "last_reports": {"sender rank 0": reports[0], f"receiver rank {nsend}": reports[nsend]},
                }
            ),
            flush=True,
        )
    dist.barrier()
    dist.destroy_process_group()


def _pack_then_raw(rank: int, p: Any, tree: Any, raw_bufs: dict[tuple[int, int], Any], height: int) -> Any:
    """The raw contender after a hand-written pack of each sender's pieces into its buffers (``np.copyto``
    of the same boxes): the least a sync must spend when the layout changes the memory order."""
    import torch.distributed as dist

    import layoutcore as lc

    shard = lc.unpack(tree["w"])[0].numpy() if tree is not None else None
    regions: dict[tuple[int, int], list[Any]] = {}
    for piece in p.pieces_of(rank):
        if piece.source_rank == rank:
            (r0, c0), (nr, nc) = piece.sender_box
            start = r0 - rank * height  # the senders hold rows, sender rank r the r-th block of `height`
            regions.setdefault((rank, piece.target_rank), []).append(shard[start : start + nr, c0 : c0 + nc])

    def packed_raw() -> None:
        ops = []
        for (s, d), buf in raw_bufs.items():
            if s == rank:
                out, offset = buf.numpy(), 0
                for src in regions[(s, d)]:
                    np.copyto(out[offset : offset + src.nbytes].view(src.dtype).reshape(src.shape), src)
                    offset += src.nbytes
                ops.append(dist.P2POp(dist.isend, buf, d))
            else:
                ops.append(dist.P2POp(dist.irecv, buf, s))
        for work in dist.batch_isend_irecv(ops):
            work.wait()

    return packed_raw


def _gather_broadcast(
    rank: int, senders: list[int], receivers: list[int], tree: Any, bcast: Any, rows: int, cols: int, columns: int
) -> Any:
    """Gathering the tensor to sender rank 0, broadcasting it to every receiver, which slices its part."""
    import torch
    import torch.distributed as dist

    import layoutcore as lc

    shard = lc.unpack(tree["w"])[0] if tree is not None else None
    full = torch.empty((rows, cols), dtype=torch.float32) if rank == 0 or rank in receivers else None

    def gather_broadcast() -> None:
        if rank in senders:
            if rank == 0:
                chunks = list(full.chunk(len(senders)))
                chunks[0].copy_(shard)
                works = [dist.irecv(chunks[s], s) for s in senders[1:]]
                for work in works:
                    work.wait()
            else:
                dist.isend(shard.contiguous(), 0).wait()
        if rank == 0 or rank in receivers:
            dist.broadcast(full, 0, group=bcast)
        if rank in receivers:
            j = receivers.index(rank)
            if columns:
                width = cols // len(receivers)
                full[:, j * width : (j + 1) * width].contiguous()
            else:
                height = rows // len(receivers)
                full[j * height : (j + 1) * height].clone()

    return gather_broadcast


def _report(r: Any) -> dict[str, Any]:
    keys = ("floor_share", "bytes_sent", "bytes_received", "metadata_bytes", "plan_reused")
    out = {k: getattr(r, k) for k in keys}
    out.update({k: round(getattr(r, k), 4) for k in dir(r) if k.startswith("seconds_")})
    return out


def main() -> None:
    from _processes import run_gloo_ranks

    quick = "--quick" in sys.argv
    rows, cols = (512, 512) if quick else (4096, 8192)  # 128 MiB of float32
    rounds = 2 if quick else 15  # the machine is shared: many interleaved rounds, ratio of minima (and of medians)
    result: dict[str, Any] = {
        "statistic": {"target ratios": "minimum", "(median) ratios": "median", "plan": "minimum"},
        "framework": "",
        "tensor": {"shape": [rows, cols], "dtype": "float32", "MiB": rows * cols * 4 / MIB},
        "rounds": rounds,
    }
    result["plan_at_scale"] = plan_at_scale(1000 if quick else 10_000)
    print(json.dumps(result["plan_at_scale"]), flush=True)
    result["packing"] = packing(rows, cols, rounds * 4)
    print(json.dumps(result["packing"]), flush=True)
    import torch

    result["framework"] = f"torch {torch.__version__} gloo on 127.0.0.1, {os.cpu_count()} cores"
    result["sync"] = {}
    for nsend, bucket, columns in (
        (2, 64 * MIB, 1),
        (2, 16 * MIB, 1),
        (2, 4 * MIB, 1),
        (2, 16 * MIB, 0),
        (4, 16 * MIB, 1),
    ):
        world = 2 * nsend
        kind = "rows->columns" if columns else "rows->rows"
        key = f"{nsend}->{nsend} {kind}, bucket {bucket // MIB} MiB"
        out = run_gloo_ranks(__file__, world, str(nsend), str(rows), str(cols), str(rounds), str(bucket), str(columns))
        result["sync"][key] = out
        print(key, json.dumps(out), flush=True)
    result["load_average"] = list(os.getloadavg())
    name = "bench_transfer.quick.json" if quick else "bench_transfer.json"
    path = Path(__file__).resolve().parent / "results" / name
    path.write_text(json.dumps(result, indent=1) + "\n", "utf-8")
    print("wrote", path)


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "torch-gloo-worker":
        r, port, world, nsend, rows, cols, rounds, bucket, columns = map(int, sys.argv[2:11])
        worker(r, port, world, nsend, rows, cols, rounds, bucket, columns)
    else:
        main()
