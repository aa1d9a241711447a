"""Run the installed conformance suite in-process (``layoutcore conformance`` calls :func:`run`)."""

from __future__ import annotations

import os
from collections.abc import Sequence

from layoutcore.driver import DRIVER_ENV

__all__ = ["PACKAGE", "run"]

#: The package pytest collects (``--pyargs``): the suite as installed, wherever that is.
PACKAGE = "layoutcore_conformance"


def run(argv: Sequence[str] | None = None, *, driver: str | None = None) -> int:
    """Run the conformance suite with pytest and return pytest's exit code.

    Args:
        argv: extra pytest arguments, e.g. ``["-q", "-k", "seed", "-x"]``.
        driver: the driver to test; sets ``LAYOUTCORE_DRIVER`` for the run (restored after).
            ``None`` tests the active driver.

    Returns:
        0 when every test passed, 1 when some failed, other codes as ``pytest.main``.
    """
    import pytest  # the suite's own dependency; importing layoutcore_conformance must not need it

    previous = os.environ.get(DRIVER_ENV)
    if driver is not None:
        os.environ[DRIVER_ENV] = driver
    try:
        return int(pytest.main(["--pyargs", PACKAGE, *(argv or [])]))
    finally:
        if driver is not None:
            if previous is None:
                os.environ.pop(DRIVER_ENV, None)
            else:
                os.environ[DRIVER_ENV] = previous
