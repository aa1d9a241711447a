"""The hand-over step (layoutcore.driver._fill): new tensors over owned blocks, existing tensors filled.

Oracle: the global value assembled with NumPy slicing by the pure shard math (Layout.device_slices).
The checkpoint tests run the same step on every driver (load(into=...)).
"""

from __future__ import annotations

import numpy as np
import pytest

import layoutcore as lc
from layoutcore.driver._fill import fill, fill_target, pack_owned

MESH = lc.Mesh((2, 2), ("x", "y"))
LAYOUT = lc.Layout(("x", None), MESH)  # replicated over y: two devices per block


def _blocks(target, value):
    blocks = target.empty_blocks()
    for block, (offsets, sizes) in zip(blocks, target.boxes, strict=True):
        block[...] = value[tuple(slice(o, o + s) for o, s in zip(offsets, sizes, strict=True))]
    return blocks


def test_fill_writes_numpy_components_in_place() -> None:
    old = np.arange(24, dtype=np.float32).reshape(4, 6)
    tensor = lc.distribute_tensor(old.copy(), LAYOUT, driver="numpy")
    components = lc.unpack(tensor, driver="numpy")
    target = fill_target("w", tensor, shape=(4, 6), dtype="float32")
    new = -old - 1
    out = fill(target, _blocks(target, new))
    assert out is tensor
    np.testing.assert_array_equal(lc.to_numpy(out), new)
    for before, after in zip(components, lc.unpack(out, driver="numpy"), strict=True):
        assert np.shares_memory(before, after)  # the same memory, written
    assert lc.fetch_layout(out) == LAYOUT


def test_replicas_are_one_block_and_pack_owned_keeps_it() -> None:
    tensor = lc.distribute_tensor(np.zeros((4, 6), np.int32), LAYOUT, driver="numpy")
    target = fill_target("w", tensor)
    blocks = target.empty_blocks()
    assert blocks[0] is blocks[1] and blocks[2] is blocks[3] and blocks[0] is not blocks[2]
    value = np.arange(24, dtype=np.int32).reshape(4, 6)
    packed = pack_owned(lc.get_driver("numpy"), _blocks(target, value), LAYOUT, (4, 6))
    np.testing.assert_array_equal(lc.to_numpy(packed), value)
    assert lc.fetch_layout(packed) == LAYOUT


def test_variable_is_assigned() -> None:
    with lc.use_driver("numpy"):
        var = lc.Variable(np.zeros((4, 6), np.float32), LAYOUT)
        target = fill_target("v", var, shape=(4, 6), dtype="float32")
        value = np.ones((4, 6), np.float32)
        assert fill(target, _blocks(target, value)) is var
        np.testing.assert_array_equal(lc.to_numpy(var.value), value)


@pytest.mark.parametrize(("shape", "dtype"), [((4, 5), "float32"), ((4, 6), "float64")])
def test_mismatch_is_refused_naming_the_path(shape: tuple[int, ...], dtype: str) -> None:
    tensor = lc.distribute_tensor(np.zeros((4, 6), np.float32), LAYOUT, driver="numpy")
    with pytest.raises(lc.LayoutMismatchError, match="'model/w'"):
        fill_target("model/w", tensor, shape=shape, dtype=dtype)


def test_not_a_distributed_tensor_is_refused() -> None:
    with pytest.raises(lc.LayoutError, match="'w' is not a distributed tensor"):
        fill_target("w", np.zeros(3), driver="numpy")


def test_wrong_block_shape_is_refused() -> None:
    tensor = lc.distribute_tensor(np.zeros((4, 6), np.float32), LAYOUT, driver="numpy")
    target = fill_target("w", tensor)
    blocks = [np.zeros((2, 5), np.float32)] * 4
    with pytest.raises(lc.LayoutError, match="block 0"):
        fill(target, blocks)
