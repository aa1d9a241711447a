"""New NumPy tensors from a foreign checkpoint: each tensor read whole, its blocks views of it.

Oracle: the arrays the safetensors library wrote, sliced by the layouts' pure shard math
(``Layout.device_slices``); the bytes the kernel was asked for (``rchar``) against the read plan.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
import safetensors.numpy as stn

import layoutcore as lc
from layoutcore import checkpoint
from layoutcore.checkpoint._planner import plan
from layoutcore.checkpoint._whole import whole_tensor_reads
from layoutcore.driver._registry import get_driver

MESH = lc.Mesh((4, 2), ("x", "y"))


@pytest.fixture
def weights(tmp_path: Path) -> tuple[Path, dict[str, np.ndarray]]:
    rng = np.random.default_rng(3)
    value = {"w": rng.standard_normal((64, 48)).astype(np.float32), "b": np.arange(48, dtype=np.int16)}
    stn.save_file(value, str(tmp_path / "model.safetensors"))
    return tmp_path / "model.safetensors", value


def _rchar() -> int:
    with open("/proc/self/io") as f:
        return int(next(line for line in f if line.startswith("rchar:")).split()[1])


def _root(a: np.ndarray) -> Any:
    while isinstance(a.base, np.ndarray):
        a = a.base
    return a


@pytest.mark.parametrize("axes", [(None, "x"), ("y", "x"), (("x", "y"), None), (None, None)])
def test_blocks_are_views_of_one_read_of_the_tensor(weights: tuple[Path, dict[str, np.ndarray]], axes: tuple) -> None:
    path, value = weights
    layout = lc.Layout(axes, MESH)
    target = {"w": layout, "b": lc.Layout(("x",), MESH)}
    checkpoint.load(path, target, driver="numpy")  # warm: imports and the page cache
    expected = checkpoint.read_plan(path, target, driver="numpy")
    with checkpoint.open(path) as src:  # the header read on opening
        probe = -_rchar()
        before = _rchar()
        probe += before  # what reading /proc/self/io adds itself
        out = src.load(target, driver="numpy")
        assert _rchar() - before - probe == expected.read_bytes  # the floor, once
    blocks = lc.unpack(out["w"])
    for block, index in zip(blocks, layout.device_slices(value["w"].shape), strict=True):
        assert block.dtype == np.float32 and block.tobytes() == np.ascontiguousarray(value["w"][index]).tobytes()
        assert not block.flags.writeable
    if axes != (None, None):  # several distinct blocks: views of one array
        assert len({id(_root(b)) for b in blocks}) == 1
        assert all(b.strides == value["w"].strides for b in blocks)  # rows of the whole tensor, not of a block
    assert lc.to_numpy(out["b"]).tobytes() == value["b"].tobytes()
    assert lc.fetch_layout(out["w"]) == layout


def test_only_where_blocks_tile_the_tensor_and_the_driver_shares(weights: tuple[Path, dict[str, np.ndarray]]) -> None:
    path, _ = weights
    numpy = get_driver("numpy")
    columns = lc.Layout((None, "x"), MESH)

    def pack(drv: Any, tl: Any, blocks: list[np.ndarray]) -> Any:
        return "regular"

    with checkpoint.open(path) as src:
        every = plan(src, {"w": columns}, lambda p, layout: list(range(layout.mesh.size)), only=["w"])
        half = plan(src, {"w": columns}, lambda p, layout: [0, 4], only=["w"])  # columns 0 and 2 of 4: a gap
        whole, packs = whole_tensor_reads(every, numpy, pack)
        assert whole[0].geometry.boxes == (((0, 0), (64, 48)),) and len(every[0].geometry.boxes) == 4
        assert whole[0].geometry.read_bytes == every[0].geometry.read_bytes
        block = np.zeros((64, 48), np.float32)
        got = packs(numpy, whole[0], [block] * len(whole[0].geometry.box_of))
        assert all(_root(b) is block for b in lc.unpack(got))
        kept, packs = whole_tensor_reads(half, numpy, pack)
        assert kept[0].geometry is half[0].geometry and packs(numpy, kept[0], []) == "regular"

        class Snapshot:
            input_aliasing = "snapshot"

        kept, same = whole_tensor_reads(every, Snapshot(), pack)
        assert kept[0].geometry is every[0].geometry and same is pack
