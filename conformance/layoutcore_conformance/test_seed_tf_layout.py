"""Seed: ``tf.experimental.dtensor.Layout`` methods on the 3x2 mesh, with the values TensorFlow
2.21 returned (docs/framework-facts.md#tf-layout-strings, #tf-layout-helpers and #size-one-axes), strings byte for byte; plus the calls where layoutcore
deliberately differs (TF silently ignores or crashes, layoutcore raises ``LayoutError``).

These are values, not data, but they run under every driver: a driver package must not be
able to break them (e.g. by patching the core), and the suite is the one place a third party
runs.
"""

from __future__ import annotations

from typing import Any

import pytest

import layoutcore as lc
from layoutcore import UNSHARDED as U

DEVICES = [f"CPU:{i}" for i in range(6)]
MESH = "|x=3,y=2|0,1,2,3,4,5|0,1,2,3,4,5|" + ",".join(
    f"/job:localhost/replica:0/task:0/device:CPU:{i}" for i in range(6)
)


@pytest.fixture(scope="module")
def mesh() -> lc.Mesh:
    return lc.create_mesh([("x", 3), ("y", 2)], devices=DEVICES)


def test_helpers_strings(mesh: lc.Mesh) -> None:
    assert (
        lc.Layout.batch_sharded(mesh, "x", rank=3).to_string() == "sharding_specs:x,unsharded,unsharded, mesh:" + MESH
    )
    assert lc.Layout.batch_sharded(mesh, "y", rank=3, axis=1).to_string() == (
        "sharding_specs:unsharded,y,unsharded, mesh:" + MESH
    )
    assert (
        lc.Layout.inner_sharded(mesh, "y", rank=3).to_string() == "sharding_specs:unsharded,unsharded,y, mesh:" + MESH
    )
    assert lc.Layout.replicated(mesh, rank=3).to_string() == (
        "sharding_specs:unsharded,unsharded,unsharded, mesh:" + MESH
    )
    assert lc.Layout.replicated(mesh, rank=0).to_string() == "sharding_specs: mesh:" + MESH


@pytest.mark.parametrize(
    ("spec", "text"),
    [
        (["x", U], "sharding_specs:x,unsharded, mesh:"),
        ([U, "y"], "sharding_specs:unsharded,y, mesh:"),
        (["y", "x"], "sharding_specs:y,x, mesh:"),
        (["x", "y"], "sharding_specs:x,y, mesh:"),
        ([U, U], "sharding_specs:unsharded,unsharded, mesh:"),
        ([], "sharding_specs: mesh:"),
    ],
)
def test_to_string_from_string(mesh: lc.Mesh, spec: list[str], text: str) -> None:
    layout = lc.Layout(spec, mesh)
    assert layout.to_string() == text + MESH
    parsed = lc.Layout.from_string(text + MESH)
    assert parsed == layout
    assert hash(parsed) == hash(layout)
    assert parsed.to_string() == text + MESH


def test_delete(mesh: lc.Mesh) -> None:
    layout = lc.Layout(["x", "y", U], mesh)
    assert layout.delete([1]).to_string() == "sharding_specs:x,unsharded, mesh:" + MESH
    assert layout.delete(0).to_string() == "sharding_specs:y,unsharded, mesh:" + MESH
    assert layout.delete([0, 2]).to_string() == "sharding_specs:y, mesh:" + MESH
    assert layout.to_string() == "sharding_specs:x,y,unsharded, mesh:" + MESH  # never mutated


@pytest.mark.parametrize("dims", [[5], [-1], 3, [0, 7]], ids=str)
def test_delete_out_of_range_raises(mesh: lc.Mesh, dims: Any) -> None:
    # Deliberate divergence: TF returns the layout unchanged; a typo'd dim should not pass silently.
    with pytest.raises(lc.LayoutError) as info:
        lc.Layout(["x", "y", U], mesh).delete(dims)
    assert isinstance(info.value, ValueError)
    bad = [d for d in ([dims] if isinstance(dims, int) else dims) if not 0 <= d < 3]
    assert repr(bad[0]) in str(info.value)


# (num_shards per dim, is_fully_replicated, offset_to_shard, global index of each offset tuple)
HELPER_VALUES: dict[str, tuple[list[str], list[int], bool, list[tuple[int, ...]], list[int]]] = {
    "x,unsharded": (["x", U], [3, 1], False, [(0, 0), (0, 0), (1, 0), (1, 0), (2, 0), (2, 0)], [0, 0, 1, 1, 2, 2]),
    "unsharded,y": ([U, "y"], [1, 2], False, [(0, 0), (0, 1), (0, 0), (0, 1), (0, 0), (0, 1)], [0, 1, 0, 1, 0, 1]),
    "y,x": (["y", "x"], [2, 3], False, [(0, 0), (1, 0), (0, 1), (1, 1), (0, 2), (1, 2)], [0, 3, 1, 4, 2, 5]),
    "x,y": (["x", "y"], [3, 2], False, [(0, 0), (0, 1), (1, 0), (1, 1), (2, 0), (2, 1)], [0, 1, 2, 3, 4, 5]),
    "unsharded,unsharded": ([U, U], [1, 1], True, [(0, 0)] * 6, [0] * 6),
}


@pytest.mark.parametrize("name", list(HELPER_VALUES))
def test_helper_values(mesh: lc.Mesh, name: str) -> None:
    spec, shards, replicated, offsets, indices = HELPER_VALUES[name]
    layout = lc.Layout(spec, mesh)
    assert [layout.num_shards(d) for d in range(layout.rank)] == shards
    assert layout.is_fully_replicated() is replicated
    assert [tuple(t) for t in layout.offset_to_shard()] == offsets
    assert [layout.offset_tuple_to_global_index(t) for t in layout.offset_to_shard()] == indices


def test_equality(mesh: lc.Mesh) -> None:
    assert lc.Layout(["x", U], mesh) == lc.Layout.batch_sharded(mesh, "x", 2)
    assert lc.Layout([U, U], mesh) == lc.Layout.replicated(mesh, 2)
    assert hash(lc.Layout(["x", U], mesh)) == hash(lc.Layout.batch_sharded(mesh, "x", 2))
    assert lc.Layout([], mesh).is_fully_replicated() is True
    # Equality includes the mesh: its name and its device order.
    renamed = lc.create_mesh([("x", 3), ("y", 2)], devices=DEVICES, mesh_name="other")
    reordered = lc.create_mesh([("x", 3), ("y", 2)], devices=DEVICES[::-1])
    assert lc.Layout(["x", U], mesh) != lc.Layout(["x", U], renamed)
    assert lc.Layout(["x", U], mesh) != lc.Layout(["x", U], reordered)
    # Unlike TF (TypeError), comparing with another type is simply unequal.
    assert lc.Layout(["x", U], mesh) != "sharding_specs:x,unsharded, mesh:" + MESH  # type: ignore[comparison-overlap]  # the comparison is the test
    assert lc.Layout(["x", U], mesh) != None  # noqa: E711


def test_mesh_properties(mesh: lc.Mesh) -> None:
    assert mesh.to_string() == MESH
    assert lc.create_mesh([("x", 3), ("y", 2)], devices=DEVICES, mesh_name="my_mesh").to_string() == "my_mesh" + MESH
    assert mesh.dim_names == ["x", "y"]
    assert mesh.shape == (3, 2)
    assert mesh.size == 6
    assert lc.create_mesh([("x", 1)], devices=["CPU:0"]).to_string() == (
        "|x=1|0|0|/job:localhost/replica:0/task:0/device:CPU:0"
    )


@pytest.mark.parametrize(
    "call",
    [
        pytest.param(lambda m: lc.Layout.batch_sharded(m, "x", rank=2, axis=5), id="batch_sharded-axis5"),
        pytest.param(lambda m: lc.Layout.batch_sharded(m, "x", rank=2, axis=-1), id="batch_sharded-axis-1"),
        pytest.param(lambda m: lc.Layout.batch_sharded(m, "x", rank=0), id="batch_sharded-rank0"),
        pytest.param(lambda m: lc.Layout.inner_sharded(m, "y", rank=0), id="inner_sharded-rank0"),
        pytest.param(lambda m: lc.Layout(["x", U], m).num_shards(5), id="num_shards5"),
        pytest.param(lambda m: lc.Layout(["x", U], m).num_shards(-1), id="num_shards-1"),
        pytest.param(lambda m: lc.Layout.batch_sharded(m, "z", rank=2), id="batch_sharded-unknown-axis"),
    ],
)
def test_calls_that_crash_tf_raise(mesh: lc.Mesh, call: Any) -> None:
    # TF segfaults or raises RuntimeError/garbage on these (docs/framework-facts.md#tf-crash-traps); layoutcore raises LayoutError.
    with pytest.raises(lc.LayoutError):
        call(mesh)
