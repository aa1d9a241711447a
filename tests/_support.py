"""Constants shared by the core tests (tests/ is on sys.path under pytest's default import mode)."""

from __future__ import annotations

from typing import Any

#: The DTensor guide's devices.
DEVICES6 = [f"CPU:{i}" for i in range(6)]


def FULL(index: int) -> str:
    """TF's full name of local CPU ``index``."""
    return f"/job:localhost/replica:0/task:0/device:CPU:{index}"


#: What rich reads from the environment to choose colour, terminal mode and size.
_RICH_ENV = ("FORCE_COLOR", "NO_COLOR", "TTY_COMPATIBLE", "TTY_INTERACTIVE", "COLUMNS", "LINES", "TERM", "COLORTERM")


def plain_console_env(columns: int, base: dict[str, str] | None = None) -> dict[str, str]:
    """``base`` (default: this process's environment) with rich told to write plain text ``columns``
    wide, whatever terminal runs the tests (``FORCE_COLOR``, ``COLUMNS`` and friends replaced)."""
    import os

    env = {k: v for k, v in (os.environ if base is None else base).items() if k not in _RICH_ENV}
    env.update(TTY_COMPATIBLE="0", COLUMNS=str(columns), NO_COLOR="1")
    return env


def plain_console(monkeypatch: Any, columns: int) -> None:
    """The CLI tests' console, in this process: plain text ``columns`` wide (see :func:`plain_console_env`)."""
    for name in _RICH_ENV:
        monkeypatch.delenv(name, raising=False)
    for name, value in plain_console_env(columns, {}).items():
        monkeypatch.setenv(name, value)


def run_processes(
    argvs: list[list[str]], *, env: dict[str, str], timeout: float, cwd: str | None = None
) -> list[tuple[int, str, str]]:
    """Start every command at once (the ranks of one group), then collect each one's ``(returncode, stdout, stderr)``.

    A rank still running ``timeout`` seconds after the start is killed (its return code is then negative, and its
    stderr ends with a ``[killed ...]`` line), and none is left running on any exit, so a hung peer fails the
    test instead of hanging it. Driver tests (where tests/ is not on ``sys.path``) load it with ``runpy``.
    """
    import signal
    import subprocess
    import time

    procs = [
        subprocess.Popen(a, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, cwd=cwd) for a in argvs
    ]
    deadline = time.monotonic() + timeout
    outputs = []
    try:
        for p in procs:
            try:
                out, err = p.communicate(timeout=max(1.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                p.kill()
                out, err = p.communicate()
                err += f"\n[killed at the {timeout} s deadline]"
            outputs.append((p.returncode, out, err))
    finally:
        for p in procs:
            if p.poll() is None:
                p.send_signal(signal.SIGKILL)
                p.wait()
    return outputs
