"""docs/drivers/tensorflow.md and docs/integrations/tensorflow.md (tf-keras, tf.function): their ```python
blocks run, in order, in one namespace, in a fresh interpreter.

The page is run by the documentation runner of tests/test_docs.py (``python tests/test_docs.py PAGE``),
which executes every runnable block in order with tracebacks at the page's own line numbers
(``no-run`` blocks, justified on the page, are checked by tests/test_docs.py).
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from _tf_helpers import REPO, run_python

PAGE = REPO / "docs" / "drivers" / "tensorflow.md"
INTEGRATION = REPO / "docs" / "integrations" / "tensorflow.md"
RUNNER = REPO / "tests" / "test_docs.py"


@pytest.mark.parametrize(("page", "examples"), [(PAGE, 8), (INTEGRATION, 7)], ids=["driver-page", "integration-page"])
def test_page_blocks_run_in_order_in_one_namespace(page: Path, examples: int) -> None:
    text = page.read_text("utf-8")
    assert len(re.findall(r"^```python[ \t]*$", text, re.MULTILINE)) >= examples, "the page lost its examples"
    # superfences renders a fence with bare words after the language ("```python no-run") as prose.
    assert not re.search(r"^```python[ \t]+[^{ \t\n]", text, re.MULTILINE), "use ```python {.no-run}"
    program = f"import runpy, sys\nsys.argv = ['test_docs', {str(page)!r}]\nrunpy.run_path({str(RUNNER)!r}, run_name='__main__')\n"
    proc = run_python(program, env={"LAYOUTCORE_CPU_DEVICES": "8"}, timeout=240)
    assert proc.returncode == 0, f"{proc.stdout}\n{proc.stderr[-4000:]}"
