"""Shared fixtures for layoutcore's own tests (the conformance suite has its own)."""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest
from _support import DEVICES6
from hypothesis import settings

import layoutcore
from layoutcore import Mesh
from layoutcore.driver import _registry

# "ci" is hypothesis' built-in profile (derandomized, no deadline), chosen by tox through
# HYPOTHESIS_PROFILE=ci or by hypothesis itself when CI is set; "dev" keeps local runs short.
settings.register_profile("dev", max_examples=40, deadline=None)
# "fuzz": tests/test_fuzz.py's long run, 10 000 examples per target (HYPOTHESIS_PROFILE=fuzz).
settings.register_profile("fuzz", max_examples=10_000, deadline=None)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE") or ("ci" if os.environ.get("CI") else "dev"))


@pytest.fixture(autouse=True)
def _driver_selection_isolated(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Every test starts from the default selection (no env var, no set_driver) and registry."""
    monkeypatch.delenv(layoutcore.driver.DRIVER_ENV, raising=False)
    monkeypatch.delenv(layoutcore.driver.CPU_DEVICES_ENV, raising=False)
    factories = dict(_registry._discover())
    instances = dict(_registry._instances)
    layoutcore.set_driver(None)
    yield
    layoutcore.set_driver(None)
    with _registry._lock:
        _registry._factories = factories
        _registry._instances.clear()
        _registry._instances.update(instances)


@pytest.fixture
def mesh() -> Mesh:
    """The DTensor guide's 3x2 mesh over CPU:0 .. CPU:5."""
    return Mesh((3, 2), ("x", "y"), DEVICES6)


@pytest.fixture
def mesh6() -> Mesh:
    """The DTensor guide's 1-D mesh x=6 over CPU:0 .. CPU:5."""
    return Mesh((6,), ("x",), DEVICES6)
