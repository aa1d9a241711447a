"""The ``layoutcore`` command line: argument parsing, the tour, JSON readers and rich rendering.

The only part of layoutcore that imports ``rich``, and only inside the commands and the drawing
functions: importing this package loads neither ``rich`` nor a framework. ``main`` is the
console script; the drawing functions (:func:`render_layout`, :func:`layout_summary`,
:func:`device_table`) are importable from here and load ``rich`` on first use.
"""

from __future__ import annotations

from typing import Any

from ._json import layout_map_from_json, variables_from_json
from ._main import main

__all__ = ["device_table", "layout_map_from_json", "layout_summary", "main", "render_layout", "variables_from_json"]

_RENDER = frozenset({"device_table", "layout_summary", "render_layout"})


def __getattr__(name: str) -> Any:
    if name in _RENDER:  # _render imports rich at its top: only when a drawing is asked for
        try:
            from . import _render
        except ModuleNotFoundError as exc:
            if (exc.name or "").split(".")[0] != "rich":
                raise
            raise ImportError(
                f"layoutcore.cli.{name} draws with 'rich', which is not installed: pip install 'layoutcore[cli]'",
                name="rich",
            ) from None
        return getattr(_render, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
