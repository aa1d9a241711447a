"""The README's example under LAYOUTCORE_DRIVER=jax: runs up to its documented refusal of the uneven line (docs/drivers/jax.md), which must be UnsupportedLayoutError(feature="uneven"), and on after it."""

from __future__ import annotations

import importlib.util
from pathlib import Path

# Loaded from its file: tests/ is not on sys.path for the driver tests (see test_jax_dtypes.py's note).
_spec = importlib.util.spec_from_file_location(
    "readme_example", Path(__file__).resolve().parents[2] / "readme_example.py"
)
assert _spec is not None and _spec.loader is not None
readme = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(readme)


def test_readme_example_on_jax() -> None:
    out = readme.run_readme_example("jax", refuses_uneven=True)
    assert "refused:" in out, out
