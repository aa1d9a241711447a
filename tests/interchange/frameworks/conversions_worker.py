"""Property checks of TensorSpec <-> one framework's layout forms, against the framework itself.

Usage: python conversions_worker.py {jax|torch|tensorflow} N_EXAMPLES. Random TensorSpecs
(tests/interchange/strategies.py); for each, the framework form either round-trips and places
every device's block where TensorSpec.boxes() says (the framework's own sharding arithmetic or
data), or is refused with UnsupportedLayoutError for exactly the features the form lacks.
"""

from __future__ import annotations

import math
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
import numpy as np
from hypothesis import HealthCheck, given, settings
from strategies import specs

import layoutcore as lc
from layoutcore import TensorSpec

framework, examples = sys.argv[1], int(sys.argv[2])
checked = {"converted": 0, "refused": 0}


def boxes_of(spec: TensorSpec) -> list[tuple[tuple[int, ...], tuple[int, ...]]]:
    return [(tuple(o), tuple(s)) for o, s in spec.boxes()]


def multi(spec: TensorSpec) -> bool:
    return any(isinstance(a, tuple) and len(a) > 1 for a in spec.layout.axes)


def check_jax(spec: TensorSpec) -> None:
    from layoutcore_jax._interchange import spec_from_jax, to_shape_dtype_struct
    from orbax.checkpoint._src.metadata.sharding import NamedShardingMetadata

    from layoutcore.checkpoint._foreign._orbax import layout_from_orbax_sharding, orbax_sharding_entry

    if not spec.layout.is_even(spec.shape):
        try:
            to_shape_dtype_struct(spec)
        except lc.UnsupportedLayoutError as err:
            assert err.feature == "uneven"
            checked["refused"] += 1
            return
        raise AssertionError(f"uneven {spec} was not refused")
    sds = to_shape_dtype_struct(spec)
    assert sds.shape == spec.shape and str(sds.dtype) == spec.dtype
    index_map = sds.sharding.devices_indices_map(spec.shape)
    devices = list(sds.sharding.mesh.devices.flat)  # row-major mesh order
    for device, (off, size) in zip(devices, boxes_of(spec), strict=True):
        got = tuple(sl.indices(d)[:2] for sl, d in zip(index_map[device], spec.shape, strict=True))
        assert got == tuple((o, o + s) for o, s in zip(off, size, strict=True)), (spec, device, got)
    back = spec_from_jax(sds)
    assert back.shape == spec.shape and back.dtype == spec.dtype and back.layout.axes == spec.layout.axes
    assert back.layout.mesh.shape == spec.mesh.shape and back.layout.mesh.axis_names == spec.mesh.axis_names
    # Orbax's own reader of the _sharding entry gives the same NamedSharding
    entry = orbax_sharding_entry(spec.layout)
    native = NamedShardingMetadata.from_deserialized_dict(entry).to_jax_sharding()
    assert native.devices_indices_map(spec.shape) == index_map
    assert layout_from_orbax_sharding(entry) == spec.layout
    checked["converted"] += 1


def check_torch(spec: TensorSpec) -> None:
    import torch
    from layoutcore_torch._interchange import layout_from_torch, spec_from_dtensor, to_placements
    from torch.distributed._local_tensor import LocalTensor, LocalTensorMode
    from torch.distributed.tensor import DeviceMesh, distribute_tensor

    uneven_multi = any(
        isinstance(a, tuple) and len(a) > 1 and spec.shape[d] % spec.layout.num_shards(d)
        for d, a in enumerate(spec.layout.axes)
    )
    try:
        placements = to_placements(spec)
    except lc.UnsupportedLayoutError as err:
        assert uneven_multi and err.feature == "uneven_multi_axis", (spec, err)
        checked["refused"] += 1
        return
    assert not uneven_multi, spec
    back_layout = layout_from_torch(placements, spec.mesh, len(spec.shape))
    # orders that differ only by size-1 mesh axes are the same placements: back in mesh order, same blocks
    assert back_layout == spec.layout or TensorSpec(spec.shape, spec.dtype, back_layout).boxes() == spec.boxes()
    n = spec.mesh.size
    g = np.arange(math.prod(spec.shape), dtype=np.float32).reshape(spec.shape)
    with LocalTensorMode(n):
        dm = DeviceMesh("cpu", torch.arange(n).reshape(spec.mesh.shape), mesh_dim_names=spec.mesh.axis_names)
        full = LocalTensor({r: torch.from_numpy(g.copy()) for r in range(n)})  # made inside the mode (strided bug)
        dt = distribute_tensor(full, dm, list(placements))
        local = dt.to_local()
        for r, (off, size) in enumerate(boxes_of(spec)):
            want = g[tuple(slice(o, o + s) for o, s in zip(off, size, strict=True))]
            got = local._local_tensors[r].numpy()
            assert got.shape == want.shape and np.array_equal(got, want), (spec, r, placements)
        back = spec_from_dtensor(dt, spec.mesh)
    assert back.layout == back_layout and back.shape == spec.shape
    checked["converted"] += 1


def check_tensorflow(spec: TensorSpec) -> None:
    from layoutcore_tensorflow._interchange import spec_from_layout_string, to_layout_string

    try:
        text = to_layout_string(spec)
    except lc.UnsupportedLayoutError as err:
        assert multi(spec) and err.feature == "multi_axis", (spec, err)
        checked["refused"] += 1
        return
    assert not multi(spec)
    back = spec_from_layout_string(text, spec.shape, spec.dtype)
    assert back.layout.axes == spec.layout.axes and back.layout.mesh.shape == spec.mesh.shape
    assert text == back.layout.to_string()  # TF's own text of the layout it parsed
    if spec.layout.is_even(spec.shape):  # TF's data placement: the driver packs via TF's own calls
        g = np.arange(math.prod(spec.shape), dtype=np.float32).reshape(spec.shape)
        t = lc.distribute_tensor(g, spec.layout, driver="tensorflow")
        import tensorflow as tf
        from tensorflow.experimental import dtensor

        assert dtensor.fetch_layout(t).to_string() == text
        for comp, (off, size) in zip(dtensor.unpack(t), boxes_of(spec), strict=True):
            want = g[tuple(slice(o, o + s) for o, s in zip(off, size, strict=True))]
            assert np.array_equal(tf.convert_to_tensor(comp).numpy(), want)
    checked["converted"] += 1


check = {"jax": check_jax, "torch": check_torch, "tensorflow": check_tensorflow}[framework]
if framework == "jax":
    import jax

    jax.config.update("jax_enable_x64", True)
if framework == "torch":
    import torch.distributed as dist
    from torch.testing._internal.distributed.fake_pg import FakeStore

    dist.init_process_group("fake", store=FakeStore(), rank=0, world_size=8)


@settings(max_examples=examples, deadline=None, derandomize=True, suppress_health_check=list(HealthCheck))
@given(specs())
def run(spec: TensorSpec) -> None:
    assert TensorSpec.from_json(spec.to_json()) == spec
    check(spec)


run()
assert checked["converted"] > examples // 4, checked  # the property exercised real conversions
if framework == "torch":  # every order of 2 and 3 mesh axes on one tensor axis, _StridedShard included
    import itertools

    for mesh_shape in ((3, 2, 1), (2, 2, 2), (1, 3, 2)):
        mesh = lc.Mesh(mesh_shape, ("a", "b", "c"))
        for k in (2, 3):
            for order in itertools.permutations(("a", "b", "c"), k):
                n = math.prod(mesh.axis_size(a) for a in order)
                check_torch(TensorSpec((2 * n, 3), "float32", lc.Layout((order, None), mesh)))
print("OK", framework, checked)
