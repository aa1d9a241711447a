"""TensorSpec: canonical, lossless JSON; boxes equal to the layout's device slices."""

from __future__ import annotations

import json
import pickle

import ml_dtypes
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from layoutcore import Layout, LayoutError, Mesh, TensorSpec
from layoutcore._dtypes import ALL_DTYPES

AXIS_NAMES = ("a", "b", "c", "d")


@st.composite
def specs(draw: st.DrawFn) -> TensorSpec:
    ndim = draw(st.integers(1, 3))
    mesh_shape = tuple(draw(st.lists(st.integers(1, 4), min_size=ndim, max_size=ndim)))
    names = AXIS_NAMES[:ndim]
    size = int(np.prod(mesh_shape))
    devices = None
    if draw(st.booleans()):
        devices = tuple(f"CPU:{i}" for i in draw(st.permutations(range(size))))
    mesh = Mesh(mesh_shape, names, devices, name=draw(st.sampled_from(["", "m1"])))
    rank = draw(st.integers(0, 3))
    free = list(draw(st.permutations(names)))
    axes: list[object] = []
    for _ in range(rank):
        take = draw(st.integers(0, min(2, len(free))))
        used, free = free[:take], free[take:]
        axes.append(None if not used else (used[0] if take == 1 and draw(st.booleans()) else tuple(used)))
    shape = tuple(draw(st.lists(st.integers(0, 9), min_size=rank, max_size=rank)))
    return TensorSpec(shape, draw(st.sampled_from(ALL_DTYPES)), Layout(axes, mesh))


@given(specs())
def test_json_round_trips_exactly(spec: TensorSpec) -> None:
    text = spec.to_json()
    back = TensorSpec.from_json(text)
    assert back == spec
    assert back.layout.axes == spec.layout.axes  # multi-axis order kept
    assert back.mesh.devices == spec.mesh.devices and back.mesh.name == spec.mesh.name
    assert back.to_json() == text  # canonical: one text per value
    assert back.fingerprint == spec.fingerprint
    assert json.loads(text)["version"] == 1
    assert pickle.loads(pickle.dumps(spec)) == spec


@given(specs())
def test_boxes_equal_device_slices(spec: TensorSpec) -> None:
    slices = spec.layout.device_slices(spec.shape)
    boxes = spec.boxes()
    assert len(boxes) == spec.mesh.size
    for box, sl in zip(boxes, slices, strict=True):
        # Oracle: the slices applied to an index grid, independent of boxes()' arithmetic.
        expected = [range(n)[s] for n, s in zip(spec.shape, sl, strict=True)]
        assert box[0] == tuple(
            r.start if len(r) else min(r.start, n) for r, n in zip(expected, spec.shape, strict=True)
        )
        assert box[1] == tuple(len(r) for r in expected)


def test_canonical_dtype_spellings_and_keys() -> None:
    mesh = Mesh((2,), ("x",))
    a = TensorSpec((4,), "bf16", Layout(("x",), mesh))
    b = TensorSpec([np.int64(4)], np.dtype(ml_dtypes.bfloat16), Layout(["x"], mesh))
    assert a == b and a.dtype == "bfloat16" and a.shape == (4,)
    data = json.loads(a.to_json())
    assert list(data) == sorted(data)
    assert data["dtype"] == "bfloat16" and data["chunking"] == "ceil"
    assert repr(a) == "TensorSpec((4,), 'bfloat16', " + repr(a.layout) + ")"
    assert len(a.fingerprint) == 64 and a.fingerprint != a.replace(dtype="float8_e5m2").fingerprint


def test_float8_and_multi_axis_keep_their_names() -> None:
    mesh = Mesh((2, 2), ("x", "y"), ["cpu:0", "cpu:1", "cpu:2", "cpu:3"])
    spec = TensorSpec((5, 3), "float8_e4m3fn", Layout([("y", "x"), None], mesh))
    text = spec.to_json()
    assert '"axes":[["y","x"],[]]' in text and '"float8_e4m3fn"' in text and '"CPU:0"' in text
    assert TensorSpec.from_json(text).layout.axes == (("y", "x"), None)
    # 5 rows in 4 blocks of ceil(5/4)=2 (sizes 2, 2, 1, 0); device (x, y) holds block 2*y + x
    # (y major): devices (0,0) (0,1) (1,0) (1,1) hold blocks 0, 2, 1, 3.
    assert [b[1][0] for b in spec.boxes()] == [2, 1, 2, 0]


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (((2, 3), "float32", Layout(("x",), Mesh((2,), ("x",)))), "rank"),
        (((4,), "str", Layout(("x",), Mesh((2,), ("x",)))), "dtype"),
        (((4,), "float32", Layout(("x",))), "bound to a mesh"),
        (((-1,), "float32", Layout(("x",), Mesh((2,), ("x",)))), "shape"),
        (((4,), "float32", ("x",)), "Layout"),
    ],
)
def test_invalid_specs_raise_layout_error(args: tuple[object, ...], needle: str) -> None:
    with pytest.raises(LayoutError, match=needle):
        TensorSpec(*args)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "mutate",
    [
        lambda d: d.update(version=2),
        lambda d: d.update(format="other"),
        lambda d: d.update(chunking="floor"),
        lambda d: d["layout"].pop("mesh"),
        lambda d: d.update(dtype="object"),
    ],
)
def test_from_json_refuses_unknown_or_malformed(mutate: object) -> None:
    spec = TensorSpec((4,), "float32", Layout(("x",), Mesh((2,), ("x",))))
    data = json.loads(spec.to_json())
    mutate(data)  # type: ignore[operator]
    with pytest.raises(LayoutError):
        TensorSpec.from_json(json.dumps(data))
    with pytest.raises(LayoutError, match="cannot be parsed"):
        TensorSpec.from_json("{not json")
