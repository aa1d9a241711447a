"""One rank of a 2-process gloo group saving oracle.dcp_arrays() with torch.distributed.checkpoint.

Usage: python torch_dcp_save.py RANK PORT OUT_DIR [--safetensors]. Placements over a 1-D mesh of 2 ranks and a
2x1 mesh: Shard(0), Shard(1), uneven Shard(0) (5 rows over 2), [Shard(0), Shard(1)] on 2x1,
Replicate; plus a plain int ``step``.
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
from oracle import dcp_arrays
from torch.distributed.tensor import DeviceMesh, Replicate, Shard, distribute_tensor

rank, port, out = int(sys.argv[1]), sys.argv[2], sys.argv[3]
os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=port, RANK=str(rank), WORLD_SIZE="2")
dist.init_process_group("gloo", rank=rank, world_size=2, timeout=datetime.timedelta(seconds=60))
mesh = DeviceMesh("cpu", torch.arange(2), mesh_dim_names=("x",))
mesh2 = DeviceMesh("cpu", torch.arange(2).reshape(2, 1), mesh_dim_names=("p", "q"))


def t(a: np.ndarray) -> torch.Tensor:
    if a.dtype.name == "bfloat16":
        return torch.from_numpy(a.view(np.uint16).copy()).view(torch.bfloat16)
    return torch.from_numpy(a.copy())


g = dcp_arrays()
sd = {
    "model": {
        "w_rows": distribute_tensor(t(g["model/w_rows"]), mesh, [Shard(0)]),
        "w_cols": distribute_tensor(t(g["model/w_cols"]), mesh, [Shard(1)]),
        "uneven": distribute_tensor(t(g["model/uneven"]), mesh, [Shard(0)]),
        "emb": distribute_tensor(t(g["model/emb"]), mesh2, [Shard(0), Shard(1)]),
        "ids": distribute_tensor(t(g["model/ids"]), mesh, [Replicate()]),
    },
    "rep": t(g["rep"]),
    "step": 7,
}
if "--safetensors" in sys.argv:  # DCP's SAFETENSORS serialisation (torch 2.13 cannot read it back)
    from torch.distributed.checkpoint.filesystem import SerializationFormat

    writer = dcp.FileSystemWriter(out, serialization_format=SerializationFormat.SAFETENSORS)
    dcp.save(sd, storage_writer=writer)
else:
    dcp.save(sd, checkpoint_id=out)
dist.barrier()
dist.destroy_process_group()
print("SAVED", rank)
exit_after_gloo()
