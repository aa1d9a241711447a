"""docs/internals.md names only modules that exist, and describes the layer table tests/test_layers.py enforces."""

from __future__ import annotations

import re
from pathlib import Path

import test_layers

ROOT = Path(__file__).resolve().parent.parent
PAGE = ROOT / "docs" / "internals.md"


def test_every_module_the_page_names_exists() -> None:
    named = set(re.findall(r"`((?:layoutcore|drivers|conformance)/[\w/.]*)`", PAGE.read_text("utf-8")))
    assert len(named) > 30
    missing = sorted(p for p in named if not (ROOT / p).exists())
    assert missing == [], f"docs/internals.md names modules that do not exist: {missing}"


def test_the_page_lists_the_layers_in_the_enforced_order() -> None:
    rows = re.findall(r"^\| ([a-zA-Z ]+) \| `", PAGE.read_text("utf-8"), re.MULTILINE)
    assert tuple(rows) == test_layers.LAYERS


def test_every_module_of_a_layer_row_has_that_layer() -> None:
    for line in PAGE.read_text("utf-8").splitlines():
        match = re.match(r"^\| ([a-zA-Z ]+) \| (`.*`) \| ", line)
        if not match or match.group(1) not in test_layers.LAYERS:
            continue
        for path in re.findall(r"`((?:layoutcore|drivers|conformance)/[\w/.]*)`", match.group(2)):
            parts = path.removesuffix(".py").removesuffix("/").split("/")
            if parts[0] in ("drivers", "conformance"):
                parts = parts[1:]
            module = ".".join(p for p in parts if p != "__init__")
            assert test_layers.layer_of(module) == match.group(1), (path, module)
