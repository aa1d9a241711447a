"""``layoutcore checkpoint inspect|plan``: tables, --json, and errors as one line."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

import layoutcore as lc
from layoutcore import Layout, Mesh, checkpoint
from layoutcore.cli import main


@pytest.fixture
def saved(tmp_path: Path) -> Path:
    mesh = Mesh((8,), ("x",))
    value = np.zeros((64, 32), np.float32)
    checkpoint.save(tmp_path / "c", {"w": lc.distribute_tensor(value, Layout(("x", None), mesh)), "step": 3})
    return tmp_path / "c"


def test_inspect_table_and_json(saved: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["checkpoint", "inspect", str(saved)]) == 0
    out = capsys.readouterr().out
    assert "2 tensors" in out and "(64, 32)" in out and "float32" in out and "Layout[x, unsharded]" in out
    assert main(["checkpoint", "inspect", str(saved), "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["total_bytes"] == 64 * 32 * 4 + 8
    assert lc.TensorSpec.from_dict(data["tensors"]["w"]) == checkpoint.inspect(saved).tensors["w"]


def test_plan_matches_read_plan(saved: Path, capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    args = ["checkpoint", "plan", str(saved), "--mesh", "x=8", "--layout", "none,x", "--process-devices", "2"]
    assert main([*args, "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    mesh = Mesh((8,), ("x",))
    expected = checkpoint.read_plan(
        saved, {"w": Layout((None, "x"), mesh), "step": Layout((), mesh)}, process_devices=[2]
    )
    assert data["read_bytes"] == expected.read_bytes and data["floor_bytes"] == expected.floor_bytes
    assert main(args) == 0
    assert "read / floor" in capsys.readouterr().out
    rules = tmp_path / "rules.json"
    rules.write_text(json.dumps({"mesh": "x=8", "rules": {"w": ["x", None]}}))
    assert main(["checkpoint", "plan", str(saved), "--rules", str(rules), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["floor_bytes"] == 64 * 32 * 4 + 8


def test_errors_are_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["checkpoint", "inspect", str(tmp_path / "nothing")]) == 1
    err = capsys.readouterr().err
    assert err.startswith("layoutcore checkpoint inspect: error:") and "does not exist" in err
    assert main(["checkpoint", "plan", str(tmp_path)]) == 2
    assert "--rules" in capsys.readouterr().err
