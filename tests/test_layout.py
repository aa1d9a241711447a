"""Layout: canonical axes, validation, TF DTensor strings and helper values (docs/framework-facts.md#tf-layout-strings, #tf-layout-helpers and #size-one-axes),
and the shard geometry it exposes (docs/framework-facts.md#shard-order, #uneven-dimensions and #multi-axis)."""

from __future__ import annotations

import dataclasses
import pickle

import numpy as np
import pytest
from _support import DEVICES6, FULL
from hypothesis import given
from hypothesis import strategies as st
from layoutcore_conformance.facts import CHUNKS, MEASURED_6x6, bounds

import layoutcore
from layoutcore import UNSHARDED, Layout, LayoutError, Mesh, TensorLayout, UnsupportedLayoutError

U = UNSHARDED
MESH_STRING = "|x=3,y=2|0,1,2,3,4,5|0,1,2,3,4,5|" + ",".join(FULL(i) for i in range(6))


# -- TF strings, byte for byte (docs/framework-facts.md#tf-layout-strings) -------------------------
@pytest.mark.parametrize(
    ("specs", "head"),
    [
        (["x", U], "sharding_specs:x,unsharded,"),
        ([U, "y"], "sharding_specs:unsharded,y,"),
        (["y", "x"], "sharding_specs:y,x,"),
        (["x", "y"], "sharding_specs:x,y,"),
        ([U, U], "sharding_specs:unsharded,unsharded,"),
        ([], "sharding_specs:"),
    ],
)
def test_to_string_matches_tf(mesh: Mesh, specs: list[str], head: str) -> None:
    layout = Layout(specs, mesh)
    assert layout.to_string() == f"{head} mesh:{MESH_STRING}"
    back = Layout.from_string(layout.to_string())
    assert back == layout and back.to_string() == layout.to_string()


def test_rank0_string_has_no_comma(mesh: Mesh) -> None:
    assert Layout([], mesh).to_string() == "sharding_specs: mesh:" + MESH_STRING


def test_exact_1d_string() -> None:
    mesh = Mesh((3,), ("x",), DEVICES6[:3])
    assert Layout(["x", U], mesh).to_string() == (
        f"sharding_specs:x,unsharded, mesh:|x=3|0,1,2|0,1,2|{FULL(0)},{FULL(1)},{FULL(2)}"
    )


def test_one_device_mesh_layout_string() -> None:
    mesh = Mesh((1,), ("x",), ["CPU:0"])
    assert Layout(["x"], mesh).to_string() == f"sharding_specs:x, mesh:|x=1|0|0|{FULL(0)}"


def test_from_string_remote_and_generator_meshes_are_abstract() -> None:
    remote = Layout.from_string("sharding_specs:x,unsharded, mesh:|x=3,y=2|0,1,2,3,4,5||")
    assert remote == Layout(["x", None], Mesh((3, 2), ("x", "y")))
    assert Layout.from_string("sharding_specs:x, mesh:|x=2|*CPU") == Layout(["x"], Mesh((2,), ("x",)))


@pytest.mark.parametrize(
    ("text", "why"),
    [
        ("sharding_specs:x,unsharded,mesh:" + MESH_STRING, "no space before mesh:"),
        ("sharding_specs:none,unsharded, mesh:" + MESH_STRING, "'none' is no mesh axis"),
        ("sharding_specs:z,unsharded, mesh:" + MESH_STRING, "unknown axis"),
        ("sharding_specs:, mesh:" + MESH_STRING, "rank 0 is 'sharding_specs: mesh:'"),
        ("sharding_specs:x,x, mesh:" + MESH_STRING, "axis used twice"),
        ("sharding_specs:match,unsharded, mesh:" + MESH_STRING, "TF's match placeholder"),
        ("sharding_specs:x,unsharded mesh:" + MESH_STRING, "no trailing comma"),
        ("maximal:true, mesh:" + FULL(0), "single-device layout"),
        ("parted:x,unsharded, mesh:" + MESH_STRING, "parted layout"),
        ("", "empty"),
    ],
)
def test_from_string_rejects(text: str, why: str) -> None:
    with pytest.raises(LayoutError):
        Layout.from_string(text)


def test_from_string_names_the_text() -> None:
    with pytest.raises(LayoutError, match="parted:x"):
        Layout.from_string("parted:x,unsharded, mesh:" + MESH_STRING)


# -- helpers: TF's values on the 3x2 mesh (docs/framework-facts.md#tf-layout-helpers) --------------
def test_helper_constructors_match_tf_strings(mesh: Mesh) -> None:
    tail = " mesh:" + MESH_STRING
    assert Layout.batch_sharded(mesh, "x", rank=3).to_string() == "sharding_specs:x,unsharded,unsharded," + tail
    assert Layout.batch_sharded(mesh, "y", rank=3, axis=1).to_string() == "sharding_specs:unsharded,y,unsharded," + tail
    assert Layout.inner_sharded(mesh, "y", rank=3).to_string() == "sharding_specs:unsharded,unsharded,y," + tail
    assert Layout.replicated(mesh, rank=3).to_string() == "sharding_specs:unsharded,unsharded,unsharded," + tail
    assert Layout.replicated(mesh, rank=0).to_string() == "sharding_specs:" + tail


def test_delete_matches_tf(mesh: Mesh) -> None:
    layout = Layout(["x", "y", U], mesh)
    assert layout.delete([1]).to_string().startswith("sharding_specs:x,unsharded, mesh:")
    assert layout.delete(0).to_string().startswith("sharding_specs:y,unsharded, mesh:")
    assert layout.delete([0, 2]).to_string().startswith("sharding_specs:y, mesh:")
    assert layout.delete([0, 2]).mesh == mesh


@pytest.mark.parametrize("dims", [[5], [-1], 3, [True]])
def test_delete_out_of_range_raises_where_tf_ignores(mesh: Mesh, dims: object) -> None:
    with pytest.raises(LayoutError, match="delete"):
        Layout(["x", "y", U], mesh).delete(dims)  # type: ignore[arg-type]


# docs/framework-facts.md#tf-layout-helpers: num_shards, is_fully_replicated, offset_to_shard, offset_tuple_to_global_index.
TF_HELPER_TABLE = [
    (["x", U], [3, 1], False, [(0, 0), (0, 0), (1, 0), (1, 0), (2, 0), (2, 0)], [0, 0, 1, 1, 2, 2]),
    ([U, "y"], [1, 2], False, [(0, 0), (0, 1), (0, 0), (0, 1), (0, 0), (0, 1)], [0, 1, 0, 1, 0, 1]),
    (["y", "x"], [2, 3], False, [(0, 0), (1, 0), (0, 1), (1, 1), (0, 2), (1, 2)], [0, 3, 1, 4, 2, 5]),
    (["x", "y"], [3, 2], False, [(0, 0), (0, 1), (1, 0), (1, 1), (2, 0), (2, 1)], [0, 1, 2, 3, 4, 5]),
    ([U, U], [1, 1], True, [(0, 0)] * 6, [0] * 6),
]


@pytest.mark.parametrize(("specs", "shards", "replicated", "offsets", "global_index"), TF_HELPER_TABLE)
def test_helper_values_match_tf(
    mesh: Mesh,
    specs: list[str],
    shards: list[int],
    replicated: bool,
    offsets: list[tuple[int, int]],
    global_index: list[int],
) -> None:
    layout = Layout(specs, mesh)
    assert [layout.num_shards(d) for d in range(2)] == shards
    assert layout.is_fully_replicated() is replicated
    assert layout.offset_to_shard() == offsets
    assert [layout.offset_tuple_to_global_index(t) for t in offsets] == global_index


def test_batch_sharded_equals_layout_and_replicated_equals_unsharded(mesh: Mesh) -> None:
    assert Layout(["x", U], mesh) == Layout.batch_sharded(mesh, "x", 2)
    assert Layout([U, U], mesh) == Layout.replicated(mesh, 2)


@pytest.mark.parametrize(
    "call",
    [
        lambda m: Layout.batch_sharded(m, "x", rank=2, axis=5),  # TF segfaults
        lambda m: Layout.batch_sharded(m, "x", rank=2, axis=-1),  # TF segfaults
        lambda m: Layout.batch_sharded(m, "x", rank=0),  # TF segfaults
        lambda m: Layout.inner_sharded(m, "y", rank=0),  # TF segfaults
        lambda m: Layout.batch_sharded(m, "z", rank=2),  # TF: RuntimeError
        lambda m: Layout.replicated(m, rank=-1),
        lambda m: Layout(["x", U], m).num_shards(5),  # TF: ValueError basic_string::_M_create
        lambda m: Layout(["x", U], m).num_shards(-1),
        lambda m: Layout(["x", U], m).offset_tuple_to_global_index((3, 0)),
        lambda m: Layout(["x", U], m).offset_tuple_to_global_index((0,)),
    ],
)
def test_helpers_raise_where_tf_crashes(mesh: Mesh, call: object) -> None:
    with pytest.raises(LayoutError):
        call(mesh)  # type: ignore[operator]


def test_is_fully_replicated_edge_cases() -> None:
    assert Layout([]).is_fully_replicated()
    # As TF (docs/framework-facts.md#size-one-axes): sharding over a size-1 mesh axis still counts as sharded.
    assert not Layout(["a", U], Mesh((1, 6), ("a", "b"))).is_fully_replicated()


# -- canonical form -------------------------------------------------------------------------------
def test_canonical_axes(mesh: Mesh) -> None:
    layout = Layout([UNSHARDED, ("x",), ["y"]], mesh)
    assert layout.axes == (None, "x", "y")
    assert Layout([("x", "y"), None], mesh).axes == (("x", "y"), None)
    assert Layout([["y", "x"]], mesh).axes == (("y", "x"),)
    assert Layout([("x", "y"), None], mesh) != Layout([("y", "x"), None], mesh)  # order is major -> minor
    assert Layout([None, "x"]) == Layout((UNSHARDED, ("x",)))
    assert Layout(np.array(["x", U], dtype=object), mesh).axes == ("x", None)


def test_sharding_specs(mesh: Mesh) -> None:
    assert Layout([None, "x"], mesh).sharding_specs == ["unsharded", "x"]
    with pytest.raises(UnsupportedLayoutError) as info:
        _ = Layout([("x", "y")], mesh).sharding_specs
    assert info.value.feature == "multi_axis" and "('x', 'y')" in str(info.value)


def test_rank_and_mesh_axes(mesh: Mesh) -> None:
    layout = Layout([("y", "x"), None], mesh)
    assert layout.rank == 2
    assert layout.mesh_axes(0) == ("y", "x") and layout.mesh_axes(1) == ()
    assert layout.num_shards(0) == 6 and layout.num_shards(1) == 1


# -- validation ---------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("axes", "named"),
    [
        (["z", None], "'z'"),
        ([("x", "w")], "'w'"),
        (["x", "x"], "'x'"),
        ([("x", "y"), "y"], "'y'"),
        ([("x", "x")], "'x'"),
        ("x", "'x'"),
        (3, "3"),
        ([""], "''"),
        ([1], "1"),
        ([("x", None)], "None"),
        ([("x", U)], "unsharded"),
    ],
)
def test_invalid_layout_raises_layout_error_naming_the_value(mesh: Mesh, axes: object, named: str) -> None:
    with pytest.raises(LayoutError) as info:
        Layout(axes, mesh)  # type: ignore[arg-type]
    assert isinstance(info.value, ValueError)
    assert named in str(info.value)


def test_unknown_axis_message_lists_valid_names(mesh: Mesh) -> None:
    with pytest.raises(LayoutError, match=r"\['x', 'y'\]"):
        Layout(["z"], mesh)


def test_duplicate_axis_is_checked_without_a_mesh() -> None:
    with pytest.raises(LayoutError, match="'x'"):
        Layout(["x", "x"])


def test_rank_mismatch_names_both_ranks(mesh: Mesh) -> None:
    layout = Layout(["x", None], mesh)
    for call in (layout.device_slices, layout.shard_shape, layout.local_shapes):
        with pytest.raises(LayoutError, match=r"rank 2.*rank 3"):
            call((6, 4, 2))


def test_negative_shape_raises(mesh: Mesh) -> None:
    with pytest.raises(LayoutError, match="-1"):
        Layout(["x"], mesh).device_slices((-1,))


def test_geometry_without_a_mesh_raises() -> None:
    with pytest.raises(LayoutError, match="with_mesh"):
        Layout(["x"]).device_slices((6,))


def test_mesh_and_device_mesh_must_agree(mesh: Mesh) -> None:
    assert TensorLayout(["x", None], device_mesh=mesh) == Layout(["x", None], mesh)
    assert TensorLayout is Layout
    with pytest.raises(LayoutError):
        Layout(["x"], mesh, device_mesh=Mesh((6,), ("x",)))
    with pytest.raises(LayoutError, match="not a mesh"):
        Layout(["x"], "not a mesh")  # type: ignore[arg-type]


# -- with_mesh, value semantics ------------------------------------------------------------------------
def test_with_mesh_returns_new_layout(mesh: Mesh) -> None:
    unbound = Layout(["x", None])
    bound = unbound.with_mesh(mesh)
    assert unbound.mesh is None and bound.mesh == mesh and bound.axes == unbound.axes
    with pytest.raises(LayoutError, match="'x'"):
        unbound.with_mesh(Mesh((2,), ("y",)))


@pytest.mark.parametrize(
    "layout",
    [
        Layout(["x", None]),
        Layout([("x", "y"), None], Mesh((3, 2), ("x", "y"))),
        Layout(["y"], Mesh((3, 2), ("x", "y"), DEVICES6, name="m")),
        Layout([]),
    ],
)
def test_repr_evaluates_back_and_pickles(layout: Layout) -> None:
    namespace = {name: getattr(layoutcore, name) for name in layoutcore.__all__}
    assert eval(repr(layout), namespace) == layout
    assert pickle.loads(pickle.dumps(layout)) == layout


def test_eq_and_hash(mesh: Mesh) -> None:
    a, b = Layout(["x", U], mesh), Layout(("x", None), Mesh((3, 2), ("x", "y"), [f"cpu:{i}" for i in range(6)]))
    assert a == b and hash(a) == hash(b) and {a: 1}[b] == 1
    assert Layout(("x", "y"), mesh) != Layout(("x", None), mesh)
    assert a != Layout(("x", None), Mesh((3, 2), ("x", "y"), DEVICES6, name="other"))  # as TF
    assert a != Layout(("x", None), Mesh((3, 2), ("x", "y"), DEVICES6[::-1]))  # as TF
    assert a != Layout(("x", None))
    assert a != "sharding_specs:x,unsharded,"  # TF raises TypeError here; we compare


def test_the_hash_kept_after_first_use_agrees_with_equality(mesh: Mesh) -> None:
    """Layout keeps its hash once computed: equal layouts, however made (list or tuple axes, UNSHARDED or
    None, pickled, a copy, propagation's unvalidated construction), hash equal and find each other as keys."""
    from layoutcore.propagation import elementwise

    a = Layout(["x", U], mesh)
    table = {a: "a"}  # hashed now, and kept
    made = [
        Layout(("x", None), mesh),
        pickle.loads(pickle.dumps(a)),
        dataclasses.replace(a),
        elementwise(Layout(["x", None], mesh), Layout(["x", None], mesh)),
    ]
    for b in made:
        assert b == a and hash(b) == hash(a) and table[b] == "a"
        assert hash(b) == hash(b)  # stable: the second hash is the kept one
    others = [Layout([None, "x"], mesh), Layout(["x", U]), Layout(["x", "y"], mesh)]
    assert all(o not in table for o in others)


def test_is_immutable(mesh: Mesh) -> None:
    layout = Layout(["x"], mesh)
    with pytest.raises(dataclasses.FrozenInstanceError):
        layout.axes = ("y",)  # type: ignore[misc]
    with pytest.raises(dataclasses.FrozenInstanceError):
        layout.mesh = None  # type: ignore[misc]


def test_str_is_short(mesh: Mesh) -> None:
    assert str(Layout([("x", "y"), None], mesh)) == "Layout[(x,y), unsharded] on Mesh(x=3, y=2)"


# -- geometry through Layout (docs/framework-facts.md#shard-order, #uneven-dimensions and #multi-axis) -------------------------------------------------------------
@pytest.mark.parametrize("axes", list(MEASURED_6x6))
def test_device_slices_match_all_three_frameworks(mesh: Mesh, axes: tuple[str | None, ...]) -> None:
    slices = Layout(axes, mesh).device_slices((6, 6))
    # A one-block axis is slice(None) (as JAX writes it); the measured tables hold (start, stop).
    assert bounds([tuple(slice(*s.indices(6)[:2]) for s in sl) for sl in slices]) == MEASURED_6x6[axes]


@pytest.mark.parametrize(("size", "n"), list(CHUNKS))
def test_chunk_rule_is_torch_chunk(size: int, n: int) -> None:
    sizes = list(CHUNKS[size, n])
    # docs/framework-facts.md#uneven-dimensions: torch's distribute_tensor (4 over 3 -> 2,2,0, NOT numpy.array_split's 2,1,1).
    layout = Layout(["x"], Mesh((n,), ("x",)))
    assert [s[0] for s in layout.local_shapes((size,))] == sizes
    assert layout.shard_shape((size,)) == (max(sizes),)
    assert layout.is_even((size,)) == (size % n == 0)
    pieces = [np.arange(size)[sl] for sl in layout.device_slices((size,))]
    assert np.concatenate(pieces).tolist() == list(range(size))


def test_multi_axis_is_one_flat_chunk_over_the_product() -> None:
    # 5 over a 2x2 product: flat chunk over 4 gives 2,2,1,0 (torch's nested [Shard(0), Shard(0)] would give 2,1,1,1).
    layout = Layout([("x", "y")], Mesh((2, 2), ("x", "y")))
    assert [s[0] for s in layout.local_shapes((5,))] == [2, 2, 1, 0]
    # (2, 6) on 3x2 with (x, y) on axis 0: flat chunk over 6 (docs/framework-facts.md#uneven-dimensions).
    layout = Layout([("x", "y"), None], Mesh((3, 2), ("x", "y")))
    assert layout.local_shapes((2, 6)) == [(1, 6), (1, 6), (0, 6), (0, 6), (0, 6), (0, 6)]


def test_two_axes_uneven_is_a_flat_chunk_per_dimension() -> None:
    # docs/framework-facts.md#uneven-dimensions: (7, 5) with [Shard(0), Shard(1)] on 3x2.
    layout = Layout(["x", "y"], Mesh((3, 2), ("x", "y")))
    assert layout.local_shapes((7, 5)) == [(3, 3), (3, 2), (3, 3), (3, 2), (1, 3), (1, 2)]


@pytest.mark.parametrize(
    ("axes", "blocks"),
    [
        # docs/framework-facts.md#multi-axis, arange(12) on x=3, y=2.
        (("x", "y"), [(0, 2), (2, 4), (4, 6), (6, 8), (8, 10), (10, 12)]),
        (("y", "x"), [(0, 2), (6, 8), (2, 4), (8, 10), (4, 6), (10, 12)]),
    ],
)
def test_multi_axis_order_is_major_to_minor(mesh: Mesh, axes: tuple[str, str], blocks: list[tuple[int, int]]) -> None:
    assert [r[0] for r in bounds(Layout([axes], mesh).device_slices((12,)))] == blocks


def test_multi_axis_y_x_on_2x3_matches_jax() -> None:
    # docs/framework-facts.md#multi-axis: mesh x=2, y=3, P(('y','x')) on arange(12).
    mesh = Mesh((2, 3), ("x", "y"))
    held = [np.arange(12)[s].tolist() for s in Layout([("y", "x")], mesh).device_slices((12,))]
    assert held == [[0, 1], [4, 5], [8, 9], [2, 3], [6, 7], [10, 11]]


@st.composite
def tf_layouts(draw: st.DrawFn) -> Layout:
    """Layouts TF can write: at most one mesh axis per tensor axis, any mesh, rank 0..4."""
    shape = draw(st.lists(st.integers(1, 3), min_size=1, max_size=3))
    names = [f"a{i}" for i in range(len(shape))]
    mesh = Mesh(shape, names, [f"CPU:{i}" for i in range(int(np.prod(shape)))])
    rank = draw(st.integers(0, 4))
    used = draw(st.permutations(names))
    entries = [used[i] if i < len(used) and draw(st.booleans()) else None for i in range(rank)]
    return Layout(draw(st.permutations(entries)), mesh)


@given(tf_layouts())
def test_layout_string_round_trip_property(layout: Layout) -> None:
    text = layout.to_string()
    specs = [U if e is None else e for e in layout.axes]
    assert text == "sharding_specs:" + "".join(f"{s}," for s in specs) + " mesh:" + layout.mesh.to_string()  # type: ignore[union-attr]
    assert Layout.from_string(text) == layout
    assert layout.sharding_specs == specs


# -- typed errors for every bad input; NumPy ints accepted ----------------------------------
class _IndexRaises:
    """An int-like object whose ``__index__`` raises."""

    def __index__(self) -> int:
        raise RuntimeError("no index today")


@pytest.mark.parametrize(
    "axes",
    [
        [np.array(["x"]), None],  # an array entry: == would answer with an array
        [np.array("x")],
        [np.int64(0)],
        [b"x"],
        [("x", np.array(["y"]))],
        [{"x": 1}],
    ],
)
def test_layout_rejects_non_name_entries_typed(mesh: Mesh, axes: list) -> None:
    with pytest.raises(LayoutError, match="layout entry"):
        Layout(axes, mesh)


def test_delete_accepts_numpy_ints(mesh: Mesh) -> None:
    layout = Layout(["x", "y", U], mesh)
    assert layout.delete(np.int64(0)) == layout.delete(0) == Layout(["y", U], mesh)
    assert layout.delete([np.int32(0), np.int64(2)]) == Layout(["y"], mesh)
    assert layout.delete(np.array([1, 2])) == Layout(["x"], mesh)


@pytest.mark.parametrize("dims", [None, _IndexRaises(), [_IndexRaises()], "0", 1.0, [None]])
def test_delete_rejects_non_ints_typed(mesh: Mesh, dims: object) -> None:
    with pytest.raises(LayoutError, match="delete"):
        Layout(["x", "y", U], mesh).delete(dims)  # type: ignore[arg-type]


def test_delete_of_rank_0_layout_is_typed(mesh: Mesh) -> None:
    with pytest.raises(LayoutError, match="rank-0"):
        Layout([], mesh).delete(0)


@pytest.mark.parametrize("shape", [None, 5, "ab", (6, None), (6, -1), (6, 4.0), (_IndexRaises(), 4), (6, 4, 1)])
def test_shape_functions_reject_bad_shapes_typed(mesh: Mesh, shape: object) -> None:
    layout = Layout(["x", U], mesh)
    for method in (layout.shard_shape, layout.device_slices, layout.local_shapes, layout.is_even, layout.check_shape):
        with pytest.raises(LayoutError):
            method(shape)  # type: ignore[arg-type]


def test_shape_functions_accept_numpy_ints(mesh: Mesh) -> None:
    layout = Layout(["x", U], mesh)
    assert layout.shard_shape((np.int64(6), np.int32(4))) == (2, 4)
    assert layout.shard_shape(np.array([6, 4])) == (2, 4)
    assert all(type(s) is int for s in layout.check_shape(np.array([6, 4])))


@pytest.mark.parametrize("rank", [None, -1, 1.5, _IndexRaises(), True])
def test_classmethods_reject_bad_ranks_typed(mesh: Mesh, rank: object) -> None:
    for make in (
        lambda: Layout.replicated(mesh, rank),  # type: ignore[arg-type]
        lambda: Layout.batch_sharded(mesh, "x", rank),  # type: ignore[arg-type]
        lambda: Layout.inner_sharded(mesh, "x", rank),  # type: ignore[arg-type]
    ):
        with pytest.raises(LayoutError, match="rank"):
            make()
    assert Layout.replicated(mesh, np.int64(2)) == Layout([U, U], mesh)


@pytest.mark.parametrize("dim", [None, -1, 2, _IndexRaises(), "0"])
def test_dim_methods_reject_bad_dims_typed(mesh: Mesh, dim: object) -> None:
    layout = Layout(["x", U], mesh)
    for method in (layout.num_shards, layout.mesh_axes):
        with pytest.raises(LayoutError):
            method(dim)  # type: ignore[arg-type]
    assert layout.num_shards(np.int64(0)) == 3


@pytest.mark.parametrize(
    "text",
    [
        f"sharding_specs:x, mesh:|x=\u00b2|0|0|{FULL(0)}",
        f"sharding_specs:x, mesh:|x=999999999999999999999999999999,y=2|0|0|{FULL(0)}",
        f"sharding_specs:x, mesh:|x=1e11|0|0|{FULL(0)}",
        f"sharding_specs:x\x00, mesh:|x\x00=1|0|0|{FULL(0)}",  # a NUL byte in an axis name
        f"sharding_specs:x, mesh:|x=2|0,1|0,1|{FULL(0)},{FULL(1)}|{FULL(1)},{FULL(0)}",
        "sharding_specs:x, mesh:|x=2|*CPU|extra",
        "sharding_specs:x,x, mesh:|x=2|*CPU",
        "sharding_specs:q, mesh:|x=2|*CPU",
    ],
)
def test_layout_from_string_rejects_issue_9_inputs_typed(text: str) -> None:
    with pytest.raises(LayoutError):
        Layout.from_string(text)


def test_device_mesh_is_keras_name_for_mesh(mesh: Mesh) -> None:
    layout = TensorLayout(["x", None], device_mesh=mesh)
    assert layout.device_mesh is layout.mesh is mesh
    assert Layout(["x"]).device_mesh is None


# JAX 0.10.2's NamedSharding(...).devices_indices_map((6, 4)) on the 3x2 mesh (x, y), recorded; the JAX
# driver tests compare against JAX itself.
JAX_INDICES_6x4 = {
    ("x", None): [(slice(0, 2), slice(None))] * 2 + [(slice(2, 4), slice(None))] * 2 + [(slice(4, 6), slice(None))] * 2,
    (None, None): [(slice(None), slice(None))] * 6,
    (("x", "y"), None): [(slice(i, i + 1), slice(None)) for i in range(6)],
}


@pytest.mark.parametrize("axes", list(JAX_INDICES_6x4))
def test_device_slices_write_one_block_axes_as_slice_none_like_jax(mesh: Mesh, axes: tuple) -> None:
    assert Layout(axes, mesh).device_slices((6, 4)) == JAX_INDICES_6x4[axes]


def test_device_slices_of_a_size_1_mesh_axis_are_slice_none() -> None:
    # JAX: P("x", "y") on a (1, 2) mesh gives (slice(None), slice(0, 2)), (slice(None), slice(2, 4)).
    layout = Layout(["x", "y"], Mesh((1, 2), ("x", "y")))
    assert layout.device_slices((6, 4)) == [(slice(None), slice(0, 2)), (slice(None), slice(2, 4))]
    assert layout.local_shapes((6, 4)) == [(6, 2), (6, 2)]
