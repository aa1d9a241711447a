"""Orbax checkpoints holding 0-d arrays (every optax state has a ``count``) load on every driver.

Regression: ``np.ascontiguousarray`` made each 0-d block 1-d, and the load raised ``LayoutError:
Component ... has rank 1 ... but Layout[] ... has rank 0``. The first saver writes that tree shape by
hand (a replicated 0-d jax.Array, an uncommitted one, a NumPy 0-d); the second saves a real optax
state, whose empty ``EmptyState`` nodes Orbax records as ``None`` leaves with no array (the reader
tried to open one and raised ``CheckpointError``).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from test_cross_framework import run


@pytest.fixture(scope="module")
def orbax_scalars(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("orbax_scalars") / "ckpt"
    run("jax", "jax_orbax_scalars.py", str(out))
    return out


@pytest.mark.parametrize("driver", ["numpy", "jax", "torch", "tensorflow"])
def test_an_orbax_optimizer_state_with_scalars_loads(orbax_scalars: Path, driver: str) -> None:
    assert run(driver, "orbax_scalars_worker.py", driver, str(orbax_scalars)).strip().endswith(f"OK {driver}")


@pytest.fixture(scope="module")
def orbax_optax(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    out = tmp_path_factory.mktemp("orbax_optax") / "ckpt"
    oracle = run("jax", "jax_orbax_optax.py", str(out)).strip().splitlines()[-1]
    assert json.loads(oracle)["none"], oracle
    return out, oracle


@pytest.mark.parametrize("driver", ["numpy", "jax", "torch", "tensorflow"])
def test_a_real_optax_state_saved_by_orbax_loads(orbax_optax: tuple[Path, str], driver: str) -> None:
    path, oracle = orbax_optax
    assert run(driver, "orbax_optax_worker.py", driver, str(path), oracle).strip().endswith(f"OK {driver}")
