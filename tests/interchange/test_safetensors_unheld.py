"""A stored tensor of a dtype layoutcore cannot hold is refused for that tensor alone (docs/design.md#dtypes).

The file is written by hand per the safetensors format (frameworks/unheld_safetensors.py), not by
layoutcore's writer: ``F32`` "w", ``F8_E8M0`` "scales" (MX block scales) and ``F4`` "packed".
``inspect`` lists all three, the F4 one as a ``RefusedValue`` naming its dtype; a load that asks for it
raises ``UnsupportedLayoutError`` naming the tensor and ``F4``; loads of the other tensors (an index
naming them) work, the F8_E8M0 one bit for bit. The other drivers: frameworks/test_unheld_dtypes_frameworks.py.
"""

from __future__ import annotations

import importlib.util
import json
import struct
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest

import layoutcore as lc
from layoutcore import checkpoint
from layoutcore.checkpoint._foreign import RefusedValue

_spec = importlib.util.spec_from_file_location(
    "unheld_safetensors", Path(__file__).resolve().parent / "frameworks" / "unheld_safetensors.py"
)
assert _spec is not None and _spec.loader is not None
unheld = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(unheld)


def test_inspect_lists_all_three(tmp_path: Path) -> None:
    info = checkpoint.inspect(unheld.write(tmp_path))
    assert {p: s.dtype for p, s in info.tensors.items()} == {"w": "float32", "scales": "float8_e8m0fnu"}
    assert info.tensors["w"].shape == (4, 2) and info.tensors["scales"].shape == (8,)
    refused = info.values["packed"]
    assert isinstance(refused, RefusedValue) and refused.dtype == "F4" and refused.path == "packed"
    assert "F4" in refused.message and "[4, 4]" in refused.message
    assert refused.file.endswith("model.safetensors")


def test_a_load_that_asks_for_the_f4_tensor_is_refused_naming_it(tmp_path: Path) -> None:
    with pytest.raises(lc.UnsupportedLayoutError, match=r"'packed' has dtype F4") as info:
        checkpoint.load(unheld.write(tmp_path), driver="numpy")
    assert info.value.feature == "dtype" and info.value.value == "F4"


def test_the_other_tensors_load_the_e8m0_scales_bit_for_bit(tmp_path: Path) -> None:
    unheld.write(tmp_path)
    loaded = checkpoint.load(tmp_path / unheld.HELD_INDEX, driver="numpy")
    assert set(loaded) == {"w", "scales"}
    w = lc.to_numpy(loaded["w"])
    assert w.dtype == np.float32 and w.reshape(-1).tolist() == unheld.W
    scales = lc.to_numpy(loaded["scales"])
    assert scales.dtype == np.dtype(ml_dtypes.float8_e8m0fnu)
    assert scales.view(np.uint8).tobytes() == unheld.SCALES
    with np.errstate(invalid="ignore"):
        as_float = scales.astype(np.float64).tolist()
    assert as_float[:7] == [2.0 ** (b - 127) for b in unheld.SCALES[:7]] and np.isnan(as_float[7])


def test_an_f4_tensor_whose_bytes_do_not_fit_is_refused_with_the_file(tmp_path: Path) -> None:
    """Even a tensor that is not loaded is checked against the file: 16 F4 elements need 8 bytes."""
    header = json.dumps({"packed": {"dtype": "F4", "shape": [4, 4], "data_offsets": [0, 9]}}).encode()
    file = tmp_path / "bad.safetensors"
    file.write_bytes(struct.pack("<Q", len(header)) + header + bytes(9))
    with pytest.raises(lc.CheckpointError, match=r"'packed'.*needs 8"):
        checkpoint.inspect(file)


def test_export_of_e8m0_writes_f8_e8m0(tmp_path: Path) -> None:
    """layoutcore's own export names float8_e8m0fnu F8_E8M0 (read back here by its header bytes)."""
    unheld.write(tmp_path)
    out = tmp_path / "export"
    checkpoint.export_safetensors(tmp_path / unheld.HELD_INDEX, out)
    shard = next(out.glob("*.safetensors"))
    raw = shard.read_bytes()
    (n,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8 : 8 + n])
    assert header["scales"]["dtype"] == "F8_E8M0"
    begin, end = header["scales"]["data_offsets"]
    assert raw[8 + n + begin : 8 + n + end] == unheld.SCALES
