"""``benchmarks/bench_device_save.py`` runs end to end (a smoke test, 4 MiB, one round): every
contender ran and recorded what the README and docs read; never a time."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def test_quick_run_records_every_contender(tmp_path: Path) -> None:
    pytest.importorskip("torch.distributed.tensor")
    out = tmp_path / "result.json"
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), str(ROOT / "drivers")]))
    cmd = [sys.executable, str(ROOT / "benchmarks" / "bench_device_save.py"), "--quick", "--size-mib", "4"]
    run = subprocess.run([*cmd, "--reps", "1", "--out", str(out)], env=env, capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stderr[-4000:]
    result = json.loads(out.read_text())
    assert result["statistic"] == "minimum" and result["bytes"] == 4 << 20
    names = {"host_zero_copy", "device_whole_copy", "device_staged", "torch_whole_copy", "torch_staged"}
    assert names <= set(result["results"])
    for name, r in result["results"].items():
        assert r["seconds_min"] > 0 and r["minor_faults"] >= 0 and r["peak_rss_growth_mib"] >= 0, name
