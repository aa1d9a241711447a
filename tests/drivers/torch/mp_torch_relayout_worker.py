"""One rank of the gloo relayout-at-the-floor test (test_torch_relayout_floor.py); not a test module itself.

Usage: ``python mp_torch_relayout_worker.py RANK PORT WORLD_SIZE TIMEOUT_S``. Joins a gloo group on
127.0.0.1, relayouts each case of ``CASES`` with layoutcore while counting the bytes this rank's
collectives send to the other ranks (``CollectiveBytes``, a ``CommDebugMode`` on a real group), and
prints one JSON line: per case the bytes, this rank's blocks after the relayout and the global value.
The parent sums the bytes over the ranks and checks the blocks against layoutcore.geometry.
"""

from __future__ import annotations

import datetime
import json
import sys
from typing import Any

import numpy as np
import torch
import torch.distributed as dist

import layoutcore as lc

TWO = lc.Mesh((2,), ("x",), devices=["CPU:0", "CPU:1"])
TWO_BY_ONE = lc.Mesh((2, 1), ("x", "y"), devices=["CPU:0", "CPU:1"])
ONE_BY_TWO = lc.Mesh((1, 2), ("x", "y"), devices=["CPU:0", "CPU:1"])
FLAT = lc.Mesh((2,), ("z",), devices=["CPU:0", "CPU:1"])

#: name -> (source layout, target layout, shape, dtype name)
CASES: dict[str, tuple[lc.Layout, lc.Layout, tuple[int, ...], str]] = {
    "S0 -> S1": (lc.Layout(["x", None], TWO), lc.Layout([None, "x"], TWO), (6, 4), "float32"),
    "x -> None": (lc.Layout(["x", None], TWO), lc.Layout([None, None], TWO), (6, 4), "float32"),
    "uneven S0 -> S1": (lc.Layout(["x", None], TWO), lc.Layout([None, "x"], TWO), (5, 3), "float32"),
    "(x,y) -> (y,x) on 1x2": (
        lc.Layout(["x", "y"], ONE_BY_TWO),
        lc.Layout(["y", "x"], ONE_BY_TWO),
        (6, 4),
        "float32",
    ),
    "((x,y),None) -> (None,(x,y)) on 1x2": (
        lc.Layout([("x", "y"), None], ONE_BY_TWO),
        lc.Layout([None, ("x", "y")], ONE_BY_TWO),
        (6, 4),
        "float32",
    ),
    "cross-mesh 2x1 (x,None) -> 2 (None,z)": (
        lc.Layout(["x", None], TWO_BY_ONE),
        lc.Layout([None, "z"], FLAT),
        (6, 4),
        "float32",
    ),
    "bfloat16 uneven": (lc.Layout(["x", None], TWO), lc.Layout([None, "x"], TWO), (5, 3), "bfloat16"),
    "int64 cross-mesh": (lc.Layout(["x", None], TWO_BY_ONE), lc.Layout([None, "z"], FLAT), (6, 4), "int64"),
    "bool uneven": (lc.Layout(["x", None], TWO), lc.Layout([None, "x"], TWO), (5, 3), "bool"),
}


def value(shape: tuple[int, ...], dtype: str) -> torch.Tensor:
    """Distinct values per element (bit patterns that arithmetic on a wrong dtype would change)."""
    n = int(np.prod(shape))
    if dtype == "bool":
        return torch.from_numpy((np.arange(n) % 3 == 1).reshape(shape))
    if dtype == "bfloat16":
        return (torch.arange(n, dtype=torch.float32) * 1.0078125 + 0.5).reshape(shape).to(torch.bfloat16)
    if dtype == "int64":
        return (torch.arange(n, dtype=torch.int64) * (1 << 40) + 7).reshape(shape)
    return torch.arange(n, dtype=torch.float32).reshape(shape)


def as_list(tensor: torch.Tensor) -> Any:
    """Exact JSON form: bfloat16 as float32 (exact), int64 as ints, bool as bools."""
    return (tensor.float() if tensor.dtype == torch.bfloat16 else tensor).tolist()


def plain(array: np.ndarray) -> Any:
    """A NumPy result as exact JSON (bfloat16, float32 or ml_dtypes' bfloat16, as float32)."""
    return (array.astype(np.float32) if array.dtype.name == "bfloat16" else array).tolist()


def main() -> None:
    from layoutcore_torch._relayout import CollectiveBytes

    rank, port, world, timeout_s = int(sys.argv[1]), sys.argv[2], int(sys.argv[3]), float(sys.argv[4])
    dist.init_process_group(
        "gloo",
        init_method=f"tcp://127.0.0.1:{port}",
        rank=rank,
        world_size=world,
        timeout=datetime.timedelta(seconds=timeout_s),
    )
    drv = lc.get_driver("torch")
    out: dict[str, Any] = {"rank": rank}
    for name, (source, target, shape, dtype) in CASES.items():
        x = value(shape, dtype)
        d = lc.distribute_tensor(x, source, driver=drv)
        with CollectiveBytes() as counted:
            moved = lc.relayout(d, target, driver=drv)
        mesh = target.mesh
        assert mesh is not None
        positions = list(drv.local_positions(mesh, drv.bind_mesh(mesh)))
        out[name] = {
            "sent": counted.moved,
            "ops": counted.ops,
            "positions": positions,
            "blocks": [as_list(c) for c in lc.unpack(moved, driver=drv)] if positions else [],
            "dtype": str(moved.dtype),
            "layout_ok": lc.fetch_layout(moved, driver=drv) == target,
            "global": plain(lc.to_numpy(moved, driver=drv)) if positions else None,
        }
    print(json.dumps(out), flush=True)
    dist.barrier()  # both ranks past their last collective before either tears gloo down
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
