"""Fixtures for the JAX driver's own tests (the conformance suite runs separately under tox -e jax)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

import layoutcore as lc

jax = pytest.importorskip("jax", reason="the JAX driver's tests need the jax extra: pip install 'layoutcore[jax]'")

from layoutcore_jax import JaxDriver  # noqa: E402

REPO = Path(__file__).resolve().parents[3]


@pytest.fixture
def driver() -> JaxDriver:
    """The registered jax driver (a fresh instance per test: the root conftest resets the registry)."""
    d = lc.get_driver("jax")
    assert isinstance(d, JaxDriver)
    return d


@pytest.fixture
def mesh32() -> lc.Mesh:
    """The DTensor guide's 3x2 mesh, abstract (bound to the driver's first 6 devices)."""
    return lc.Mesh((3, 2), ("x", "y"))


def run_python(
    code: str, *, env: dict[str, str] | None = None, timeout: float = 120
) -> subprocess.CompletedProcess[str]:
    """Run ``code`` in a fresh interpreter of this venv (JAX start-up state cannot be reset in-process)."""
    full_env = {k: v for k, v in os.environ.items() if not k.startswith(("LAYOUTCORE_", "JAX_", "XLA_FLAGS"))}
    full_env.update(env or {})
    return subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=full_env, timeout=timeout, cwd=REPO
    )
