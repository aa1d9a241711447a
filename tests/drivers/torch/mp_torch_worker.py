"""One rank of the 2-process gloo test (test_torch_multiprocess.py); not a test module itself.

Usage: ``python mp_torch_worker.py RANK PORT WORLD_SIZE TIMEOUT_S``. Joins a gloo group on
127.0.0.1, runs layoutcore on it and prints one JSON line with what this rank holds; the parent
checks it against layoutcore.geometry.
"""

from __future__ import annotations

import datetime
import json
import sys
import time
from typing import Any

import numpy as np
import torch.distributed as dist

import layoutcore as lc


def main() -> None:
    rank, port, world, timeout_s = int(sys.argv[1]), sys.argv[2], int(sys.argv[3]), float(sys.argv[4])
    start = time.monotonic()
    dist.init_process_group(
        "gloo",
        init_method=f"tcp://127.0.0.1:{port}",
        rank=rank,
        world_size=world,
        timeout=datetime.timedelta(seconds=timeout_s),
    )
    drv = lc.get_driver("torch")
    out: dict[str, Any] = {"rank": rank, "init_s": time.monotonic() - start, "devices": drv.list_devices()}
    x = np.arange(24, dtype=np.float32).reshape(6, 4)
    five = np.arange(5, dtype=np.float32)
    cases = {
        "1d": (lc.Mesh((2,), ("x",)), x, ("x", None), (None, "x")),
        "1d_uneven": (lc.Mesh((2,), ("x",)), five, ("x",), (None,)),
        "2d_2x1": (lc.Mesh((2, 1), ("x", "y")), x, ("x", "y"), ("y", "x")),
        "2d_1x2": (lc.Mesh((1, 2), ("x", "y")), x, ("x", "y"), (None, ("x", "y"))),
    }
    for name, (mesh, value, axes, other) in cases.items():
        layout, target = lc.Layout(axes, mesh), lc.Layout(other, mesh)
        d = lc.distribute_tensor(value, layout)
        local = [c.numpy().tolist() for c in lc.unpack(d)]
        moved = lc.relayout(d, target)
        mine = drv.local_positions(mesh, drv.bind_mesh(mesh))
        packed = lc.pack([value[layout.device_slices(value.shape)[p]] for p in mine], layout, global_shape=value.shape)
        out[name] = {
            "positions": list(mine),
            "local": local,
            "relayout_local": [c.numpy().tolist() for c in lc.unpack(moved)],
            "global": lc.to_numpy(d).tolist(),
            "relayout_global": lc.to_numpy(moved).tolist(),
            "packed_global": lc.to_numpy(packed).tolist(),
            "fetch_ok": lc.fetch_layout(d) == layout and lc.fetch_layout(moved) == target,
        }
    # torch's collectives misplace data on a permuted rank grid, so the driver refuses one.
    try:
        lc.distribute_tensor(x, lc.Layout(("x", None), lc.Mesh((2,), ("x",), devices=["CPU:1", "CPU:0"])))
        out["permuted"] = None
    except lc.UnsupportedLayoutError as err:
        out["permuted"] = [err.feature, str(err)]
    print(json.dumps(out), flush=True)
    # Both ranks past their last collective before either tears gloo down: a rank that destroys its
    # group while the peer's last transfer is in flight can abort the peer at exit (seen once in CI).
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
