"""Fixtures for the torch driver's own tests (the conformance suite runs separately under tox -e torch).

The in-process tests share one simulation (a fake process group of 8 ranks, started by the first
data operation); anything about start-up, mode switching or real process groups runs in a fresh
interpreter (:func:`run_python`), because torch.distributed's default group is process-global.
"""

from __future__ import annotations

import importlib.util
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

import layoutcore as lc

# A missing framework fails the run; it never becomes a run of skips that reads as a pass.
if importlib.util.find_spec("torch") is None:
    raise ImportError("the torch driver's tests need the torch extra: pip install 'layoutcore[torch]'")

from layoutcore_torch import TorchDriver

REPO = Path(__file__).resolve().parents[3]
HERE = Path(__file__).resolve().parent


@pytest.fixture
def driver() -> TorchDriver:
    """The registered torch driver (a fresh instance per test: the root conftest resets the registry)."""
    d = lc.get_driver("torch")
    assert isinstance(d, TorchDriver)
    return d


@pytest.fixture
def mesh32() -> lc.Mesh:
    """The DTensor guide's 3x2 mesh, abstract (bound to the driver's first 6 devices)."""
    return lc.Mesh((3, 2), ("x", "y"))


def free_port() -> int:
    """A free TCP port on 127.0.0.1, from a throwaway bind."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def clean_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    """This environment without layoutcore/torch.distributed variables, plus ``extra``."""
    drop = ("LAYOUTCORE_", "MASTER_", "RANK", "WORLD_SIZE", "LOCAL_RANK", "TORCHELASTIC")
    env = {k: v for k, v in os.environ.items() if not k.startswith(drop)}
    env.update(extra or {})
    return env


def run_python(
    code: str, *, env: dict[str, str] | None = None, timeout: float = 120
) -> subprocess.CompletedProcess[str]:
    """Run ``code`` in a fresh interpreter of this environment; killed (SIGKILL) after ``timeout`` s."""
    return subprocess.run(
        [sys.executable, "-c", code],
        env=clean_env(env),
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=REPO,
        check=False,
    )
