"""Fixtures for the JAX driver's own tests (the conformance suite runs separately under tox -e jax)."""

from __future__ import annotations

import importlib.util
import os

import pytest

import layoutcore as lc

# A missing framework fails the run; it never becomes a run of skips that reads as a pass.
if importlib.util.find_spec("jax") is None:
    raise ImportError("the JAX driver's tests need the jax extra: pip install 'layoutcore[jax]'")

from layoutcore_jax import JaxDriver
from layoutcore_jax._runtime import configure_cpu_devices

# These tests mean CPU devices (LAYOUTCORE_CPU_DEVICES of them); on a GPU host JAX's default platform
# would be the GPU. An explicit JAX_PLATFORMS wins, to run them on another platform on purpose.
os.environ.setdefault("JAX_PLATFORMS", "cpu")
# Test modules build flax models and optax states with plain JAX calls, which would start JAX with
# one CPU device; settle the count first, as the driver would (start-up itself is tested in subprocesses).
configure_cpu_devices()


@pytest.fixture
def driver() -> JaxDriver:
    """The registered jax driver (the root conftest puts the registry back after each test; instances persist)."""
    d = lc.get_driver("jax")
    assert isinstance(d, JaxDriver)
    return d


@pytest.fixture
def mesh32() -> lc.Mesh:
    """The DTensor guide's 3x2 mesh, abstract (bound to the driver's first 6 devices)."""
    return lc.Mesh((3, 2), ("x", "y"))
