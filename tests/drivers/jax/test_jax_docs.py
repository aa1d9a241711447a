"""docs/drivers/jax.md and docs/integrations/*.md (keras, flax, jax.jit): their ```python blocks run, in
order, in one namespace, in a fresh interpreter.

The page is run by the documentation runner of tests/test_docs.py (``python tests/test_docs.py PAGE``),
which executes every runnable block in order with tracebacks at the page's own line numbers
(``no-run`` blocks, justified on the page, are checked by tests/test_docs.py).
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from _jax_helpers import REPO, run_python

PAGE = REPO / "docs" / "drivers" / "jax.md"
RUNNER = REPO / "tests" / "test_docs.py"


#: The JAX-side integration pages (other drivers' engineers run their own pages in docs/integrations/).
INTEGRATIONS = [REPO / "docs" / "integrations" / name for name in ("flax.md", "jax-jit.md", "keras.md")]


def _run_page(page: Path) -> None:
    text = page.read_text("utf-8")
    # superfences renders a fence with bare words after the language ("```python no-run") as prose.
    assert not re.search(r"^```python[ \t]+[^{ \t\n]", text, re.MULTILINE), "use ```python {.no-run}"
    program = f"import runpy, sys\nsys.argv = ['test_docs', {str(page)!r}]\nrunpy.run_path({str(RUNNER)!r}, run_name='__main__')\n"
    proc = run_python(program, env={"LAYOUTCORE_CPU_DEVICES": "8"}, timeout=240)
    assert proc.returncode == 0, f"{proc.stdout}\n{proc.stderr[-4000:]}"


def test_page_blocks_run_in_order_in_one_namespace() -> None:
    text = PAGE.read_text("utf-8")
    assert len(re.findall(r"^```python[ \t]*$", text, re.MULTILINE)) >= 7, "the page lost its examples"
    _run_page(PAGE)


def test_integration_pages_exist() -> None:
    assert all(p.exists() for p in INTEGRATIONS), INTEGRATIONS


@pytest.mark.parametrize("page", INTEGRATIONS, ids=lambda p: p.name)
def test_integration_page_blocks_run(page: Path) -> None:
    assert len(re.findall(r"^```python[ \t]*$", page.read_text("utf-8"), re.MULTILINE)) >= 3
    _run_page(page)
