"""``benchmarks/bench_load_drivers.py`` runs end to end (a smoke test: the NumPy driver, one round, this
checkout compared with itself): every case is timed for both checkouts; never a time asserted."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_compare_run_times_every_case_for_both_checkouts() -> None:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), str(ROOT / "drivers")]))
    cmd = [sys.executable, str(ROOT / "benchmarks" / "bench_load_drivers.py"), "--compare", str(ROOT)]
    run = subprocess.run(
        [*cmd, "--rounds", "1", "--reps", "1", "--drivers", "numpy"],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert run.returncode == 0, run.stderr[-4000:]
    result = json.loads(run.stdout)
    assert result["benchmark"] == "bench_load_drivers" and result["statistic"] == "minimum"
    assert set(result["checkouts"]) == {"this", "other"}
    cases = {k for k in result if k.startswith("numpy/")}
    assert cases == {"numpy/lc_rows_to_cols", "numpy/lc_replicated", "numpy/st_cols"}
    for case in cases:
        for who in ("this", "other"):
            assert result[case][who]["min_s"] > 0 and result[case][who]["median_s"] >= result[case][who]["min_s"], case
