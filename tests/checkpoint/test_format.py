"""The files: TensorStore and zarr-python open every array without layoutcore; damage is refused."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import layoutcore as lc
from layoutcore import CheckpointError, Layout, Mesh, checkpoint
from layoutcore._dtypes import ALL_DTYPES, as_bits, int_view_dtype, numpy_dtype

MESH8 = Mesh((8,), ("x",))
BITS_ONLY = {"bfloat16", "float8_e4m3fn", "float8_e5m2", "float8_e8m0fnu"}


def _value(shape: tuple[int, ...], dtype: str, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    dt = numpy_dtype(dtype)
    raw = rng.integers(0, 256, size=int(np.prod(shape)) * dt.itemsize, dtype=np.uint8)
    return (raw % 2 if dtype == "bool" else raw).view(dt).reshape(shape)


@pytest.fixture(scope="module")
def saved(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, np.ndarray]]:
    """Every dtype; even, uneven, multi-axis, replicated, 0-d and empty tensors; declared read layouts."""
    path = tmp_path_factory.mktemp("fmt") / "ckpt"
    oracle: dict[str, np.ndarray] = {}
    tree: dict[str, object] = {}
    for i, dtype in enumerate(ALL_DTYPES):
        oracle[f"dtypes/{dtype}"] = v = _value((16, 3), dtype, i)
        tree.setdefault("dtypes", {})[dtype] = lc.distribute_tensor(v, Layout(("x", None), MESH8))  # type: ignore[index]
    mesh32 = Mesh((3, 2), ("a", "b"))
    specs = {
        "uneven": ((10, 7), Layout(("a", "b"), mesh32)),
        "multi": ((24, 5), Layout((("b", "a"), None), mesh32)),
        "replicated": ((5, 4), Layout((None, None), mesh32)),
        "empty": ((0, 4), Layout(("a", None), mesh32)),
        "big": ((512, 256), Layout(("x", None), MESH8)),
    }
    for j, (name, (shape, layout)) in enumerate(specs.items()):
        oracle[name] = v = _value(shape, "float32", 100 + j)
        tree[name] = lc.distribute_tensor(v, layout)
    oracle["scalar"] = np.array(3.25)
    tree["scalar"] = 3.25
    read_layouts = {"big": Layout((None, "x"), MESH8), "uneven": Layout(("x", None), MESH8)}
    checkpoint.save(path, tree, read_layouts=read_layouts)
    return path, oracle


def _open_script() -> str:
    # No layoutcore import: only zarr-python, TensorStore and the JSON beside the arrays.
    return r"""
import json, sys, numpy as np, zarr, tensorstore as ts
root = sys.argv[1]
meta = json.load(open(root + "/layoutcore.json"))
out = {}
group = zarr.open_group(root, mode="r")
for path, entry in meta["tensors"].items():
    node = entry["node"]
    z = group[node][...]
    t = ts.open({"driver": "zarr3", "kvstore": {"driver": "file", "path": root + "/" + node}}).result().read().result()
    assert z.dtype == t.dtype and np.ascontiguousarray(z).tobytes() == np.ascontiguousarray(t).tobytes(), path
    out[path] = {"dtype": str(z.dtype), "shape": list(z.shape), "hex": np.ascontiguousarray(z).tobytes().hex()}
print(json.dumps(out))
"""


def test_tensorstore_and_zarr_open_every_array_without_layoutcore(saved: tuple[Path, dict[str, np.ndarray]]) -> None:
    path, oracle = saved
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    result = subprocess.run(
        [sys.executable, "-I", "-c", _open_script(), str(path)], capture_output=True, text=True, env=env, timeout=300
    )
    assert result.returncode == 0, result.stderr[-3000:]
    arrays = json.loads(result.stdout)
    assert set(arrays) == set(oracle)
    for name, value in oracle.items():
        got = arrays[name]
        dtype = str(value.dtype.name) if value.dtype.name not in BITS_ONLY else str(int_view_dtype(value.dtype.name))
        assert got["dtype"] == dtype and tuple(got["shape"]) == value.shape, name
        assert bytes.fromhex(got["hex"]) == np.ascontiguousarray(as_bits(value)).tobytes(), name


def test_layoutcore_json_records_true_dtype_and_spec(saved: tuple[Path, dict[str, np.ndarray]]) -> None:
    path, _ = saved
    meta = json.loads((path / "layoutcore.json").read_text())
    entry = meta["tensors"]["dtypes/bfloat16"]
    assert entry["storage_dtype"] == "uint16" and entry["spec"]["dtype"] == "bfloat16"
    zmeta = json.loads((path / entry["node"] / "zarr.json").read_text())
    assert zmeta["data_type"] == "uint16" and zmeta["attributes"]["layoutcore"]["dtype"] == "bfloat16"
    sharding = zmeta["codecs"][0]
    assert sharding["name"] == "sharding_indexed"
    assert sharding["configuration"]["index_codecs"][-1] == {"name": "crc32c"}
    # the declared columns layout refines the (64, 256) row shards into (64, 32) chunks
    assert meta["tensors"]["big"]["shard"] == [64, 256] and meta["tensors"]["big"]["chunk"] == [64, 32]


def test_replicated_blocks_are_stored_once(saved: tuple[Path, dict[str, np.ndarray]]) -> None:
    path, _ = saved
    shards = sorted(p.relative_to(path).as_posix() for p in (path / "replicated" / "c").rglob("*") if p.is_file())
    assert shards == ["replicated/c/0/0"]
    # uneven: 10 rows over 3 -> blocks 4, 4, 2; 7 columns over 2 -> 4, 3: six shards
    assert len([p for p in (path / "uneven" / "c").rglob("*") if p.is_file()]) == 6


def _damaged_copy(saved: Path, tmp_path: Path) -> Path:
    import shutil

    dst = tmp_path / "copy"
    shutil.copytree(saved, dst)
    return dst


def test_flipped_byte_raises_naming_tensor_and_file(saved: tuple[Path, dict[str, np.ndarray]], tmp_path: Path) -> None:
    path = _damaged_copy(saved[0], tmp_path)
    shard = path / "big" / "c" / "3" / "0"
    data = bytearray(shard.read_bytes())
    data[100] ^= 0x40
    shard.write_bytes(bytes(data))
    with pytest.raises(CheckpointError, match=r"checksum mismatch.*big/c/3/0") as info:
        checkpoint.load(path, {"big": Layout((None, "x"), MESH8)})
    assert info.value.tensor == "big" and info.value.file == "big/c/3/0"
    # verify=False trusts the files: the same bytes are read, the checksum is not computed
    out = checkpoint.load(path, {"big": Layout((None, "x"), MESH8)}, verify=False)
    assert np.count_nonzero(as_bits(lc.to_numpy(out["big"])) != as_bits(saved[1]["big"])) == 1


def test_flipped_byte_in_an_edge_chunk_raises(saved: tuple[Path, dict[str, np.ndarray]], tmp_path: Path) -> None:
    # "uneven" (10, 7) on 3x2: the last shard holds rows 8..9 and columns 4..6 of a 4x4 chunk; its
    # padding is not read, its checksum is, and is checked with zeros in the padding
    path = _damaged_copy(saved[0], tmp_path)
    shard = path / "uneven" / "c" / "2" / "1"
    data = bytearray(shard.read_bytes())
    data[0] ^= 0x01  # element (8, 4)
    shard.write_bytes(bytes(data))
    with pytest.raises(CheckpointError, match=r"checksum mismatch.*uneven/c/2/1") as info:
        checkpoint.load(path)
    assert info.value.tensor == "uneven"
    out = checkpoint.load(path, verify=False)
    assert np.count_nonzero(as_bits(lc.to_numpy(out["uneven"])) != as_bits(saved[1]["uneven"])) == 1


@pytest.mark.parametrize("where", ["first", "middle", "last", "checksum"])
def test_pieces_read_in_slabs_are_verified(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, where: str) -> None:
    from layoutcore.checkpoint import _slabs

    monkeypatch.setattr(_slabs, "SLAB_BYTES", 1000)  # 64 KiB pieces of 1 KiB rows: 1 row per slab
    value = _value((512, 256), "float32", 7)
    path = tmp_path / "ckpt"
    checkpoint.save(path, {"w": lc.distribute_tensor(value, Layout(("x", None), MESH8))})
    cols = {"w": Layout((None, "x"), MESH8)}
    assert np.array_equal(as_bits(lc.to_numpy(checkpoint.load(path, cols)["w"])), as_bits(value))
    shard = path / "w" / "c" / "2" / "0"
    data = bytearray(shard.read_bytes())
    at = {"first": 5, "middle": 64 * 1024 // 2 + 3, "last": 64 * 1024 - 1, "checksum": 64 * 1024}[where]
    data[at] ^= 0x10
    shard.write_bytes(bytes(data))
    with pytest.raises(CheckpointError, match=r"checksum mismatch.*w/c/2/0") as info:
        checkpoint.load(path, cols)
    assert info.value.tensor == "w" and info.value.file == "w/c/2/0"
    shard.write_bytes(bytes(data[: 64 * 1024 - 10]))
    with pytest.raises(CheckpointError, match=r"w/c/2/0.*truncated"):
        checkpoint.load(path, cols)


@pytest.mark.parametrize(
    ("shape", "spec"),
    [
        ((64, 12, 10), (None, "x", "y")),  # trailing axes cut: every slab row split over 4 x 2 blocks
        ((64, 10, 7), ("y", "x", None)),  # uneven blocks (10 over 4, 7 kept), rows cut too
        ((64, 33), (None, ("x", "y"))),  # a 2-d piece, 33 columns over 8 (5 each): the last block empty
    ],
)
@pytest.mark.parametrize("verify", [True, False])
def test_slab_copies_match_numpy_slicing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, shape: tuple[int, ...], spec: tuple, verify: bool
) -> None:
    """The slab path's copy plans (rows of each slab cut to every block's part) against NumPy's own
    slicing of the value by the shard math, with slabs of a few rows, so a piece spans many slabs."""
    from layoutcore.checkpoint import _read_plan, _slabs

    monkeypatch.setattr(_slabs, "SLAB_BYTES", 600)
    calls = []
    real = _read_plan.read_whole_in_slabs
    monkeypatch.setattr(_read_plan, "read_whole_in_slabs", lambda *a: calls.append(1) or real(*a))
    mesh = Mesh((4, 2), ("x", "y"))
    value = _value(shape, "float32", 11)
    path = tmp_path / "ckpt"
    checkpoint.save(path, {"w": lc.distribute_tensor(value, Layout(("x", None) + (None,) * (len(shape) - 2), mesh))})
    target = Layout(spec, mesh)
    got = checkpoint.load(path, {"w": target}, verify=verify)["w"]
    assert calls, "the slab path did not run"
    for component, where in zip(lc.unpack(got), target.device_slices(shape), strict=True):
        assert np.array_equal(as_bits(np.asarray(component)), as_bits(value[where]))


def test_truncated_and_missing_shards_raise(saved: tuple[Path, dict[str, np.ndarray]], tmp_path: Path) -> None:
    path = _damaged_copy(saved[0], tmp_path)
    shard = path / "dtypes" / "float32" / "c" / "5" / "0"
    shard.write_bytes(shard.read_bytes()[:10])
    with pytest.raises(CheckpointError, match=r"truncated.*dtypes/float32/c/5/0"):
        checkpoint.load(path)
    (path / "dtypes" / "float32" / "c" / "5" / "0").unlink()
    with pytest.raises(CheckpointError, match=r"dtypes/float32.*dtypes/float32/c/5/0"):
        checkpoint.load(path)
    (path / "layoutcore.json").unlink()
    with pytest.raises(CheckpointError, match="incomplete"):
        checkpoint.load(path)


def test_import_checkpoint_imports_no_framework() -> None:
    code = (
        "import sys, layoutcore.checkpoint as c, layoutcore\n"
        "bad = sorted(m for m in ('jax', 'torch', 'tensorflow', 'rich', 'zarr', 'tensorstore') if m in sys.modules)\n"
        "print(bad)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"


def test_crc32c_matches_the_standard_check_value_on_every_path() -> None:
    """CRC-32C of b"123456789" is 0xE3069283 (RFC 3720, B.4): the ctypes, google-crc32c and table paths."""
    from layoutcore import _crc

    check = b"123456789"
    arr = np.frombuffer(check, dtype=np.uint8).copy()
    assert _crc.crc32c(check) == 0xE3069283
    assert _crc.crc32c(arr) == 0xE3069283  # the GIL-releasing path when the library was found
    assert _crc.crc32c(arr[4:], _crc.crc32c(arr[:4])) == 0xE3069283
    ro = arr.copy()
    ro.flags.writeable = False
    assert _crc.crc32c(ro.reshape(3, 3)) == 0xE3069283
    assert _crc.crc32c(np.zeros(0, dtype=np.float32)) == 0
    values = np.arange(12345, dtype=np.float32)
    saved = (_crc._extend, _crc._g, _crc._warned_slow)
    try:
        expected = _crc.crc32c(values)
        _crc._extend = None  # google-crc32c's own API
        assert _crc.crc32c(values) == expected
        _crc._g = None  # the table-driven fallback (its once-only warning: tests/checkpoint/test_crc_warning.py)
        _crc._warned_slow = True
        assert _crc.crc32c(check) == 0xE3069283
        assert _crc.crc32c(values[:100]) == saved[1].value(values[:100].tobytes())
    finally:
        _crc._extend, _crc._g, _crc._warned_slow = saved
