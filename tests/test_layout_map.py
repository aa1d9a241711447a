"""LayoutMap: keras' lookup rules (docs/framework-facts.md#keras-layoutmap), errors, mesh binding, and layout_map_scope."""

from __future__ import annotations

import re
import warnings
from typing import Any

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from layoutcore import (
    AmbiguousLayoutError,
    Layout,
    LayoutError,
    LayoutMap,
    MatchReport,
    Mesh,
    UnmatchedPathError,
    UnmatchedPathWarning,
    Variable,
    current_layout_map,
    layout_map_scope,
)

MESH = Mesh((2, 3), ("x", "y"))

# docs/framework-facts.md#keras-layoutmap: the same keys queried with keras 3.15 (fullmatch) and keras 3.6 (search).
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
    # docs/framework-facts.md#keras-layoutmap: keys {'kernel', 'dense.*'} and path 'dense/kernel' under search.
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

    compiled = []
    real_compile = re.compile

    def counting_compile(*args: Any, **kwargs: Any) -> Any:
        compiled.append(args[0])
        return real_compile(*args, **kwargs)

    def no_search(*args: object, **kwargs: object) -> None:
        raise AssertionError("re.search during lookup")

    monkeypatch.setattr(re, "compile", counting_compile)
    monkeypatch.setattr(re, "search", no_search)
    for path in ("a/dense_1/kernel", "a/b", "x/bias", "a/dense_2/kernel"):
        lm[path]
    # Lookups compile nothing but the one alternation of every pattern (the screen), once per change of the map.
    assert compiled == ["(?:dense.*kernel)|(?:bias)"]
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


# -- on_missing (docs/design.md#seeing-before-running) ----------------------------------------------
def _dense_map(on_missing: str) -> LayoutMap:
    lm = LayoutMap(MESH, on_missing=on_missing)  # type: ignore[arg-type]
    lm["dense.*kernel"] = (None, "y")
    return lm


def test_on_missing_replicate_is_the_default_and_silent() -> None:
    lm = LayoutMap(MESH)
    assert lm.on_missing == "replicate"
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert lm.layout_for("conv/kernel", (2, 2)) == Layout.replicated(MESH, 2)


def test_on_missing_warn_replicates_with_a_warning_naming_path_and_near_miss() -> None:
    lm = _dense_map("warn")
    with pytest.warns(UnmatchedPathWarning, match=r"'model/dense_1/kernl' \(closest: 'dense\.\*kernel'\)") as record:
        assert lm.layout_for("model/dense_1/kernl", (2, 2)) == Layout.replicated(MESH, 2)
    assert record[0].message.paths == ("model/dense_1/kernl",)  # type: ignore[union-attr]
    assert record[0].message.near_misses == (("dense.*kernel",),)  # type: ignore[union-attr]


def test_on_missing_error_raises_in_layout_for_and_in_layout_map_scope() -> None:
    lm = _dense_map("error")
    with pytest.raises(UnmatchedPathError, match="'model/dense_1/kernl'") as info:
        lm.layout_for("model/dense_1/kernl", (2, 2))
    assert isinstance(info.value, LayoutError) and info.value.paths == ("model/dense_1/kernl",)
    assert info.value.near_misses == (("dense.*kernel",),)
    assert lm["model/dense_1/kernl"] is None  # a plain lookup still answers None, as keras
    with layout_map_scope(lm), pytest.raises(UnmatchedPathError, match="conv/kernel"):
        Variable(np.zeros((2, 2)), path="conv/kernel")
    with layout_map_scope(lm):
        assert Variable(np.zeros((2, 6)), path="dense/kernel").layout == Layout([None, "y"], MESH)


def test_repr_names_non_default_policies() -> None:
    lm = LayoutMap(MESH, on_missing="warn")
    lm["k"] = ("x",)
    assert repr(lm) == ("LayoutMap({'k': ('x',)}, mesh=Mesh((2, 3), ('x', 'y')), match='search', on_missing='warn')")
    assert "on_missing" not in repr(LayoutMap(MESH))


def test_bad_on_missing_raises() -> None:
    with pytest.raises(LayoutError, match="on_missing"):
        LayoutMap(MESH, on_missing="ignore")  # type: ignore[arg-type]


# -- explain ---------------------------------------------------------------------------------------
def test_explain_a_chosen_pattern() -> None:
    lm = _dense_map("replicate")
    report = lm.explain("model/dense_1/kernel")
    assert report == MatchReport(
        "model/dense_1/kernel", False, ("dense.*kernel",), "dense.*kernel", Layout([None, "y"], MESH)
    )
    assert str(report) == (
        "'model/dense_1/kernel' matches pattern 'dense.*kernel', so it takes Layout[unsharded, y] on Mesh(x=2, y=3)."
    )


def test_explain_exact_ambiguous_first_and_unmatched() -> None:
    lm = LayoutMap(MESH)
    lm["kernel"] = ("x",)
    lm["dense.*"] = ("y",)
    lm["dense/kernel"] = (None,)
    exact = lm.explain("dense/kernel")
    assert exact.exact and exact.chosen == "dense/kernel" and exact.layout == Layout([None], MESH)
    assert "is a key of the map itself" in str(exact)
    ambiguous = lm.explain("dense/kernel2")  # never raises
    # every key is also a pattern: "dense/kernel" searches in "dense/kernel2" too
    assert ambiguous.matches == ("kernel", "dense.*", "dense/kernel") and ambiguous.chosen is None
    assert ambiguous.ambiguous and "matches 3 patterns ('kernel', 'dense.*', 'dense/kernel')" in str(ambiguous)
    assert "raises AmbiguousLayoutError" in str(ambiguous)
    first = LayoutMap(MESH, on_multiple="first")
    first["kernel"] = ("x",)
    first["dense.*"] = ("y",)
    report = first.explain("dense/kernel2")
    assert report.chosen == "kernel" and report.layout == Layout(["x"], MESH) and not report.ambiguous
    assert "also matches 'dense.*'" in str(report)
    nothing = lm.explain("zzz")
    assert nothing.matches == () and nothing.near_misses == () and "no pattern is close" in str(nothing)
    with pytest.raises(LayoutError):
        lm.explain(3)  # type: ignore[arg-type]


def test_explain_near_misses_rank_the_closest_pattern_first() -> None:
    lm = LayoutMap(MESH, on_missing="error")
    lm["encoder/.*/attention/(query|key|value)/kernel"] = (None, "y")
    lm["decoder/.*kernel"] = (None, "y")
    lm["embeddings"] = ("y", None)
    report = lm.explain("encoder/layer_3/attention/qeury/kernel")
    assert report.near_misses[0] == "encoder/.*/attention/(query|key|value)/kernel"
    assert "embeddings" not in report.near_misses
    assert str(report).startswith("'encoder/layer_3/attention/qeury/kernel' matches no pattern, so applying the map")
    assert lm.explain("token_embedings").near_misses == ("embeddings",)


# -- patterns Python's re cannot run safely ------------------------------------------------
@pytest.mark.parametrize(
    ("pattern", "cause"),
    [
        ("(" * 10_000 + "a" + ")" * 10_000, "RecursionError"),
        ("a{4294967296}", "OverflowError"),
    ],
    ids=["10000-nested-groups", "huge-repeat"],
)
def test_patterns_too_deep_or_too_large_raise_layout_error(pattern: str, cause: str) -> None:
    lm = LayoutMap(MESH)
    with pytest.raises(LayoutError, match=cause) as info:
        lm[pattern] = ("x",)
    assert info.value.value == pattern and pattern[:50] in str(info.value)
    assert len(str(info.value)) < 1000 and len(lm) == 0


@pytest.mark.parametrize("pattern", ["(a+)+$", "(a*)*b", "(?:x\\d+/)*kernel", "((ab)*c)+", "(a|b+)*"])
def test_nested_unbounded_repeats_are_refused(pattern: str) -> None:
    lm = LayoutMap(MESH)
    with pytest.raises(LayoutError, match="nests an unbounded repeat") as info:
        lm[pattern] = ("x",)
    assert repr(pattern) in str(info.value)


@pytest.mark.parametrize("pattern", ["(a|a)+$", "(?:a|a)*x", "(a|ab)+$", "(ab|abc)+$", "(x|)+$", "((a|a)b)+"])
def test_repeated_alternations_whose_branches_overlap_are_refused(pattern: str) -> None:
    lm = LayoutMap(MESH)
    with pytest.raises(LayoutError, match="alternation whose branches may match the same text") as info:
        lm[pattern] = ("x",)
    assert repr(pattern) in str(info.value) and len(lm) == 0


@pytest.mark.parametrize(
    "pattern", ["(a++)+$", "(?>a+)+$", "(a{1,3})+", "(dense|conv)_\\d+/kernel", "a+b*c+", "(a|b)+$", "(query|key)+$"]
)
def test_possessive_atomic_bounded_and_flat_repeats_are_accepted(pattern: str) -> None:
    import time

    lm = LayoutMap(MESH)
    lm[pattern] = ("x",)
    start = time.perf_counter()
    lm.get("a" * 26 + "!")
    assert time.perf_counter() - start < 1.0  # the refused shape takes seconds here


def test_the_lookup_cache_is_bounded_in_bytes() -> None:
    import sys

    from layoutcore._layout_map import CACHE_BYTES

    lm = LayoutMap(MESH)
    lm["dense.*kernel"] = ("x",)
    held = 0
    for i in range(65_535):
        lm.get(f"{i:05d}" + "x" * 10_235)  # distinct 10 KB paths
        if i % 4096 == 4095:
            held = max(held, sum(sys.getsizeof(path) for path in lm._cache))  # what the cache keeps alive
    assert held <= CACHE_BYTES  # not the 562 MiB an entry-count bound allowed
    assert 0 < lm.cache_bytes <= CACHE_BYTES
    assert lm["model/dense/kernel"] == Layout(["x"], MESH)  # still answers, from the cache or not


_SCREEN_PATTERNS = [
    "dense.*kernel",
    "dense_1/bias$",
    "^enc/(query|key)/kernel",
    "(?i)DENSE_2",
    r"(a)\1",
    "conv2d_[0-9]+/kernel",
    "kernel",
    "b.as",
    r"(?P<x>emb)edding",
    "layer_(7|17)/",
    "^$",
    "x{2,}y",
]
_SCREEN_PATHS = st.text(alphabet="abdeiklnrsyxqucvmo_/0127DENS", max_size=30) | st.sampled_from(
    ["dense_1/kernel", "dense_1/bias", "enc/query/kernel", "my/DENSE_2/w", "aa", "layer_17/w", "", "xxy", "embedding"]
)


@pytest.mark.parametrize("mode", ["search", "match", "fullmatch"])
@given(data=st.data())
def test_lookup_equals_trying_every_pattern(mode: str, data: st.DataObject) -> None:
    """The combined-alternation screen and the literal prefilter never change an answer: the oracle
    tries every pattern with Python's re, in insertion order."""
    chosen = data.draw(st.lists(st.sampled_from(_SCREEN_PATTERNS), unique=True, max_size=8))
    layout_map = LayoutMap(match=mode, on_multiple="first")  # type: ignore[arg-type]  # mode is one of the three
    for i, pattern in enumerate(chosen):
        layout_map[pattern] = Layout([None] * (i + 1))
    for path in data.draw(st.lists(_SCREEN_PATHS, max_size=6)):
        expected = next((p for p in chosen if getattr(re.compile(p), mode)(path)), None)
        assert layout_map.pattern_for(path) == expected, (chosen, path)
