"""Fixtures, report header and hypothesis profiles of the conformance suite.

The suite runs against whichever driver ``layoutcore.get_driver()`` gives, i.e. the one
``LAYOUTCORE_DRIVER`` names (default ``numpy``). Hypothesis profiles, picked with
``HYPOTHESIS_PROFILE`` or ``--hypothesis-profile``:

* ``ci`` (default): 30 examples per property, derandomized (the same examples every run, so a
  CI failure reproduces), no deadline (a framework's first call compiles).
* ``dev``: 60 random examples per property, with the example database.
* ``thorough``: 1000 random examples per property.
* ``fuzz``: 2000 random examples per property, and 2000 operation sequences in the model-based test.
* ``smoke``: 10 derandomized examples per property, no shrinking: a quick first look at a new
  driver (and what the suite's own meta-test uses, where only pass/fail matters).
"""

from __future__ import annotations

import faulthandler
import os
import sys
from collections.abc import Iterator

import pytest
from hypothesis import HealthCheck, Phase, settings

import layoutcore as lc
from layoutcore.driver import ALL_DTYPES, dtype_name

from .adapter import ConformanceAdapter, adapter_path, load_adapter

PROFILE_ENV = "HYPOTHESIS_PROFILE"
#: A test still running after this many seconds (``LAYOUTCORE_CONFORMANCE_HANG_S`` overrides it;
#: 0 disables) is taken for a deadlock inside the framework: every thread's stack is dumped and the
#: run exits with status 1. A framework call that hangs holding the GIL is beyond pytest-timeout's
#: signal and thread methods; faulthandler's watchdog runs without the GIL.
HANG_ENV = "LAYOUTCORE_CONFORMANCE_HANG_S"
DEFAULT_HANG_S = 600.0
DEFAULT_PROFILE = "ci"

_SLOW_OK = [HealthCheck.too_slow, HealthCheck.data_too_large]
settings.register_profile(
    "ci",
    max_examples=30,
    derandomize=True,
    database=None,
    print_blob=True,
    deadline=None,
    suppress_health_check=_SLOW_OK,
)
settings.register_profile("dev", max_examples=60, deadline=None, suppress_health_check=_SLOW_OK)
settings.register_profile("thorough", max_examples=1000, deadline=None, suppress_health_check=_SLOW_OK)
settings.register_profile("fuzz", max_examples=2000, deadline=None, suppress_health_check=_SLOW_OK)
settings.register_profile(
    "smoke",
    max_examples=10,
    derandomize=True,
    database=None,
    phases=[Phase.explicit, Phase.generate],
    deadline=None,
    suppress_health_check=_SLOW_OK,
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
    lacking = sorted(c.value for c in lc.driver.Capability if c not in driver.capabilities)
    devices = driver.list_devices()
    return [
        f"layoutcore conformance: driver {driver.name!r} ({type(driver).__module__}.{type(driver).__qualname__}), "
        f"adapter {adapter_path(driver) or '(none)'}",
        f"  capabilities: {', '.join(declared) or '(none)'}; refusals checked for: {', '.join(lacking) or '(none)'}",
        f"  devices ({len(devices)}): {', '.join(devices)}",
        f"  dtypes: {_dtype_line(driver)}",
        f"  hypothesis profile: {settings.get_current_profile_name()}, max_examples={settings().max_examples}",
    ]


def _dtype_line(driver: lc.Driver) -> str:
    """The dtypes the driver declares and, of the 18, those whose refusal the suite checks."""
    hook = getattr(driver, "supported_dtypes", None)
    if hook is None:
        return "(none declared: the dtype tests fail)"
    held = {dtype_name(d) for d in (hook() if callable(hook) else hook)}
    refused = [d for d in ALL_DTYPES if d not in held]
    return f"{', '.join(d for d in ALL_DTYPES if d in held)}; refusals checked for: {', '.join(refused) or '(none)'}"


def _hang_limit(config: pytest.Config) -> float:
    if float(config.getini("faulthandler_timeout") or 0) > 0:
        return 0.0  # pytest's own faulthandler watchdog is in use; leave it alone
    raw = os.environ.get(HANG_ENV, "").strip()
    limit = float(raw) if raw else DEFAULT_HANG_S
    timeout = config.getoption("timeout", None)  # pytest-timeout, when installed
    if limit and timeout:
        limit = max(limit, float(timeout) + 30)  # let pytest-timeout act first where it can
    return limit


def _stderr_fd(config: pytest.Config) -> int:
    """The real stderr (pytest's faulthandler plugin keeps a copy from before output capture)."""
    try:
        from _pytest.faulthandler import fault_handler_stderr_fd_key

        return config.stash[fault_handler_stderr_fd_key]
    except (ImportError, KeyError):
        return sys.__stderr__.fileno() if sys.__stderr__ is not None else 2


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item: pytest.Item) -> Iterator[None]:
    limit = _hang_limit(item.config)
    if limit:
        faulthandler.dump_traceback_later(limit, exit=True, file=_stderr_fd(item.config))
    try:
        return (yield)
    finally:
        if limit:
            faulthandler.cancel_dump_traceback_later()


_EXIT_STATUS = pytest.StashKey[int]()


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    session.config.stash[_EXIT_STATUS] = int(exitstatus)


def pytest_unconfigure(config: pytest.Config) -> None:
    """End the process once pytest has reported if a timed-out test left threads stuck in the framework
    (test_threads): interpreter shutdown would wait on them, or crash inside the framework."""
    from .test_threads import STUCK

    alive = [t.name for t in STUCK if t.is_alive()]
    if alive:
        sys.stderr.write(f"layoutcore conformance: threads {alive} are stuck (deadlock); ending the process.\n")
        sys.stderr.flush()
        sys.stdout.flush()
        os._exit(config.stash.get(_EXIT_STATUS, 1) or 1)


@pytest.fixture(scope="session")
def driver() -> lc.driver.Driver:
    """The driver under test: the active one (``LAYOUTCORE_DRIVER``), which the module-level
    functions the tests call dispatch to."""
    return lc.get_driver()


@pytest.fixture(scope="session")
def adapter(driver: lc.driver.Driver) -> ConformanceAdapter:
    """The driver's raw-data adapter (registered in the ``layoutcore.conformance_adapters`` entry-point group)."""
    return load_adapter(driver)
