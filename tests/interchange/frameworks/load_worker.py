"""Load a foreign checkpoint into one driver under other layouts and check it bit for bit.

Usage: python load_worker.py DRIVER {dcp|orbax} CKPT_DIR EXPORT_DIR. Checks, per tensor: the
global value (lc.to_numpy) and every device's component (lc.unpack) against the NumPy oracle
sliced by the target layout's device_slices, and that the tensor carries the target layout.
Then exports the checkpoint with export_safetensors and loads that back the same way.
"""

from __future__ import annotations

import sys

import numpy as np
from oracle import dcp_arrays, orbax_arrays, same_bits

import layoutcore as lc
import layoutcore.checkpoint as ckpt

driver, kind, ckpt_dir, export_dir = sys.argv[1:5]
if driver == "jax":  # the oracle holds int64 and float64, which JAX keeps only with x64 on
    import jax

    jax.config.update("jax_enable_x64", True)
mesh = lc.Mesh((2, 4), ("a", "b"))
even_only = driver in ("jax", "tensorflow")
multi_axis = driver != "tensorflow"  # TF DTensor has no tensor axis over several mesh axes
if kind == "dcp":
    oracle = dcp_arrays()
    targets = {
        "model/w_rows": lc.Layout((None, "b"), mesh),  # rows over 2 -> columns over 4
        # columns over 2 -> columns over 8 (mesh axes in reverse order), or rows and columns on TF
        "model/w_cols": lc.Layout((None, ("b", "a")) if multi_axis else ("a", "b"), mesh),
        "model/uneven": lc.Layout((None, "a") if even_only else ("b", None), mesh),  # 5 rows over 4: uneven
        "model/emb": lc.Layout(("b", "a"), mesh),
        "model/ids": lc.Layout(("a", None), mesh),
        "rep": lc.Layout(("a",), mesh),
    }
    values = {"step": 7}
else:
    oracle = orbax_arrays()
    targets = {
        "params/dense/kernel": lc.Layout((("a", "b"), None) if multi_axis else ("b", "a"), mesh),
        "params/dense/bias": lc.Layout(("a",), mesh),
        "params/emb": lc.Layout(("b", None), mesh),
        "opt/count": lc.Layout((None,), mesh),
        "rep": lc.Layout((None, "a"), mesh),
    }
    values = {"step": 11}


def get(tree: dict, path: str):  # type: ignore[no-untyped-def]
    for k in path.split("/"):
        tree = tree[k]
    return tree


def component_bits(comp) -> tuple[tuple[int, ...], bytes]:  # type: ignore[no-untyped-def]
    """One device's component as (shape, raw bytes), through the framework's own export."""
    if driver == "torch":
        import torch

        c = comp.detach().cpu().contiguous()
        return tuple(c.shape), c.reshape(-1).view(torch.uint8).numpy().tobytes()
    return tuple(np.shape(comp)), np.ascontiguousarray(np.asarray(comp)).tobytes()


def check(out: dict, label: str) -> None:
    for path, expected in oracle.items():
        got = get(out, path)
        layout = targets[path]
        fetched = lc.fetch_layout(got)
        assert fetched.axes == layout.axes and fetched.mesh.shape == mesh.shape, (label, path, fetched)
        glob = lc.to_numpy(got)
        assert same_bits(np.asarray(glob), expected), (label, path, glob, expected)
        for comp, sl in zip(lc.unpack(got), layout.device_slices(expected.shape), strict=True):
            block = np.ascontiguousarray(expected[sl])
            assert component_bits(comp) == (block.shape, block.tobytes()), (label, path)
    for path, value in values.items():
        assert get(out, path) == value, (label, path)


out = ckpt.load(ckpt_dir, targets, driver=driver)
check(out, kind)
if driver == "numpy":  # reading DCP and Orbax needed no framework at all
    leaked = [m for m in ("torch", "jax", "tensorflow") if m in sys.modules]
    assert not leaked, leaked
ckpt.export_safetensors(ckpt_dir, export_dir, max_shard_size=256)
exported = ckpt.load(export_dir, {k.replace("/", "."): v for k, v in targets.items()}, driver=driver)
renamed: dict = {}
for name, value in exported.items():
    node = renamed
    *head, last = name.split(".")
    for k in head:
        node = node.setdefault(k, {})
    node[last] = value
check({**renamed, **values}, "export")
print("OK", driver, kind)
