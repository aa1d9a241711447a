"""Save oracle.orbax_arrays() with Orbax's StandardCheckpointer on 8 JAX CPU devices (mesh x=2, y=4).

Usage: python jax_orbax_save.py OUT_DIR [--no-sharding]. ``--no-sharding`` deletes ``_sharding``
afterwards (the bad-input case).
"""

from __future__ import annotations

import os
import sys

os.environ["XLA_FLAGS"] = os.environ.get("XLA_FLAGS", "") + " --xla_force_host_platform_device_count=8"
import jax
import jax.numpy as jnp
import orbax.checkpoint as ocp
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P
from oracle import orbax_arrays

out = sys.argv[1]
mesh = jax.make_mesh((2, 4), ("x", "y"), devices=jax.devices())
specs = {
    "params/dense/kernel": P("x", "y"),
    "params/dense/bias": P(("y", "x")),
    "params/emb": P(None, "x"),
    "opt/count": P("y"),
    "rep": P(),
}
g = orbax_arrays()
leaves = {k: jax.device_put(jnp.asarray(v), NamedSharding(mesh, specs[k])) for k, v in g.items()}
tree = {
    "params": {
        "dense": {"kernel": leaves["params/dense/kernel"], "bias": leaves["params/dense/bias"]},
        "emb": leaves["params/emb"],
    },
    "opt": {"count": leaves["opt/count"]},
    "rep": leaves["rep"],
    "step": 11,
}
ckptr = ocp.StandardCheckpointer()
ckptr.save(out, tree)
ckptr.wait_until_finished()
if "--no-sharding" in sys.argv:
    os.remove(os.path.join(out, "_sharding"))
print("SAVED")
