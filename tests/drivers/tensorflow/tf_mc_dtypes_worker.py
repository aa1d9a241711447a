"""One client of the 2-client DTensor dtype test (run by test_tensorflow_dtypes.py, not collected by pytest).

Usage: python tf_mc_dtypes_worker.py CLIENT_ID PORT0,PORT1. A relayout whose blocks cross clients, and
to_numpy's gather, for dtypes DTensor's collectives change or lack; prints "client N ok" when every
component and the global value equal NumPy's bit for bit.
"""

from __future__ import annotations

import sys

import layoutcore_tensorflow as lctf
import numpy as np

client_id = int(sys.argv[1])
ports = sys.argv[2].split(",")
lctf.initialize_multi_client(client_id, [f"localhost:{p}" for p in ports], num_cpu_devices=2, timeout=60)

import layoutcore as lc  # noqa: E402
from layoutcore._dtypes import random_values  # noqa: E402
from layoutcore.driver import as_bits  # noqa: E402

lc.set_driver("tensorflow")
driver = lc.get_driver()
mesh = lc.Mesh((2, 2), ("x", "y"))
positions = list(driver.local_positions(mesh, driver.bind_mesh(mesh)))
rows, cols = lc.Layout(("x", None), mesh), lc.Layout((None, "y"), mesh)
for name in ("float32", "uint64", "float8_e5m2", "bool", "complex128", "int16", "bfloat16"):
    x = random_values(name, (4, 4), seed=3)
    t = lc.pack([x[rows.device_slices(x.shape)[p]] for p in positions], rows, global_shape=x.shape)
    moved = lc.relayout(t, cols)
    for p, component in zip(positions, lc.unpack(moved), strict=True):
        got = np.asarray(component.numpy())
        assert np.array_equal(as_bits(got), as_bits(x[cols.device_slices(x.shape)[p]])), (name, p)
    whole = lc.to_numpy(t)  # blocks on the other client: gathered through DTensor
    assert whole.dtype == x.dtype and np.array_equal(as_bits(whole), as_bits(x)), name
print(f"client {client_id} ok", flush=True)
