"""layoutcore's JAX driver: :class:`~layoutcore.Mesh` and :class:`~layoutcore.Layout` on ``jax.sharding``.

Select it with ``LAYOUTCORE_DRIVER=jax``, ``layoutcore.set_driver("jax")`` or ``driver="jax"``.
Importing this package does not import JAX; the driver imports it on first use, after applying
``LAYOUTCORE_CPU_DEVICES`` as ``jax_num_cpu_devices``.

Public conversions (round-trip tested): :func:`to_jax_mesh` / :func:`from_jax_mesh`,
:func:`to_partition_spec` / :func:`from_partition_spec`, :func:`to_named_sharding` /
:func:`from_named_sharding`, and :func:`from_jax_sharding` for any array's sharding.
Multi-process runs start with :func:`initialize_distributed`. :func:`tree_shardings` turns a
LayoutMap into ``NamedSharding``s for any pytree (flax NNX state, linen params, optax states).
"""

from __future__ import annotations

from ._convert import (
    SINGLE_DEVICE_AXIS,
    AxisTypeName,
    from_jax_mesh,
    from_jax_sharding,
    from_named_sharding,
    from_partition_spec,
    to_jax_mesh,
    to_named_sharding,
    to_partition_spec,
)
from ._distributed import ABORT_GRACE_S, DistributedInitError, initialize_distributed
from ._driver import JaxDriver
from ._trees import tree_paths, tree_shardings

__all__ = [
    "ABORT_GRACE_S",
    "SINGLE_DEVICE_AXIS",
    "AxisTypeName",
    "DistributedInitError",
    "JaxDriver",
    "from_jax_mesh",
    "from_jax_sharding",
    "from_named_sharding",
    "from_partition_spec",
    "initialize_distributed",
    "to_jax_mesh",
    "to_named_sharding",
    "to_partition_spec",
    "tree_paths",
    "tree_shardings",
]
