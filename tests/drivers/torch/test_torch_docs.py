"""docs/drivers/torch.md and docs/integrations/torch.md: their ```python blocks run, in order, in one namespace,
in a fresh interpreter.

Each page is run by the documentation runner of tests/test_docs.py (``python tests/test_docs.py PAGE``),
which executes every runnable block in order with tracebacks at the page's own line numbers.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import REPO, clean_env

PAGES = {REPO / "docs" / "drivers" / "torch.md": 7, REPO / "docs" / "integrations" / "torch.md": 3}
RUNNER = REPO / "tests" / "test_docs.py"


@pytest.mark.parametrize("page", list(PAGES), ids=lambda p: p.parent.name)
def test_page_blocks_run_in_order_in_one_namespace(page: Path) -> None:
    text = page.read_text("utf-8")
    blocks = re.findall(r"^```python[ \t]*$", text, re.MULTILINE)
    assert len(blocks) >= PAGES[page], "the page lost its examples (or the fence pattern broke)"
    assert "no-run" not in text
    inherited = [str((REPO / p).resolve()) for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    proc = subprocess.run(
        [sys.executable, str(RUNNER), str(page)],
        cwd=REPO,
        env=clean_env({"LAYOUTCORE_CPU_DEVICES": "8", "PYTHONPATH": os.pathsep.join(inherited)}),
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
    )
    assert proc.returncode == 0, f"{proc.stdout}\n{proc.stderr[-4000:]}"
