"""The public ``layout_map_scope``: layoutcore's own scope plus the active driver's.

:mod:`layoutcore._layout_map` keeps the map that ``Variable`` reads (a context variable); the
driver may add its framework's own scope through the hook ``enter_layout_map_scope`` (the TF
driver gives tf-keras models their layouts there). This module sits above both, so neither
imports the other.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

from ._errors import LayoutError
from ._layout_map import LayoutMap
from ._layout_map import layout_map_scope as _map_scope
from ._registry import get_driver

__all__ = ["layout_map_scope"]


@contextlib.contextmanager
def layout_map_scope(layout_map: LayoutMap, *, driver: str | None = None) -> Iterator[LayoutMap]:
    """Within this context, a ``Variable`` with a ``path`` and no layout takes ``layout_map[path]``.

    Where nothing matches, the map's ``on_missing`` applies (by default the variable is fully
    replicated). Scopes nest; the innermost wins. The active driver (or ``driver=``) enters its
    own scope too: on the TF driver with tf-keras installed, the variables of tf-keras models
    built inside take their layouts from the map, keyed as tf-keras keys them (``"d1.kernel"``).

    Raises:
        LayoutError: ``layout_map`` is not a :class:`LayoutMap`.
        DriverNotFoundError, DriverUnavailableError: the driver cannot be used.
    """
    if not isinstance(layout_map, LayoutMap):
        raise LayoutError(f"layout_map_scope expects a LayoutMap. Received: {layout_map!r}", value=layout_map)
    with _map_scope(layout_map) as active, get_driver(driver).enter_layout_map_scope(layout_map):
        yield active
