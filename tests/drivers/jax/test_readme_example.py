"""The README's example, unchanged, under LAYOUTCORE_DRIVER=jax: the uneven line is refused with UnsupportedLayoutError(feature="uneven") (docs/drivers/jax.md), which the example itself catches."""

from __future__ import annotations

import runpy
from pathlib import Path

# tests/ is not on sys.path for the driver tests: the shared runner is loaded from its file.
run_readme_example = runpy.run_path(str(Path(__file__).resolve().parents[2] / "readme_example.py"))[
    "run_readme_example"
]


def test_readme_example_on_jax() -> None:
    assert "refused:" in run_readme_example("jax", refuses_uneven=True)
