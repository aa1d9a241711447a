"""Load jax_orbax_scalars.py's checkpoint on one driver; check every 0-d leaf and the sharded ones.

Usage: python orbax_scalars_worker.py DRIVER CKPT_DIR.
"""

from __future__ import annotations

import sys

import numpy as np

import layoutcore as lc
import layoutcore.checkpoint as ckpt

driver, path = sys.argv[1:3]
w = np.arange(32, dtype=np.float32).reshape(8, 4)
with ckpt.open(path) as src:
    assert src.format == "orbax"
    assert src.specs["opt_state/adam/count"].shape == ()
    out = src.load(driver=driver)
scalars = {
    "adam": (out["opt_state"]["adam"]["count"], 5, np.int32),
    "schedule": (out["opt_state"]["schedule"]["count"], 3, np.int32),
}
for name, (value, want, dtype) in scalars.items():
    got = lc.to_numpy(value)
    assert got.shape == () and got.dtype == dtype and got == want, (name, got, got.shape, got.dtype)
    assert lc.fetch_layout(value).rank == 0, name
scale = out["opt_state"]["scale"]
got = lc.to_numpy(scale) if not isinstance(scale, float) else np.float32(scale)
assert np.shape(got) == () and float(got) == 0.25, got
assert np.array_equal(lc.to_numpy(out["params"]["w"]), w)
assert np.array_equal(lc.to_numpy(out["opt_state"]["adam"]["mu"]["w"]), w * 0.5)
print("OK", driver)
