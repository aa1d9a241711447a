"""Fixtures, report header and hypothesis profiles of the conformance suite.

The suite runs against whichever driver ``layoutcore.get_driver()`` gives, i.e. the one
``LAYOUTCORE_DRIVER`` names (default ``numpy``). Hypothesis profiles, picked with
``HYPOTHESIS_PROFILE`` or ``--hypothesis-profile``:

* ``ci`` (default): 30 examples per property, derandomized (the same examples every run, so a
  CI failure reproduces), no deadline (a framework's first call compiles).
* ``dev``: 60 random examples per property, with the example database.
* ``thorough``: 1000 random examples per property.
* ``smoke``: 10 derandomized examples per property, no shrinking: a quick first look at a new
  driver (and what the suite's own meta-test uses, where only pass/fail matters).
"""

from __future__ import annotations

import os

import pytest
from hypothesis import HealthCheck, Phase, settings

import layoutcore as lc

from .adapter import ConformanceAdapter, load_adapter

PROFILE_ENV = "HYPOTHESIS_PROFILE"
#: Per-test limit when pytest-timeout is installed and no --timeout was given: a driver that
#: hangs (a framework deadlock) fails that test with a stack dump instead of stalling the run.
TEST_TIMEOUT_S = 300
DEFAULT_PROFILE = "ci"

_common = {"deadline": None, "suppress_health_check": [HealthCheck.too_slow, HealthCheck.data_too_large]}
settings.register_profile("ci", max_examples=30, derandomize=True, database=None, print_blob=True, **_common)
settings.register_profile("dev", max_examples=60, **_common)
settings.register_profile("thorough", max_examples=1000, **_common)
settings.register_profile(
    "smoke", max_examples=10, derandomize=True, database=None, phases=[Phase.explicit, Phase.generate], **_common
)


def pytest_configure(config: pytest.Config) -> None:
    # --hypothesis-profile (hypothesis' own option) wins over the environment, then our default.
    chosen = config.getoption("hypothesis_profile", None) or os.environ.get(PROFILE_ENV) or DEFAULT_PROFILE
    settings.load_profile(chosen)


_HEADER_SHOWN = pytest.StashKey[bool]()


def pytest_report_header(config: pytest.Config) -> list[str]:
    """Name the driver under test, its capabilities, its devices and the hypothesis profile."""
    config.stash[_HEADER_SHOWN] = True
    return _header_lines()


def pytest_collection_finish(session: pytest.Session) -> None:
    # Under ``--pyargs`` pytest imports this conftest during collection, after the report
    # header was printed; print the header here instead, so every run names its driver.
    if session.config.stash.get(_HEADER_SHOWN, False):
        return
    reporter = session.config.pluginmanager.get_plugin("terminalreporter")
    if reporter is not None:
        for line in _header_lines():
            reporter.write_line(line)


def _header_lines() -> list[str]:
    name = lc.active_driver_name()
    try:
        driver = lc.get_driver()
    except lc.LayoutcoreError as exc:  # every test then errors with the same message
        return [f"layoutcore conformance: driver {name!r} UNAVAILABLE: {exc}"]
    declared = sorted(c.value for c in driver.capabilities)
    lacking = sorted(c.value for c in lc.Capability if c not in driver.capabilities)
    devices = driver.list_devices()
    return [
        f"layoutcore conformance: driver {driver.name!r} ({type(driver).__module__}.{type(driver).__qualname__}), "
        f"adapter {driver.conformance_adapter or '(none)'}",
        f"  capabilities: {', '.join(declared) or '(none)'}; refusals checked for: {', '.join(lacking) or '(none)'}",
        f"  devices ({len(devices)}): {', '.join(devices)}",
        f"  hypothesis profile: {settings.get_current_profile_name()}, max_examples={settings().max_examples}",
    ]


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if not config.pluginmanager.hasplugin("timeout") or config.getoption("timeout", None) or config.getini("timeout"):
        return
    for item in items:
        if item.get_closest_marker("timeout") is None:
            # "thread": a hang inside framework C++ code never returns to Python for a signal.
            item.add_marker(pytest.mark.timeout(TEST_TIMEOUT_S, method="thread"))


@pytest.fixture(scope="session")
def driver() -> lc.Driver:
    """The driver under test: the active one (``LAYOUTCORE_DRIVER``), which the module-level
    functions the tests call dispatch to."""
    return lc.get_driver()


@pytest.fixture(scope="session")
def adapter(driver: lc.Driver) -> ConformanceAdapter:
    """The driver's raw-data adapter (``Driver.conformance_adapter``)."""
    return load_adapter(driver)
