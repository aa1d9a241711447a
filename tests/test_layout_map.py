"""LayoutMap: keras' lookup rules (FACTS §11.1), errors, mesh binding, and layout_map_scope."""

from __future__ import annotations

import pytest

from layoutcore import (
    AmbiguousLayoutError,
    Layout,
    LayoutError,
    LayoutMap,
    Mesh,
    current_layout_map,
    layout_map_scope,
)

MESH = Mesh((2, 3), ("x", "y"))

# FACTS §11.1: the same keys queried with keras 3.15 (fullmatch) and keras 3.6 (search).
KERAS_TABLE = [
    ("dense/kernel", ("x", None), ("x", None)),
    ("my_dense/kernel", None, ("x", None)),
    ("dense/kernel_extra", None, ("x", None)),
    ("model/dense/kernel", None, ("x", None)),
    ("dense/bias", None, (None,)),
    ("bias2", None, (None,)),
    ("x_bias", None, (None,)),
    ("token_embeddings", (None, "y"), (None, "y")),
]


def _keras_map(match: str) -> LayoutMap:
    lm = LayoutMap(MESH, match=match)  # type: ignore[arg-type]
    lm["dense/kernel"] = ("x", None)
    lm["bias"] = (None,)
    lm[".*embeddings"] = (None, "y")
    return lm


@pytest.mark.parametrize(("path", "fullmatch", "search"), KERAS_TABLE)
def test_search_and_fullmatch_as_keras(path: str, fullmatch: tuple | None, search: tuple | None) -> None:
    for mode, expected in (("fullmatch", fullmatch), ("search", search)):
        found = _keras_map(mode)[path]
        assert (found.axes if found is not None else None) == expected, (mode, path)
        if found is not None:
            assert found.mesh == MESH


def test_default_mode_is_search() -> None:
    lm = LayoutMap(MESH)
    lm["conv2d.*kernel"] = (None, None, None, "x")
    assert lm.match == "search"
    assert lm["my_model/conv2d_123/kernel"] == Layout((None, None, None, "x"), MESH)
    assert lm["my_model/conv3d_1/kernel"] is None


def test_match_mode_anchors_at_the_start_only() -> None:
    lm = LayoutMap(MESH, match="match")
    lm["dense"] = ("x", None)
    assert lm["dense/kernel_extra"] is not None
    assert lm["my_dense/kernel"] is None


def test_several_matches_raise_naming_every_pattern() -> None:
    # FACTS §11.1: keys {'kernel', 'dense.*'} and path 'dense/kernel' under search.
    lm = LayoutMap(MESH)
    lm["kernel"] = ("x",)
    lm["dense.*"] = ("y",)
    lm["unrelated"] = (None,)
    with pytest.raises(AmbiguousLayoutError) as info:
        lm["dense/kernel2"]
    err = info.value
    assert isinstance(err, LayoutError) and isinstance(err, ValueError)
    assert err.patterns == ("kernel", "dense.*") and err.path == "dense/kernel2"
    assert "'kernel'" in str(err) and "'dense.*'" in str(err) and "dense/kernel2" in str(err)
    with pytest.raises(AmbiguousLayoutError):
        lm.get("dense/kernel2")  # get does not hide ambiguity


def test_fullmatch_resolves_that_ambiguity() -> None:
    lm = LayoutMap(MESH, match="fullmatch")
    lm["kernel"] = ("x",)
    lm["dense.*"] = ("y",)
    assert lm["dense/kernel"].axes == ("y",)


def test_on_multiple_first_takes_the_first_inserted() -> None:
    lm = LayoutMap(MESH, on_multiple="first")
    lm["dense.*"] = ("y",)
    lm["kernel"] = ("x",)
    assert lm["dense/kernel"].axes == ("y",)


def test_exact_key_wins_over_patterns() -> None:
    lm = LayoutMap(MESH)
    lm["dense.*"] = ("y", None)
    lm["kernel"] = ("x", None)
    lm["dense/kernel"] = (None, "x")
    assert lm["dense/kernel"].axes == (None, "x")  # no AmbiguousLayoutError
    # a key with regex characters is still an exact key first
    lm["a.b"] = ("x",)
    lm["a.b.*"] = ("y",)
    assert lm["a.b"].axes == ("x",)


def test_reinserting_a_key_raises_naming_it() -> None:
    lm = LayoutMap(MESH)
    lm["dense/bias"] = ("x",)
    with pytest.raises(LayoutError, match="'dense/bias'"):
        lm["dense/bias"] = ("y",)
    assert lm["dense/bias"].axes == ("x",)
    del lm["dense/bias"]
    lm["dense/bias"] = ("y",)
    assert lm["dense/bias"].axes == ("y",)


@pytest.mark.parametrize("pattern", ["dense[", "(unclosed", "*kernel"])
def test_bad_regex_raises_at_insert_naming_the_pattern(pattern: str) -> None:
    lm = LayoutMap(MESH)
    with pytest.raises(LayoutError) as info:
        lm[pattern] = ("x",)
    assert repr(pattern) in str(info.value)
    assert len(lm) == 0 and pattern not in lm


def test_patterns_are_compiled_once_at_insert(monkeypatch: pytest.MonkeyPatch) -> None:
    import re

    lm = LayoutMap(MESH)
    lm["dense.*kernel"] = ("x", None)
    lm["bias"] = (None,)

    def no_compile(*args: object, **kwargs: object) -> None:
        raise AssertionError("re.compile during lookup")

    monkeypatch.setattr(re, "compile", no_compile)
    monkeypatch.setattr(re, "search", no_compile)
    assert lm["a/dense_1/kernel"].axes == ("x", None)
    assert lm["a/b"] is None


def test_a_layout_without_mesh_is_bound_by_a_new_layout() -> None:
    lm = LayoutMap(device_mesh=MESH)
    unbound = Layout(("x", None))
    lm["dense.*kernel"] = unbound
    assert unbound.mesh is None  # never mutated
    assert lm["dense/kernel"] == Layout(("x", None), MESH)
    other = Layout(("x",), Mesh((2,), ("x",)))
    lm["bias"] = other
    assert lm["bias"] is other  # a layout with its own mesh is kept as is


def test_a_map_without_mesh_keeps_layouts_unbound() -> None:
    lm = LayoutMap(None)
    lm["k"] = ["x", None]
    assert lm["k"] == Layout(("x", None)) and lm.mesh is None


def test_layout_axes_are_validated_against_the_mesh_at_insert() -> None:
    lm = LayoutMap(MESH)
    with pytest.raises(LayoutError, match="'z'"):
        lm["k"] = ("z",)
    assert "k" not in lm


@pytest.mark.parametrize("value", [3, "x", None, {"x": 1}])
def test_bad_values_raise(value: object) -> None:
    lm = LayoutMap(MESH)
    with pytest.raises(LayoutError):
        lm["k"] = value  # type: ignore[assignment]


def test_mapping_protocol() -> None:
    lm = LayoutMap(MESH)
    lm["b.*"] = ("x",)
    lm["a"] = ("y",)
    assert len(lm) == 2 and list(lm) == ["b.*", "a"]
    assert "a" in lm and "b.*" in lm
    assert "bb" not in lm  # containment is by key, not by pattern lookup
    assert lm.get("bb").axes == ("x",)
    assert lm.get("zzz") is None and lm.get("zzz", "fallback") == "fallback"
    assert dict(lm.items()) == {"b.*": Layout(("x",), MESH), "a": Layout(("y",), MESH)}
    del lm["a"]
    assert len(lm) == 1 and "a" not in lm
    with pytest.raises(KeyError):
        del lm["a"]
    assert lm.pop("b.*") == Layout(("x",), MESH) and len(lm) == 0
    assert lm.pop("missing", None) is None
    with pytest.raises(KeyError):
        lm.pop("missing")
    assert lm.setdefault("c", ("x",)) == Layout(("x",), MESH)
    assert lm.setdefault("c", ("y",)) == Layout(("x",), MESH)


def test_lookups_see_later_inserts_and_deletes() -> None:
    lm = LayoutMap(MESH)
    assert lm["dense/kernel"] is None
    lm["kernel"] = ("x",)
    assert lm["dense/kernel"].axes == ("x",)
    lm["dense"] = ("y",)
    with pytest.raises(AmbiguousLayoutError):
        lm["dense/kernel"]
    del lm["kernel"]
    assert lm["dense/kernel"].axes == ("y",)


def test_non_string_path_raises() -> None:
    lm = LayoutMap(MESH)
    with pytest.raises(LayoutError, match=r"\['a'\]"):
        lm[["a"]]  # type: ignore[index]
    with pytest.raises(LayoutError, match="42"):
        lm[42] = ("x",)  # type: ignore[index]


@pytest.mark.parametrize(
    "kwargs",
    [
        {"match": "regex"},
        {"on_multiple": "last"},
        {"mesh": "mesh"},
        {"mesh": MESH, "device_mesh": Mesh((6,), ("x",))},
    ],
)
def test_bad_constructor_arguments_raise(kwargs: dict) -> None:
    with pytest.raises(LayoutError):
        LayoutMap(**kwargs)


def test_mesh_spellings() -> None:
    assert LayoutMap(MESH).mesh == LayoutMap(device_mesh=MESH).device_mesh == LayoutMap(mesh=MESH).mesh == MESH


def test_layout_map_scope_nests_and_restores() -> None:
    outer, inner = LayoutMap(MESH), LayoutMap(MESH)
    assert current_layout_map() is None
    with layout_map_scope(outer) as got:
        assert got is outer and current_layout_map() is outer
        with layout_map_scope(inner):
            assert current_layout_map() is inner
        assert current_layout_map() is outer
    assert current_layout_map() is None
    with pytest.raises(LayoutError), layout_map_scope({"a": ("x",)}):  # type: ignore[arg-type]
        pass


def test_layout_for_gives_the_entry_checked_against_the_rank() -> None:
    lm = LayoutMap(MESH)
    lm["dense.*kernel"] = (None, "y")
    assert lm.layout_for("model/dense_1/kernel", (4, 6)) == Layout([None, "y"], MESH)
    with pytest.raises(LayoutError, match=r"parameter 'model/dense_1/kernel' \(shape \(6,\)\).*rank-2"):
        lm.layout_for("model/dense_1/kernel", (6,), kind="parameter")


def test_layout_for_replicates_unmatched_paths_on_the_maps_mesh() -> None:
    lm = LayoutMap(MESH)
    lm["dense.*kernel"] = (None, "y")
    assert lm.layout_for("model/conv/kernel", (2, 3, 4)) == Layout.replicated(MESH, 3)
    assert lm.layout_for("model/conv/scale", ()) == Layout([], MESH)


def test_layout_for_without_a_mesh_names_the_path() -> None:
    lm = LayoutMap()
    lm["dense.*kernel"] = (None, "y")
    with pytest.raises(LayoutError, match=r"No LayoutMap entry matches variable 'conv/kernel'"):
        lm.layout_for("conv/kernel", (2, 2))
    with pytest.raises(LayoutError, match=r"for variable 'dense/kernel' has no mesh"):
        lm.layout_for("dense/kernel", (2, 2))


def test_layout_for_refuses_ambiguous_paths() -> None:
    lm = LayoutMap(MESH)
    lm["kernel"] = (None, "y")
    lm["dense.*"] = ("x", None)
    with pytest.raises(AmbiguousLayoutError):
        lm.layout_for("dense/kernel", (2, 2))
