"""Load the hand-written F32 / F8_E8M0 / F4 safetensors file (unheld_safetensors.py) into one driver.

Usage: python unheld_worker.py DRIVER DIR. The F4 tensor is refused by name (UnsupportedLayoutError);
the F32 one loads with its values; the F8_E8M0 one loads bit for bit where the driver holds
float8_e8m0fnu, else is refused naming the tensor and the dtype. Prints "ok".
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
from unheld_safetensors import F32_INDEX, HELD_INDEX, SCALES, W

import layoutcore as lc
from layoutcore import checkpoint

driver, directory = sys.argv[1], Path(sys.argv[2])
try:
    checkpoint.load(directory / "model.safetensors", driver=driver)
    raise SystemExit("a load asking for the F4 tensor was not refused")
except lc.UnsupportedLayoutError as err:
    assert err.feature == "dtype" and "'packed'" in str(err) and "F4" in str(err), err

holds_e8m0 = "float8_e8m0fnu" in lc.get_driver(driver).supported_dtypes()
if holds_e8m0:
    loaded = checkpoint.load(directory / HELD_INDEX, driver=driver)
    scales = lc.to_numpy(loaded["scales"])
    assert scales.dtype.name == "float8_e8m0fnu", scales.dtype
    assert scales.view(np.uint8).tobytes() == SCALES, scales.view(np.uint8)
else:
    try:
        checkpoint.load(directory / HELD_INDEX, driver=driver)
        raise SystemExit("a load asking for the F8_E8M0 tensor was not refused")
    except lc.UnsupportedLayoutError as err:
        assert err.feature == "dtype" and "'scales'" in str(err) and "float8_e8m0fnu" in str(err), err
    loaded = checkpoint.load(directory / F32_INDEX, driver=driver)
w = lc.to_numpy(loaded["w"])
assert w.dtype == np.float32 and w.shape == (4, 2) and w.reshape(-1).tolist() == W, w
print("ok", driver, "e8m0" if holds_e8m0 else "no e8m0")
