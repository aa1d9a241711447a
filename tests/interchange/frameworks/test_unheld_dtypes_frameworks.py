"""A safetensors file holding F32, F8_E8M0 and F4 tensors, loaded into JAX, torch and TensorFlow (each in
its own process: TF and torch cannot share one): F4 refused by name, F32 loaded, F8_E8M0 bit for bit
where the framework has float8_e8m0fnu (JAX, torch) and refused by name on TF (docs/design.md#dtypes)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from unheld_safetensors import write

HERE = Path(__file__).resolve().parent


@pytest.mark.parametrize("driver", ["jax", "torch", "tensorflow"])
def test_per_tensor_refusal_on_each_framework(tmp_path: Path, driver: str) -> None:
    write(tmp_path)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(HERE), os.environ.get("PYTHONPATH", "")])}
    env.pop("LAYOUTCORE_DRIVER", None)
    done = subprocess.run(
        [sys.executable, str(HERE / "unheld_worker.py"), driver, str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
    )
    assert done.returncode == 0 and done.stdout.strip().startswith("ok"), done.stdout + done.stderr[-4000:]
    assert ("no e8m0" in done.stdout) == (driver == "tensorflow")
