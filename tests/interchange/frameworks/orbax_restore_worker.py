"""Orbax users restore into layouts from TensorSpecs: layoutcore_jax.to_restore_target.

Usage: python orbax_restore_worker.py CKPT_DIR. The specs come from layoutcore.checkpoint.inspect
of the Orbax directory with new layouts on another mesh; Orbax's own StandardCheckpointer.restore
reads the arrays into them, checked against the oracle and the requested shardings.
"""

from __future__ import annotations

import sys

import jax
import numpy as np
import orbax.checkpoint as ocp
from layoutcore_jax._interchange import to_restore_target
from oracle import orbax_arrays, same_bits

import layoutcore as lc
import layoutcore.checkpoint as ckpt

lc.get_driver("jax")  # configures LAYOUTCORE_CPU_DEVICES CPU devices before JAX starts
path = sys.argv[1]
info = ckpt.inspect(path)
mesh = lc.Mesh((4, 2), ("p", "q"))
new_axes = {
    "params/dense/kernel": ("q", "p"),
    "params/dense/bias": (("p", "q"),),
    "params/emb": (None, "q"),
    "opt/count": ("p",),
    "rep": (None, None),
}
tree: dict = {}
for p, spec in info.tensors.items():
    node = tree
    *head, last = p.split("/")
    for k in head:
        node = node.setdefault(k, {})
    node[last] = spec.replace(layout=lc.Layout(new_axes[p], mesh))
tree["step"] = 0
restored = ocp.StandardCheckpointer().restore(path, to_restore_target(tree))
oracle = orbax_arrays()
for p, expected in oracle.items():
    node = restored
    for k in p.split("/"):
        node = node[k]
    assert same_bits(np.asarray(node), expected), p
    assert node.sharding.spec == jax.sharding.PartitionSpec(*new_axes[p]), (p, node.sharding)
    assert lc.fetch_layout(node, driver="jax").axes == lc.Layout(new_axes[p], mesh).axes
print("OK restore", restored["step"])
