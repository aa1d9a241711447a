"""layoutcore.tree_layouts / distribute_tree / flatten_with_paths (docs/design.md#trees-and-model-code), on the NumPy driver.

The oracle for placed data is the pure shard math (``Layout.device_slices``) applied to the
original leaf with NumPy indexing, not the driver's own unpacking logic.
"""

from __future__ import annotations

from collections import OrderedDict, namedtuple

import numpy as np
import pytest

from layoutcore import (
    AmbiguousLayoutError,
    Layout,
    LayoutError,
    LayoutMap,
    Mesh,
    distribute_tree,
    fetch_layout,
    to_numpy,
    tree_layouts,
    unpack,
)
from layoutcore._trees import flatten_with_paths
from layoutcore.numpy import ShardedArray

Pair = namedtuple("Pair", ["kernel", "bias"])


@pytest.fixture
def lm(mesh: Mesh) -> LayoutMap:
    m = LayoutMap(mesh)
    m["dense.*kernel"] = (None, "y")
    m["embed"] = ("x", None)
    m["layers/1/.*"] = ("x",)
    return m


def _tree() -> dict[str, object]:
    rng = np.random.default_rng(0)
    return {
        "dense": {"kernel": rng.normal(size=(6, 4)), "bias": rng.normal(size=(4,))},
        "embed": rng.normal(size=(6, 2)),
        "layers": [Pair(rng.normal(size=(3, 2)), rng.normal(size=(2,))), (rng.normal(size=(6,)), 7)],
        "step": None,
    }


def test_flatten_with_paths_names_every_shaped_leaf_in_order() -> None:
    tree = _tree()
    paths = [p for p, _ in flatten_with_paths(tree)]
    assert paths == ["dense/kernel", "dense/bias", "embed", "layers/0/kernel", "layers/0/bias", "layers/1/0"]
    assert flatten_with_paths(tree)[0][1] is tree["dense"]["kernel"]  # type: ignore[index]
    assert [p for p, _ in flatten_with_paths({"a": {"b": np.zeros(1)}}, separator=".")] == ["a.b"]
    assert [p for p, _ in flatten_with_paths([np.zeros(1)] * 12)][-1] == "11"  # decimal indices
    root = np.zeros(3)
    assert [(p, leaf is root) for p, leaf in flatten_with_paths(root)] == [("", True)]  # a bare leaf: empty path


def test_tree_layouts_keeps_structure_and_types(lm: LayoutMap, mesh: Mesh) -> None:
    tree = _tree()
    layouts = tree_layouts(lm, tree)
    assert layouts["dense"]["kernel"] == Layout((None, "y"), mesh)
    assert layouts["dense"]["bias"] == Layout.replicated(mesh, 1)  # nothing matches: replicated
    assert layouts["embed"] == Layout(("x", None), mesh)
    assert isinstance(layouts["layers"], list) and isinstance(layouts["layers"][0], Pair)
    assert isinstance(layouts["layers"][1], tuple) and not isinstance(layouts["layers"][1], Pair)
    assert layouts["layers"][0] == Pair(Layout.replicated(mesh, 2), Layout.replicated(mesh, 1))
    assert layouts["layers"][1] == (Layout(("x",), mesh), None)  # a leaf without .shape gets None
    assert layouts["step"] is None
    od = tree_layouts(lm, OrderedDict(embed=np.zeros((6, 2))))
    assert type(od) is OrderedDict and od["embed"].axes == ("x", None)


def test_tree_layouts_separator_changes_the_paths(mesh: Mesh) -> None:
    m = LayoutMap(mesh, match="fullmatch")
    m[r"dense\.kernel"] = (None, "y")
    layouts = tree_layouts(m, {"dense": {"kernel": np.zeros((2, 4))}}, separator=".")
    assert layouts["dense"]["kernel"].axes == (None, "y")
    assert tree_layouts(m, {"dense": {"kernel": np.zeros((2, 4))}})["dense"]["kernel"].is_fully_replicated()


def test_tree_layouts_errors_name_the_path(lm: LayoutMap, mesh: Mesh) -> None:
    with pytest.raises(LayoutError, match="embed"):
        tree_layouts(lm, {"embed": np.zeros(6)})  # rank-2 entry on a rank-1 leaf
    amb = LayoutMap(mesh)
    amb["a"] = ("x",)
    amb["b"] = ("y",)
    with pytest.raises(AmbiguousLayoutError) as info:
        tree_layouts(amb, {"ab": np.zeros(6)})
    assert info.value.path == "ab"
    with pytest.raises(LayoutError, match="LayoutMap"):
        tree_layouts({"a": ("x",)}, {"a": np.zeros(6)})  # type: ignore[arg-type]
    with pytest.raises(LayoutError, match="separator"):
        tree_layouts(lm, {}, separator=1)  # type: ignore[arg-type]


def test_distribute_tree_places_every_leaf(lm: LayoutMap, mesh: Mesh) -> None:
    tree = _tree()
    layouts = tree_layouts(lm, tree)
    placed = distribute_tree(tree, layouts, driver="numpy")
    assert placed["step"] is None and placed["layers"][1][1] == 7
    leaves = flatten_with_paths(tree)
    placed_leaves = flatten_with_paths(placed)
    assert [p for p, _ in placed_leaves] == [p for p, _ in leaves]
    for (path, original), (_, out) in zip(leaves, placed_leaves, strict=True):
        assert isinstance(out, ShardedArray), path
        layout = fetch_layout(out, driver="numpy")
        assert layout == lm.layout_for(path, original.shape)
        # Oracle: the geometry's slices of the original leaf, per device in row-major mesh order.
        expected = [original[s] for s in layout.device_slices(original.shape)]
        got = unpack(out, driver="numpy")
        assert len(got) == len(expected) and all(np.array_equal(g, e) for g, e in zip(got, expected, strict=True))
        np.testing.assert_array_equal(to_numpy(out, driver="numpy"), original)


def test_distribute_tree_accepts_a_layout_map_and_mapping_order(lm: LayoutMap, mesh: Mesh) -> None:
    tree = {"embed": np.arange(12.0).reshape(6, 2), "dense": {"kernel": np.ones((2, 4))}}
    placed = distribute_tree(tree, lm, driver="numpy")
    assert fetch_layout(placed["embed"], driver="numpy").axes == ("x", None)
    # The layouts dict may list keys in another order: mappings pair by key.
    reordered = {"dense": {"kernel": Layout((None, "y"), mesh)}, "embed": None}
    placed = distribute_tree(tree, reordered, driver="numpy")
    assert placed["embed"] is tree["embed"]
    assert fetch_layout(placed["dense"]["kernel"], driver="numpy").axes == (None, "y")


def test_distribute_tree_refuses_a_mismatched_structure(mesh: Mesh) -> None:
    tree = {"a": [np.zeros(6), np.zeros(6)]}
    with pytest.raises(LayoutError, match="'a'"):
        distribute_tree(tree, {"a": [Layout(("x",), mesh)]}, driver="numpy")
    with pytest.raises(LayoutError, match="'b'"):
        distribute_tree({"b": np.zeros(6)}, {"c": None}, driver="numpy")
    with pytest.raises(LayoutError, match="Layout or None"):
        distribute_tree({"b": np.zeros(6)}, {"b": ("x",)}, driver="numpy")
    with pytest.raises(LayoutError):  # the driver's own check: the layout's rank differs from the leaf's
        distribute_tree({"b": np.zeros(6)}, {"b": Layout(("x", None), mesh)}, driver="numpy")
