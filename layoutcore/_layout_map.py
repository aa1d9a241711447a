"""LayoutMap: regex rules from variable paths to layouts, and ``layout_map_scope``."""

from __future__ import annotations

import contextlib
import contextvars
import re
from collections.abc import Callable, Iterator, MutableMapping, Sequence
from typing import Any, Literal

from ._errors import AmbiguousLayoutError, LayoutError
from ._layout import Layout
from ._mesh import Mesh

__all__ = ["LayoutMap", "current_layout_map", "layout_map_scope"]

MatchMode = Literal["search", "fullmatch", "match"]
OnMultiple = Literal["error", "first"]
_MATCH_MODES: tuple[str, ...] = ("search", "fullmatch", "match")
_ON_MULTIPLE: tuple[str, ...] = ("error", "first")
_CACHE_SIZE = 65536


class LayoutMap(MutableMapping[str, Layout]):
    """An ordered map from regex patterns to layouts, looked up by variable path.

    Args:
        mesh: the mesh that layouts given without one are bound to (keras' ``device_mesh=``
            is accepted); may be ``None``, then layouts stay unbound.
        match: how a pattern is tried against a path: ``"search"`` (``re.search``; keras
            3.6 and the seed docs, the default), ``"fullmatch"`` (keras >= 3.12) or
            ``"match"`` (tf-keras).
        on_multiple: ``"error"`` raises :class:`AmbiguousLayoutError` when several patterns
            match; ``"first"`` takes the first inserted.

    Lookup (``lm[path]`` / ``lm.get(path)``): an exact key wins; otherwise every pattern is
    tried; no match gives ``None`` (not ``KeyError``, as keras).

    Raises:
        LayoutError: a bad mode, a pattern that does not compile (on insert), a re-inserted
            key, or a value that is neither a Layout nor a sequence of axes.

    Example:
        >>> lm = LayoutMap(Mesh((2,), ("model",)))
        >>> lm["dense.*kernel"] = (None, "model")
        >>> lm["my_model/dense_1/kernel"].axes
        (None, 'model')
        >>> lm["conv3d/kernel"] is None
        True
    """

    def __init__(
        self,
        mesh: Mesh | None = None,
        *,
        device_mesh: Mesh | None = None,
        match: MatchMode = "search",
        on_multiple: OnMultiple = "error",
    ) -> None:
        if device_mesh is not None:
            if mesh is not None and mesh != device_mesh:
                raise LayoutError("Pass the mesh once, as mesh= or device_mesh=, not both.", value=device_mesh)
            mesh = device_mesh
        if mesh is not None and not isinstance(mesh, Mesh):
            raise LayoutError(f"LayoutMap mesh must be a layoutcore Mesh or None. Received: {mesh!r}", value=mesh)
        if match not in _MATCH_MODES:
            raise LayoutError(f"match must be one of {list(_MATCH_MODES)}. Received: match={match!r}", value=match)
        if on_multiple not in _ON_MULTIPLE:
            raise LayoutError(
                f"on_multiple must be one of {list(_ON_MULTIPLE)}. Received: on_multiple={on_multiple!r}",
                value=on_multiple,
            )
        self._mesh = mesh
        self._match = match
        self._on_multiple = on_multiple
        self._layouts: dict[str, Layout] = {}
        self._matchers: dict[str, Callable[[str], Any]] = {}
        self._cache: dict[str, Layout | None] = {}

    # -- properties ------------------------------------------------------------------------
    @property
    def mesh(self) -> Mesh | None:
        """The map's mesh (``None`` when layouts stay unbound)."""
        return self._mesh

    device_mesh = mesh  # keras' name

    @property
    def match(self) -> MatchMode:
        """The match mode: ``"search"``, ``"fullmatch"`` or ``"match"``."""
        return self._match  # type: ignore[return-value]

    @property
    def on_multiple(self) -> OnMultiple:
        """What several matching patterns do: ``"error"`` or ``"first"``."""
        return self._on_multiple  # type: ignore[return-value]

    # -- MutableMapping --------------------------------------------------------------------
    def __setitem__(self, pattern: str, value: Layout | Sequence[Any]) -> None:
        if not isinstance(pattern, str):
            raise LayoutError(f"LayoutMap keys are regex strings. Received: {pattern!r}", value=pattern)
        if pattern in self._layouts:
            raise LayoutError(
                f"{pattern!r} already exists in the LayoutMap with value {self._layouts[pattern]!r}. "
                "Keys cannot be re-inserted; delete it first.",
                value=pattern,
            )
        try:
            compiled = re.compile(pattern)
        except re.error as exc:
            raise LayoutError(
                f"LayoutMap key {pattern!r} is not a valid regular expression: {exc}", value=pattern
            ) from None
        if isinstance(value, Layout):
            layout = value
        elif isinstance(value, (tuple, list)):
            layout = Layout(value)
        else:
            raise LayoutError(
                f"A LayoutMap value is a Layout or a tuple of axes. Received for {pattern!r}: {value!r}", value=value
            )
        if layout.mesh is None and self._mesh is not None:
            layout = layout.with_mesh(self._mesh)
        self._layouts[pattern] = layout
        self._matchers[pattern] = getattr(compiled, self._match)
        self._cache.clear()

    def __getitem__(self, path: str) -> Layout | None:  # type: ignore[override]
        if not isinstance(path, str):
            raise LayoutError(f"LayoutMap paths are strings. Received: {path!r}", value=path)
        if path in self._layouts:
            return self._layouts[path]
        try:
            return self._cache[path]
        except KeyError:
            pass
        if self._on_multiple == "first":
            matches = next(([p] for p, matcher in self._matchers.items() if matcher(path)), [])
        else:
            matches = [p for p, matcher in self._matchers.items() if matcher(path)]
        if len(matches) > 1:
            raise AmbiguousLayoutError(
                f"Path {path!r} matches multiple layout specification keys: {matches}. Make the patterns "
                "exclusive, or build the LayoutMap with on_multiple='first'.",
                path=path,
                patterns=tuple(matches),
            )
        result = self._layouts[matches[0]] if matches else None
        if len(self._cache) >= _CACHE_SIZE:  # a model has a bounded set of paths; a stream of new ones must not grow us
            self._cache.clear()
        self._cache[path] = result
        return result

    def get(self, path: str, default: Any = None) -> Any:  # type: ignore[override]
        """``self[path]``, or ``default`` where no key or pattern matches."""
        result = self[path]
        return default if result is None else result

    def layout_for(self, path: str, shape: Sequence[int], *, kind: str = "variable") -> Layout:
        """The layout a variable at ``path`` of global ``shape`` takes under this map.

        The map's entry for ``path`` (checked against the rank), else fully replicated on the
        map's mesh: what :func:`layout_map_scope` gives a ``Variable``, and what the torch
        driver gives a module parameter. ``kind`` names the thing in error messages.

        Raises:
            LayoutError: the entry's rank differs from ``len(shape)`` or it has no mesh, or nothing
                matches and the map has no mesh to replicate on (each naming ``path``).
            AmbiguousLayoutError: several patterns match (``on_multiple="error"``).
        """
        shape = tuple(shape)
        layout = self[path]
        if layout is None:
            if self._mesh is None:
                raise LayoutError(
                    f"No LayoutMap entry matches {kind} {path!r} and the map has no mesh to replicate it on; "
                    "give the LayoutMap a mesh.",
                    value=path,
                )
            return Layout.replicated(self._mesh, len(shape))
        if layout.rank != len(shape):
            raise LayoutError(
                f"LayoutMap gives {kind} {path!r} (shape {shape}) the rank-{layout.rank} layout {layout.axes}, "
                f"but the {kind} has rank {len(shape)}.",
                value=layout,
            )
        if layout.mesh is None:
            raise LayoutError(
                f"The layout {layout.axes} for {kind} {path!r} has no mesh; give the LayoutMap a mesh.", value=layout
            )
        return layout

    def pop(self, pattern: str, *default: Any) -> Any:  # type: ignore[override]
        """Remove key ``pattern`` and return its layout (by key, never by pattern lookup)."""
        if pattern in self._layouts:
            layout = self._layouts[pattern]
            del self[pattern]
            return layout
        if default:
            return default[0]
        raise KeyError(pattern)

    def setdefault(self, pattern: str, default: Any = None) -> Any:  # type: ignore[override]
        """``self[pattern]`` if ``pattern`` is a key, else insert ``default`` under it (by key)."""
        if pattern not in self._layouts:
            self[pattern] = default
        return self._layouts[pattern]

    def __contains__(self, key: object) -> bool:
        """Whether ``key`` is a key of the map (an exact pattern; not a lookup)."""
        return key in self._layouts

    def __delitem__(self, pattern: str) -> None:
        del self._layouts[pattern]
        del self._matchers[pattern]
        self._cache.clear()

    def __iter__(self) -> Iterator[str]:
        return iter(self._layouts)

    def __len__(self) -> int:
        return len(self._layouts)

    def __repr__(self) -> str:
        items = ", ".join(f"{k!r}: {v.axes!r}" for k, v in self._layouts.items())
        return f"LayoutMap({{{items}}}, mesh={self._mesh!r}, match={self._match!r})"


_ACTIVE_MAP: contextvars.ContextVar[LayoutMap | None] = contextvars.ContextVar("layoutcore_layout_map", default=None)


@contextlib.contextmanager
def layout_map_scope(layout_map: LayoutMap) -> Iterator[LayoutMap]:
    """Within this context, a ``Variable`` with a ``path`` and no layout takes ``layout_map[path]``.

    Where nothing matches, the variable is fully replicated. Scopes nest; the innermost wins.

    Raises:
        LayoutError: ``layout_map`` is not a :class:`LayoutMap`.
    """
    if not isinstance(layout_map, LayoutMap):
        raise LayoutError(f"layout_map_scope expects a LayoutMap. Received: {layout_map!r}", value=layout_map)
    token = _ACTIVE_MAP.set(layout_map)
    try:
        yield layout_map
    finally:
        _ACTIVE_MAP.reset(token)


def current_layout_map() -> LayoutMap | None:
    """The LayoutMap of the innermost active ``layout_map_scope``, or ``None``."""
    return _ACTIVE_MAP.get()
