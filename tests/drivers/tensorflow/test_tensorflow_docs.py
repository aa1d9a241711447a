"""docs/drivers/tensorflow.md: its ```python blocks run, in order, in one namespace, in a fresh interpreter."""

from __future__ import annotations

import re

from _tf_helpers import REPO, run_python

PAGE = REPO / "docs" / "drivers" / "tensorflow.md"
_FENCE = re.compile(r"^```(?P<info>[^\n`]*)\n(?P<code>.*?)^```[ \t]*$", re.MULTILINE | re.DOTALL)


def python_blocks(text: str) -> list[tuple[int, str]]:
    """(first code line, code) of every top-level ```python block not marked ``no-run``."""
    blocks = []
    for match in _FENCE.finditer(text):
        words = match["info"].split()
        if words[:1] == ["python"] and "no-run" not in words:
            blocks.append((text.count("\n", 0, match.start("code")) + 1, match["code"]))
    return blocks


def test_page_blocks_run_in_order_in_one_namespace() -> None:
    blocks = python_blocks(PAGE.read_text("utf-8"))
    assert len(blocks) >= 8, "the page lost its examples (or the fence parser broke)"
    # Pad each block so that a traceback points at the page's own line numbers.
    program = (
        "ns = {'__name__': 'doc_example'}\n"
        + "".join(
            f"exec(compile({chr(10) * (line - 1) + code!r}, {str(PAGE)!r}, 'exec'), ns)\n" for line, code in blocks
        )
        + f"print('ran {len(blocks)} blocks')\n"
    )
    proc = run_python(program, env={"LAYOUTCORE_CPU_DEVICES": "8"}, timeout=240)
    assert proc.returncode == 0, f"{proc.stdout}\n{proc.stderr[-4000:]}"
    assert proc.stdout.strip().endswith(f"ran {len(blocks)} blocks")


def test_no_run_blocks_say_why() -> None:
    text = PAGE.read_text("utf-8")
    no_run = [m for m in _FENCE.finditer(text) if "no-run" in m["info"].split()]
    assert len(no_run) <= 1
    for match in no_run:
        before = text[: match.start()].rstrip().rsplit("\n\n", 1)[-1]
        assert "not run" in before, before
