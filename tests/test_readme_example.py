"""The README's example runs unchanged on the NumPy driver, uneven line included (tests/readme_example.py)."""

from __future__ import annotations

from readme_example import run_readme_example


def test_readme_example_runs_on_numpy() -> None:
    assert "refused" not in run_readme_example("numpy", refuses_uneven=False)
