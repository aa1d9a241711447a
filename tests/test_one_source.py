"""One source for each rule: scans of the package and its plug-ins for copies of a rule that has a home.

Each rule's own behaviour is tested where it lives (``geometry.chunk_size`` in test_geometry.py,
``LRUCache`` in test_cache.py, the dtype names in test_dtypes.py); these tests keep copies from
coming back.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

import layoutcore.driver as lcd

ROOT = Path(__file__).resolve().parent.parent
SOURCES = sorted(p for folder in ("layoutcore", "drivers", "conformance") for p in (ROOT / folder).rglob("*.py"))


def _lines_matching(pattern: str, skip: tuple[str, ...] = ()) -> list[str]:
    regex = re.compile(pattern)
    return [
        f"{path.relative_to(ROOT)}:{number}"
        for path in SOURCES
        if str(path.relative_to(ROOT)) not in skip
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
        if regex.search(line)
    ]


def test_device_names_are_canonicalised_by_canonical_devices_not_a_throwaway_mesh() -> None:
    # Mesh((len(names),), ("d",), devices=names).devices: a whole mesh built to read one rule
    assert _lines_matching(r"Mesh\(\(len\(\w+\),\), \(\"d\",\)") == []


@pytest.mark.parametrize(
    ("device", "name"),
    [("cpu:3", "CPU:3"), ("/job:localhost/replica:0/task:0/device:GPU:1", "GPU:1"), (" CPU:0 ", "CPU:0")],
)
def test_canonical_device_is_exported_for_drivers(device: str, name: str) -> None:
    assert lcd.canonical_device(device) == name
    assert lcd.canonical_devices([device]) == (name,)
