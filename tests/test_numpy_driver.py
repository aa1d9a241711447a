"""The NumPy reference driver: zero-copy distribution, strict pack, gather-free relayout."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from _support import DEVICES6

import layoutcore
from layoutcore import (
    UNSHARDED,
    Layout,
    LayoutError,
    Mesh,
    NotDistributedError,
    call_with_layout,
    copy_to_mesh,
    distribute_tensor,
    fetch_layout,
    pack,
    relayout,
    to_numpy,
    unpack,
)
from layoutcore.numpy import NumpyDriver, ShardedArray
from layoutcore.numpy import _driver as numpy_driver

MESH = Mesh((3, 2), ("x", "y"))
U = UNSHARDED

# Every kind of layout on x=3, y=2 for a rank-2 tensor, multi-axis in both orders included.
LAYOUTS = [
    Layout(axes, MESH)
    for axes in [
        (None, None),
        ("x", None),
        (None, "x"),
        ("y", None),
        ("x", "y"),
        ("y", "x"),
        (("x", "y"), None),
        (("y", "x"), None),
        (None, ("x", "y")),
    ]
]
SHAPES = [(6, 4), (5, 3), (7, 1), (2, 9), (0, 4)]


def _ids(values: list) -> list[str]:
    return [str(v) for v in values]


# -- distribute_tensor ------------------------------------------------------------------------------
@pytest.mark.parametrize("layout", LAYOUTS, ids=_ids(LAYOUTS))
@pytest.mark.parametrize("shape", SHAPES)
def test_components_are_readonly_views_holding_the_oracle_slices(layout: Layout, shape: tuple[int, int]) -> None:
    x = np.arange(np.prod(shape), dtype=np.float32).reshape(shape)
    t = distribute_tensor(x, layout)
    components = unpack(t)
    assert len(components) == 6
    for component, sl in zip(components, layout.device_slices(shape), strict=True):
        np.testing.assert_array_equal(component, x[sl])
        assert component.size == 0 or np.shares_memory(component, x)
        assert not component.flags.writeable
    np.testing.assert_array_equal(to_numpy(t), x)
    assert fetch_layout(t) == layout


def test_writing_a_component_raises() -> None:
    t = distribute_tensor(np.zeros((6, 4)), Layout(["x", None], MESH))
    with pytest.raises(ValueError, match="read-only"):
        unpack(t)[0][0, 0] = 1.0


def test_non_contiguous_input_is_still_viewed() -> None:
    x = np.arange(48.0).reshape(6, 8)[:, ::2]
    t = distribute_tensor(x, Layout(["x", "y"], MESH))
    assert all(np.shares_memory(c, x) for c in unpack(t))
    np.testing.assert_array_equal(to_numpy(t), x)


def test_dtensor_guide_hybrid_layout() -> None:
    mesh = Mesh((3, 2), ("x", "y"), DEVICES6)
    t = distribute_tensor(np.arange(6).reshape(3, 2), Layout(["x", U], mesh))
    assert [c.tolist() for c in unpack(t)] == [[[0, 1]], [[0, 1]], [[2, 3]], [[2, 3]], [[4, 5]], [[4, 5]]]
    assert t.devices == tuple(DEVICES6)


def test_nested_lists_and_scalars() -> None:
    t = distribute_tensor([[1, 2], [3, 4], [5, 6]], Layout(["x", None], MESH))
    assert t.shape == (3, 2) and t.dtype == np.array([1]).dtype
    s = distribute_tensor(3.5, Layout([], MESH))
    assert [float(c) for c in unpack(s)] == [3.5] * 6 and to_numpy(s).shape == ()


def test_distributing_a_distributed_array_relayouts_it() -> None:
    x = np.arange(24).reshape(6, 4)
    t = distribute_tensor(x, Layout(["x", None], MESH))
    u = distribute_tensor(t, Layout([None, "y"], MESH))
    assert fetch_layout(u) == Layout([None, "y"], MESH)
    np.testing.assert_array_equal(to_numpy(u), x)


def test_repr_shows_shape_dtype_and_layout() -> None:
    text = repr(distribute_tensor(np.zeros((6, 4), np.int16), Layout(["x", "y"], MESH)))
    assert "(6, 4)" in text and "int16" in text and "x" in text and "y" in text


def test_array_protocol() -> None:
    x = np.arange(12.0).reshape(6, 2)
    t = distribute_tensor(x, Layout(["x", None], MESH))
    np.testing.assert_array_equal(np.asarray(t), x)
    assert np.asarray(t, dtype=np.int32).dtype == np.int32
    with pytest.raises(ValueError, match="copy"):
        np.asarray(t, copy=False)


@pytest.mark.parametrize(
    ("layout", "message"),
    [
        (Layout(["x", None, None], MESH), "rank 3"),
        (Layout(["x"]), "no mesh"),
        ("x", "Layout"),
    ],
)
def test_bad_layouts_raise(layout: object, message: str) -> None:
    with pytest.raises(LayoutError, match=message):
        distribute_tensor(np.zeros((6, 4)), layout)  # type: ignore[arg-type]


def test_a_mesh_naming_missing_devices_says_how_to_get_more() -> None:
    mesh = Mesh((2,), ("x",), ["CPU:0", "CPU:9"])
    with pytest.raises(LayoutError) as info:
        distribute_tensor(np.zeros(4), Layout(["x"], mesh))
    assert "CPU:9" in str(info.value) and "LAYOUTCORE_CPU_DEVICES" in str(info.value)
    with pytest.raises(LayoutError, match="LAYOUTCORE_CPU_DEVICES"):
        distribute_tensor(np.zeros(4), Layout(["x"], Mesh((16,), ("x",))))


def test_an_abstract_mesh_binds_to_the_first_devices_and_round_trips() -> None:
    layout = Layout(["x"], Mesh((4,), ("x",)))
    t = distribute_tensor(np.arange(8), layout)
    assert t.devices == ("CPU:0", "CPU:1", "CPU:2", "CPU:3")
    assert fetch_layout(t) == layout and fetch_layout(t).mesh.devices is None


def test_functions_refuse_plain_arrays() -> None:
    for fn in (unpack, to_numpy, fetch_layout):
        with pytest.raises(NotDistributedError, match=r"numpy\.ndarray"):
            fn(np.zeros(3))
    # docs/design.md#data-functions-made-precise: relayout places a plain value as distribute_tensor would (TF's relayout does too).
    placed = relayout(np.arange(4), Layout(["x"], MESH))
    assert fetch_layout(placed) == Layout(["x"], MESH) and to_numpy(placed).tolist() == [0, 1, 2, 3]


# -- copy_to_mesh, call_with_layout --------------------------------------------------------------------
def test_copy_to_mesh_takes_replicated_layouts_only() -> None:
    t = copy_to_mesh(np.array([0, 1]), Layout([U], Mesh((6,), ("x",))))
    assert [c.tolist() for c in unpack(t)] == [[0, 1]] * 6
    with pytest.raises(LayoutError, match="replicated"):
        copy_to_mesh(np.zeros((6, 2)), Layout(["x", U], MESH))


def test_call_with_layout_ones() -> None:
    t = call_with_layout(np.ones, Layout(["x", "y"], MESH), (6, 4))
    assert [c.shape for c in unpack(t)] == [(2, 2)] * 6 and all((c == 1).all() for c in unpack(t))
    z = call_with_layout(np.zeros, Layout(["x", None], MESH), shape=(3, 2), dtype=np.int8)
    assert to_numpy(z).dtype == np.int8
    with pytest.raises(LayoutError, match="callable"):
        call_with_layout(3, Layout(["x"], MESH))  # type: ignore[arg-type]


# -- pack -------------------------------------------------------------------------------------------
@pytest.mark.parametrize("layout", LAYOUTS, ids=_ids(LAYOUTS))
@pytest.mark.parametrize("shape", SHAPES)
def test_pack_inverts_unpack_and_infers_uneven_shapes(layout: Layout, shape: tuple[int, int]) -> None:
    x = np.random.default_rng(0).random(shape)
    pieces = [np.array(c) for c in unpack(distribute_tensor(x, layout))]
    for global_shape in (None, shape):
        t = pack(pieces, layout, global_shape=global_shape)
        assert t.shape == shape and fetch_layout(t) == layout
        np.testing.assert_array_equal(to_numpy(t), x)


def test_pack_dtensor_guide_replicated() -> None:
    t = pack([np.array([0, 1])] * 6, Layout([U], Mesh((6,), ("x",), DEVICES6)))
    assert t.shape == (2,) and [c.tolist() for c in unpack(t)] == [[0, 1]] * 6


def test_pack_checks_the_component_count() -> None:
    with pytest.raises(LayoutError, match=r"6 components.*Received 5"):
        pack([np.zeros((2, 4))] * 5, Layout(["x", None], MESH))


def test_pack_checks_each_component_shape_naming_the_device() -> None:
    pieces = [np.zeros((2, 4))] * 6
    pieces[3] = np.zeros((3, 4))
    with pytest.raises(LayoutError, match=r"CPU:3.*\(3, 4\)"):
        pack(pieces, Layout(["x", None], MESH), global_shape=(6, 4))
    with pytest.raises(LayoutError, match=r"CPU:0.*rank 1"):
        pack([np.zeros(4)] * 6, Layout(["x", None], MESH))
    with pytest.raises(LayoutError, match=r"\(2, 4\)"):
        pack([np.zeros((2, 4))] * 6, Layout(["x", None], MESH), global_shape=(9, 4))


def test_pack_checks_dtypes() -> None:
    pieces = [np.zeros((2, 4), np.float32)] * 5 + [np.zeros((2, 4), np.float64)]
    with pytest.raises(LayoutError, match=r"float32.*float64"):
        pack(pieces, Layout(["x", None], MESH))


def test_pack_refuses_differing_replicas_naming_the_devices() -> None:
    # docs/framework-facts.md#replicas-and-pack: TF accepts this silently; we don't.
    pieces = [np.full((2, 4), float(i // 2)) for i in range(6)]
    pieces[5] = pieces[5] + 1
    with pytest.raises(LayoutError) as info:
        pack(pieces, Layout(["x", None], MESH))
    assert "CPU:5" in str(info.value) and "CPU:4" in str(info.value)
    assert info.value.value == ["CPU:5"]
    nan = [np.full((2,), np.nan)] * 6
    assert pack(nan, Layout([None], MESH)).shape == (2,)  # NaN replicas are equal


def test_pack_refuses_differing_replicas_of_a_fully_replicated_layout() -> None:
    pieces = [np.array([0, 1])] * 6
    pieces[2] = np.array([0, 2])
    with pytest.raises(LayoutError, match="CPU:2"):
        pack(pieces, Layout([U], MESH))


def test_pack_takes_nested_lists() -> None:
    t = pack([[0, 1]] * 6, Layout([U], MESH))
    np.testing.assert_array_equal(to_numpy(t), [0, 1])


def test_packed_components_are_not_copied() -> None:
    pieces = [np.full((2, 4), float(i)) for i in range(3) for _ in range(2)]
    t = pack(pieces, Layout(["x", None], MESH))
    assert all(np.shares_memory(a, b) for a, b in zip(unpack(t), pieces, strict=True))


# -- relayout ----------------------------------------------------------------------------------------
PAIRS = list(itertools.product(LAYOUTS, LAYOUTS))


@pytest.mark.parametrize("shape", [(6, 4), (5, 3), (7, 13)])
def test_relayout_every_pair_matches_a_direct_distribute(shape: tuple[int, int]) -> None:
    x = np.arange(np.prod(shape)).reshape(shape)
    for source, target in PAIRS:
        moved = relayout(distribute_tensor(x, source), target)
        assert fetch_layout(moved) == target
        for got, sl in zip(unpack(moved), target.device_slices(shape), strict=True):
            np.testing.assert_array_equal(got, x[sl], err_msg=f"{source} -> {target}")
            assert not got.flags.writeable


def test_relayout_never_gathers(monkeypatch: pytest.MonkeyPatch) -> None:
    def forbidden(*args: object, **kwargs: object) -> None:
        raise AssertionError("relayout gathered the global value")

    x = np.arange(7 * 13).reshape(7, 13)
    sources = [distribute_tensor(x, layout) for layout in LAYOUTS]
    monkeypatch.setattr(numpy_driver, "_assemble", forbidden)
    monkeypatch.setattr(NumpyDriver, "native_to_numpy", forbidden)
    monkeypatch.setattr(NumpyDriver, "to_numpy", forbidden)
    monkeypatch.setattr(ShardedArray, "__array__", forbidden)
    moved = [relayout(s, target) for s in sources for target in LAYOUTS]
    monkeypatch.undo()
    for t in moved:
        np.testing.assert_array_equal(to_numpy(t), x)


def test_relayout_is_a_view_where_one_source_block_covers_the_target() -> None:
    x = np.arange(24.0).reshape(6, 4)
    rows = distribute_tensor(x, Layout(["x", None], MESH))
    finer = relayout(rows, Layout(["x", "y"], MESH))  # each (x, y) block lies inside one x block
    assert all(np.shares_memory(c, x) for c in unpack(finer))
    coarser = relayout(finer, Layout(["x", None], MESH))  # needs two y blocks: a new array
    assert not any(np.shares_memory(c, x) for c in unpack(coarser))
    np.testing.assert_array_equal(to_numpy(coarser), x)


def test_relayout_gives_each_replica_its_own_received_block() -> None:
    # docs/design.md#seeing-before-running: the driver moves exactly relayout_plan's transfers, so a replica that receives a
    # block holds its own copy (as a real device would), with the same data as the other replicas.
    x = np.arange(24.0).reshape(6, 4)
    moved = relayout(distribute_tensor(x, Layout(["x", "y"], MESH)), Layout([None, "y"], MESH))
    comps = unpack(moved)
    assert comps[0] is not comps[2] and not np.shares_memory(comps[0], comps[2])
    for j in range(2):
        for c in comps[j::2]:
            np.testing.assert_array_equal(c, x[:, 2 * j : 2 * j + 2])


def test_relayout_to_the_same_layout_returns_the_tensor() -> None:
    t = distribute_tensor(np.zeros((6, 4)), Layout(["x", None], MESH))
    assert relayout(t, Layout(["x", None], MESH)) is t


def test_relayout_across_meshes() -> None:
    x = np.arange(30).reshape(5, 6)
    t = distribute_tensor(x, Layout(["x", "y"], MESH))
    other = Layout([None, ("a", "b")], Mesh((2, 2), ("a", "b")))
    moved = relayout(t, other)
    assert len(unpack(moved)) == 4 and fetch_layout(moved) == other
    np.testing.assert_array_equal(to_numpy(moved), x)


def test_relayout_rank_mismatch_raises() -> None:
    t = distribute_tensor(np.zeros((6, 4)), Layout(["x", None], MESH))
    with pytest.raises(LayoutError, match="rank"):
        relayout(t, Layout(["x"], MESH))


# -- to_numpy --------------------------------------------------------------------------------------------
def test_to_numpy_of_packed_components_is_a_new_array() -> None:
    pieces = [np.full((2, 4), float(i // 2)) for i in range(6)]
    out = to_numpy(pack(pieces, Layout(["x", None], MESH)))
    assert out.flags.writeable and out.flags.c_contiguous
    assert not any(np.shares_memory(out, p) for p in pieces)
    np.testing.assert_array_equal(out, np.repeat(np.arange(3.0), 2)[:, None].repeat(4, axis=1))


def test_a_driver_with_other_device_count() -> None:
    driver = NumpyDriver(num_devices=2)
    assert driver.list_devices() == ["CPU:0", "CPU:1"]
    t = layoutcore.distribute_tensor(np.arange(4), Layout(["x"], Mesh((2,), ("x",))), driver=driver)
    assert [c.tolist() for c in driver.unpack(t)] == [[0, 1], [2, 3]]


def test_relayout_allocates_only_the_blocks_it_must_build() -> None:
    import tracemalloc

    # ('y', None) -> ('x', None) on x=3, y=2: devices (0, 0) and (2, 1) hold their new row third
    # already (views), (0, 1) and (2, 0) receive theirs whole from one device (views of the sender's
    # read-only block); only the two devices whose middle third straddles both halves build a third
    # each. A gather would allocate the whole array (and a gather-then-slice at least that much again).
    x = np.arange(600 * 1024, dtype=np.float64).reshape(600, 1024)
    t = distribute_tensor(x, Layout(["y", None], MESH))
    tracemalloc.start()
    try:
        moved = relayout(t, Layout(["x", None], MESH))
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert 2 * x.nbytes / 3 <= peak < 0.75 * x.nbytes
    np.testing.assert_array_equal(to_numpy(moved), x)
