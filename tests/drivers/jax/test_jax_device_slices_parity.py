"""``Layout.device_slices`` equals JAX's ``NamedSharding.devices_indices_map`` (in mesh order), ``==`` and all.

The oracle is JAX's own call on a ``jax.sharding.Mesh`` built here from ``jax.devices()``, not the
driver's conversion: a replicated axis, or one split over size-1 mesh axes, is ``slice(None)``.
"""

from __future__ import annotations

import math

import jax
import numpy as np
import pytest
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

import layoutcore as lc

CASES = [
    ((3, 2), ("x", None), (6, 4)),
    ((3, 2), (None, "y"), (6, 4)),
    ((3, 2), ("y", "x"), (6, 6)),
    ((3, 2), (None, None), (6, 4)),
    ((3, 2), (("x", "y"), None), (6, 4)),
    ((3, 2), (("y", "x"),), (12,)),
    ((1, 2), ("x", "y"), (6, 4)),  # a size-1 mesh axis gives one block: slice(None)
    ((2, 2, 2), ("z", None, ("x", "y")), (4, 3, 8)),
    ((8,), (), ()),
]


@pytest.mark.parametrize(("mesh_shape", "axes", "shape"), CASES)
def test_device_slices_equal_jax_devices_indices_map(mesh_shape: tuple, axes: tuple, shape: tuple) -> None:
    names = ("x", "y", "z")[: len(mesh_shape)]
    devices = np.array(jax.devices("cpu")[: math.prod(mesh_shape)]).reshape(mesh_shape)
    jax_map = NamedSharding(jax.sharding.Mesh(devices, names), P(*axes)).devices_indices_map(shape)
    ours = lc.Layout(axes, lc.Mesh(mesh_shape, names)).device_slices(shape)
    assert ours == [jax_map[d] for d in devices.flat]
