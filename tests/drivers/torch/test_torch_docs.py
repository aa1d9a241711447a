"""docs/drivers/torch.md: its ```python blocks run, in order, in one namespace, in a fresh interpreter.

The page is run by the documentation runner of tests/test_docs.py (``python tests/test_docs.py PAGE``),
which executes every runnable block in order with tracebacks at the page's own line numbers.
"""

from __future__ import annotations

import re
import subprocess
import sys

from conftest import REPO, clean_env

PAGE = REPO / "docs" / "drivers" / "torch.md"
RUNNER = REPO / "tests" / "test_docs.py"


def test_page_blocks_run_in_order_in_one_namespace() -> None:
    text = PAGE.read_text("utf-8")
    blocks = re.findall(r"^```python[ \t]*$", text, re.MULTILINE)
    assert len(blocks) >= 7, "the page lost its examples (or the fence pattern broke)"
    assert "no-run" not in text
    proc = subprocess.run(
        [sys.executable, str(RUNNER), str(PAGE)],
        cwd=REPO,
        env=clean_env({"LAYOUTCORE_CPU_DEVICES": "8"}),
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
    )
    assert proc.returncode == 0, f"{proc.stdout}\n{proc.stderr[-4000:]}"
