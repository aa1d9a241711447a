"""``layoutcore checkpoint inspect|plan``: tables, --json, and errors as one line.

The console is pinned (plain text, a fixed width) so that no test depends on the terminal, its
width or the temporary path's length; summaries are checked in a 40-column console as well.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from _support import plain_console, plain_console_env

import layoutcore as lc
from layoutcore import Layout, Mesh, checkpoint
from layoutcore.cli import main


@pytest.fixture(autouse=True)
def _wide_console(monkeypatch: pytest.MonkeyPatch) -> None:
    """Plain text 160 columns wide: table cells hold their text on one line whatever runs the tests."""
    plain_console(monkeypatch, 160)


@pytest.fixture
def saved(tmp_path: Path) -> Path:
    mesh = Mesh((8,), ("x",))
    value = np.zeros((64, 32), np.float32)
    checkpoint.save(tmp_path / "c", {"w": lc.distribute_tensor(value, Layout(("x", None), mesh)), "step": 3})
    return tmp_path / "c"


def _row(out: str, first_cell: str) -> list[str]:
    """The cells of the table row whose first cell is ``first_cell``."""
    for line in out.splitlines():
        cells = [c.strip() for c in line.strip("│ ").split("│")]
        if cells[0] == first_cell:
            return cells
    raise AssertionError(f"no row {first_cell!r} in:\n{out}")


def test_inspect_table_and_json(saved: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["checkpoint", "inspect", str(saved)]) == 0
    out = capsys.readouterr().out
    summary = out.splitlines()[0]
    assert summary.startswith(f"{saved} (layoutcore): 2 tensors, ") and summary.endswith(" files")
    saved_layout = str(Layout(("x", None), Mesh((8,), ("x",))))  # "Layout[x, unsharded] on Mesh(x=8)"
    assert _row(out, "w")[1:4] == ["(64, 32)", "float32", saved_layout]
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
    out = capsys.readouterr().out
    assert f"{expected.amplification:.4f}x in {len(expected.reads)} ranges" in out.splitlines()[0]
    assert "read / floor" in out and _row(out, "w")[3] == f"{expected.tensors['w'][0] / expected.tensors['w'][1]:.4f}"
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


def test_summaries_stay_whole_in_a_narrow_console(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """In 40 columns, under a path longer than any console, each summary is still one line."""
    deep = tmp_path / ("a-long-directory-name-" * 8) / "c"
    checkpoint.save(deep, {"w": np.zeros((4, 2), np.float32)})
    plain_console(monkeypatch, 40)
    assert main(["checkpoint", "inspect", str(deep)]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith(f"{deep} (layoutcore): 1 tensors, ") and lines[0].endswith(" files")
    assert main(["checkpoint", "plan", str(deep), "--mesh", "x=2", "--layout", "x,none"]) == 0
    plan = checkpoint.read_plan(deep, {"w": Layout(("x", None), Mesh((2,), ("x",)))})
    summary = capsys.readouterr().out.splitlines()[0]
    assert summary.startswith("read ") and summary.endswith(f": {plan.amplification:.4f}x in {len(plan.reads)} ranges")


def test_layout_of_a_rank_no_tensor_has_is_refused(saved: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """--layout of rank 3 on a checkpoint of ranks 2 and 0 would plan everything replicated: refused."""
    assert main(["checkpoint", "plan", str(saved), "--mesh", "x=8", "--layout", "x,none,none", "--json"]) == 2
    out, err = capsys.readouterr()
    assert out == ""
    assert "has rank 3" in err and "'w' rank 2" in err and "'step' rank 0" in err and "--rules" in err
    # A rank some tensors have plans them, and names the others as replicated on stderr.
    assert main(["checkpoint", "plan", str(saved), "--mesh", "x=8", "--layout", "none,x", "--json"]) == 0
    out, err = capsys.readouterr()
    assert json.loads(out)["tensors"]["w"]["floor_bytes"] == 64 * 32 * 4
    assert "1 tensor(s) of other ranks are planned replicated: 'step' (rank 0)" in err


def test_json_into_a_closed_pipe_ends_quietly(saved: Path) -> None:
    """``layoutcore checkpoint plan --json | head``: the reader is gone before the first write (the read
    end is closed before the process starts), so the write fails every time; no traceback, status 141."""
    argv = ["checkpoint", "plan", str(saved), "--mesh", "x=8", "--layout", "none,x", "--json"]
    read_end, write_end = os.pipe()
    os.close(read_end)
    try:
        done = subprocess.run(
            [sys.executable, "-m", "layoutcore.cli", *argv],
            stdout=write_end,
            stderr=subprocess.PIPE,
            text=True,
            env=plain_console_env(160),
            timeout=300,
        )
    finally:
        os.close(write_end)
    assert "Traceback" not in done.stderr and "BrokenPipe" not in done.stderr, done.stderr
    assert done.returncode == 141, done.stderr
