"""The 2-process example of docs/transfer.md (shown as a ``text`` block there: the docs tests have no torch) runs
on 2 gloo processes."""

from __future__ import annotations

import importlib.util
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests"))
from test_docs import extract_blocks  # noqa: E402

pytestmark = pytest.mark.skipif(importlib.util.find_spec("torch") is None, reason="needs torch (tox -e checkpoint)")


def test_the_pages_link_example_runs_on_two_processes(tmp_path: Path) -> None:
    page = (ROOT / "docs" / "transfer.md").read_text("utf-8")
    blocks = [b for b in extract_blocks(page) if b.language == "text" and "transfer.Link" in b.code]
    assert len(blocks) == 1 and "transfer.Link" in blocks[0].code
    script = tmp_path / "example.py"
    script.write_text(blocks[0].code, "utf-8")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = {k: v for k, v in os.environ.items() if not k.startswith("LAYOUTCORE_")}
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), str(ROOT / "drivers"), env.get("PYTHONPATH", "")])
    env["PORT"] = str(port)
    procs = [
        subprocess.Popen(
            [sys.executable, str(script)],
            env={**env, "RANK": str(r)},
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for r in (0, 1)
    ]
    try:
        outs = [p.communicate(timeout=240) for p in procs]
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
    for r, (p, (out, err)) in enumerate(zip(procs, outs, strict=True)):
        assert p.returncode == 0, f"rank {r}:\n{out[-2000:]}\n{err[-6000:]}"
        assert f"rank {r}: received" in out and "(its floor)" in out
