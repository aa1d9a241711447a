"""One rank of the 2-process gloo dtype test (test_torch_dtypes.py); not a test module itself.

Usage: ``python mp_torch_dtypes_worker.py RANK PORT TIMEOUT_S``. For every dtype: distribute, relayout
to two layouts, to_numpy and pack on a real gloo group; prints one JSON line of per-dtype results
(``true`` where every result equals the NumPy value bit for bit, else the error).
"""

from __future__ import annotations

import json
import os
import sys

import numpy as np
import torch.distributed as dist
from gloo_pair import join_gloo_pair

import layoutcore as lc
from layoutcore._dtypes import random_values
from layoutcore.driver import ALL_DTYPES, as_bits


def same(got: np.ndarray, want: np.ndarray) -> bool:
    return bool(got.dtype == want.dtype and np.array_equal(as_bits(got), as_bits(want)))


def main() -> None:
    rank = join_gloo_pair()
    lc.set_driver("torch")
    mesh = lc.Mesh((2,), ("x",))
    rows, columns, replicated = (
        lc.Layout(("x", None), mesh),
        lc.Layout((None, "x"), mesh),
        lc.Layout.replicated(mesh, 2),
    )
    drv = lc.get_driver()
    mine = drv.local_positions(mesh, drv.bind_mesh(mesh))
    out: dict[str, object] = {}
    for name in ALL_DTYPES:
        x = random_values(name, (4, 4), seed=ALL_DTYPES.index(name))
        try:
            t = lc.distribute_tensor(x, rows)
            packed = lc.pack([x[rows.device_slices(x.shape)[p]] for p in mine], rows, global_shape=x.shape)
            results = [lc.to_numpy(t), lc.to_numpy(lc.relayout(t, columns)), lc.to_numpy(lc.relayout(t, replicated))]
            results.append(lc.to_numpy(packed))
            out[name] = all(same(r, x) for r in results)
        except Exception as exc:  # reported to the parent, which fails the test naming it
            out[name] = f"{type(exc).__name__}: {exc}"[:300]
    print(json.dumps({"rank": rank, "dtypes": out}), flush=True)
    dist.barrier()
    dist.destroy_process_group()
    sys.stdout.flush()
    # The results are out: leave without C++ static destructors. Under load, gloo's teardown at interpreter
    # exit aborted once after a clean destroy_process_group ("terminate called without an active
    # exception", SIGABRT in a fresh-clone CI run), failing the test on a process that had done its work.
    os._exit(0)


if __name__ == "__main__":
    main()
