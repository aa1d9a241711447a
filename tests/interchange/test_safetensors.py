"""Hugging Face safetensors: reading files the safetensors library wrote, bad headers, export."""

from __future__ import annotations

import json
import os
import struct
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest
import safetensors
import safetensors.numpy as stn
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from safetensors import safe_open

import layoutcore as lc
from layoutcore.checkpoint import _foreign as F
from layoutcore.checkpoint._foreign._safetensors import SAFETENSORS_DTYPES

MESH = lc.Mesh((2, 3), ("x", "y"))


def _tensors() -> dict[str, np.ndarray]:
    rng = np.random.default_rng(0)
    return {
        "model.embed.weight": rng.standard_normal((7, 5)).astype(np.float32),
        "model.layers.0.w": rng.standard_normal((6, 4, 3)).astype(ml_dtypes.bfloat16),
        "model.fp8": rng.standard_normal((5,)).astype(ml_dtypes.float8_e4m3fn),
        "model.fp8b": rng.standard_normal((4, 2)).astype(ml_dtypes.float8_e5m2),
        "model.ids": np.arange(11, dtype=np.int64),
        "scalar": np.array(3.5, dtype=np.float64),
    }


def _same_bits(a: np.ndarray, b: np.ndarray) -> bool:
    return a.dtype == b.dtype and a.shape == b.shape and a.tobytes() == b.tobytes()


@pytest.fixture
def single(tmp_path: Path) -> Path:
    file = tmp_path / "model.safetensors"
    stn.save_file(_tensors(), str(file))
    return file


LAYOUTS = [
    (None, None),
    ("x", None),
    (None, ("y", "x")),
    (("x", "y"), None),
]


@pytest.mark.parametrize("axes", LAYOUTS)
def test_load_any_layout_bit_exact(single: Path, axes: tuple) -> None:
    ref = _tensors()
    ckpt = F.open_foreign(single)
    assert F.detect(single) == "safetensors" and ckpt.format == "safetensors"
    assert F.detect(single.parent) == "safetensors" and F.detect(single.parent / "nothing") is None
    target = {k: lc.Layout(axes[: v.ndim] + (None,) * max(0, v.ndim - 2), MESH) for k, v in ref.items() if v.ndim}
    out = F.load(ckpt, target, driver="numpy")
    for key, expected in ref.items():
        got = out[key]
        if not expected.ndim:  # not in the target: its saved layout, one replicated block
            assert lc.fetch_layout(got).mesh.shape == (1,)
            got = lc.to_numpy(got)
        else:
            assert lc.fetch_layout(got) == target[key]
            # each device's component is the oracle's device_slices block
            for comp, sl in zip(lc.unpack(got), target[key].device_slices(expected.shape), strict=True):
                assert _same_bits(np.asarray(comp), np.ascontiguousarray(expected[sl]))
            got = lc.to_numpy(got)
        assert _same_bits(np.asarray(got), expected)


def test_target_none_loads_one_replicated_block_and_inspect(single: Path) -> None:
    info = F.inspect(F.open_foreign(single))
    ref = _tensors()
    assert set(info.tensors) == set(ref)
    for key, spec in info.tensors.items():
        assert spec.shape == ref[key].shape and spec.dtype == lc._dtypes.dtype_name(ref[key].dtype)
        assert info.boxes[key] == (((0,) * ref[key].ndim, ref[key].shape),)
        assert not info.layout_known[key]
    out = F.load(F.open_foreign(single), driver="numpy")
    for key, expected in ref.items():
        assert lc.fetch_layout(out[key]) == lc.Layout((None,) * expected.ndim, lc.Mesh((1,), ("d",)))
        assert _same_bits(lc.to_numpy(out[key]), expected)


def test_row_ranges_read_only_the_floor(single: Path) -> None:
    """Row-sharded loads read exactly the rows each device needs (row-contiguous format)."""
    ref = _tensors()
    ckpt = F.open_foreign(single)
    target = {k: lc.Layout(("x",) + (None,) * (v.ndim - 1), MESH) for k, v in ref.items() if v.ndim}
    for process in ([0, 1, 2], [3, 4, 5], [0]):
        plan = F.read_plan(ckpt, target, process_devices=process)
        assert plan.exact and plan.read_bytes == plan.floor_bytes
        expected = (
            sum(v[target[k].device_slices(v.shape)[process[0]]].nbytes for k, v in ref.items() if v.ndim)
            + ref["scalar"].nbytes * (0 in process)  # saved layout: one device, position 0
        )
        assert plan.floor_bytes == expected
    # column sharding of a row-major tensor: runs are per row, still nothing twice
    plan = F.read_plan(ckpt, {"model.embed.weight": lc.Layout((None, "y"), MESH)}, process_devices=[0])
    assert plan.amplification >= 1.0


def test_read_box_matches_numpy_slicing(single: Path) -> None:
    ref = _tensors()["model.layers.0.w"]
    t = F.open_foreign(single).tensors["model.layers.0.w"]
    rng = np.random.default_rng(1)
    ckpt = F.open_foreign(single)
    fds: dict[str, int] = {}
    for _ in range(30):
        lo = [int(rng.integers(0, d)) for d in ref.shape]
        size = [int(rng.integers(1, d - o + 1)) for o, d in zip(lo, ref.shape, strict=True)]
        (got,) = ckpt.read(t, [(tuple(lo), tuple(size))], fds)
        sl = tuple(slice(o, o + s) for o, s in zip(lo, size, strict=True))
        assert _same_bits(got, np.ascontiguousarray(ref[sl]))


def test_truncated_header(tmp_path: Path, single: Path) -> None:
    data = single.read_bytes()
    bad = tmp_path / "trunc.safetensors"
    bad.write_bytes(data[:20])
    with pytest.raises(lc.CheckpointError, match=r"trunc\.safetensors") as err:
        F.open_foreign(bad)
    assert err.value.file == str(bad)
    tiny = tmp_path / "tiny.safetensors"
    tiny.write_bytes(b"\x01\x02")
    with pytest.raises(lc.CheckpointError, match=r"tiny\.safetensors"):
        F.open_foreign(tiny)


def test_offsets_beyond_file(tmp_path: Path, single: Path) -> None:
    data = single.read_bytes()
    (n,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8 : 8 + n])
    data_size = len(data) - 8 - n
    header["model.ids"]["data_offsets"] = [data_size - 8, data_size - 8 + 88]  # 11 int64, 80 past the end
    text = json.dumps(header).encode()
    bad = tmp_path / "beyond.safetensors"
    bad.write_bytes(struct.pack("<Q", len(text)) + text + data[8 + n :])
    with pytest.raises(lc.CheckpointError, match=r"beyond\.safetensors.*model\.ids"):
        F.open_foreign(bad)
    # file cut short after a valid header: the last tensor's range lies past the end
    cut = tmp_path / "cut.safetensors"
    cut.write_bytes(data[:-3])
    with pytest.raises(lc.CheckpointError, match=r"cut\.safetensors"):
        F.open_foreign(cut)


def test_unknown_dtype_and_garbage_json(tmp_path: Path) -> None:
    text = json.dumps({"a": {"dtype": "F4", "shape": [2], "data_offsets": [0, 1]}}).encode()
    bad = tmp_path / "f4.safetensors"
    bad.write_bytes(struct.pack("<Q", len(text)) + text + b"\0")
    refused = F.open_foreign(bad).values["a"]  # listed, refused by itself (docs/design.md#dtypes), not the whole file
    assert refused.dtype == "F4" and "F4" in refused.message
    with pytest.raises(lc.UnsupportedLayoutError, match="'a' has dtype F4"):
        lc.checkpoint.load(bad, driver="numpy")
    junk = tmp_path / "junk.safetensors"
    junk.write_bytes(struct.pack("<Q", 4) + b"{{{{")
    with pytest.raises(lc.CheckpointError, match=r"junk\.safetensors"):
        F.open_foreign(junk)


def _hf_index_dir(tmp_path: Path) -> Path:
    """Shards + index as transformers writes them (two files, weight_map)."""
    ref = _tensors()
    keys = sorted(ref)
    d = tmp_path / "hf"
    d.mkdir()
    shards = {"model-00001-of-00002.safetensors": keys[:3], "model-00002-of-00002.safetensors": keys[3:]}
    weight_map = {}
    for name, ks in shards.items():
        stn.save_file({k: ref[k] for k in ks}, str(d / name))
        weight_map.update({k: name for k in ks})
    (d / "model.safetensors.index.json").write_text(
        json.dumps({"metadata": {"total_size": 0}, "weight_map": weight_map})
    )
    return d


def test_sharded_index(tmp_path: Path) -> None:
    d = _hf_index_dir(tmp_path)
    ref = _tensors()
    out = F.load(F.open_foreign(d), {"model.embed.weight": lc.Layout(("y", "x"), MESH)}, driver="numpy")
    assert _same_bits(lc.to_numpy(out["model.embed.weight"]), ref["model.embed.weight"])
    for k in ref:
        assert _same_bits(lc.to_numpy(out[k]), ref[k])
    # missing shard / bad index name the file
    (d / "model-00002-of-00002.safetensors").unlink()
    with pytest.raises(lc.CheckpointError, match="model-00002-of-00002"):
        F.open_foreign(d)
    (d / "model.safetensors.index.json").write_text("[1, 2]")
    with pytest.raises(lc.CheckpointError, match=r"index\.json"):
        F.open_foreign(d)


def _index_reader(directory: Path) -> dict[str, np.ndarray]:
    """transformers' way to read a sharded checkpoint: index -> weight_map -> safe_open per file."""
    index = json.loads((directory / "model.safetensors.index.json").read_text())
    out: dict[str, np.ndarray] = {}
    for shard in sorted(set(index["weight_map"].values())):
        with safe_open(str(directory / shard), framework="numpy") as f:
            keys = set(f.keys())
        # safetensors' own parser (its numpy backend has no float8): raw bytes, its dtype codes
        for key, entry in safetensors.deserialize((directory / shard).read_bytes()):
            assert key in keys and index["weight_map"][key] == shard
            dtype = lc._dtypes.numpy_dtype(SAFETENSORS_DTYPES[entry["dtype"]])
            out[key] = np.frombuffer(bytes(entry["data"]), dtype=dtype).reshape(entry["shape"])
    assert set(out) == set(index["weight_map"])
    assert index["metadata"]["total_size"] == sum(v.nbytes for v in out.values())
    return out


def test_export_round_trip_sharded(tmp_path: Path, single: Path) -> None:
    ref = _tensors()
    index = F.export_safetensors(single, tmp_path / "out", max_shard_size=120)
    shards = sorted(p.name for p in index.parent.glob("*.safetensors"))
    assert len(shards) > 1 and shards[0].startswith("model-00001-of-")
    got = _index_reader(index.parent)
    assert set(got) == set(ref)
    for k in ref:
        assert _same_bits(got[k], ref[k])
    # and back through layoutcore's reader of the index
    out = F.load(F.open_foreign(index.parent), {"model.layers.0.w": lc.Layout(("x", "y", None), MESH)}, driver="numpy")
    assert _same_bits(lc.to_numpy(out["model.layers.0.w"]), ref["model.layers.0.w"])
    with pytest.raises(lc.CheckpointError, match="exists"):
        F.export_safetensors(single, tmp_path / "out")
    F.export_safetensors(single, tmp_path / "out", overwrite=True)
    one = F.export_safetensors(single, tmp_path / "one")
    assert sorted(p.name for p in one.parent.iterdir()) == ["model.safetensors", "model.safetensors.index.json"]


def test_export_streams_in_blocks(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """No read asks for more than one block: memory stays within a block, below a shard."""
    from layoutcore.checkpoint._foreign import _export

    big = np.arange(64 * 50, dtype=np.float32).reshape(64, 50)
    stn.save_file({"big": big}, str(tmp_path / "big.safetensors"))
    monkeypatch.setattr(_export, "BLOCK_BYTES", 1000)
    sizes: list[int] = []
    real = F.ForeignCheckpoint.read

    def spy(self, tensor, boxes, fds):  # type: ignore[no-untyped-def]
        out = real(self, tensor, boxes, fds)
        sizes.extend(o.nbytes for o in out)
        return out

    monkeypatch.setattr(F.ForeignCheckpoint, "read", spy)
    index = F.export_safetensors(tmp_path / "big.safetensors", tmp_path / "o")
    assert max(sizes) <= 1000 and len(sizes) == -(-64 // 5)  # 5 rows of 200 bytes per block
    assert _same_bits(_index_reader(index.parent)["big"], big)


@given(cut=st.integers(0, 400), flips=st.lists(st.tuples(st.integers(0, 300), st.integers(0, 255)), max_size=4))
@settings(
    max_examples=int(os.environ.get("IC_FUZZ", "60")),
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
def test_corrupt_files_raise_checkpoint_error_or_read_exactly(
    tmp_path: Path, cut: int, flips: list[tuple[int, int]]
) -> None:
    """Truncated or byte-flipped files: CheckpointError naming the file, or a load whose every
    tensor has exactly its header's shape and size -- never another exception."""
    good = tmp_path / "good.safetensors"
    if not good.exists():
        stn.save_file({"a": np.arange(6, dtype=np.float32).reshape(2, 3), "b": np.arange(4, dtype=np.int16)}, str(good))
    data = bytearray(good.read_bytes())
    for pos, value in flips:
        if pos < len(data):
            data[pos] = value
    bad = tmp_path / "bad.safetensors"
    bad.write_bytes(bytes(data[: len(data) - cut]) if cut < len(data) else b"")
    try:
        ckpt = F.open_foreign(bad)
        out = F.load(ckpt, driver="numpy")
    except lc.CheckpointError as err:
        assert str(bad) in str(err)
        return
    for key, t in ckpt.tensors.items():
        assert lc.to_numpy(out[key]).shape == t.shape
