"""One rank of 2 gloo processes filling DTensors through LayoutcoreStorageReader.

Usage: python torch_dcp_reader_worker.py RANK PORT CKPT_DIR. The checkpoint holds
oracle.dcp_arrays() (saved by layoutcore); each rank makes empty DTensors of other placements
and calls torch.distributed.checkpoint.load with the reader; every local shard must equal the
oracle's block (torch's own local shape and offset), bit for bit.
"""

from __future__ import annotations

import datetime
import os
import sys

import numpy as np
import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
from _gloo_exit import exit_after_gloo
from layoutcore_torch import LayoutcoreStorageReader
from oracle import dcp_arrays
from torch.distributed.tensor import DeviceMesh, Replicate, Shard, distribute_tensor
from torch.distributed.tensor._utils import compute_local_shape_and_global_offset

rank, port, path = int(sys.argv[1]), sys.argv[2], sys.argv[3]
os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=port, RANK=str(rank), WORLD_SIZE="2")
dist.init_process_group("gloo", rank=rank, world_size=2, timeout=datetime.timedelta(seconds=60))
mesh = DeviceMesh("cpu", torch.arange(2), mesh_dim_names=("x",))
mesh2 = DeviceMesh("cpu", torch.arange(2).reshape(1, 2), mesh_dim_names=("p", "q"))
g = dcp_arrays()
placements = {
    "model/w_rows": (mesh, [Shard(1)]),
    "model/w_cols": (mesh, [Shard(0)]),
    "model/uneven": (mesh, [Shard(0)]),  # 5 rows over 2: 3 + 2
    "model/emb": (mesh2, [Replicate(), Shard(0)]),
    "model/ids": (mesh, [Shard(1)]),  # 3 columns over 2: uneven
    "rep": (mesh, [Replicate()]),
}


def torch_dtype(a: np.ndarray) -> torch.dtype:
    return torch.bfloat16 if a.dtype.name == "bfloat16" else torch.from_numpy(a[:0]).dtype


state: dict = {}
for p, (m, pl) in placements.items():
    node = state
    *head, last = p.split("/")
    for k in head:
        node = node.setdefault(k, {})
    node[last] = distribute_tensor(torch.zeros(g[p].shape, dtype=torch_dtype(g[p])), m, pl)
reader = LayoutcoreStorageReader(path)
dcp.load(state, storage_reader=reader)
for p, (m, pl) in placements.items():
    node = state
    for k in p.split("/"):
        node = node[k]
    local = node.to_local()
    shape, offset = compute_local_shape_and_global_offset(g[p].shape, m, pl)
    want = np.ascontiguousarray(g[p][tuple(slice(o, o + s) for o, s in zip(offset, shape, strict=True))])
    got = local.contiguous().reshape(-1).view(torch.uint8).numpy().tobytes()
    assert tuple(local.shape) == want.shape and got == want.tobytes(), (rank, p)
total = sum(a.nbytes for a in g.values())
print("LOADED", rank, reader.bytes_read, total, flush=True)
dist.barrier()
dist.destroy_process_group()
exit_after_gloo()
