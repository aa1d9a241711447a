"""Mesh/Layout <-> dtensor.Mesh/Layout, the seed's proto forms, and strings byte-identical to TF's."""

from __future__ import annotations

import layoutcore_tensorflow as lctf
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from layoutcore_tensorflow import TensorFlowDriver
from tensorflow.experimental import dtensor

import layoutcore as lc

U = dtensor.UNSHARDED
NAMES = ["x", "y", "batch", "model", "a_1", "Z"]


@st.composite
def tf_meshes(draw: st.DrawFn) -> tuple[list[tuple[str, int]], list[str], str]:
    """(mesh_dims, short device names, mesh name) of a mesh over at most 8 of the 8 logical CPUs."""
    ndim = draw(st.integers(1, 3))
    names = draw(st.lists(st.sampled_from(NAMES), min_size=ndim, max_size=ndim, unique=True))
    sizes = [draw(st.sampled_from([1, 2, 4])) for _ in range(ndim)]
    while int(np.prod(sizes)) > 8:
        sizes[sizes.index(max(sizes))] //= 2
    size = int(np.prod(sizes))
    devices = draw(st.permutations([f"CPU:{i}" for i in range(8)]))[:size]
    name = draw(st.sampled_from(["", "mesh1", "my_mesh"]))
    return list(zip(names, sizes, strict=True)), devices, name


@st.composite
def tf_layouts(draw: st.DrawFn) -> tuple[tuple[list[tuple[str, int]], list[str], str], list[str]]:
    dims, devices, name = draw(tf_meshes())
    rank = draw(st.integers(0, 3))
    pool = [n for n, _ in dims]
    specs = []
    for _ in range(rank):
        choice = draw(st.sampled_from([U, *pool]))
        if choice != U:
            pool.remove(choice)
        specs.append(choice)
    return (dims, devices, name), specs


@settings(suppress_health_check=[HealthCheck.function_scoped_fixture])  # the driver is stateless here
@given(tf_layouts())
def test_strings_byte_identical_to_tf(driver: TensorFlowDriver, case: tuple) -> None:
    (dims, devices, name), specs = case
    # Both sides built by their own constructors: TF's text is the reference.
    native = dtensor.Layout(specs, dtensor.create_mesh(dims, devices=devices, mesh_name=name))
    ours = lc.Layout(specs, lc.create_mesh(dims, devices, name=name))
    assert ours.to_string() == native.to_string()
    assert ours.mesh is not None and ours.mesh.to_string() == native.mesh.to_string()
    assert lc.Layout.from_string(native.to_string()) == ours
    assert dtensor.Layout.from_string(ours.to_string()) == native
    # The conversions agree with both.
    assert lctf.to_tensorflow_layout(ours) == native
    assert lctf.from_tensorflow_layout(native) == ours
    assert lctf.to_tensorflow_mesh(ours.mesh) == native.mesh
    assert lctf.from_tensorflow_mesh(native.mesh) == ours.mesh


@settings(suppress_health_check=[HealthCheck.function_scoped_fixture])  # the driver is stateless here
@given(tf_layouts())
def test_proto_forms_round_trip_through_tf(driver: TensorFlowDriver, case: tuple) -> None:
    (dims, devices, name), specs = case
    native = dtensor.Layout(specs, dtensor.create_mesh(dims, devices=devices, mesh_name=name))
    ours = lc.Layout(specs, lc.create_mesh(dims, devices, name=name))
    assert lctf.as_proto(ours) == native.as_proto()
    assert lctf.serialized_string(ours) == native.as_proto().SerializeToString()
    assert lctf.mesh_proto(ours) == native.mesh.as_proto()
    assert ours.mesh is not None and lctf.as_proto(ours.mesh) == native.mesh.as_proto()
    assert lctf.from_str(native.as_proto().SerializeToString()) == ours
    assert lctf.from_str(lctf.serialized_string(ours)) == ours
    assert dtensor.Layout.from_proto(lctf.as_proto(ours)) == native
    assert lctf.from_proto(native.as_proto()) == ours
    assert lctf.from_proto(native.mesh.as_proto()) == ours.mesh


def test_tf_layout_helpers_give_the_same_strings(driver: TensorFlowDriver, mesh32: lc.Mesh) -> None:
    native_mesh = lctf.to_tensorflow_mesh(mesh32)
    assert native_mesh == dtensor.create_mesh([("x", 3), ("y", 2)], devices=[f"CPU:{i}" for i in range(6)])
    pairs = [
        (lc.Layout.batch_sharded(mesh32, "x", 3), dtensor.Layout.batch_sharded(native_mesh, "x", rank=3)),
        (
            lc.Layout.batch_sharded(mesh32, "y", 3, axis=1),
            dtensor.Layout.batch_sharded(native_mesh, "y", rank=3, axis=1),
        ),
        (lc.Layout.inner_sharded(mesh32, "y", 3), dtensor.Layout.inner_sharded(native_mesh, "y", rank=3)),
        (lc.Layout.replicated(mesh32, 3), dtensor.Layout.replicated(native_mesh, rank=3)),
        (lc.Layout.replicated(mesh32, 0), dtensor.Layout.replicated(native_mesh, rank=0)),
        (lc.Layout(["x", "y", None], mesh32).delete([1]), dtensor.Layout(["x", "y", U], native_mesh).delete([1])),
    ]
    for ours, native in pairs:
        assert ours.to_string() == native.to_string()
        assert lctf.to_tensorflow_layout(ours) == native
        assert lctf.from_tensorflow_layout(native) == ours
        assert ours.offset_to_shard() == [tuple(t) for t in native.offset_to_shard()]
        assert [ours.num_shards(d) for d in range(ours.rank)] == [native.num_shards(d) for d in range(native.rank)]


def test_abstract_mesh_binds_to_the_drivers_devices(driver: TensorFlowDriver) -> None:
    mesh = lc.Mesh((4, 2), ("x", "y"))
    native = lctf.to_tensorflow_mesh(mesh)
    assert native.to_string() == mesh.to_string()
    assert lctf.from_tensorflow_mesh(native) == mesh.with_devices(driver.list_devices())


def test_what_layoutcore_cannot_represent_is_refused(driver: TensorFlowDriver, mesh32: lc.Mesh) -> None:
    native_mesh = lctf.to_tensorflow_mesh(mesh32)
    with pytest.raises(lc.UnsupportedLayoutError) as info:
        lctf.to_tensorflow_layout(lc.Layout([("x", "y")], mesh32))
    assert info.value.feature == "multi_axis"
    refused = {
        "single-device layout": dtensor.Layout.from_device("/job:localhost/replica:0/task:0/device:CPU:0"),
        "parted layout": dtensor.Layout(["x", U], native_mesh).to_parted(),
        "match token": dtensor.Layout([dtensor.MATCH, U], native_mesh),
        "remote mesh": dtensor.Mesh.from_string("|x=3,y=2|0,1,2,3,4,5||"),
        "single-device mesh": dtensor.Mesh.from_string("/job:localhost/replica:0/task:0/device:CPU:0"),
        "not a mesh": "|x=3|0,1,2|0,1,2|CPU:0",
    }
    for what, native in refused.items():
        convert = (
            lctf.from_tensorflow_mesh if what.endswith("mesh") or what == "not a mesh" else lctf.from_tensorflow_layout
        )
        with pytest.raises(lc.LayoutError):
            convert(native)
    with pytest.raises(lc.LayoutError, match="LayoutProto"):
        lctf.from_str(b"\xff\x00 not a proto")
    with pytest.raises(lc.LayoutError):
        lctf.from_str("sharding_specs:x, mesh:...")  # text, not bytes
    with pytest.raises(lc.LayoutError):
        lctf.to_tensorflow_layout(lc.Layout(["x", None]))  # no mesh
