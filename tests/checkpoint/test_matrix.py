"""Save on each of the four drivers, load on each of the four: 16 pairs, one process per framework.

Each framework runs in its own subprocess, as its users run it. The interpreter is
this one where it has the framework (the tox ``checkpoint`` env installs all three), else the
framework's own virtual environment named by ``LAYOUTCORE_<NAME>_PYTHON`` or found under
``/work/venvs``.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

WORKER = Path(__file__).with_name("_matrix_worker.py")
DRIVERS = {"numpy": None, "jax": "jax", "torch": "torch", "tensorflow": "tensorflow"}
VENVS = {"jax": "jax", "torch": "torch", "tensorflow": "tf"}


def _python(driver: str) -> str | None:
    module = DRIVERS[driver]
    if module is None or importlib.util.find_spec(module) is not None:
        return sys.executable
    named = os.environ.get(f"LAYOUTCORE_{driver.upper()}_PYTHON")
    if named:
        return named
    candidate = Path("/work/venvs") / VENVS[driver] / "bin" / "python"
    return str(candidate) if candidate.exists() else None


def _run(driver: str, *args: str) -> dict[str, object]:
    python = _python(driver)
    if python is None:
        pytest.skip(f"no interpreter with {driver} installed")
    env = dict(os.environ, LAYOUTCORE_CPU_DEVICES="8", TF_CPP_MIN_LOG_LEVEL="3")
    out = subprocess.run(
        [python, str(WORKER), args[0], driver, *args[1:]], capture_output=True, text=True, env=env, timeout=400
    )
    assert out.returncode == 0, f"{driver} {args[0]} failed:\n{out.stderr[-4000:]}"
    return json.loads(out.stdout.strip().splitlines()[-1])  # type: ignore[no-any-return]


@pytest.fixture(scope="module")
def saved(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    root = tmp_path_factory.mktemp("matrix")
    paths = {}
    for driver in DRIVERS:
        if _python(driver) is None:
            continue
        paths[driver] = str(root / driver)
        _run(driver, "save", paths[driver])
    return paths


@pytest.mark.parametrize("loader", list(DRIVERS))
def test_load_every_drivers_checkpoint(saved: dict[str, str], loader: str) -> None:
    missing = sorted(set(DRIVERS) - set(saved))
    report = _run(loader, "load", *saved.values())
    results = report["results"]
    assert isinstance(results, list) and len(results) == len(saved)
    for result in results:
        # every leaf checked bit for bit, per device, with its layout; refusals are the typed ones
        assert len(result["checked"]) == 7, result
        assert set(result["refused"].values()) <= {"uneven", "multi_axis"}, result
        if loader in ("numpy", "torch", "jax"):
            assert "one_axis_to_two" not in result["refused"], result
    if missing:
        pytest.skip(f"saved on {sorted(saved)} only; no interpreter for {missing}")
