"""Scatter reads (layoutcore.checkpoint._scatter): a stored piece read by the kernel straight into
the parts of several blocks. Oracle: the saved NumPy arrays sliced by the layouts' pure shard math."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import layoutcore as lc
from layoutcore import CheckpointError, Layout, Mesh, checkpoint
from layoutcore.checkpoint import _scatter
from layoutcore.driver import ALIGN, aligned_empty

MESH = Mesh((4,), ("x",))


def _blocks_equal(tensor: Any, value: np.ndarray, layout: Layout) -> None:
    for comp, sl in zip(lc.unpack(tensor), layout.device_slices(value.shape), strict=True):
        assert np.asarray(comp).tobytes() == value[sl].tobytes()


@pytest.mark.parametrize(
    ("shape", "saved", "target"),
    [
        ((64, 1024), ("x", None), (None, "x")),  # rows -> columns
        ((16, 64, 8), ("x", None, None), (None, "x", None)),  # trailing axis whole
        ((64, 1024), (None, None), (None, "x")),  # one piece -> 4 column blocks
    ],
)
def test_scatter_reads_layoutcore_pieces_bit_exact_without_verify(
    tmp_path: Path, spy: list[bool], shape: tuple[int, ...], saved: tuple[Any, ...], target: tuple[Any, ...]
) -> None:
    value = np.random.default_rng(1).standard_normal(shape).astype(np.float32)
    checkpoint.save(tmp_path / "ck", {"w": lc.distribute_tensor(value, Layout(saved, MESH), driver="numpy")})
    layout = Layout(target, MESH)
    out = checkpoint.load(tmp_path / "ck", {"w": layout}, driver="numpy", verify=False)
    assert spy and all(spy)
    _blocks_equal(out["w"], value, layout)
    spy.clear()
    checked = checkpoint.load(tmp_path / "ck", {"w": layout}, driver="numpy")  # checksums: the slab path
    assert not spy
    _blocks_equal(checked["w"], value, layout)


def test_scatter_reads_safetensors_columns_and_into(tmp_path: Path, spy: list[bool]) -> None:
    safetensors_numpy = pytest.importorskip("safetensors.numpy")
    value = np.arange(128 * 512, dtype=np.float32).reshape(128, 512)
    file = tmp_path / "m.safetensors"
    safetensors_numpy.save_file({"w": value, "b": value[:3, :5].copy()}, str(file))
    cols = Layout((None, "x"), MESH)
    out = checkpoint.load(file, {"w": cols}, driver="numpy")
    assert not spy  # new NumPy tensors: read whole, the blocks views of it (checkpoint/_whole.py)
    _blocks_equal(out["w"], value, cols)
    raw = file.read_bytes()
    header_end = 8 + int.from_bytes(raw[:8], "little")
    phase = (header_end + json.loads(raw[8:header_end])["w"]["data_offsets"][0]) % ALIGN
    shapes = cols.local_shapes(value.shape)
    # each component its own memory, at the file's phase: scattered into
    into = {"w": lc.pack([aligned_empty(s, np.float32, phase=phase) for s in shapes], cols, global_shape=value.shape)}
    filled = checkpoint.load(file, into=into)
    assert spy == [True]
    _blocks_equal(filled["w"], value, cols)
    # memory off the file's phase (a multiple of 16 bytes off): scattered all the same
    spy.clear()
    off = {"w": lc.pack([aligned_empty(s, np.float32, phase=(phase + 16) % ALIGN) for s in shapes], cols)}
    _blocks_equal(checkpoint.load(file, into=off)["w"], value, cols)
    assert spy == [True]


def test_uneven_and_small_parts_fall_back(tmp_path: Path, spy: list[bool]) -> None:
    value = np.random.default_rng(2).standard_normal((30, 10)).astype(np.float32)  # 10 columns over 4: parts < 512 B
    checkpoint.save(tmp_path / "ck", {"w": lc.distribute_tensor(value, Layout(("x", None), MESH), driver="numpy")})
    layout = Layout((None, "x"), MESH)
    out = checkpoint.load(tmp_path / "ck", {"w": layout}, driver="numpy", verify=False)
    assert spy and not any(spy)
    _blocks_equal(out["w"], value, layout)


def test_uneven_columns_scatter_into_blocks_of_different_widths(tmp_path: Path, spy: list[bool]) -> None:
    # 1030 columns over 4: blocks 258, 258, 258 and 256 wide (row strides differ), parts >= 1 KiB
    value = np.random.default_rng(3).standard_normal((48, 1030)).astype(np.float32)
    checkpoint.save(tmp_path / "ck", {"w": lc.distribute_tensor(value, Layout(("x", None), MESH), driver="numpy")})
    layout = Layout((None, "x"), MESH)
    assert len({s[1] for s in layout.local_shapes(value.shape)}) == 2
    out = checkpoint.load(tmp_path / "ck", {"w": layout}, driver="numpy", verify=False)
    assert spy and all(spy)
    _blocks_equal(out["w"], value, layout)


def test_into_loads_reuse_iovec_tables_and_read_the_new_bytes(
    tmp_path: Path, spy: list[bool], monkeypatch: pytest.MonkeyPatch
) -> None:
    builds: list[int] = []
    real = _scatter._tiles

    def counted(*args: Any) -> Any:
        builds.append(1)
        return real(*args)

    monkeypatch.setattr(_scatter, "_tiles", counted)
    rows, cols = Layout(("x", None), MESH), Layout((None, "x"), MESH)
    rng = np.random.default_rng(4)
    first, second = (rng.standard_normal((64, 1024)).astype(np.float32) for _ in range(2))
    checkpoint.save(tmp_path / "ck", {"w": lc.distribute_tensor(first, rows, driver="numpy")})
    into = {"w": lc.pack([np.zeros(s, np.float32) for s in cols.local_shapes(first.shape)], cols)}
    checkpoint.load(tmp_path / "ck", into=into, verify=False)
    assert spy and all(spy) and len(builds) == len(spy)  # one table per piece, built
    _blocks_equal(into["w"], first, cols)
    # the same path saved again with other values: the kept tables point at memory, not at bytes
    checkpoint.save(tmp_path / "ck", {"w": lc.distribute_tensor(second, rows, driver="numpy")}, overwrite=True)
    spy.clear()
    builds.clear()
    checkpoint.load(tmp_path / "ck", into=into, verify=False)
    assert spy and all(spy) and not builds  # every table reused
    _blocks_equal(into["w"], second, cols)
    # other memory (a load of new arrays; into= other arrays): tables built for it
    out = checkpoint.load(tmp_path / "ck", {"w": cols}, driver="numpy", verify=False)
    assert len(builds) == len(spy) // 2
    _blocks_equal(out["w"], second, cols)
    other = {"w": lc.pack([np.ones(s, np.float32) for s in cols.local_shapes(first.shape)], cols)}
    builds.clear()
    checkpoint.load(tmp_path / "ck", into=other, verify=False)
    assert builds
    _blocks_equal(other["w"], second, cols)


def test_a_truncated_file_names_tensor_and_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    safetensors_numpy = pytest.importorskip("safetensors.numpy")
    file = tmp_path / "m.safetensors"
    safetensors_numpy.save_file({"w": np.ones((64, 512), np.float32)}, str(file))
    data = file.read_bytes()
    with checkpoint.open(file) as source:  # the sizes were checked at open; the file shrinks after
        file.write_bytes(data[: len(data) - 4096])
        with pytest.raises(CheckpointError, match="changed size") as changed:
            source.load({"w": Layout((None, "x"), MESH)}, driver="numpy")  # refused before any read
        assert changed.value.file == str(file.resolve())
        # a file that shrinks while a load reads it (after the Source's check): the scatter read's own error
        monkeypatch.setattr(source, "_check_current", source._check_open)
        with pytest.raises(CheckpointError, match="truncated") as info:
            source.load({"w": Layout((None, "x"), MESH)}, driver="numpy")
    assert info.value.tensor == "w" and info.value.file is not None
