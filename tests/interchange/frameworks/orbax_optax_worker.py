"""Load jax_orbax_optax.py's checkpoint on one driver and compare every leaf with the saver's oracle.

Usage: python orbax_optax_worker.py DRIVER CKPT_DIR ORACLE_JSON.
"""

from __future__ import annotations

import json
import sys
from typing import Any

import numpy as np

import layoutcore as lc
import layoutcore.checkpoint as ckpt

driver, path, oracle_text = sys.argv[1:4]
oracle = json.loads(oracle_text)


def at(tree: Any, tree_path: str) -> Any:
    for key in tree_path.split("/"):
        tree = tree[key]
    return tree


with ckpt.open(path) as src:
    assert src.format == "orbax"
    out = src.load(driver=driver)
for tree_path in oracle["none"]:
    assert at(out, tree_path) is None, (tree_path, at(out, tree_path))
for tree_path, want in oracle["arrays"].items():
    got = lc.to_numpy(at(out, tree_path))
    expected = np.asarray(want["values"], dtype=want["dtype"])
    assert got.dtype == expected.dtype and got.shape == expected.shape, (tree_path, got.dtype, got.shape)
    assert np.array_equal(got, expected), (tree_path, got, expected)
print("OK", driver)
