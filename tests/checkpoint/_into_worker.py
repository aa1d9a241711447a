"""``checkpoint.load(path, into=tree)`` on one driver, in its own process (test_into.py runs it per driver).

    python _into_worker.py DRIVER PATH

PATH holds the matrix's standard tree (``_matrix_worker.save``). The worker makes existing tensors
of every leaf on its target layout (zeros), loads into a subset of them, and checks against the
NumPy oracle through the framework's own per-device data: values bit for bit, the layout kept, and
what ``into`` promises per driver (NumPy components and torch local tensors keep their memory,
TF variables keep their identity, JAX arrays are replaced). Prints one JSON line.
"""

from __future__ import annotations

import json
import sys
from typing import Any

import numpy as np
from _matrix_worker import LEAVES, _bits, oracle

import layoutcore as lc
from layoutcore import UnsupportedLayoutError, checkpoint
from layoutcore._dtypes import numpy_dtype


def _storage(driver: str, value: Any) -> list[int]:
    """Per local device, the address of the memory holding its block, by the framework's own calls."""
    if driver == "torch":
        return [int(c.data_ptr()) for c in lc.unpack(value)]
    if driver == "numpy":
        return [int(np.asarray(c).__array_interface__["data"][0]) for c in lc.unpack(value)]
    return []


def _existing(driver: str) -> dict[str, Any]:
    tree: dict[str, Any] = {}
    for name, (shape, dtype, _, dst, fallback) in LEAVES.items():
        zeros = np.zeros(shape, numpy_dtype(dtype))
        try:
            tree[name] = lc.distribute_tensor(zeros, dst, driver=driver)
        except UnsupportedLayoutError:
            tree[name] = lc.distribute_tensor(zeros, fallback or LEAVES[name][2], driver=driver)
    return tree


def main(driver: str, path: str) -> None:
    drv = lc.get_driver(driver)
    tree = _existing(driver)
    subset = {k: tree[k] for k in list(tree)[1:]}  # a subset: the first leaf is not read
    before = {k: _storage(driver, v) for k, v in subset.items()}
    layouts = {k: lc.fetch_layout(v) for k, v in subset.items()}
    out = checkpoint.load(path, into=subset)
    assert list(out) == list(subset)
    kinds = {}
    for name, value in out.items():
        want = oracle(name)
        assert _bits(lc.to_numpy(value)) == _bits(want), name
        assert lc.fetch_layout(value) == layouts[name], name
        for comp, sl in zip(lc.unpack(value), layouts[name].device_slices(want.shape), strict=True):
            assert _bits(drv.component_to_numpy(comp).astype(want.dtype)) == _bits(want[sl]), name
        kinds[name] = "same" if value is subset[name] else "replaced"
        if driver in ("torch", "numpy"):
            assert kinds[name] == "same" and _storage(driver, value) == before[name], name
    untouched = next(iter(tree))
    assert not lc.to_numpy(tree[untouched]).any(), "a tensor outside into was written"
    variables = {}
    if driver == "tensorflow":  # a DTensor variable: assigned in place, keeping its identity
        import tensorflow as tf  # noqa: F401  (the framework the driver runs)
        from tensorflow.experimental import dtensor

        name = "rows_to_columns"
        layout = lc.fetch_layout(tree[name])
        var = dtensor.DVariable(lc.distribute_tensor(np.zeros((32, 24), np.float32), layout, driver=driver))
        got = checkpoint.load(path, into={name: var})[name]
        assert got is var and _bits(lc.to_numpy(var)) == _bits(oracle(name))
        variables[name] = "assigned"
    print(json.dumps({"driver": driver, "kinds": kinds, "variables": variables}))


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
