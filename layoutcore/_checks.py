"""Input checks shared by the value types and the geometry functions.

The one rule for every public entry point: bad input raises :class:`~layoutcore.LayoutError`
naming the value (cut to a readable length), and sizes are checked before anything is allocated.
Integers are accepted through ``__index__`` (NumPy's too); bools, floats and objects whose
``__index__`` raises are not integers.
"""

from __future__ import annotations

import operator
from collections.abc import Iterable
from typing import Any

from ._errors import LayoutError

__all__ = ["MAX_LISTED", "MAX_RANK", "MAX_SIZE", "check_listed", "checked_int", "int_sequence", "short_repr"]

#: Largest mesh size, dimension size or product layoutcore accepts: TF's int64 device ids and shapes.
MAX_SIZE = 2**63 - 1
#: Most entries a call that lists one item per device or per chunk builds (``Mesh.to_string``,
#: ``local_devices``, ``device_slices``, ``chunk_sizes``, ...). An abstract mesh may be any size,
#: but listing 10**12 devices would exhaust memory; above this such calls raise instead.
MAX_LISTED = 2**22
#: Highest tensor rank a layout built from a rank (``Layout.replicated(mesh, rank)``) may have:
#: NumPy's own limit, so every layout can hold a NumPy array (``to_numpy``).
MAX_RANK = 64


def check_listed(count: int, what: str, value: Any) -> None:
    """Raise :class:`LayoutError` before a call builds a list of ``count`` > :data:`MAX_LISTED` items."""
    if count > MAX_LISTED:
        raise LayoutError(
            f"{what} would list {count} items; layoutcore lists at most {MAX_LISTED} (MAX_LISTED). "
            f"Received: {short_repr(value)}",
            value=value,
        )


def short_repr(value: Any, limit: int = 200) -> str:
    """``repr(value)`` cut to ``limit`` characters, so a huge bad input does not make a huge message."""
    try:
        text = repr(value)
    except Exception:  # a value whose __repr__ raises is still named by its type
        text = f"<{type(value).__name__} object>"
    return text if len(text) <= limit else text[: limit - 3] + "..."


def checked_int(value: Any, what: str, *, minimum: int | None = None, maximum: int = MAX_SIZE) -> int:
    """``value`` as a Python int in ``minimum .. maximum``.

    Raises:
        LayoutError: a bool, a non-integer, an object whose ``__index__`` raises, or out of range.
    """
    if isinstance(value, bool) or not hasattr(type(value), "__index__"):
        raise LayoutError(f"{what} must be an int. Received: {short_repr(value)}", value=value)
    try:
        number = operator.index(value)
    except Exception as exc:  # a user type's __index__ may raise anything; report it as a bad value
        raise LayoutError(
            f"{what} must be an int; its __index__ raised {exc!r}. Received: {short_repr(value)}", value=value
        ) from exc
    if not isinstance(number, int) or (minimum is not None and number < minimum) or number > maximum:
        bounds = f">= {minimum}" if minimum is not None else ""
        raise LayoutError(
            f"{what} must be an int {bounds}{' and ' if bounds else ''}<= {maximum}. Received: {short_repr(value)}",
            value=value,
        )
    return number


def int_sequence(value: Any, what: str, *, minimum: int | None = None) -> tuple[int, ...]:
    """``value`` (any iterable of ints, not a string) as a tuple of Python ints, each checked.

    Raises:
        LayoutError: not an iterable, a string, or an element :func:`checked_int` rejects.
    """
    if isinstance(value, (str, bytes)) or not isinstance(value, Iterable):
        raise LayoutError(f"{what} must be a sequence of ints. Received: {short_repr(value)}", value=value)
    try:
        items = tuple(value)
    except Exception as exc:  # an iterable whose iteration fails is a bad value, not a crash
        raise LayoutError(f"{what} must be a sequence of ints. Received: {short_repr(value)}", value=value) from exc
    return tuple(checked_int(v, f"{what} entry", minimum=minimum) for v in items)
