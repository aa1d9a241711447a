"""The reasons live in the repository: references point at docs/design.md and docs/framework-facts.md.

Code, tests, configuration and docs cite the contract as ``docs/design.md#<anchor>`` and measured
framework behaviour as ``docs/framework-facts.md#<anchor>``. These tests fail on a reference to a
file that is not in the repository (the contract's or the facts' working copies outside it), on a
tracker number or a developer's handle in place of the reason, and on a link to an anchor that the
page does not have.
"""

from __future__ import annotations

import re
import unicodedata
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
#: What the checks read: everything the package, its drivers, tests, benchmarks and docs ship.
SCOPE = (
    "layoutcore",
    "drivers",
    "conformance",
    "tests",
    "benchmarks",
    "docs",
    "README.md",
    "tox.ini",
    "constraints.txt",
    "pyproject.toml",
    "mkdocs.yml",
)
SUFFIXES = frozenset({".py", ".md", ".ini", ".txt", ".toml", ".yml", ".yaml", ".cfg", ".json", ".sh"})
SKIP_PARTS = frozenset({"__pycache__", ".tox", "build", "site", ".git", ".mypy_cache", ".pytest_cache"})

# Built from pieces so that this file does not match itself.
_D, _F, _S = "DESIGN", "FACTS", "\u00a7"
FORBIDDEN = {
    "a section of the contract's working copy (link docs/design.md#<anchor>)": re.compile(
        rf"\b{_D}(\s*{_S}|\.md\b|:)|\b{_D}\b(?=\)|\s*$| /)"
    ),
    "the facts' working copy (link docs/framework-facts.md#<anchor>)": re.compile(rf"\b{_F}(\.md\b|\s*{_S}|\s+F\d)"),
    "a tracker number (say what the behaviour is instead)": re.compile(r"\bissues?\s+#?\d+", re.IGNORECASE),
    "a developer's handle (say what the code does instead)": re.compile(r"(?<![\w.-])H\d{1,2}(?:'s)?(?![\w.-])"),
}
REQUIRED_DESIGN_ANCHORS = [
    "mesh",
    "layout",
    "layoutmap",
    "drivers-and-data",
    "data-functions-made-precise",
    "errors",
    "conformance",
    "seeing-before-running",
    "trees-and-model-code",
    "spmd",
    "checkpoints",
    "interchange",
    "dtypes",
    "real-models",
]
_LINK = re.compile(r"\b(design|framework-facts)\.md#([\w-]+)")


def _files() -> list[Path]:
    found: list[Path] = []
    for name in SCOPE:
        top = ROOT / name
        candidates = [top] if top.is_file() else sorted(top.rglob("*")) if top.is_dir() else []
        found += [
            p
            for p in candidates
            if p.is_file() and p.suffix in SUFFIXES and not SKIP_PARTS.intersection(p.relative_to(ROOT).parts)
        ]
    return found


def _slug(heading: str) -> str:
    """Python-Markdown's toc slug (mkdocs' default): lower case, punctuation dropped, spaces to hyphens."""
    text = unicodedata.normalize("NFKD", heading).encode("ascii", "ignore").decode()
    text = re.sub(r"[^\w\s-]", "", text).strip().lower()
    return re.sub(r"[-\s]+", "-", text)


def anchors(page: Path) -> set[str]:
    """The anchors a Markdown page defines: explicit ``{#id}`` attributes and headings' slugs."""
    found: set[str] = set()
    in_fence = False
    for line in page.read_text("utf-8").splitlines():
        if line.lstrip().startswith(("```", "~~~")):
            in_fence = not in_fence
            continue
        if in_fence:
            continue
        found.update(re.findall(r"\{[^}]*#([\w-]+)[^}]*\}", line))
        heading = re.match(r"#{1,6}\s+(.*?)\s*(\{[^}]*\})?\s*$", line)
        if heading:
            found.add(_slug(heading.group(1)))
    return found


def test_no_reference_to_files_outside_the_repository_tracker_numbers_or_handles() -> None:
    hits = []
    for path in _files():
        if path == Path(__file__).resolve():
            continue
        for number, line in enumerate(path.read_text("utf-8", errors="replace").splitlines(), 1):
            hits += [
                f"{path.relative_to(ROOT)}:{number}: {why}: {line.strip()[:120]}"
                for why, pattern in FORBIDDEN.items()
                if pattern.search(line)
            ]
    assert not hits, "\n".join(hits)


def test_the_contract_has_its_stable_anchors() -> None:
    missing = sorted(set(REQUIRED_DESIGN_ANCHORS) - anchors(DOCS / "design.md"))
    assert not missing, f"docs/design.md lacks the anchors {missing}, which code links to"


def test_every_linked_anchor_exists() -> None:
    pages = {name: anchors(DOCS / f"{name}.md") for name in ("design", "framework-facts")}
    broken = [
        f"{path.relative_to(ROOT)}: {page}.md#{anchor}"
        for path in _files()
        for page, anchor in _LINK.findall(path.read_text("utf-8", errors="replace"))
        if anchor not in pages[page]
    ]
    assert not broken, "links to anchors these pages do not define:\n" + "\n".join(broken)


@pytest.mark.parametrize(
    ("line", "bad"),
    [
        (f"as the contract says ({_D} {_S}2a)", True),
        (f"# {_F} F2.3: torch's chunk rule", True),
        (f"measured in {_F}.md", True),
        ("fixed in issue 9", True),
        ("a small edit in H1's module", True),
        ("(H7)", True),
        ("see docs/design.md#spmd and docs/framework-facts.md#shard-order", False),
        ("an NVIDIA H100 holds 80 GB; HDF5 files; the issue is that", False),
    ],
)
def test_the_patterns_catch_what_they_should(line: str, bad: bool) -> None:
    assert any(p.search(line) for p in FORBIDDEN.values()) is bad


def test_anchors_reads_explicit_ids_and_heading_slugs(tmp_path: Path) -> None:
    page = tmp_path / "p.md"
    page.write_text(
        "# Title\n\n## Mesh {#mesh}\n\n### TF DTensor strings and `helpers`\n\n```text\n# not a heading\n```\n"
    )
    assert anchors(page) == {"title", "mesh", "tf-dtensor-strings-and-helpers"}
