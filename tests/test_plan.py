"""layoutcore.plan: which pattern each variable takes and the bytes every device holds.

Expected bytes come from the geometry (``Layout.local_shapes``) or from hand arithmetic, never
from ``layoutcore._plan``.
"""

from __future__ import annotations

import collections
import json
import math
import warnings

import numpy as np
import pytest

import layoutcore as lc
from layoutcore import Layout, LayoutError, LayoutMap, Mesh, Plan, PlanEntry, UnmatchedPathError, plan

MESH = Mesh((4, 2), ("data", "model"))


def _map(**kwargs: object) -> LayoutMap:
    lm = LayoutMap(MESH, **kwargs)  # type: ignore[arg-type]
    lm["encoder/.*/attention/(query|key|value)/kernel"] = (None, "model")
    lm["encoder/.*/mlp/dense_in/kernel"] = ("data", "model")
    lm["embeddings"] = ("model", None)
    lm["decoder/.*kernel"] = (None, "model")  # no variable below takes it
    return lm


VARIABLES = {
    "embeddings": (1000, 64),
    "encoder/layer_0/attention/query/kernel": (64, 64),
    "encoder/layer_0/attention/key/kernel": ((64, 64), "bfloat16"),
    "encoder/layer_0/mlp/dense_in/kernel": np.zeros((64, 256), dtype=np.float16),
    "encoder/layer_0/mlp/dense_in/bias": (256,),
    "head/scale": (),
}


def _oracle_bytes(layout: Layout, shape: tuple[int, ...], itemsize: int) -> list[int]:
    return [math.prod(s) * itemsize for s in layout.local_shapes(shape)]


def test_entries_patterns_and_device_bytes() -> None:
    result = plan(_map(), VARIABLES)
    assert isinstance(result, Plan) and result.mesh == MESH
    by_path = {e.path: e for e in result.entries}
    assert list(by_path) == list(VARIABLES)
    key = by_path["encoder/layer_0/attention/key/kernel"]
    assert key == PlanEntry(
        "encoder/layer_0/attention/key/kernel",
        (64, 64),
        "bfloat16",
        "encoder/.*/attention/(query|key|value)/kernel",
        Layout([None, "model"], MESH),
        (64, 32),
        (64 * 32 * 2,) * 8,
    )
    dense = by_path["encoder/layer_0/mlp/dense_in/kernel"]
    assert dense.dtype == "float16" and dense.shard_shape == (16, 128)
    assert list(dense.device_bytes) == _oracle_bytes(Layout(["data", "model"], MESH), (64, 256), 2)
    emb = by_path["embeddings"]
    assert list(emb.device_bytes) == _oracle_bytes(Layout(["model", None], MESH), (1000, 64), 4)
    for entry in result.entries:
        assert sum(entry.device_bytes) >= entry.nbytes
    totals = [sum(e.device_bytes[d] for e in result.entries) for d in range(8)]
    assert list(result.device_bytes) == totals and result.max_device_bytes == max(totals)
    assert repr(result).startswith("Plan(mesh=Mesh((4, 2), ('data', 'model')), entries=<6 entries>, unmatched=(")


def test_unmatched_unused_and_replicated_bytes() -> None:
    result = plan(_map(), VARIABLES)
    assert result.unmatched == ("encoder/layer_0/mlp/dense_in/bias", "head/scale")
    assert result.unused_patterns == ("decoder/.*kernel",)
    bias = next(e for e in result.entries if e.path == "encoder/layer_0/mlp/dense_in/bias")
    assert bias.pattern is None and bias.layout == Layout.replicated(MESH, 1) and bias.device_bytes == (1024,) * 8
    # Held whole on all 8 devices: the two unmatched ones (256 * 4 + 4 bytes); nothing else.
    assert result.replicated_bytes == 256 * 4 + 4


def test_a_renamed_variable_fails_check_and_explain_names_the_near_miss() -> None:
    lm = _map()
    renamed = dict(VARIABLES)
    renamed["encoder/layer_0/attention/qeury/kernel"] = renamed.pop("encoder/layer_0/attention/query/kernel")
    result = plan(lm, renamed)
    result.check()  # allowed by default
    with pytest.raises(LayoutError) as info:
        result.check(allow_unmatched=False)
    message = str(info.value)
    assert "'encoder/layer_0/attention/qeury/kernel'" in message
    assert "encoder/.*/attention/(query|key|value)/kernel" in message
    report = lm.explain("encoder/layer_0/attention/qeury/kernel")
    assert report.chosen is None and report.matches == ()
    assert report.near_misses[0] == "encoder/.*/attention/(query|key|value)/kernel"
    assert "closest patterns are 'encoder/.*/attention/(query|key|value)/kernel'" in str(report)


def test_check_max_device_bytes_names_the_device_and_the_biggest_entries() -> None:
    result = plan(_map(), VARIABLES)
    assert result.check(max_device_bytes=result.max_device_bytes) is result
    with pytest.raises(LayoutError, match=r"exceed max_device_bytes=1000: device \d holds \d+ bytes.*'embeddings'"):
        result.check(max_device_bytes=1000)


def test_on_missing_applies_in_plan() -> None:
    with pytest.raises(UnmatchedPathError) as info:
        plan(_map(on_missing="error"), VARIABLES)
    assert info.value.paths == ("encoder/layer_0/mlp/dense_in/bias", "head/scale")
    assert isinstance(info.value, LayoutError)
    with pytest.warns(lc.UnmatchedPathWarning, match="head/scale") as record:
        result = plan(_map(on_missing="warn"), VARIABLES)
    assert len(record) == 1 and result.unmatched == ("encoder/layer_0/mlp/dense_in/bias", "head/scale")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        plan(_map(), VARIABLES)  # replicate: silent


def test_to_dict_round_trips_through_json() -> None:
    data = json.loads(json.dumps(plan(_map(), VARIABLES).to_dict()))
    assert data["mesh"] == {"shape": [4, 2], "axis_names": ["data", "model"]}
    assert data["unused_patterns"] == ["decoder/.*kernel"]
    assert data["unmatched"][1] == {"path": "head/scale", "near_misses": []}
    assert data["entries"][0]["axes"] == ["model", None] and data["entries"][0]["device_bytes"][0] == 500 * 64 * 4


def test_trees_named_parameters_and_objects_with_path() -> None:
    lm = LayoutMap(MESH)
    lm["dense.*kernel"] = (None, "model")
    kernel = np.zeros((8, 4), dtype=np.float32)
    tree = {"dense": {"kernel": kernel, "bias": np.zeros(4)}, "layers": [np.zeros((2, 2))]}
    from_tree = plan(lm, tree)
    assert [e.path for e in from_tree.entries] == ["dense/kernel", "dense/bias", "layers/0"]
    assert from_tree.entries[1].dtype == "float64"
    pairs = plan(lm, iter([("dense.kernel", kernel)]))  # torch's named_parameters()
    assert pairs.entries[0].pattern == "dense.*kernel"

    Var = collections.namedtuple("Var", "path shape dtype")  # keras 3 variables have .path
    keras_like = plan(lm, [Var("model/dense_1/kernel", (8, 4), "float32")])
    assert keras_like.entries[0].layout == Layout([None, "model"], MESH)

    class Param:  # flax's State: a Mapping of Params with .shape and .dtype
        shape, dtype = (8, 4), "float32"

    state = collections.OrderedDict(dense=collections.OrderedDict(kernel=Param()), step=3)
    assert [e.path for e in plan(lm, state).entries] == ["dense/kernel"]  # "step" has no shape: skipped


class _TorchLikeDtype:
    """A dtype object whose str is ``torch.bfloat16`` and whose itemsize is 2 (as torch's)."""

    itemsize = 2

    def __str__(self) -> str:
        return "torch.bfloat16"


def test_framework_dtype_objects() -> None:
    lm = LayoutMap(MESH)
    param = collections.namedtuple("Param", "shape dtype")((4, 4), _TorchLikeDtype())
    result = plan(lm, {"w": param})
    assert result.entries[0].dtype == "bfloat16" and result.entries[0].device_bytes == (32,) * 8


@pytest.mark.parametrize(
    ("variables", "match"),
    [
        ({"w": "float32"}, "no variable with a .shape"),
        ({"w": {"v": None}}, "no variable with a .shape"),
        ({"w": (4, -1)}, "'w'"),
        ({"w": ((4,), "no-such-dtype")}, "no-such-dtype"),
        ("w", "plan expects"),
        ([object()], "cannot tell the path"),
    ],
)
def test_bad_variables_raise_naming_them(variables: object, match: str) -> None:
    with pytest.raises(LayoutError, match=match):
        plan(LayoutMap(MESH), variables)


def test_bad_maps_raise() -> None:
    with pytest.raises(LayoutError, match="expects a LayoutMap"):
        plan({"a": ("x",)}, {})  # type: ignore[arg-type]
    with pytest.raises(LayoutError, match="needs a LayoutMap with a mesh"):
        plan(LayoutMap(), {})
    lm = LayoutMap(MESH)
    lm["w"] = ("data", None)
    with pytest.raises(LayoutError, match=r"'w' \(shape \(4,\)\).*rank-2"):
        plan(lm, {"w": (4,)})


@pytest.mark.parametrize(
    ("spelling", "name", "size"),
    [
        ("half", "float16", 2),
        ("float", "float32", 4),
        ("int", "int32", 4),
        ("bf16", "bfloat16", 2),
        ("int4", "int4", 1),
    ],
)
def test_plan_names_dtypes_as_the_dtype_module_does(spelling: str, name: str, size: int) -> None:
    """One normaliser: the plan's dtype names and sizes are layoutcore.driver.dtype_name's and itemsize's."""
    mesh = lc.Mesh((2,), ("x",))
    layout_map = lc.LayoutMap(mesh)
    layout_map["w"] = ("x",)
    entry = lc.plan(layout_map, {"w": ((8,), spelling)}).entries[0]
    assert (entry.dtype, entry.device_bytes) == (name, (8 // 2 * size,) * 2)
    if name != "int4":
        assert lc.driver.dtype_name(spelling) == name and lc.driver.itemsize(name) == size
