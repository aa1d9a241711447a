"""One client of the 2-client DTensor test (run by test_tensorflow_multiclient.py, not collected by pytest).

Usage: python tf_mc_worker.py CLIENT_ID PORT0,PORT1
"""

from __future__ import annotations

import sys

import layoutcore_tensorflow as lctf
import numpy as np

client_id = int(sys.argv[1])
ports = sys.argv[2].split(",")
cluster = lctf.initialize_multi_client(client_id, [f"localhost:{p}" for p in ports], num_cpu_devices=2, timeout=60)

import layoutcore as lc  # noqa: E402

lc.set_driver("tensorflow")
driver = lc.get_driver()
assert driver.multi_client  # type: ignore[attr-defined]
assert lc.list_devices() == [f"/job:worker/replica:0/task:{t}/device:CPU:{i}" for t in (0, 1) for i in (0, 1)]
assert list(cluster) == lc.list_devices()

mesh = lc.Mesh((2, 2), ("x", "y"))  # abstract: binds to the 4 devices of both clients
devices = driver.bind_mesh(mesh)
positions = list(driver.local_positions(mesh, devices))
assert positions == [2 * client_id, 2 * client_id + 1], positions
G = np.arange(16, dtype=np.float32).reshape(4, 4)

# Pack only this client's components (rows of x-block client_id).
rows = lc.Layout(("x", None), mesh)
slices = rows.device_slices(G.shape)
components = [G[slices[p]] for p in positions]
t = lc.pack(components, rows, global_shape=G.shape)
assert lc.fetch_layout(t) == rows
assert all(np.array_equal(c.numpy(), e) for c, e in zip(lc.unpack(t), components, strict=True))
try:
    lc.pack(components * 2, rows, global_shape=G.shape)
except lc.LayoutError as exc:
    assert "needs 2 components" in str(exc), exc
else:
    raise AssertionError("pack took 4 components on a client with 2 devices")

# Relayout across clients: each column block needs rows held by the other client.
cols = lc.Layout((None, "y"), mesh)
moved = lc.relayout(t, cols)
col_slices = cols.device_slices(G.shape)
for p, c in zip(positions, lc.unpack(moved), strict=True):
    assert np.array_equal(c.numpy(), G[col_slices[p]]), (p, c.numpy())

# The global value, from sharded tensors whose blocks are partly on the other client.
assert np.array_equal(lc.to_numpy(t), G)
assert np.array_equal(lc.to_numpy(moved), G)

# distribute_tensor of the same global value in every client keeps the local components.
both = lc.Layout(("y", "x"), mesh)
d = lc.distribute_tensor(G, both)
both_slices = both.device_slices(G.shape)
for p, c in zip(positions, lc.unpack(d), strict=True):
    assert np.array_equal(c.numpy(), G[both_slices[p]])
assert np.array_equal(lc.to_numpy(d), G)
print(f"client {client_id} ok: positions {positions} of {lc.list_devices()}", flush=True)
