"""Save an optax-like state with Orbax's StandardCheckpointer: 0-d arrays beside sharded ones.

Usage: python jax_orbax_scalars.py OUT_DIR. The tree is what ``optax.adam(...).init(params)`` gives
(a ``count`` scalar per ScaleByAdamState, mu/nu like the params), written without optax: a 0-d
jax.Array replicated over the mesh, a 0-d uncommitted jax.Array (SingleDeviceSharding), and a 0-d
NumPy array. Prints the oracle as JSON.
"""

from __future__ import annotations

import json
import os
import sys

os.environ["XLA_FLAGS"] = os.environ.get("XLA_FLAGS", "") + " --xla_force_host_platform_device_count=8"
import jax
import jax.numpy as jnp
import numpy as np
import orbax.checkpoint as ocp
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

mesh = jax.make_mesh((2, 4), ("x", "y"), devices=jax.devices())
w = np.arange(32, dtype=np.float32).reshape(8, 4)
put = lambda v, spec: jax.device_put(jnp.asarray(v), NamedSharding(mesh, spec))  # noqa: E731
tree = {
    "params": {"w": put(w, P("x", None))},
    "opt_state": {
        "adam": {"count": put(np.int32(5), P()), "mu": {"w": put(w * 0.5, P("x", None))}},
        "schedule": {"count": jnp.asarray(np.int32(3))},  # SingleDeviceSharding
        "scale": np.float32(0.25),  # a NumPy 0-d leaf
    },
}
ckptr = ocp.StandardCheckpointer()
ckptr.save(sys.argv[1], tree)
ckptr.wait_until_finished()
print(json.dumps({"opt_state/adam/count": 5, "opt_state/schedule/count": 3, "opt_state/scale": 0.25}))
