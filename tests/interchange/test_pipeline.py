"""Foreign formats through the one pipeline: ``checkpoint.open``, slab reads, ``into``.

Oracle: the arrays the safetensors library wrote, sliced by the layouts' pure shard math.
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest
import safetensors.numpy as stn

import layoutcore as lc
from layoutcore import checkpoint
from layoutcore.checkpoint import _slabs

MESH = lc.Mesh((8,), ("x",))


@pytest.fixture
def wide(tmp_path: Path) -> tuple[Path, np.ndarray]:
    value = np.random.default_rng(1).standard_normal((2000, 64)).astype(np.float32)  # 500 KiB, 2000 rows
    stn.save_file({"w": value, "b": value[0].copy()}, str(tmp_path / "model.safetensors"))
    return tmp_path / "model.safetensors", value


def test_open_names_the_format_and_loads(wide: tuple[Path, np.ndarray]) -> None:
    path, value = wide
    with checkpoint.open(path) as src:
        assert src.format == "safetensors"
        assert set(src.specs) == {"w", "b"} and src.specs["w"].shape == (2000, 64)
        out = src.load({"w": lc.Layout((None, "x"), MESH)}, driver="numpy")
    np.testing.assert_array_equal(lc.to_numpy(out["w"]), value)


def test_a_column_split_tensor_is_read_in_slabs_not_per_row(
    wide: tuple[Path, np.ndarray], monkeypatch: pytest.MonkeyPatch
) -> None:
    path, value = wide
    calls = []
    real = os.preadv

    def counting(fd: int, buffers: list, offset: int) -> int:  # type: ignore[type-arg]
        calls.append(offset)
        return real(fd, buffers, offset)

    monkeypatch.setattr(os, "preadv", counting)
    layout = lc.Layout((None, "x"), MESH)  # 8 column blocks: each row is 8 pieces of 32 bytes
    out = checkpoint.load(path, {"w": layout, "b": lc.Layout(("x",), MESH)}, driver="numpy")
    for block, index in zip(lc.unpack(out["w"]), layout.device_slices(value.shape), strict=True):
        np.testing.assert_array_equal(np.asarray(block), value[index])
    slabs = -(-value.nbytes // _slabs.SLAB_BYTES)
    assert len(calls) <= slabs + 1, len(calls)  # one per 1 MiB slab (and one for "b"); was 16 000


def test_into_from_safetensors(wide: tuple[Path, np.ndarray]) -> None:
    path, value = wide
    layout = lc.Layout(("x", None), MESH)
    into = {"w": lc.distribute_tensor(np.zeros_like(value), layout, driver="numpy")}
    out = checkpoint.load(path, into=into)
    assert out["w"] is into["w"]
    np.testing.assert_array_equal(lc.to_numpy(into["w"]), value)
