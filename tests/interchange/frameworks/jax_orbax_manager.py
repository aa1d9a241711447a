"""Save with Orbax's CheckpointManager (step 3, item "default"), a short PartitionSpec (P("x") on a
rank-2 array: trailing axes replicated). Usage: python jax_orbax_manager.py OUT_DIR."""

from __future__ import annotations

import os
import sys

os.environ["XLA_FLAGS"] = os.environ.get("XLA_FLAGS", "") + " --xla_force_host_platform_device_count=8"
import jax
import jax.numpy as jnp
import orbax.checkpoint as ocp
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

mesh = jax.make_mesh((8,), ("x",), devices=jax.devices())
tree = {"w": jax.device_put(jnp.arange(16.0, dtype=jnp.float32).reshape(8, 2), NamedSharding(mesh, P("x")))}
manager = ocp.CheckpointManager(sys.argv[1])
manager.save(3, args=ocp.args.StandardSave(tree))
manager.wait_until_finished()
print("SAVED")
