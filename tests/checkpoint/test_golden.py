"""The golden checkpoint (``golden/v1``, format version 1, written once by ``golden/make_golden.py``).

It loads with the values computed here (not read from the writer), bit for bit, under its saved
layouts and another; and today's ``save`` of the same tree writes the same files, byte for byte, so
that a change of the on-disk format cannot pass unnoticed.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import ml_dtypes
import numpy as np
import pytest

import layoutcore as lc
from layoutcore import Layout, Mesh, checkpoint

GOLDEN = Path(__file__).with_name("golden") / "v1"

#: name -> NumPy dtype, spelled out here (not through layoutcore's dtype table)
DTYPES: dict[str, Any] = {
    "bool": np.bool_,
    "int8": np.int8,
    "int16": np.int16,
    "int32": np.int32,
    "int64": np.int64,
    "uint8": np.uint8,
    "uint16": np.uint16,
    "uint32": np.uint32,
    "uint64": np.uint64,
    "float16": np.float16,
    "bfloat16": ml_dtypes.bfloat16,
    "float32": np.float32,
    "float64": np.float64,
    "complex64": np.complex64,
    "complex128": np.complex128,
    "float8_e4m3fn": ml_dtypes.float8_e4m3fn,
    "float8_e5m2": ml_dtypes.float8_e5m2,
}
GRID = Mesh((2, 2), ("x", "y"))
CASES = (((5, 3), ("x", "y")), ((7,), (("x", "y"),)), ((3, 5), (None, "x")))


def _expected(name: str, shape: tuple[int, ...]) -> np.ndarray[Any, Any]:
    """The value the generator wrote: bytes ``(37 * i + 11) % 256`` (bool: ``i % 3 == 0``)."""
    n = int(np.prod(shape))
    if name == "bool":
        return np.array([i % 3 == 0 for i in range(n)], dtype=np.bool_).reshape(shape)
    dtype = np.dtype(DTYPES[name])
    raw = bytes((37 * i + 11) % 256 for i in range(n * dtype.itemsize))
    return np.frombuffer(raw, dtype=dtype).reshape(shape)


def _cases() -> dict[str, tuple[tuple[int, ...], Layout]]:
    return {f"params/{name}": (CASES[k % 3][0], Layout(CASES[k % 3][1], GRID)) for k, name in enumerate(DTYPES)}


def test_golden_checkpoint_loads_bit_for_bit() -> None:
    info = checkpoint.inspect(GOLDEN)
    cases = _cases()
    assert info.format_version == 1
    assert set(info.tensors) == {*cases, "step"}
    out = checkpoint.load(GOLDEN, driver="numpy")
    for path, (shape, layout) in cases.items():
        name = path.split("/")[1]
        want = _expected(name, shape)
        got = out["params"][name]
        assert lc.fetch_layout(got) == layout, path
        assert info.tensors[path].dtype == name and info.tensors[path].shape == shape
        host = lc.to_numpy(got)
        assert host.dtype == want.dtype and host.tobytes() == want.tobytes(), path
        # each device's block is its slice of the value
        for component, sl in zip(lc.unpack(got), layout.device_slices(shape), strict=True):
            assert np.asarray(component).tobytes() == np.ascontiguousarray(want[sl]).tobytes(), path
    assert np.asarray(out["step"]).dtype == np.int32 and int(np.asarray(out["step"])) == 7
    # under other layouts too (reads across the stored shards and chunks)
    other = {p: Layout.replicated(Mesh((3,), ("r",)), len(s)) for p, (s, _) in cases.items()}
    again = checkpoint.load(GOLDEN, other, driver="numpy")
    for path, (shape, _) in cases.items():
        name = path.split("/")[1]
        assert lc.to_numpy(again["params"][name]).tobytes() == _expected(name, shape).tobytes(), path


def _files(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def test_todays_save_writes_the_golden_bytes(tmp_path: Path) -> None:
    tree = {
        "params": {
            path.split("/")[1]: lc.distribute_tensor(_expected(path.split("/")[1], shape), layout, driver="numpy")
            for path, (shape, layout) in _cases().items()
        },
        "step": np.array(7, dtype=np.int32),
    }
    read_layouts = {"params/float32": Layout(("x", None), Mesh((4,), ("x",)))}
    checkpoint.save(tmp_path / "v1", tree, read_layouts=read_layouts)
    golden, today = _files(GOLDEN), _files(tmp_path / "v1")
    assert sorted(today) == sorted(golden)
    changed = [f for f in golden if golden[f] != today[f]]
    assert not changed, f"save writes other bytes than format version 1 for {changed}"


def test_golden_files_are_small_and_complete() -> None:
    files = _files(GOLDEN)
    assert sum(map(len, files.values())) < 64 << 10
    assert set(files) == set(checkpoint.inspect(GOLDEN).files)
    assert not [f for f in files if os.path.basename(f).startswith(".")]


def test_a_corrupted_golden_shard_is_refused(tmp_path: Path) -> None:
    """The fixture's checksums are live: one flipped bit in a copy is a CheckpointError naming the file."""
    import shutil

    copy = tmp_path / "v1"
    shutil.copytree(GOLDEN, copy)
    shard = next(p for p in sorted((copy / "params" / "float64").rglob("*")) if p.is_file() and p.name != "zarr.json")
    data = bytearray(shard.read_bytes())
    data[0] ^= 1
    shard.write_bytes(bytes(data))
    with pytest.raises(lc.CheckpointError, match="float64"):
        checkpoint.load(copy, driver="numpy")


E8M0 = Path(__file__).with_name("golden") / "v1_float8_e8m0fnu"
#: the float8_e8m0fnu fixture's tensors (written by ``make_golden.py float8_e8m0fnu``): CASES[:2]
E8M0_CASES = {f"params/e8m0_{k}": (shape, Layout(axes, GRID)) for k, (shape, axes) in enumerate(CASES[:2])}


def _e8m0(shape: tuple[int, ...]) -> np.ndarray[Any, Any]:
    n = int(np.prod(shape))
    return np.frombuffer(bytes((37 * i + 11) % 256 for i in range(n)), dtype=ml_dtypes.float8_e8m0fnu).reshape(shape)


def test_float8_e8m0fnu_golden_loads_bit_for_bit_and_todays_save_writes_its_bytes(tmp_path: Path) -> None:
    info = checkpoint.inspect(E8M0)
    assert info.format_version == 1 and set(info.tensors) == {*E8M0_CASES, "step"}
    out = checkpoint.load(E8M0, driver="numpy")
    for path, (shape, layout) in E8M0_CASES.items():
        got, want = out["params"][path.split("/")[1]], _e8m0(shape)
        assert info.tensors[path].dtype == "float8_e8m0fnu" and lc.fetch_layout(got) == layout
        host = lc.to_numpy(got)
        assert host.dtype == want.dtype and host.tobytes() == want.tobytes(), path
    tree = {
        "params": {
            path.split("/")[1]: lc.distribute_tensor(_e8m0(shape), layout, driver="numpy")
            for path, (shape, layout) in E8M0_CASES.items()
        },
        "step": np.array(7, dtype=np.int32),
    }
    checkpoint.save(tmp_path / "today", tree)
    golden, today = _files(E8M0), _files(tmp_path / "today")
    assert sorted(today) == sorted(golden)
    assert not [f for f in golden if golden[f] != today[f]], "save writes other bytes than the float8_e8m0fnu fixture"


def test_float8_e8m0fnu_edge_chunks_padded_with_nan_by_the_earlier_writer_still_load(tmp_path: Path) -> None:
    """Before zero bytes, the writer padded edge chunks with the dtype's 0, which for float8_e8m0fnu is
    NaN (``0xFF``): such a chunk, read in part, is checked with that padding too, and a flipped bit
    is still refused."""
    import shutil

    import google_crc32c

    copy = tmp_path / "legacy"
    shutil.copytree(E8M0, copy)
    shard = copy / "params" / "e8m0_0" / "c" / "1" / "1"  # rows 3-4, column 2 of a (5, 3) tensor in (3, 2) chunks
    raw = bytearray(shard.read_bytes())
    chunk = bytearray(raw[:6])  # the (3, 2) chunk, C order: in the tensor are elements (0, 0) and (1, 0)
    for k in (1, 3, 4, 5):
        assert chunk[k] == 0  # today's writer: zero bytes
        chunk[k] = 0xFF
    raw[:10] = bytes(chunk) + google_crc32c.value(bytes(chunk)).to_bytes(4, "little")
    shard.write_bytes(bytes(raw))
    out = checkpoint.load(copy, driver="numpy")
    assert lc.to_numpy(out["params"]["e8m0_0"]).tobytes() == _e8m0((5, 3)).tobytes()
    raw[0] ^= 1  # an element inside the tensor
    shard.write_bytes(bytes(raw))
    with pytest.raises(lc.CheckpointError, match="checksum mismatch"):
        checkpoint.load(copy, driver="numpy")
