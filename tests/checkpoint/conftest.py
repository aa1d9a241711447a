"""Fixtures shared by the checkpoint tests."""

from __future__ import annotations

from typing import Any

import pytest

from layoutcore.checkpoint import _read_plan, _scatter


@pytest.fixture
def spy(monkeypatch: pytest.MonkeyPatch) -> list[bool]:
    """Records each scatter_read's answer (True: the piece was scattered)."""
    calls: list[bool] = []
    real = _scatter.scatter_read

    def wrapped(*args: Any, **kwargs: Any) -> bool:
        calls.append(real(*args, **kwargs))
        return calls[-1]

    monkeypatch.setattr(_read_plan, "scatter_read", wrapped)
    return calls
