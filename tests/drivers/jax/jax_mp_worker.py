"""One process of the 2-process JAX test (run by test_jax_multiprocess.py, not collected by pytest).

Usage: python jax_mp_worker.py PROCESS_ID PORT [TIMEOUT_S]

Prints one line ``RESULT <json>`` with what it observed; the parent asserts on it.
"""

from __future__ import annotations

import json
import sys

import layoutcore_jax
import numpy as np

import layoutcore as lc

process_id, port = int(sys.argv[1]), int(sys.argv[2])
timeout_s = int(sys.argv[3]) if len(sys.argv) > 3 else 60

layoutcore_jax.initialize_distributed(f"127.0.0.1:{port}", 2, process_id, timeout_s=timeout_s, local_device_count=2)

import jax  # noqa: E402  (after initialisation, as in user code)

driver = lc.get_driver("jax")
G = np.arange(16, dtype=np.float32).reshape(4, 4)
mesh = lc.Mesh((2, 2), ("x", "y"))  # abstract: bound to the 4 global devices, row-major
devices = driver.bind_mesh(mesh)
local = list(driver.local_positions(mesh, devices))


def local_blocks(array: jax.Array) -> list[list[list[float]]]:
    return [np.asarray(c).tolist() for c in driver.unpack(array)]


rows = lc.Layout(("x", None), mesh)
t = lc.distribute_tensor(G, rows, driver="jax")
cols = lc.Layout((None, ("x", "y")), mesh)
moved = lc.relayout(t, cols, driver="jax")  # rows held by the other process move here
repacked = lc.pack(driver.unpack(moved), cols, global_shape=G.shape, driver="jax")
# A large NumPy input, 64-byte aligned in process 0 (JAX may alias it zero-copy) and not in process 1:
# every process must still make the same collectives (device_put checks the value across processes).
big = np.arange(512 * 1024, dtype=np.float32).reshape(1024, 512)  # 2 MiB: above the small-input copy
raw = np.empty(big.nbytes + 128, dtype=np.uint8)
start = (-raw.ctypes.data) % 64 + (0 if process_id == 0 else 4)
placed = raw[start : start + big.nbytes].view(np.float32).reshape(big.shape)
placed[...] = big
aligned = lc.distribute_tensor(placed, rows, driver="jax")
placed[...] = -1  # a snapshot: the caller's later writes do not show through
after = lc.distribute_tensor(G, cols, driver="jax")  # the next collective lines up with the peer's
result = {
    "aligned_input": placed.ctypes.data % 64 == 0,
    "aligned_ok": all(
        np.array_equal(np.asarray(c), big[rows.device_slices(big.shape)[p]])
        for c, p in zip(driver.unpack(aligned), local, strict=True)
    ),
    "after_ok": all(
        np.array_equal(np.asarray(c), G[cols.device_slices(G.shape)[p]])
        for c, p in zip(driver.unpack(after), local, strict=True)
    ),
    "process_index": jax.process_index(),
    "devices": driver.list_devices(),
    "bound": list(devices),
    "local_positions": local,
    "fully_addressable": t.is_fully_addressable,
    "rows_local": local_blocks(t),
    "rows_expected": [G[rows.device_slices(G.shape)[p]].tolist() for p in local],
    "cols_local": local_blocks(moved),
    "cols_expected": [G[cols.device_slices(G.shape)[p]].tolist() for p in local],
    "fetch_layout_ok": lc.fetch_layout(moved, driver="jax") == cols,
    "global_ok": bool(np.array_equal(lc.to_numpy(moved, driver="jax"), G)),  # collective: both processes call it
    "repacked_ok": bool(np.array_equal(lc.to_numpy(repacked, driver="jax"), G)),
    "sum": float(jax.jit(lambda a: a.sum())(moved)),
}
print("RESULT " + json.dumps(result), flush=True)
jax.distributed.shutdown()
