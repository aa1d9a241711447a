"""One of 2 JAX processes (4 CPU devices each) loading a safetensors file with checkpoint.load.

Usage: python jax_mp_load_worker.py PROCESS_ID PORT FILE {rows|cols}. The file holds
``w`` = arange((R, C)) float32 (written by the test). The page cache of the file is dropped first
(posix_fadvise DONTNEED), then /proc/self/io is read around the load: ``rchar`` (bytes this process
asked the kernel for) and ``read_bytes`` (bytes fetched from the disk, read-ahead included).
Prints one JSON line with those, the plan and the floor for this process's devices; checks every
addressable shard against the NumPy oracle.
"""

from __future__ import annotations

import json
import os
import sys

import jax
import numpy as np
from layoutcore_jax import initialize_distributed

import layoutcore as lc
import layoutcore.checkpoint as ckpt

pid, port, file, kind = int(sys.argv[1]), sys.argv[2], sys.argv[3], sys.argv[4]
initialize_distributed(f"127.0.0.1:{port}", 2, pid, local_device_count=4, timeout_s=120)  # before any JAX use

mesh = lc.Mesh((8,), ("x",))
layout = lc.Layout(("x", None) if kind == "rows" else (None, "x"), mesh)
info = ckpt.inspect(file)
shape = info.tensors["w"].shape
positions = list(range(4 * pid, 4 * pid + 4))  # process 0's devices come first in the bound mesh
plan = ckpt.read_plan(file, {"w": layout}, process_devices=positions)
with lc.use_driver("jax"):  # the default plans for this process's devices, as the load reads them
    assert ckpt.read_plan(file, {"w": layout}).reads == plan.reads
assert ckpt.read_plan(file, {"w": layout}, driver="jax").reads == plan.reads


def io() -> dict[str, int]:
    with open("/proc/self/io") as f:
        return {k: int(v) for k, v in (line.split(": ") for line in f)}


fd = os.open(file, os.O_RDONLY)
os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
os.close(fd)
before = io()
out = ckpt.load(file, {"w": layout}, driver="jax")
after = io()
w = out["w"]
oracle = np.arange(np.prod(shape), dtype=np.float32).reshape(shape)
for shard in w.addressable_shards:
    assert np.array_equal(np.asarray(shard.data), oracle[shard.index]), shard.index
assert len(w.addressable_shards) == 4
print(
    json.dumps(
        {
            "process": pid,
            "kind": kind,
            "rchar": after["rchar"] - before["rchar"],
            "read_bytes": after["read_bytes"] - before["read_bytes"],
            "plan_read_bytes": plan.read_bytes,
            "plan_metadata_bytes": plan.metadata_bytes,
            "floor_bytes": plan.floor_bytes,
        }
    ),
    flush=True,
)
jax.distributed.shutdown()
