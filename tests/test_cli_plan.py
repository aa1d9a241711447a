"""``layoutcore plan`` and ``layoutcore relayout-plan``: JSON inputs, tables, ``--json``, exit statuses.

Expected numbers are hand arithmetic on the chunk rule, not the code under test.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from _support import plain_console

from layoutcore.cli._main import main

RULES = {
    "mesh": "data=4,model=2",
    "rules": {
        "encoder/.*/attention/(query|key|value)/kernel": [None, "model"],
        "embeddings": ["model", None],
        "mlp/kernel": [["data", "model"], None],
        "decoder/.*kernel": [None, "model"],
    },
}
VARIABLES = {
    "embeddings": [1000, 64],
    "encoder/layer_0/attention/query/kernel": [64, 64],
    "encoder/layer_0/attention/qeury/kernel": {"shape": [64, 64], "dtype": "bfloat16"},
    "encoder/layer_0/mlp/kernel": [64, 256],
    "encoder/layer_0/ln/scale": [64],
}


@pytest.fixture(autouse=True)
def _wide_console(monkeypatch: pytest.MonkeyPatch) -> None:
    """Plain text 200 columns wide, whatever terminal runs the tests (cells never wrap)."""
    plain_console(monkeypatch, 200)


def _files(tmp_path: Path, rules: object = RULES, variables: object = VARIABLES) -> tuple[str, str]:
    (tmp_path / "rules.json").write_text(json.dumps(rules), encoding="utf-8")
    (tmp_path / "vars.json").write_text(json.dumps(variables), encoding="utf-8")
    return str(tmp_path / "rules.json"), str(tmp_path / "vars.json")


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


# Per device: embeddings 500x64 fp32 = 128000; query 64x32 fp32 = 8192; qeury replicated 64x64 bf16 = 8192;
# mlp 8x256 fp32 = 8192; scale 64 fp32 = 256.
PER_DEVICE = 128000 + 8192 + 8192 + 8192 + 256


def test_plan_json(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rules, variables = _files(tmp_path)
    code, out, err = run(capsys, "plan", "--rules", rules, "--variables", variables, "--json")
    assert code == 0, err
    data = json.loads(out)
    assert data["device_bytes"] == [PER_DEVICE] * 8 and data["max_device_bytes"] == PER_DEVICE
    assert data["unused_patterns"] == ["decoder/.*kernel"]
    assert data["unmatched"] == [
        {
            "path": "encoder/layer_0/attention/qeury/kernel",
            "near_misses": ["encoder/.*/attention/(query|key|value)/kernel"],
        },
        {"path": "encoder/layer_0/ln/scale", "near_misses": []},
    ]
    assert data["replicated_bytes"] == 8192 + 256
    mlp = next(e for e in data["entries"] if e["path"] == "encoder/layer_0/mlp/kernel")
    assert mlp["axes"] == [["data", "model"], None] and mlp["shard_shape"] == [8, 256]


def test_plan_tables(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rules, variables = _files(tmp_path)
    code, out, _ = run(capsys, "plan", "--rules", rules, "--variables", variables)
    assert code == 0
    assert "Memory per device" in out and out.count("█" * 40) == 8  # equal devices: eight full bars
    assert "2 path(s) match no pattern" in out
    line = next(x for x in out.splitlines() if "qeury" in x and "attention/(query" in x)
    assert "8.0 KiB" in line
    assert "Unused patterns (no variable takes them): 'decoder/.*kernel'" in out
    assert "Biggest tensors held whole on every device" in out


def test_plan_strict_and_budget_fail_with_status_1(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rules, variables = _files(tmp_path)
    code, _, err = run(capsys, "plan", "--rules", rules, "--variables", variables, "--strict", "--json")
    assert code == 1 and "'encoder/layer_0/attention/qeury/kernel' (closest:" in err
    code, _, err = run(capsys, "plan", "--rules", rules, "--variables", variables, "--max-device-bytes", "100KiB")
    assert code == 1 and "max_device_bytes=102400" in err and "'embeddings'" in err
    code, _, _ = run(capsys, "plan", "--rules", rules, "--variables", variables, "--max-device-bytes", str(PER_DEVICE))
    assert code == 0


def test_plan_on_missing_error_in_the_rules(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rules, variables = _files(tmp_path, {**RULES, "on_missing": "error"})
    code, _, err = run(capsys, "plan", "--rules", rules, "--variables", variables)
    assert code == 2 and "qeury" in err and "on_missing='error'" in err


@pytest.mark.parametrize(
    ("rules", "variables", "message"),
    [
        ({"rules": {}}, VARIABLES, "expected an object with 'mesh' and 'rules'"),
        ({**RULES, "extra": 1}, VARIABLES, "unknown field(s) ['extra']"),
        ({**RULES, "rules": {"a": "x"}}, VARIABLES, "rule 'a' needs a list"),
        ({**RULES, "rules": {"(a+)+": ["data"]}}, VARIABLES, "nests an unbounded repeat"),
        (RULES, {"w": "big"}, "'w' needs a shape"),
        (RULES, [1, 2], "expected an object from path to shape"),
    ],
)
def test_plan_bad_json_is_a_one_line_usage_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], rules: object, variables: object, message: str
) -> None:
    rules_file, vars_file = _files(tmp_path, rules, variables)
    code, _, err = run(capsys, "plan", "--rules", rules_file, "--variables", vars_file)
    assert code == 2 and message in err and "Traceback" not in err and len(err.strip().splitlines()) == 1


def test_plan_missing_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run(capsys, "plan", "--rules", str(tmp_path / "no.json"), "--variables", str(tmp_path / "no.json"))
    assert code == 2 and "no.json" in err


def test_relayout_plan_json(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run(
        capsys, "relayout-plan", "--mesh", "x=4,y=2", "--from", "x,y", "--to", "y,x", "--shape", "4096,4096", "--json"
    )
    assert code == 0, err
    data = json.loads(out)
    n = 4096 * 4096 * 4
    # Device (i, j) needs an n/8 block; those with i // 2 == j hold half of it (receive n/16), the others none.
    assert data["floor_bytes"] == 3 * n // 4
    assert data["ingress_bytes"] == [n // 16, n // 8, n // 16, n // 8, n // 8, n // 16, n // 8, n // 16]
    assert data["transfer_count"] == 12 and "transfers" not in data
    code, out, _ = run(
        capsys, "relayout-plan", "--mesh", "x=2", "--from", "x", "--to", "none", "--shape", "4", "--json", "--transfers"
    )
    assert json.loads(out)["transfers"] == [
        {"src": 1, "dst": 0, "index": [[2, 4]], "nbytes": 8},
        {"src": 0, "dst": 1, "index": [[0, 2]], "nbytes": 8},
    ]


def test_relayout_plan_tables_and_dtype(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(
        capsys,
        "relayout-plan",
        "--mesh",
        "x=8",
        "--from",
        "x,none",
        "--to",
        "none,x",
        "--shape",
        "64,64",
        "--dtype",
        "bfloat16",
    )
    # S0 -> S1 on 8 devices: (n-1)/n^2 of 8 KiB per device = 896 B; 7 KiB in all, 56 transfers.
    assert code == 0 and "the minimum is 7.0 KiB in 56 transfers" in out and "Bytes per device" in out
    rows = [line for line in out.splitlines() if line.startswith("│ #")]
    assert len(rows) == 8 and all("│    896 B │ 896 B │" in row for row in rows), rows  # receives, sends


def test_relayout_plan_across_meshes_by_device_name(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run(
        capsys,
        "relayout-plan",
        "--mesh", "x=4", "--devices", "CPU:0,CPU:1,CPU:2,CPU:3", "--from", "x",
        "--to-mesh", "a=2", "--to-devices", "CPU:3,CPU:9", "--to", "none", "--shape", "8", "--json",
    )  # fmt: skip
    assert code == 0, err
    # CPU:3 holds 2 of 8 elements and needs all 8; CPU:9 holds nothing.
    assert json.loads(out)["ingress_bytes"] == [24, 32]


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--mesh", "x=4", "--from", "x", "--to", "z", "--shape", "8"], "'z'"),
        (["--mesh", "x=4", "--from", "x", "--to", "none", "--shape", "8,8"], "rank"),
        (["--mesh", "x=4", "--from", "x", "--to", "none", "--shape", "8", "--dtype", "float7"], "float7"),
    ],
)
def test_relayout_plan_bad_arguments(capsys: pytest.CaptureFixture[str], argv: list[str], message: str) -> None:
    code, _, err = run(capsys, "relayout-plan", *argv)
    assert code == 2 and message in err and "Traceback" not in err
