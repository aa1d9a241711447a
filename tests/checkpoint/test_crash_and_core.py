"""A save killed with SIGKILL at a random point; the format-neutral read core against NumPy slicing."""

from __future__ import annotations

import math
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import layoutcore as lc
from layoutcore import CheckpointError, checkpoint
from layoutcore.checkpoint._read_plan import StoredPiece, StoredTensor, merge_ranges, plan_tensor, read_boxes

SAVER = r"""
import sys, numpy as np, layoutcore as lc
from layoutcore import Layout, Mesh, checkpoint
path, generation = sys.argv[1], int(sys.argv[2])
mesh = Mesh((8,), ("x",))
tree = {f"w{i}": lc.distribute_tensor(np.full((256, 512), generation * 100 + i, np.float32), Layout(("x", None), mesh))
        for i in range(24)}
print("start", flush=True)
checkpoint.save(path, tree, overwrite=True)
print("done", flush=True)
"""


def load_complete_or_none(path: Path) -> dict[str, Any] | None:
    """The checkpoint at ``path`` loaded, or None where there is none (never a partial one)."""
    try:
        out: dict[str, Any] = checkpoint.load(path)
    except CheckpointError as exc:
        assert "does not exist" in str(exc), exc
        return None
    return out


def _generation(path: Path) -> int | None:
    """Which generation the checkpoint holds (all tensors agree), or None when there is none."""
    out = load_complete_or_none(path)
    if out is None:
        return None
    values = {int(lc.to_numpy(v)[0, 0]) // 100 for v in out.values()}
    assert len(values) == 1, values  # old or new, never a mix
    for i, v in enumerate(out.values()):
        arr = lc.to_numpy(v)
        assert np.all(arr == arr[0, 0]) and int(arr[0, 0]) % 100 == i
    return values.pop()


def test_sigkill_leaves_no_checkpoint_or_the_previous_one(tmp_path: Path) -> None:
    rng = random.Random(1234)
    path = tmp_path / "ckpt"
    env = dict(os.environ, LAYOUTCORE_CPU_DEVICES="8")
    committed: int | None = None
    for generation in range(1, 7):
        proc = subprocess.Popen(
            [sys.executable, "-c", SAVER, str(path), str(generation)], stdout=subprocess.PIPE, text=True, env=env
        )
        assert proc.stdout is not None and proc.stdout.readline().strip() == "start"
        time.sleep(rng.uniform(0.0, 0.25))  # the save of 12 MiB takes about that long here
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        found = _generation(path)
        assert found in (committed, generation), (found, committed, generation)
        committed = found
    # a later save still commits, over whatever the kills left behind
    subprocess.run([sys.executable, "-c", SAVER, str(path), "9"], check=True, capture_output=True, env=env, timeout=120)
    assert _generation(path) == 9


@st.composite
def stored(draw: st.DrawFn) -> tuple[np.ndarray, StoredTensor, list[tuple[tuple[int, ...], tuple[int, ...]]]]:
    rank = draw(st.integers(0, 3))
    shape = tuple(draw(st.lists(st.integers(1, 9), min_size=rank, max_size=rank)))
    chunk = tuple(draw(st.integers(1, n + 2)) for n in shape)  # may reach past the edge (padded)
    grid = [range(0, n, c) for n, c in zip(shape, chunk, strict=True)]
    starts = [tuple(s) for s in np.array(np.meshgrid(*grid, indexing="ij")).reshape(rank, -1).T] if rank else [()]
    order = draw(st.permutations(list(range(len(starts)))))
    pieces, offset = [], draw(st.integers(0, 7))
    for k in order:
        pieces.append(StoredPiece("f.bin", offset, starts[k], chunk, None))
        offset += math.prod(chunk) * 2 + draw(st.integers(0, 3))
    # needed boxes are one layout's blocks (ceil chunk rule per axis): identical or disjoint
    blocks = [draw(st.integers(1, n + 1)) for n in shape]
    per_axis = [
        [(min(i * -(-n // k), n), min((i + 1) * -(-n // k), n)) for i in range(k)]
        for n, k in zip(shape, blocks, strict=True)
    ]
    grid_boxes = [
        (tuple(a for a, _ in combo), tuple(b - a for a, b in combo))
        for combo in (
            np.array(np.meshgrid(*[range(len(x)) for x in per_axis], indexing="ij")).reshape(rank, -1).T
            if rank
            else [()]
        )
        for combo in [[per_axis[d][i] for d, i in enumerate(combo)]]
    ]
    boxes = draw(st.lists(st.sampled_from(grid_boxes), min_size=1, max_size=6))
    value = np.arange(math.prod(shape), dtype=np.int16).reshape(shape)
    return value, StoredTensor("t", shape, "int16", tuple(pieces)), boxes


@settings(max_examples=60, deadline=None)
@given(stored(), st.sampled_from(["exact", "piece"]))
def test_read_core_reads_each_needed_box(
    tmp_path_factory: pytest.TempPathFactory, case: tuple, granularity: str
) -> None:
    value, tensor, boxes = case
    root = tmp_path_factory.mktemp("core")
    size = max(p.offset + math.prod(p.shape) * 2 for p in tensor.pieces) + 8
    blob = np.full(size, 0xEE, dtype=np.uint8)  # filler: any stray byte would show up
    for p in tensor.pieces:
        padded = np.full(p.shape, -1, dtype=np.int16)
        sub = value[tuple(slice(s, s + c) for s, c in zip(p.start, p.shape, strict=True))]
        padded[tuple(slice(0, n) for n in sub.shape)] = sub
        blob[p.offset : p.offset + padded.nbytes] = padded.reshape(-1).view(np.uint8)
    blob.tofile(root / "f.bin")
    reads = plan_tensor(tensor, boxes, granularity=granularity)  # type: ignore[arg-type]
    distinct = list(dict.fromkeys(boxes))
    assert reads.floor_bytes == sum(math.prod(s) for _, s in distinct) * 2
    out = [np.empty(s, dtype=np.int16) for _, s in reads.boxes]
    read_boxes(str(root), reads, out)
    for (lo, sz), got in zip(reads.boxes, out, strict=True):
        assert np.array_equal(got, value[tuple(slice(a, a + n) for a, n in zip(lo, sz, strict=True))])
    runs = merge_ranges(np.concatenate([p.runs for p in reads.pieces])) if reads.pieces else np.zeros((0, 2))
    if granularity == "exact":
        # each needed element once: the runs hold exactly the union of the distinct boxes
        needed = np.zeros(value.shape, dtype=bool)
        for lo, sz in distinct:
            needed[tuple(slice(a, a + n) for a, n in zip(lo, sz, strict=True))] = True
        assert int(runs[:, 1].sum()) == int(needed.sum()) * 2
