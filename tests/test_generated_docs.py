"""The generated parts of the docs match the code they come from (regenerate: python tests/generate_docs.py)."""

from __future__ import annotations

import generate_docs
import pytest

from layoutcore import UnsupportedLayoutError
from layoutcore.driver import Capability, Limitation


@pytest.mark.parametrize("part", sorted(generate_docs.PARTS))
def test_generated_part_is_in_sync(part: str) -> None:
    assert generate_docs.current(part) == generate_docs.PARTS[part][1](), (
        f"{generate_docs.PARTS[part][0].name} is out of date: run `python tests/generate_docs.py {part}`"
    )


def test_every_feature_has_a_row_and_a_description() -> None:
    table = generate_docs.features_table()
    for member in [*Capability, *Limitation]:
        row = next(line for line in table.splitlines() if line.startswith(f"| `{member.value}` |"))
        assert row.rstrip(" |").split("|")[-1].strip(), f"{member!r} has no #: comment in _capabilities.py"


def test_feature_is_always_a_member() -> None:
    err = UnsupportedLayoutError("x", driver="d", feature="uneven")
    assert err.feature is Capability.UNEVEN and err.feature == "uneven"
    assert UnsupportedLayoutError("x", driver="d", feature=Limitation.DTYPE).feature is Limitation.DTYPE
    with pytest.raises(TypeError, match="Limitation"):
        UnsupportedLayoutError("x", driver="d", feature="free text")  # type: ignore[arg-type]  # what is refused


def test_every_hook_has_a_raises_line() -> None:
    missing = [sig for sig, _, _, raises in generate_docs.hook_rows() if not raises]
    assert missing == [], f"hooks without a Raises: section: {missing}"
