"""``rich`` is optional (the ``cli`` extra): with it hidden, ``import layoutcore``, the
checkpoint package, a save and a load (progress bar path included) work; ``--json`` outputs work;
every drawing command exits with status 3 naming ``pip install 'layoutcore[cli]'``.

rich is hidden in a fresh interpreter by a meta-path finder that refuses it, as a missing
distribution would (``ModuleNotFoundError`` with ``name == "rich"``).
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

_SCRIPT = textwrap.dedent(
    """
    import contextlib, importlib.abc, io, json, sys

    class HideRich(importlib.abc.MetaPathFinder):
        def find_spec(self, name, path=None, target=None):
            if name == "rich" or name.startswith("rich."):
                raise ModuleNotFoundError(f"No module named {name!r}", name=name)
            return None

    sys.meta_path.insert(0, HideRich())
    try:
        import rich  # noqa: F401
    except ModuleNotFoundError:
        pass
    else:
        raise AssertionError("rich is not hidden")

    import numpy as np
    import layoutcore as lc
    import layoutcore.checkpoint as ckpt
    from layoutcore.checkpoint import _progress
    from layoutcore.cli import main

    class Tty(io.StringIO):  # a terminal on stderr: save and load would draw a progress bar
        def isatty(self):
            return True

    path = sys.argv[1]
    value = np.arange(48, dtype=np.float32).reshape(8, 6)
    layout = lc.Layout(("x", None), lc.Mesh((4,), ("x",)))
    _progress.PROGRESS_MIN_BYTES = 0
    stderr, sys.stderr = sys.stderr, Tty()
    try:
        ckpt.save(path, {"w": lc.distribute_tensor(value, layout)})
        loaded = ckpt.load(path, {"w": layout})
    finally:
        sys.stderr = stderr
    assert np.array_equal(lc.to_numpy(loaded["w"]), value)

    def run(*argv):
        out, err = io.StringIO(), io.StringIO()
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            status = main(list(argv))
        return status, out.getvalue(), err.getvalue()

    status, out, err = run("checkpoint", "inspect", path, "--json")
    assert status == 0 and json.loads(out)["tensors"]["w"]["shape"] == [8, 6], (status, out, err)
    status, out, _ = run("relayout-plan", "--mesh", "x=2", "--from", "x", "--to", "none", "--shape", "4", "--json")
    assert status == 0 and json.loads(out)["floor_bytes"] == 16, out  # each device receives the other's 2 float32
    drawing = [
        ("checkpoint", "inspect", path),
        ("checkpoint", "plan", path, "--mesh", "x=2", "--layout", "x,none"),
        ("show", "--mesh", "x=2", "--layout", "x", "--shape", "4"),
        ("relayout-plan", "--mesh", "x=2", "--from", "x", "--to", "none", "--shape", "4"),
        ("drivers",),
        ("tour",),
    ]
    for argv in drawing:
        status, out, err = run(*argv)
        assert status == 3, (argv, status, out, err)
        assert "pip install 'layoutcore[cli]'" in err and "Traceback" not in err and err.count("\\n") == 1, (argv, err)
    try:
        from layoutcore.cli import render_layout  # noqa: F401
    except ImportError as exc:
        assert "pip install 'layoutcore[cli]'" in str(exc), exc
    else:
        raise AssertionError("render_layout imported without rich")
    assert "rich" not in sys.modules
    print("OK")
    """
)


def test_library_and_cli_without_rich(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("LAYOUTCORE_")}
    done = subprocess.run(
        [sys.executable, "-c", _SCRIPT, str(tmp_path / "ckpt")],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )
    assert done.returncode == 0 and done.stdout.strip().endswith("OK"), done.stdout + done.stderr
