"""The README's example under LAYOUTCORE_DRIVER=torch: runs whole (torch holds uneven dimensions by the chunk rule)."""

from __future__ import annotations

import runpy
from pathlib import Path

# tests/ is not on sys.path for the driver tests: the shared runner is loaded from its file.
run_readme_example = runpy.run_path(str(Path(__file__).resolve().parents[2] / "readme_example.py"))[
    "run_readme_example"
]


def test_readme_example_on_torch() -> None:
    assert "refused:" not in run_readme_example("torch", refuses_uneven=False)
