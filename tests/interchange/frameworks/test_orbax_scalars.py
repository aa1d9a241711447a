"""Orbax checkpoints holding 0-d arrays (every optax state has a ``count``) load on every driver.

Regression: ``np.ascontiguousarray`` made each 0-d block 1-d, and the load raised ``LayoutError:
Component ... has rank 1 ... but Layout[] ... has rank 0``. optax is not a test dependency: the
saver writes the same tree shape (a replicated 0-d jax.Array, an uncommitted one, a NumPy 0-d).
"""

from __future__ import annotations

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
