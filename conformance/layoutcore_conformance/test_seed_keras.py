"""Seed: the ``keras.distribution.LayoutMap`` documentation examples, both variants, then the
same map driving ``Variable`` placement on the driver under test (``layout_map_scope``)."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

import layoutcore as lc
from layoutcore import DeviceMesh, LayoutMap, TensorLayout

from ._oracle import Case, assert_device_data, values
from .adapter import ConformanceAdapter

# What the docs' comments say each lookup gives: layout_2d, layout_1d, layout_4d, or None.
EXPECTED: dict[str, tuple[str | None, ...] | None] = {
    "dense_1.kernel": (None, "model"),
    "dense_1.bias": ("model",),
    "dense_2.kernel": (None, "model"),
    "dense_2.bias": ("model",),
    "my_model/conv2d_123/kernel": (None, None, None, "model"),
    "my_model/conv2d_123/bias": ("model",),
    "my_model/conv3d_1/kernel": None,
    "my_model/conv3d_1/bias": None,
}


def device_mesh() -> lc.Mesh:
    return DeviceMesh(shape=(2, 4), axis_names=["batch", "model"])


def docs_map_with_mesh(mesh: lc.Mesh) -> LayoutMap:
    """keras.distribution.LayoutMap docstring: ``LayoutMap(device_mesh)`` with tuple values."""
    layout_map = LayoutMap(mesh)
    layout_map["dense.*kernel"] = (None, "model")
    layout_map["dense.*bias"] = ("model",)
    layout_map["conv2d.*kernel"] = (None, None, None, "model")
    layout_map["conv2d.*bias"] = ("model",)
    return layout_map


def docs_map_without_mesh() -> LayoutMap:
    """keras.io LayoutMap page: ``LayoutMap(device_mesh=None)``, TensorLayout values (and the tuple shortcut)."""
    layout_map = LayoutMap(device_mesh=None)
    layout_map["dense.*kernel"] = (None, "model")  # layout_2d
    layout_map["dense.*bias"] = ("model",)  # layout_1d
    layout_map["conv2d.*kernel"] = TensorLayout((None, None, None, "model"))
    layout_map["conv2d.*bias"] = TensorLayout(("model",))  # layout_1d
    return layout_map


def all_tensor_layout_map() -> LayoutMap:
    layout_map = LayoutMap(device_mesh=None)
    layout_map["dense.*kernel"] = TensorLayout([None, "model"])
    layout_map["dense.*bias"] = TensorLayout(["model"])
    layout_map["conv2d.*kernel"] = TensorLayout([None, None, None, "model"])
    layout_map["conv2d.*bias"] = TensorLayout(["model"])
    return layout_map


@pytest.mark.parametrize("path", list(EXPECTED))
def test_layout_map_with_mesh(path: str) -> None:
    mesh = device_mesh()
    layout = docs_map_with_mesh(mesh)[path]
    if EXPECTED[path] is None:
        assert layout is None
    else:
        assert layout is not None and layout.axes == EXPECTED[path]
        assert layout.mesh == mesh  # bound to the map's mesh


@pytest.mark.parametrize("build", [docs_map_without_mesh, all_tensor_layout_map], ids=["docs", "all_tensor_layout"])
@pytest.mark.parametrize("path", list(EXPECTED))
def test_layout_map_without_mesh(path: str, build: Any) -> None:
    layout = build()[path]
    if EXPECTED[path] is None:
        assert layout is None
    else:
        assert isinstance(layout, TensorLayout) and layout.axes == EXPECTED[path]
        assert layout.mesh is None


# Variable shapes that divide evenly over "model"=4 (so every driver can hold them).
SHAPES = {
    "dense_1.kernel": (6, 8),
    "dense_1.bias": (8,),
    "my_model/conv2d_123/kernel": (3, 3, 2, 8),
    "my_model/conv2d_123/bias": (8,),
    "my_model/conv3d_1/kernel": (1, 1, 1, 2, 8),
}


@pytest.mark.parametrize("path", list(SHAPES))
def test_layout_map_scope_places_variables(driver: lc.driver.Driver, adapter: ConformanceAdapter, path: str) -> None:
    mesh = device_mesh()
    shape = SHAPES[path]
    x = values(shape, "float32")
    with lc.layout_map_scope(docs_map_with_mesh(mesh)):
        variable = lc.Variable(adapter.from_numpy(x), path=path)
    spec = EXPECTED[path] or (None,) * len(shape)  # unmatched: fully replicated on the map's mesh
    assert variable.layout == lc.Layout(spec, mesh)
    assert lc.fetch_layout(variable) == variable.layout
    case = Case(mesh.shape, mesh.axis_names, tuple(spec), shape, "float32")
    assert_device_data(adapter, variable.value, x, case, what=path)
    assert np.array_equal(variable.numpy(), x)
