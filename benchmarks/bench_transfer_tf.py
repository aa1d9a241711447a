"""``layoutcore.transfer`` in a TensorFlow process: handing blocks over to and from TF DTensors, against ``memcpy``.

Run from the repository root (needs tensorflow)::

    PYTHONPATH=.:drivers python benchmarks/bench_transfer_tf.py [--quick]

One process, TF with 4 logical CPUs, one float32 tensor (64 MiB; ``--quick``: 4 MiB) on a 2x2 mesh
(each CPU holds a quarter). The wire is not timed (``bench_transfer.py`` times it); these are the
steps on either side of it that TF adds, timed in interleaved turns, minimum and median of the
repeats:

* **Sender**: ``sender_local`` (what ``link.send`` reads the components through: the TF driver's
  ``component_to_numpy``, DLPack views of TF's own buffers) against what it did before, ``.numpy()``
  on every component (a copy each), and against ``np.copyto`` of the same bytes (the cost of one copy).
* **Receiver**: ``pack_owned`` of the received blocks into a new DTensor (``receive(target=...)``'s
  last step) from 64-byte-aligned blocks (what the link allocates: TF adopts them) and from blocks
  16 bytes off that alignment (TF copies them), against ``np.copyto`` of the same bytes.

Target: the hand-overs the link uses cost < 0.1x a ``memcpy`` of the bytes (they copy nothing).

Writes ``benchmarks/results/bench_transfer_tf.json`` (``--quick``: ``bench_transfer_tf.quick.json``).
"""

from __future__ import annotations

import datetime
import json
import os
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

os.environ.setdefault("LAYOUTCORE_CPU_DEVICES", "4")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np

import layoutcore as lc
from layoutcore import Layout, Mesh
from layoutcore.driver import aligned_empty
from layoutcore.driver._fill import pack_owned
from layoutcore.transfer._local import sender_local

MIB = 2**20
#: A hand-over that copies nothing costs a small fraction of one copy of the bytes.
TARGET = 0.1


def interleaved(contenders: dict[str, Callable[[], Any]], reps: int) -> dict[str, dict[str, float]]:
    """Seconds of each contender, run in turns (the first of each turn rotates), after one warm-up each."""
    for fn in contenders.values():
        fn()
    times: dict[str, list[float]] = {name: [] for name in contenders}
    names = list(contenders)
    for i in range(reps):
        for name in names[i % len(names) :] + names[: i % len(names)]:
            start = time.perf_counter()
            contenders[name]()
            times[name].append(time.perf_counter() - start)
    return {n: {"min_s": min(t), "median_s": statistics.median(t)} for n, t in times.items()}


def offset_empty(shape: tuple[int, ...], dtype: np.dtype[Any], offset: int) -> np.ndarray:
    """An array whose data starts ``offset`` bytes past a 64-byte boundary."""
    block = aligned_empty((int(np.prod(shape)) * dtype.itemsize + offset,), np.dtype(np.uint8))
    return block[offset:].view(dtype).reshape(shape)


def main() -> None:
    quick = "--quick" in sys.argv
    size = (4 if quick else 64) * MIB
    reps = 5 if quick else 11
    drv = lc.get_driver("tensorflow")
    layout = Layout(("a", "b"), Mesh((2, 2), ("a", "b")))
    side = int((size // 4) ** 0.5)
    value = np.random.default_rng(0).standard_normal((side, side)).astype(np.float32)
    tensor = lc.distribute_tensor(value, layout, driver="tensorflow")
    comps = drv.unpack(tensor)
    block_shape = tuple(int(s) for s in comps[0].shape)
    dst = [np.empty(block_shape, np.float32) for _ in comps]
    src = [np.ascontiguousarray(value[: block_shape[0], : block_shape[1]]) for _ in comps]

    def memcpy() -> None:
        for d, s in zip(dst, src, strict=True):
            np.copyto(d, s)

    sender = interleaved(
        {
            "sender_local (DLPack views)": lambda: sender_local("w", tensor),
            ".numpy() per component (before)": lambda: [np.asarray(c.numpy()) for c in drv.unpack(tensor)],
            "memcpy of the same bytes": memcpy,
        },
        reps,
    )
    aligned = [aligned_empty(block_shape, np.dtype(np.float32)) for _ in comps]
    unaligned = [offset_empty(block_shape, np.dtype(np.float32), 16) for _ in comps]
    for b in (*aligned, *unaligned):
        b[...] = src[0]
    receiver = interleaved(
        {
            "pack_owned, aligned blocks": lambda: pack_owned(drv, aligned, layout, value.shape),
            "pack_owned, blocks 16 B off (before)": lambda: pack_owned(drv, unaligned, layout, value.shape),
            "memcpy of the same bytes": memcpy,
        },
        reps,
    )
    for table in (sender, receiver):
        copy = table["memcpy of the same bytes"]
        for t in table.values():
            t["memcpy_ratio"], t["memcpy_ratio_median"] = t["min_s"] / copy["min_s"], t["median_s"] / copy["median_s"]
    result = {
        "benchmark": "bench_transfer_tf",
        "date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "load_average": os.getloadavg(),
        "statistic": "minimum",  # of the interleaved turns; medians beside them
        "bytes": int(value.nbytes),
        "mesh": "2x2 TF logical CPUs, float32, each CPU a quarter",
        "target_memcpy_ratio": TARGET,
        "sender": sender,
        "receiver": receiver,
    }
    for side_name, table in (("sender", sender), ("receiver", receiver)):
        for name, t in table.items():
            print(f"{side_name:8} {name:40} {t['min_s'] * 1e3:9.3f} ms  ({t['memcpy_ratio']:6.3f}x memcpy)")
    out = Path(__file__).resolve().parent / "results" / f"bench_transfer_tf{'.quick' if quick else ''}.json"
    out.write_text(json.dumps(result, indent=2) + "\n", "utf-8")


if __name__ == "__main__":
    main()
