"""The README's example under LAYOUTCORE_DRIVER=tensorflow: runs up to its documented refusal of the uneven line (docs/drivers/tensorflow.md), which must be UnsupportedLayoutError(feature="uneven"), and on after it."""

from __future__ import annotations

import runpy
from pathlib import Path

# tests/ is not on sys.path for the driver tests: the shared runner is loaded from its file.
run_readme_example = runpy.run_path(str(Path(__file__).resolve().parents[2] / "readme_example.py"))[
    "run_readme_example"
]


def test_readme_example_on_tensorflow() -> None:
    assert "refused:" in run_readme_example("tensorflow", refuses_uneven=True)
