"""Save a real optax optimizer state with Orbax's StandardCheckpointer (optax is a test dependency).

Usage: python jax_orbax_optax.py OUT_DIR. ``optax.chain(clip_by_global_norm, adam)`` after one update:
``(EmptyState(), (ScaleByAdamState(count, mu, nu), EmptyState()))``. Orbax records each empty
``EmptyState`` as a ``None`` leaf with no array behind it, and ``count`` as a 0-d jax.Array. Prints the
oracle as JSON: each array leaf's layoutcore path -> its values as JAX holds them, and the ``None`` paths.
"""

from __future__ import annotations

import json
import os
import sys

os.environ["XLA_FLAGS"] = os.environ.get("XLA_FLAGS", "") + " --xla_force_host_platform_device_count=8"
import jax
import jax.numpy as jnp
import numpy as np
import optax
import orbax.checkpoint as ocp
from jax.sharding import AxisType, NamedSharding
from jax.sharding import PartitionSpec as P

mesh = jax.make_mesh((2, 4), ("x", "y"), devices=jax.devices(), axis_types=(AxisType.Auto,) * 2)
w = jax.device_put(jnp.arange(32, dtype=jnp.float32).reshape(8, 4) / 7, NamedSharding(mesh, P("x", None)))
params = {"w": w}
opt = optax.chain(optax.clip_by_global_norm(1.0), optax.adam(1e-3))
state = opt.init(params)
_, state = opt.update(jax.tree.map(jnp.ones_like, params), state, params)
ckptr = ocp.StandardCheckpointer()
ckptr.save(sys.argv[1], {"params": params, "opt_state": state})
ckptr.wait_until_finished()
adam = state[1][0]
arrays = {
    "params/w": w,
    "opt_state/1/0/count": adam.count,
    "opt_state/1/0/mu/w": adam.mu["w"],
    "opt_state/1/0/nu/w": adam.nu["w"],
}
oracle = {p: {"dtype": str(np.asarray(v).dtype), "values": np.asarray(v).tolist()} for p, v in arrays.items()}
print(json.dumps({"arrays": oracle, "none": ["opt_state/0", "opt_state/1/1"]}))
