"""``layoutcore checkpoint inspect`` on foreign formats and ``layoutcore checkpoint convert``."""

from __future__ import annotations

import json
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest
import safetensors.numpy as stn
from _support import plain_console

import layoutcore as lc
import layoutcore.checkpoint as ckpt
from layoutcore.cli import main


@pytest.fixture(autouse=True)
def _wide_console(monkeypatch: pytest.MonkeyPatch) -> None:
    """Plain text 200 columns wide: cells hold their text on one line whatever runs the tests."""
    plain_console(monkeypatch, 200)


@pytest.fixture
def st_file(tmp_path: Path) -> tuple[Path, dict[str, np.ndarray]]:
    arrays = {
        "model.w": np.arange(48, dtype=np.float32).reshape(8, 6),
        "model.b": np.arange(8).astype(ml_dtypes.bfloat16),
    }
    file = tmp_path / "model.safetensors"
    stn.save_file(arrays, str(file))
    return file, arrays


def test_inspect_foreign_json_and_table(
    st_file: tuple[Path, dict[str, np.ndarray]], capsys: pytest.CaptureFixture[str]
) -> None:
    file, _ = st_file
    assert main(["checkpoint", "inspect", str(file), "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["format"] == "safetensors"
    assert data["layout_known"] == {"model.w": False, "model.b": False}
    assert data["boxes"]["model.w"] == [[[0, 0], [8, 6]]]
    assert data["tensors"]["model.b"]["dtype"] == "bfloat16" and data["tensors"]["model.w"]["shape"] == [8, 6]
    assert main(["checkpoint", "inspect", str(file)]) == 0
    out = capsys.readouterr().out
    assert out.splitlines()[0].startswith(f"{file} (safetensors): 2 tensors, ")
    assert "model.w" in out and "layout not stored" in out


def test_plan_on_foreign(st_file: tuple[Path, dict[str, np.ndarray]], capsys: pytest.CaptureFixture[str]) -> None:
    file, _ = st_file
    assert (
        main(
            ["checkpoint", "plan", str(file), "--mesh", "x=2", "--layout", "x,none", "--process-devices", "1", "--json"]
        )
        == 0
    )
    data = json.loads(capsys.readouterr().out)
    assert data["tensors"]["model.w"] == {"read_bytes": 4 * 6 * 4, "floor_bytes": 4 * 6 * 4}
    assert data["amplification"] == 1.0


def test_convert_both_ways(
    st_file: tuple[Path, dict[str, np.ndarray]], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    file, arrays = st_file
    assert main(["checkpoint", "convert", str(file), str(tmp_path / "lc")]) == 0
    loaded = ckpt.load(tmp_path / "lc", driver="numpy")
    for k, v in arrays.items():
        assert lc.to_numpy(loaded[k]).tobytes() == v.tobytes()
    assert main(["checkpoint", "convert", str(tmp_path / "lc"), str(tmp_path / "st"), "--to", "safetensors"]) == 0
    back = ckpt.load(tmp_path / "st", driver="numpy")
    for k, v in arrays.items():
        assert lc.to_numpy(back[k]).tobytes() == v.tobytes()
    assert main(["checkpoint", "convert", str(file), str(tmp_path / "st"), "--to", "safetensors"]) == 1
    assert "exists" in capsys.readouterr().err
