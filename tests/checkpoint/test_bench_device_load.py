"""``benchmarks/bench_device_load.py --quick`` runs end to end and writes a result a README row can read.

A smoke test (4 MiB, one round): it checks that every contender ran and what the file records,
never a time.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def test_quick_run_writes_every_contender(tmp_path: Path) -> None:
    pytest.importorskip("safetensors")
    out = tmp_path / "result.json"
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), str(ROOT / "drivers")]), BENCH_DIR=str(tmp_path))
    cmd = [sys.executable, str(ROOT / "benchmarks" / "bench_device_load.py"), "--quick", "--size-mib", "4"]
    run = subprocess.run(
        [*cmd, "--reps", "1", "--no-orbax", "--out", str(out)], env=env, capture_output=True, text=True, timeout=600
    )
    assert run.returncode == 0, run.stderr[-4000:]
    result = json.loads(out.read_text())
    assert result["statistic"] == "minimum" and result["quick"] is True
    assert result["device"]["kind"] in ("host", "gpu") and result["device"]["name"]
    seconds = result["seconds"]
    for name in ("preadv_fresh_t1", "preadv_prealloc_t8", "fromfile_kept", "into_cols", "load_new_cols_cold"):
        assert seconds[name] > 0, name
    # the raw scatter into new blocks ran (it checks its blocks against safetensors' own load first)
    assert [seconds[k] > 0 for k in seconds if k.startswith("st_scatter_fresh_t")] == [True]
    assert {"into_cols_noverify_vs_preadv_prealloc", "st_numpy_cols_over_load_file_distribute"} <= set(
        result["targets"]
    )
    for key in ("into_cols_noverify", "into_cols", "into_rows"):
        assert result["peak_rss_growth_bytes"][key] <= result["rss_budget_bytes"], key
