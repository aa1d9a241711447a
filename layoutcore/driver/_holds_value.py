"""The base of objects that stand for a distributed value (``layoutcore.Variable``), known to the front-end."""

from __future__ import annotations

from typing import Any

__all__ = ["HoldsValue"]


class HoldsValue:
    """Base of objects that stand for their current distributed :attr:`value` (``layoutcore.Variable``).

    Every front-end method that takes a tensor takes such an object too, and uses its ``value``;
    the front-end needs no import of the class that defines it.
    """

    __slots__ = ()

    @property
    def value(self) -> Any:
        """The current native distributed tensor."""
        raise NotImplementedError
