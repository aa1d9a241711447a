"""Seed: the TensorFlow DTensor guide ("DTensor concepts"), on ``DEVICES = ['CPU:0', ..., 'CPU:5']``.

Each example is the guide's, with ``dtensor.`` replaced by ``layoutcore.`` and TF tensors by the
driver's framework tensors (``adapter.from_numpy``, ``adapter.ones_fn()``). The expected
components are the guide's printed output, written out here, not computed.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import pytest

import layoutcore as lc
from layoutcore import UNSHARDED

from .adapter import ConformanceAdapter

DEVICES = [f"CPU:{i}" for i in range(6)]
FULL = [f"/job:localhost/replica:0/task:0/device:CPU:{i}" for i in range(6)]
MESH_1D_STRING = "|x=6|0,1,2,3,4,5|0,1,2,3,4,5|" + ",".join(FULL)
MESH_2D_STRING = "|x=3,y=2|0,1,2,3,4,5|0,1,2,3,4,5|" + ",".join(FULL)


def mesh_1d() -> lc.Mesh:
    return lc.create_mesh([("x", 6)], devices=DEVICES)


def mesh_2d() -> lc.Mesh:
    return lc.create_mesh([("x", 3), ("y", 2)], devices=DEVICES)


def dtensor_from_array(arr: Any, layout: lc.Layout) -> Any:
    """The guide's helper: replicate the input to the mesh, then shard the copy to ``layout``."""
    a = lc.copy_to_mesh(arr, layout=lc.Layout.replicated(layout.require_mesh(), rank=layout.rank))
    return lc.relayout(a, layout=layout)


def assert_components(
    driver: lc.driver.Driver, adapter: ConformanceAdapter, tensor: Any, expected: Sequence[Any], *, what: str
) -> None:
    """The raw per-device data (adapter) and ``unpack`` both give ``expected`` on CPU:0..5, in order."""
    raw = adapter.device_data(tensor)
    assert [device for device, _ in raw] == DEVICES, f"{what}: devices {[d for d, _ in raw]}"
    for (device, data), want in zip(raw, expected, strict=True):
        want_a = np.asarray(want)
        assert data.shape == want_a.shape and np.array_equal(data, want_a), (
            f"{what}: {device} holds {data.tolist()}, the guide prints {want_a.tolist()}"
        )
    unpacked = lc.unpack(tensor)
    assert len(unpacked) == len(expected), f"{what}: unpack gave {len(unpacked)} components"
    for i, (component, want) in enumerate(zip(unpacked, expected, strict=True)):
        got = driver.component_to_numpy(component)
        assert got.shape == np.shape(want) and np.array_equal(got, want), (
            f"{what}: unpack()[{i}] is {got.tolist()}, the guide prints {np.asarray(want).tolist()}"
        )


def test_mesh_strings() -> None:
    assert mesh_1d().to_string() == MESH_1D_STRING
    assert mesh_2d().to_string() == MESH_2D_STRING
    assert lc.Mesh.from_string(MESH_2D_STRING) == mesh_2d()
    assert mesh_2d().devices == tuple(DEVICES)


@pytest.mark.parametrize("via", ["dtensor_from_array", "distribute_tensor"])
def test_replicated_1d(driver: lc.driver.Driver, adapter: ConformanceAdapter, via: str) -> None:
    layout = lc.Layout([UNSHARDED], mesh_1d())
    make = dtensor_from_array if via == "dtensor_from_array" else lc.distribute_tensor
    my_first_dtensor = make([0, 1], layout)
    assert_components(driver, adapter, my_first_dtensor, [[0, 1]] * 6, what=via)
    assert lc.fetch_layout(my_first_dtensor) == layout
    assert np.array_equal(lc.to_numpy(my_first_dtensor), [0, 1])


def test_pack_six_replicas_of_framework_tensors(driver: lc.driver.Driver, adapter: ConformanceAdapter) -> None:
    layout = lc.Layout([UNSHARDED], mesh_1d())
    packed_dtensor = lc.pack([adapter.from_numpy(np.array([0, 1])) for _ in range(6)], layout=layout)
    assert_components(driver, adapter, packed_dtensor, [[0, 1]] * 6, what="pack")
    assert lc.fetch_layout(packed_dtensor) == layout


def test_pack_six_replicas_as_python_lists(driver: lc.driver.Driver, adapter: ConformanceAdapter) -> None:
    layout = lc.Layout([UNSHARDED], mesh_1d())
    packed_dtensor = lc.pack([[0, 1], [0, 1], [0, 1], [0, 1], [0, 1], [0, 1]], layout=layout)
    assert_components(driver, adapter, packed_dtensor, [[0, 1]] * 6, what="pack of lists")


# The guide's 2-D examples: arange(6).reshape(3, 2) on the 3x2 mesh, printed component by component.
GUIDE_2D: dict[str, tuple[list[Any], list[Any]]] = {
    "fully_sharded": (["x", "y"], [[[0]], [[1]], [[2]], [[3]], [[4]], [[5]]]),
    "fully_replicated": ([UNSHARDED, UNSHARDED], [[[0, 1], [2, 3], [4, 5]]] * 6),
    "hybrid": (["x", UNSHARDED], [[[0, 1]], [[0, 1]], [[2, 3]], [[2, 3]], [[4, 5]], [[4, 5]]]),
}


@pytest.mark.parametrize("via", ["distribute_tensor", "dtensor_from_array"])
@pytest.mark.parametrize("native_input", [False, True], ids=["numpy_input", "framework_input"])
@pytest.mark.parametrize("name", list(GUIDE_2D))
def test_arange_on_3x2(
    driver: lc.driver.Driver, adapter: ConformanceAdapter, name: str, native_input: bool, via: str
) -> None:
    spec, expected = GUIDE_2D[name]
    layout = lc.Layout(spec, mesh_2d())
    array = np.arange(6, dtype=np.int32).reshape(3, 2)
    value = adapter.from_numpy(array) if native_input else array
    tensor = lc.distribute_tensor(value, layout) if via == "distribute_tensor" else dtensor_from_array(value, layout)
    assert_components(driver, adapter, tensor, expected, what=f"{name} via {via}")
    assert lc.fetch_layout(tensor) == layout
    assert np.array_equal(lc.to_numpy(tensor), array)


def test_call_with_layout_ones(driver: lc.driver.Driver, adapter: ConformanceAdapter) -> None:
    ones = adapter.ones_fn()
    layout = lc.Layout(["x", "y"], mesh_2d())
    tensor = lc.call_with_layout(ones, layout, (6, 4))
    assert_components(driver, adapter, tensor, [np.ones((2, 2))] * 6, what="call_with_layout(ones)")
    assert lc.fetch_layout(tensor) == layout


def test_variable_keeps_its_layout(driver: lc.driver.Driver, adapter: ConformanceAdapter) -> None:
    ones = adapter.ones_fn()
    layout = lc.Layout([UNSHARDED, UNSHARDED], mesh_1d())
    v = lc.DVariable(initial_value=lc.call_with_layout(ones, layout, (64, 32)))
    assert v.layout == layout
    assert lc.fetch_layout(v) == layout
    assert_components(driver, adapter, v.value, [np.ones((64, 32))] * 6, what="DVariable initial value")

    twos = 2 * np.ones((64, 32), dtype=driver.component_to_numpy(lc.unpack(v.value)[0]).dtype)
    v.assign(lc.distribute_tensor(adapter.from_numpy(twos), layout))
    assert_components(driver, adapter, v.value, [twos] * 6, what="after assign of a same-layout value")

    another_mesh = mesh_2d()
    other = lc.call_with_layout(ones, lc.Layout([UNSHARDED, UNSHARDED], another_mesh), (64, 32))
    with pytest.raises(lc.LayoutMismatchError) as info:
        v.assign(other)
    assert isinstance(info.value, lc.LayoutError) and isinstance(info.value, ValueError)
    assert info.value.expected == layout
    assert info.value.actual == lc.fetch_layout(other)
    # The refused assignment changed nothing.
    assert v.layout == layout and lc.fetch_layout(v) == layout
    assert_components(driver, adapter, v.value, [twos] * 6, what="after the refused assign")
