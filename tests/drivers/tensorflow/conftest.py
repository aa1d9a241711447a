"""Fixtures for the TensorFlow driver's own tests (the conformance suite runs separately under tox -e tensorflow)."""

from __future__ import annotations

import importlib.util

import pytest

import layoutcore as lc

# A missing framework fails the run; it never becomes a run of skips that reads as a pass.
if importlib.util.find_spec("tensorflow") is None:
    raise ImportError("the TensorFlow driver's tests need the tensorflow extra: pip install 'layoutcore[tensorflow]'")

from layoutcore_tensorflow import TensorFlowDriver


@pytest.fixture
def driver() -> TensorFlowDriver:
    """The registered tensorflow driver, made the active one (the root conftest resets both after each test)."""
    lc.set_driver("tensorflow")
    d = lc.get_driver()
    assert isinstance(d, TensorFlowDriver)
    assert len(d.list_devices()) >= 8, "these tests run with LAYOUTCORE_CPU_DEVICES unset (8 logical CPUs)"
    return d


@pytest.fixture
def mesh42() -> lc.Mesh:
    """A 4x2 mesh, abstract (bound to the driver's first 8 devices)."""
    return lc.Mesh((4, 2), ("x", "y"))


@pytest.fixture
def mesh32() -> lc.Mesh:
    """The DTensor guide's 3x2 mesh over CPU:0 .. CPU:5."""
    return lc.Mesh((3, 2), ("x", "y"), [f"CPU:{i}" for i in range(6)])
