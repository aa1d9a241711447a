"""Helpers shared by the JAX driver's tests (a unique module name: tests run in prepend import mode)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[3]


def run_python(
    code: str, *, env: dict[str, str] | None = None, timeout: float = 120
) -> subprocess.CompletedProcess[str]:
    """Run ``code`` in a fresh interpreter of this venv (JAX start-up state cannot be reset in-process).

    JAX runs on its CPU platform (``JAX_PLATFORMS=cpu``, unless ``env`` says otherwise): these tests
    are about CPU device counts, and on a GPU host JAX's default devices would be GPUs.
    """
    full_env = {k: v for k, v in os.environ.items() if not k.startswith(("LAYOUTCORE_", "JAX_", "XLA_FLAGS"))}
    full_env["JAX_PLATFORMS"] = "cpu"
    full_env.update(env or {})
    return subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=full_env, timeout=timeout, cwd=REPO
    )
