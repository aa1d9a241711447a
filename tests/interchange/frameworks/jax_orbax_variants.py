"""Save one tree with Orbax's PyTreeCheckpointHandler in each storage variant: zarr v2 without OCDBT,
zarr v3 without OCDBT, zarr v3 with OCDBT. Usage: python jax_orbax_variants.py OUT_PREFIX."""

from __future__ import annotations

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
tree = {
    "a": jax.device_put(jnp.arange(8 * 12, dtype=jnp.float32).reshape(8, 12), NamedSharding(mesh, P("x", "y"))),
    "n": np.arange(5, dtype=np.int16),  # a NumPy leaf: no sharding entry, saved whole
}
for ocdbt, zarr3 in ((False, False), (False, True), (True, True)):
    handler = ocp.PyTreeCheckpointHandler(use_ocdbt=ocdbt, use_zarr3=zarr3)
    ocp.Checkpointer(handler).save(f"{sys.argv[1]}_{int(ocdbt)}{int(zarr3)}", args=ocp.args.PyTreeSave(tree))
print("SAVED")
