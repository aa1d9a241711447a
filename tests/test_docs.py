"""The documentation's code runs, its pictures match the geometry, and every page is in the nav.

Every fenced ``python`` block of ``README.md`` and ``docs/**/*.md`` runs, except the pages under
``docs/drivers/`` (the driver engineers execute those under their own framework). The blocks of
one page run in order in one namespace, as doctest would; expected output is checked by plain
``assert`` statements inside the blocks. Each page runs in a fresh interpreter, on the NumPy driver
with ``LAYOUTCORE_CPU_DEVICES=8`` and no ``LAYOUTCORE_DRIVER``, so no page sees a driver chosen or
registered by another test, and a page may call ``register_driver``/``set_driver`` freely.

A block fenced as ```` ```python {.no-run} ```` is shown but not run; the sentence before it must say
why (containing "not run"), and such blocks must stay rare. (The braces matter: pymdownx.superfences
takes only attribute lists after the language, and renders ```` ```python no-run ```` as prose.)

This file is also the runner: ``python tests/test_docs.py PAGE.md`` runs one page's blocks, with
tracebacks that point at the page's own line numbers.
"""

from __future__ import annotations

import html
import importlib.util
import os
import re
import subprocess
import sys
import textwrap
import types
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
#: Pages whose examples need a framework; their own engineers run them (not this file).
FRAMEWORK_PAGES = DOCS / "drivers"
#: Framework integration pages (keras, flax, jax.jit), run by the JAX driver's tests.
INTEGRATION_PAGES = DOCS / "integrations"
#: At most this many ``no-run`` blocks in all pages together.
MAX_NO_RUN = 3
#: Pages that must keep runnable examples (guards against a fence-parsing slip running nothing).
PAGES_WITH_EXAMPLES = (
    "index.md",
    "concepts.md",
    "layout-map.md",
    "before-you-run.md",
    "driver-authors.md",
    "framework-mapping.md",
)

#: Fence languages that are run; ``pycon`` (``>>>`` sessions) is refused rather than silently skipped.
PYTHON_LANGUAGES = frozenset({"python", "py", "python3"})

_FENCE = re.compile(r"^(?P<indent>[ \t]*)(?P<fence>`{3,}|~{3,})[ \t]*(?P<info>[^`\n]*?)[ \t]*$")


@dataclass(frozen=True)
class Block:
    """One fenced code block of a Markdown page."""

    line: int  # 1-based line number of the block's first code line
    language: str
    flags: tuple[str, ...]  # the info-string words after the language, e.g. ("no-run",)
    code: str
    preceding: str  # the last few non-blank lines of prose before the fence

    @property
    def runnable(self) -> bool:
        return self.language in PYTHON_LANGUAGES and "no-run" not in self.flags


def extract_blocks(text: str) -> list[Block]:
    """Every fenced code block of a Markdown text, in order (nested and indented fences handled).

    A fence closes on a line of at least as many of the same character and nothing else, as
    CommonMark; the block's common indentation (a fence inside a list or an admonition) is removed.
    """
    blocks: list[Block] = []
    lines = text.splitlines()
    prose: list[str] = []
    i = 0
    while i < len(lines):
        match = _FENCE.match(lines[i])
        if not match:
            if lines[i].strip():
                prose = [*prose[-2:], lines[i].strip()]
            i += 1
            continue
        fence = match["fence"]
        words = match["info"].split()
        body: list[str] = []
        j = i + 1
        while j < len(lines):
            closing = lines[j].strip()
            if closing and set(closing) == {fence[0]} and len(closing) >= len(fence):
                break
            body.append(lines[j])
            j += 1
        blocks.append(
            Block(
                line=i + 2,
                language=words[0].lower() if words else "",
                flags=tuple(w for w in (w.strip("{}.") for w in words[1:]) if w),  # "{.no-run}" -> "no-run"
                code=textwrap.dedent("\n".join(body)) + "\n",
                preceding=" ".join(prose),
            )
        )
        prose = []
        i = j + 1
    return blocks


def documentation_pages() -> list[Path]:
    """README.md and every Markdown page of docs/, framework pages excluded."""
    pages = [ROOT / "README.md"] if (ROOT / "README.md").exists() else []
    pages += sorted(
        p for p in DOCS.rglob("*.md") if FRAMEWORK_PAGES not in p.parents and INTEGRATION_PAGES not in p.parents
    )
    return pages


def run_page(page: Path) -> None:
    """Run one page's runnable blocks in order in one module namespace (the subprocess side).

    The namespace is a real module registered in ``sys.modules``, so an example can name its own
    classes by ``"module:Class"`` (as an entry point or ``register_adapter`` does for a conformance adapter).
    """
    module = types.ModuleType("doc_example")
    module.__file__ = str(page)
    sys.modules[module.__name__] = module
    shown = page.relative_to(ROOT) if page.is_relative_to(ROOT) else page
    for block in extract_blocks(page.read_text(encoding="utf-8")):
        if block.runnable:
            # Pad so that tracebacks name the page's own line numbers.
            source = "\n" * (block.line - 1) + block.code
            exec(compile(source, str(shown), "exec"), module.__dict__)


def _run_in_subprocess(page: Path) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ)
    env.pop("LAYOUTCORE_DRIVER", None)
    env["LAYOUTCORE_CPU_DEVICES"] = "8"
    return subprocess.run(
        [sys.executable, str(Path(__file__).resolve()), str(page)],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )


# ------------------------------------------------------------------------------------------------
# Tests
# ------------------------------------------------------------------------------------------------
def _pages_with_code() -> list[Path]:
    return [p for p in documentation_pages() if any(b.runnable for b in extract_blocks(p.read_text("utf-8")))]


def _page_id(page: Path) -> str:
    return str(page.relative_to(ROOT))


@pytest.mark.parametrize("page", _pages_with_code(), ids=_page_id)
def test_page_examples_run(page: Path) -> None:
    result = _run_in_subprocess(page)
    assert result.returncode == 0, f"{_page_id(page)}: an example failed\n{result.stdout}\n{result.stderr}"


def test_key_pages_have_runnable_examples() -> None:
    with_code = {p.relative_to(DOCS).as_posix() for p in _pages_with_code() if DOCS in p.parents}
    missing = sorted(set(PAGES_WITH_EXAMPLES) - with_code)
    assert not missing, f"these pages have no runnable ```python block: {missing}"


def test_runner_reports_a_failing_example_at_its_page_line(tmp_path: Path) -> None:
    page = tmp_path / "broken.md"
    page.write_text(
        "# Broken\n\n```python\nvalue = 1 + 1\n```\n\nText.\n\n```python\nassert value == 3, value\n```\n",
        encoding="utf-8",
    )
    result = _run_in_subprocess(page)
    assert result.returncode != 0
    assert f'File "{page.resolve()}", line 10' in result.stderr, result.stderr
    assert "AssertionError: 2" in result.stderr, result.stderr


def test_runner_isolates_pages_and_uses_a_fresh_numpy_driver(tmp_path: Path) -> None:
    page = tmp_path / "env.md"
    page.write_text(
        "```python\nimport os, layoutcore\n"
        "assert os.environ['LAYOUTCORE_CPU_DEVICES'] == '8'\n"
        "assert layoutcore.active_driver_name() == 'numpy'\n"
        "assert len(layoutcore.list_devices()) == 8\n"
        "assert __name__ == 'doc_example'\n```\n",
        encoding="utf-8",
    )
    result = _run_in_subprocess(page)
    assert result.returncode == 0, result.stderr


def test_extract_blocks_handles_nesting_indentation_and_flags() -> None:
    text = (
        "Intro.\n"
        "````markdown\n```python\nnot_code()\n```\n````\n"
        "- item\n\n    ```python\n    x = 1\n    ```\n"
        "This is not run: it needs a GPU.\n"
        "```python no-run\ngpu()\n```\n"
        "~~~py\ny = 2\n~~~\n"
    )
    blocks = extract_blocks(text)
    assert [(b.language, b.flags, b.code, b.line) for b in blocks] == [
        ("markdown", (), "```python\nnot_code()\n```\n", 3),
        ("python", (), "x = 1\n", 10),
        ("python", ("no-run",), "gpu()\n", 14),
        ("py", (), "y = 2\n", 17),
    ]
    assert [b.runnable for b in blocks] == [False, True, False, True]
    assert "not run" in blocks[2].preceding


def test_no_run_blocks_are_rare_and_justified() -> None:
    # Framework pages too: they are run by each driver's tests, but their no-run blocks are text.
    pages = documentation_pages() + sorted(FRAMEWORK_PAGES.glob("*.md")) + sorted(INTEGRATION_PAGES.glob("*.md"))
    no_run = [
        (page, block)
        for page in pages
        for block in extract_blocks(page.read_text("utf-8"))
        if block.language in PYTHON_LANGUAGES and "no-run" in block.flags
    ]
    assert len(no_run) <= MAX_NO_RUN, [f"{_page_id(p)}:{b.line}" for p, b in no_run]
    unjustified = [f"{_page_id(p)}:{b.line}" for p, b in no_run if "not run" not in b.preceding.lower()]
    assert not unjustified, f"say why these blocks are not run (a sentence containing 'not run'): {unjustified}"


def test_api_page_lists_exactly_the_public_names() -> None:
    import layoutcore

    text = (DOCS / "api.md").read_text("utf-8")
    listed = set(re.findall(r"^\| `(\w+)", text, re.MULTILINE))
    missing = sorted(set(layoutcore.__all__) - listed)
    unknown = sorted(listed - set(layoutcore.__all__))
    assert not missing, f"docs/api.md lacks a row for: {missing}"
    assert not unknown, f"docs/api.md documents names layoutcore does not export: {unknown}"


def test_no_interactive_sessions_that_would_escape_the_runner() -> None:
    sessions = [
        f"{_page_id(page)}:{block.line}"
        for page in documentation_pages()
        for block in extract_blocks(page.read_text("utf-8"))
        if block.language in {"pycon", "doctest"} or (block.language in PYTHON_LANGUAGES and ">>> " in block.code)
    ]
    assert not sessions, f"write these as ```python blocks with assert statements, which the tests run: {sessions}"


def _nav_pages() -> set[str]:
    """Markdown paths named in mkdocs.yml's ``nav`` (a block of ``- Title: path.md`` lines)."""
    text = (ROOT / "mkdocs.yml").read_text("utf-8")
    nav = re.search(r"^nav:\s*\n((?:[ \t]+.*\n?|\s*\n)*)", text, re.MULTILINE)
    assert nav, "mkdocs.yml has no nav section"
    return set(re.findall(r"([\w./-]+\.md)\s*$", nav.group(1), re.MULTILINE))


def test_every_docs_page_is_in_the_nav() -> None:
    pages = {p.relative_to(DOCS).as_posix() for p in DOCS.rglob("*.md")}
    missing = sorted(pages - _nav_pages())
    assert not missing, f"add these pages to mkdocs.yml's nav: {missing}"


def test_pictures_match_the_geometry(tmp_path: Path) -> None:
    """The committed SVGs show what docs/gen_pictures.py draws from layoutcore.geometry now.

    The visible text is compared (every label, block and slice in the pictures is text), not the
    bytes, so a new rich release that changes fonts or styling does not fail this test while a
    change in the shard math does.
    """
    spec = importlib.util.spec_from_file_location("gen_pictures", DOCS / "gen_pictures.py")
    assert spec and spec.loader
    gen_pictures = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(gen_pictures)
    fresh = {p.name: p for p in gen_pictures.generate(tmp_path)}
    committed = {p.name: p for p in (DOCS / "img").glob("*.svg")}
    assert sorted(committed) == sorted(fresh), "docs/img differs from docs/gen_pictures.py's list: regenerate"
    for name, path in fresh.items():
        assert _svg_text(committed[name]) == _svg_text(path), (
            f"docs/img/{name} is stale: run `python docs/gen_pictures.py` and commit the result"
        )
    # The contract's own examples (docs/design.md#layout: 5 over 3 -> 2,2,1; 4 over 3 -> 2,2,0; 2 over 4 -> 1,1,0,0).
    chunk_text = "\n".join(_svg_text(committed["chunk-rule.svg"]))
    for sizes in ("2, 2, 1", "2, 2, 0", "1, 1, 0, 0"):
        assert f"block sizes {sizes}" in chunk_text
    multi_text = "\n".join(_svg_text(committed["multi-axis.svg"]))
    assert "block = x * 2 + y" in multi_text and "block = y * 3 + x" in multi_text


def _svg_text(path: Path) -> list[str]:
    """The visible text of a rich SVG, one string per <text> element."""
    svg = path.read_text("utf-8")
    texts = [html.unescape(t).replace("\xa0", " ") for t in re.findall(r"<text\b[^>]*>(.*?)</text>", svg, re.DOTALL)]
    assert texts, f"{path} holds no text"
    return texts


if __name__ == "__main__":
    run_page(Path(sys.argv[1]).resolve())
