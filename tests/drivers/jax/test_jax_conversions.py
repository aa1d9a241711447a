"""Public conversions Layout <-> PartitionSpec / NamedSharding and Mesh <-> jax.sharding.Mesh."""

from __future__ import annotations

import jax
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from jax.sharding import AbstractMesh, AxisType, NamedSharding, PartitionSpec, SingleDeviceSharding
from layoutcore_jax import (
    SINGLE_DEVICE_AXIS,
    from_jax_mesh,
    from_jax_sharding,
    from_named_sharding,
    from_partition_spec,
    to_jax_mesh,
    to_named_sharding,
    to_partition_spec,
)

import layoutcore as lc
from layoutcore import Layout, Mesh

NAMES = ("x", "y", "z")


@st.composite
def meshes(draw: st.DrawFn) -> Mesh:
    """Meshes of rank <= 3 over <= 8 devices, abstract or over a permutation of the devices."""
    shape = draw(st.sampled_from([(8,), (4, 2), (2, 4), (3, 2), (2, 2, 2), (1, 4), (2, 1, 3)]))
    names = NAMES[: len(shape)]
    size = int(np.prod(shape))
    if draw(st.booleans()):
        return Mesh(shape, names)
    order = draw(st.permutations(range(8)))[:size]
    return Mesh(shape, names, [f"CPU:{i}" for i in order])


@st.composite
def layouts(draw: st.DrawFn) -> Layout:
    mesh = draw(meshes())
    rank = draw(st.integers(0, 3))
    free = list(mesh.axis_names)
    axes: list[object] = []
    for _ in range(rank):
        k = draw(st.integers(0, min(2, len(free))))
        picked = draw(st.permutations(free))[:k] if k else []
        free = [n for n in free if n not in picked]
        axes.append(None if not picked else picked[0] if len(picked) == 1 else tuple(picked))
    return Layout(axes, mesh)


@given(layouts())
def test_layout_partition_spec_round_trip(layout: Layout) -> None:
    spec = to_partition_spec(layout)
    assert isinstance(spec, PartitionSpec) and len(spec) == layout.rank
    assert from_partition_spec(spec, layout.mesh) == layout


@given(layouts())
def test_layout_named_sharding_round_trip(layout: Layout) -> None:
    sharding = to_named_sharding(layout)
    assert isinstance(sharding, NamedSharding)
    assert sharding.mesh.axis_types == (AxisType.Auto,) * len(sharding.mesh.axis_names)
    back = from_named_sharding(sharding, layout.rank)
    assert back.axes == layout.axes
    assert back.mesh == (
        layout.mesh if layout.mesh.devices is not None else layout.mesh.with_devices(back.mesh.devices)
    )
    # The sharding places the same blocks on the same devices as layoutcore's shard math.
    shape = tuple(layout.num_shards(d) * 2 for d in range(layout.rank))
    by_device = {f"CPU:{d.id}": idx for d, idx in sharding.devices_indices_map(shape).items()}
    for device, want in zip(back.mesh.devices, layout.device_slices(shape), strict=True):
        got = by_device[device]
        assert [slice(*s.indices(shape[i])) for i, s in enumerate(got)] == [
            slice(*w.indices(shape[i])) for i, w in enumerate(want)
        ]


@given(meshes())
def test_mesh_round_trip(mesh: Mesh) -> None:
    native = to_jax_mesh(mesh)
    assert native.axis_names == mesh.axis_names and native.devices.shape == mesh.shape
    back = from_jax_mesh(native)
    if mesh.devices is not None:
        assert back == mesh
        assert [f"CPU:{d.id}" for d in native.devices.flat] == list(mesh.devices)
    else:
        assert back == mesh.with_devices(lc.list_devices(driver="jax")[: mesh.size])
    assert to_jax_mesh(back) == native
    assert from_jax_mesh(native, name="m").name == "m"


def test_jax_made_meshes_convert_whatever_their_axis_types() -> None:
    for kind in (AxisType.Auto, AxisType.Explicit):
        native = jax.make_mesh((4, 2), ("data", "model"), axis_types=(kind, kind))
        mesh = from_jax_mesh(native)
        assert mesh.shape == (4, 2) and mesh.axis_names == ("data", "model")
        assert mesh.devices == tuple(f"CPU:{d.id}" for d in native.devices.flat)
        assert to_jax_mesh(mesh, axis_types="explicit" if kind == AxisType.Explicit else "auto") == native
    abstract = AbstractMesh((3, 2), ("x", "y"))
    assert from_jax_mesh(abstract) == Mesh((3, 2), ("x", "y"))


def test_partition_spec_shorter_than_the_rank_is_padded() -> None:
    mesh = Mesh((3, 2), ("x", "y"))
    assert from_partition_spec(PartitionSpec("x"), mesh, ndim=3) == Layout(("x", None, None), mesh)
    with pytest.raises(lc.LayoutError, match="more than the tensor's rank 1"):
        from_partition_spec(PartitionSpec("x", "y"), mesh, ndim=1)


def test_what_layoutcore_cannot_represent_raises_clearly() -> None:
    mesh = Mesh((3, 2), ("x", "y"))
    with pytest.raises(lc.LayoutError, match="UNCONSTRAINED"):
        from_partition_spec(PartitionSpec(PartitionSpec.UNCONSTRAINED, None), mesh)
    with pytest.raises(lc.LayoutError, match="unreduced"):
        from_partition_spec(PartitionSpec("x", unreduced={"y"}), mesh)
    with pytest.raises(lc.LayoutError, match="shards both tensor axis 0 and tensor axis 1"):
        from_partition_spec(PartitionSpec("x", "x"), mesh)
    bad_names = jax.sharding.Mesh(np.array(jax.devices()[:2]), ("a b",))
    with pytest.raises(lc.LayoutError, match="'a b'"):
        from_jax_mesh(bad_names)
    with pytest.raises(lc.LayoutError, match=r"Expected a jax\.sharding\.Mesh"):
        from_jax_mesh("x=3")

    class OddSharding:
        pass

    with pytest.raises(lc.LayoutError, match="OddSharding has no layoutcore layout"):
        from_jax_sharding(OddSharding(), 2)


def test_single_device_sharding_converts_to_a_one_device_mesh() -> None:
    device = jax.devices()[3]
    layout = from_jax_sharding(SingleDeviceSharding(device), 2)
    assert layout == Layout((None, None), Mesh((1,), (SINGLE_DEVICE_AXIS,), ["CPU:3"]))
    # and it places data exactly as the single-device sharding does
    x = np.arange(6.0).reshape(2, 3)
    placed = jax.device_put(x, to_named_sharding(layout))
    assert placed.devices() == {device}
    np.testing.assert_array_equal(np.asarray(placed), x)


def test_conversions_refuse_other_types() -> None:
    with pytest.raises(lc.LayoutError, match="expects a layoutcore Layout"):
        to_partition_spec(("x", None))  # type: ignore[arg-type]
    with pytest.raises(lc.LayoutError, match="has no mesh"):
        to_named_sharding(Layout(("x",)))
    with pytest.raises(lc.LayoutError, match="expects a layoutcore Mesh"):
        to_jax_mesh(jax.make_mesh((2,), ("x",)))  # type: ignore[arg-type]
    with pytest.raises(lc.LayoutError, match="devices"):
        to_jax_mesh(Mesh((2,), ("x",), ["CPU:0", "CPU:99"]))
