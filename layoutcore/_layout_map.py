"""LayoutMap: regex rules from variable paths to layouts, and ``layout_map_scope``."""

from __future__ import annotations

import contextlib
import contextvars
import sys
import warnings
from collections.abc import Callable, Iterator, MutableMapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from ._errors import AmbiguousLayoutError, LayoutError, UnmatchedPathError, UnmatchedPathWarning
from ._layout import Layout
from ._mesh import Mesh
from ._patterns import NEAR_MISSES, _compile, any_match, near_miss_index, near_misses, required_literal

__all__ = ["LayoutMap", "MatchReport", "current_layout_map", "layout_map_scope"]

MatchMode = Literal["search", "fullmatch", "match"]
OnMultiple = Literal["error", "first"]
OnMissing = Literal["replicate", "warn", "error"]
_MATCH_MODES: tuple[str, ...] = ("search", "fullmatch", "match")
_ON_MULTIPLE: tuple[str, ...] = ("error", "first")
_ON_MISSING: tuple[str, ...] = ("replicate", "warn", "error")

#: The lookup cache holds at most this many bytes of paths and entries (estimated with
#: ``sys.getsizeof``); a stream of new paths clears it rather than growing it.
CACHE_BYTES = 4 << 20
#: Estimated bytes a cache entry costs beyond its key string (dict slot, hash, value reference).
_ENTRY_OVERHEAD = 100
#: Paths longer than this are looked up but not cached (one would take a large share of the cache).
_MAX_CACHED_PATH = CACHE_BYTES // 64
#: An unmatched-path warning or error names this many paths, each with its near misses.
_NAMED_PATHS = 10


@dataclass(frozen=True, slots=True)
class MatchReport:
    """How a :class:`LayoutMap` resolves one path (:meth:`LayoutMap.explain`).

    Attributes:
        path: the looked-up path.
        exact: whether ``path`` is itself a key of the map.
        matches: every pattern that matches ``path``, in insertion order (the key alone when exact).
        chosen: the pattern whose layout is used, or ``None`` (nothing matched, or several
            matched under ``on_multiple="error"``).
        layout: the chosen layout, or ``None``.
        near_misses: when nothing matched, the patterns most similar to ``path``, closest first.
        on_missing: the map's policy for an unmatched path.
        on_multiple: the map's policy for several matches.
    """

    path: str
    exact: bool
    matches: tuple[str, ...]
    chosen: str | None
    layout: Layout | None
    near_misses: tuple[str, ...] = ()
    on_missing: OnMissing = "replicate"
    on_multiple: OnMultiple = "error"

    @property
    def ambiguous(self) -> bool:
        """Several patterns match and the map refuses to choose (``on_multiple="error"``)."""
        return self.chosen is None and len(self.matches) > 1

    def __str__(self) -> str:
        path = repr(self.path)
        if self.exact:
            return f"{path} is a key of the map itself, so it takes {self.layout} without trying any pattern."
        if self.ambiguous:
            listed = ", ".join(repr(p) for p in self.matches)
            return (
                f"{path} matches {len(self.matches)} patterns ({listed}), so looking it up raises "
                "AmbiguousLayoutError (on_multiple='error')."
            )
        if self.chosen is not None:
            others = self.matches[1:]
            also = f"; it also matches {', '.join(repr(p) for p in others)} (on_multiple='first')" if others else ""
            return f"{path} matches pattern {self.chosen!r}, so it takes {self.layout}{also}."
        outcome = {
            "replicate": "it is fully replicated",
            "warn": "it is fully replicated with an UnmatchedPathWarning",
            "error": "applying the map raises UnmatchedPathError",
        }[self.on_missing]
        near = (
            f"; the closest patterns are {', '.join(repr(p) for p in self.near_misses)}"
            if self.near_misses
            else "; no pattern is close"
        )
        return f"{path} matches no pattern, so {outcome} (on_missing={self.on_missing!r}){near}."


class LayoutMap(MutableMapping[str, Layout]):
    """An ordered map from regex patterns to layouts, looked up by variable path.

    Args:
        mesh: the mesh that layouts given without one are bound to (keras' ``device_mesh=``
            is accepted); may be ``None``, then layouts stay unbound.
        match: how a pattern is tried against a path: ``"search"`` (``re.search``; keras
            3.6 and the seed docs, the default), ``"fullmatch"`` (keras >= 3.14) or
            ``"match"`` (tf-keras). keras 3.12 and 3.13 still search; 3.14 fullmatches.
        on_multiple: ``"error"`` raises :class:`AmbiguousLayoutError` when several patterns
            match; ``"first"`` takes the first inserted.
        on_missing: what applying the map (:meth:`layout_for`, :func:`layout_map_scope`,
            :func:`layoutcore.plan`, the integrations) does with a path nothing matches:
            ``"replicate"`` (keras' behaviour), ``"warn"`` (replicate with an
            :class:`UnmatchedPathWarning`) or ``"error"`` (:class:`UnmatchedPathError`). Both
            name the path and its closest patterns. ``lm[path]`` itself still returns ``None``.

    Patterns are compiled on insert by Python's ``re``. A pattern that nests an unbounded
    repeat inside another (``(a+)+``), the shape that makes backtracking exponential, is
    refused there, as is one too deep or too large for ``re`` to compile.

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
        on_missing: OnMissing = "replicate",
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
        if on_missing not in _ON_MISSING:
            raise LayoutError(
                f"on_missing must be one of {list(_ON_MISSING)}. Received: on_missing={on_missing!r}",
                value=on_missing,
            )
        self._mesh = mesh
        self._match = match
        self._on_multiple = on_multiple
        self._on_missing = on_missing
        self._layouts: dict[str, Layout] = {}
        self._matchers: dict[str, Callable[[str], Any]] = {}
        # pattern -> literal text every match contains: a substring test rules most patterns out first.
        self._required: dict[str, str] = {}
        # For near misses: each pattern's literal spellings and their character pairs, built on the first
        # near-miss question after a change (inserting 100 000 patterns must not pay for them).
        self._near_index: tuple[dict[str, tuple[str, ...]], dict[str, tuple[frozenset[str], ...]]] | None = None
        # path -> layout (or None); bounded in bytes (see CACHE_BYTES), not in entries.
        self._cache: dict[str, Layout | None] = {}
        self._cache_bytes = 0
        # One alternation of every pattern, built on first lookup (see _patterns.any_match).
        self._screen: Callable[[str], Any] | None = None
        self._screen_built = False
        self._near_index = None

    # -- properties ------------------------------------------------------------------------
    @property
    def mesh(self) -> Mesh | None:
        """The map's mesh (``None`` when layouts stay unbound)."""
        return self._mesh

    device_mesh = mesh  # keras' name

    @property
    def match(self) -> MatchMode:
        """The match mode: ``"search"``, ``"fullmatch"`` or ``"match"``."""
        return self._match

    @property
    def on_multiple(self) -> OnMultiple:
        """What several matching patterns do: ``"error"`` or ``"first"``."""
        return self._on_multiple

    @property
    def on_missing(self) -> OnMissing:
        """What applying the map does with an unmatched path: ``"replicate"``, ``"warn"`` or ``"error"``."""
        return self._on_missing

    @property
    def cache_bytes(self) -> int:
        """Estimated bytes the lookup cache holds now (at most :data:`CACHE_BYTES`)."""
        return self._cache_bytes

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
        compiled, parsed = _compile(pattern)
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
        self._required[pattern] = required_literal(parsed, compiled.flags)
        self._clear_cache()

    def __getitem__(self, path: str) -> Layout | None:  # type: ignore[override]  # None for no match (keras), not KeyError
        if not isinstance(path, str):
            raise LayoutError(f"LayoutMap paths are strings. Received: {path!r}", value=path)
        if path in self._layouts:
            return self._layouts[path]
        try:
            return self._cache[path]
        except KeyError:
            pass
        pattern = self._pattern_for(path)
        result = None if pattern is None else self._layouts[pattern]
        self._remember(path, result)
        return result

    def pattern_for(self, path: str) -> str | None:
        """The key whose layout ``self[path]`` returns (``path`` itself when it is a key), or ``None``.

        Raises:
            AmbiguousLayoutError: several patterns match (``on_multiple="error"``).
        """
        if not isinstance(path, str):
            raise LayoutError(f"LayoutMap paths are strings. Received: {path!r}", value=path)
        if path in self._layouts:
            return path
        return self._pattern_for(path)

    def _pattern_for(self, path: str) -> str | None:
        if not self._screen_built:
            self._screen, self._screen_built = any_match(self._matchers, self._match), True
        screen = self._screen
        if screen is not None and not screen(path):  # one pass rules out every pattern
            return None
        matchers = self._matchers
        candidates = [p for p, literal in self._required.items() if literal in path]  # insertion order
        if self._on_multiple == "first":
            return next((p for p in candidates if matchers[p](path)), None)
        matches = [p for p in candidates if matchers[p](path)]
        if len(matches) > 1:
            raise AmbiguousLayoutError(
                f"Path {path!r} matches multiple layout specification keys: {matches}. Make the patterns "
                "exclusive, or build the LayoutMap with on_multiple='first'.",
                path=path,
                patterns=tuple(matches),
            )
        return matches[0] if matches else None

    def _remember(self, path: str, result: Layout | None) -> None:
        # A model has a bounded set of paths; a stream of new (or huge) ones must not grow us.
        cost = sys.getsizeof(path) + _ENTRY_OVERHEAD
        if cost > _MAX_CACHED_PATH:
            return
        if self._cache_bytes + cost > CACHE_BYTES:
            self._clear_cache()
        self._cache[path] = result
        self._cache_bytes += cost

    def _clear_cache(self) -> None:
        # Every change of the patterns comes through here: the combined screen is rebuilt on next use.
        self._cache.clear()
        self._cache_bytes = 0
        self._screen, self._screen_built = None, False
        self._near_index = None

    def near_misses(self, path: str, n: int = NEAR_MISSES) -> tuple[str, ...]:
        """The ``n`` patterns most similar to ``path`` (``difflib`` ratio over the pattern's literal text).

        Under ``match="search"`` and ``"match"`` a pattern is compared with the best part of the path it
        could stand for, so ``"dense.*kernel"`` is close to ``"model/dense_1/kernal"``.
        """
        if self._near_index is None:
            self._near_index = near_miss_index(self._matchers)
        return near_misses(path, *self._near_index, self._match, n)

    def explain(self, path: str) -> MatchReport:
        """How ``path`` resolves: exact key, every matching pattern, the chosen one, or the near misses.

        Never raises for an ambiguous path (the report says so instead).

        Example:
            >>> lm = LayoutMap(Mesh((2,), ("model",)))
            >>> lm["dense.*kernel"] = (None, "model")
            >>> lm.explain("model/dense_1/kernl").near_misses
            ('dense.*kernel',)

        Raises:
            LayoutError: ``path`` is not a string.
        """
        if not isinstance(path, str):
            raise LayoutError(f"LayoutMap paths are strings. Received: {path!r}", value=path)
        missing, multiple = self.on_missing, self.on_multiple
        if path in self._layouts:
            return MatchReport(path, True, (path,), path, self._layouts[path], (), missing, multiple)
        matches = tuple(p for p, matcher in self._matchers.items() if matcher(path))
        if not matches:
            return MatchReport(path, False, (), None, None, self.near_misses(path), missing, multiple)
        chosen = matches[0] if len(matches) == 1 or self._on_multiple == "first" else None
        layout = None if chosen is None else self._layouts[chosen]
        return MatchReport(path, False, matches, chosen, layout, (), missing, multiple)

    def unmatched(self, paths: Sequence[str], kind: str = "variable") -> None:
        """Apply ``on_missing`` to ``paths`` that nothing matched: nothing, one warning, or one error.

        Raises:
            UnmatchedPathError: ``on_missing="error"`` and ``paths`` is not empty.
        """
        if not paths or self._on_missing == "replicate":
            return
        near = tuple(self.near_misses(p) for p in paths[:_NAMED_PATHS])  # the paths the message names
        shown = "; ".join(
            f"{p!r} (closest: {', '.join(repr(m) for m in misses)})" if misses else repr(p)
            for p, misses in zip(paths, near, strict=False)
        )
        more = f" and {len(paths) - _NAMED_PATHS} more" if len(paths) > _NAMED_PATHS else ""
        message = (
            f"No LayoutMap pattern matches {len(paths)} {kind} path(s): {shown}{more}. "
            f"on_missing={self._on_missing!r}: add a pattern, or build the map with on_missing='replicate' to "
            "replicate them."
        )
        if self._on_missing == "error":
            raise UnmatchedPathError(message, paths=tuple(paths), near_misses=near)
        warnings.warn(UnmatchedPathWarning(message, paths=tuple(paths), near_misses=near), stacklevel=3)

    def get(self, path: str, default: Any = None) -> Any:
        """``self[path]``, or ``default`` where no key or pattern matches."""
        result = self[path]
        return default if result is None else result

    def layout_for(self, path: str, shape: Sequence[int], *, kind: str = "variable") -> Layout:
        """The layout a variable at ``path`` of global ``shape`` takes under this map.

        The map's entry for ``path`` (checked against the rank), else, by ``on_missing``, fully
        replicated on the map's mesh (with an :class:`UnmatchedPathWarning` under ``"warn"``):
        what :func:`layout_map_scope` gives a ``Variable``, and what the integrations give a
        model's variables. ``kind`` names the thing in error messages.

        Raises:
            LayoutError: the entry's rank differs from ``len(shape)`` or it has no mesh, or nothing
                matches and the map has no mesh to replicate on (each naming ``path``).
            UnmatchedPathError: nothing matches and ``on_missing="error"``.
            AmbiguousLayoutError: several patterns match (``on_multiple="error"``).
        """
        shape = tuple(shape)
        layout = self[path]
        if layout is None:
            self.unmatched([path], kind)
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

    def pop(self, pattern: str, *default: Any) -> Any:
        """Remove key ``pattern`` and return its layout (by key, never by pattern lookup)."""
        if pattern in self._layouts:
            layout = self._layouts[pattern]
            del self[pattern]
            return layout
        if default:
            return default[0]
        raise KeyError(pattern)

    def setdefault(self, pattern: str, default: Any = None) -> Any:
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
        del self._required[pattern]
        self._clear_cache()

    def __iter__(self) -> Iterator[str]:
        return iter(self._layouts)

    def __len__(self) -> int:
        return len(self._layouts)

    def __repr__(self) -> str:
        items = ", ".join(f"{k!r}: {v.axes!r}" for k, v in self._layouts.items())
        options = "".join(
            f", {name}={value!r}"
            for name, value, default in (
                ("on_multiple", self._on_multiple, "error"),
                ("on_missing", self._on_missing, "replicate"),
            )
            if value != default
        )
        return f"LayoutMap({{{items}}}, mesh={self._mesh!r}, match={self._match!r}{options})"


_ACTIVE_MAP: contextvars.ContextVar[LayoutMap | None] = contextvars.ContextVar("layoutcore_layout_map", default=None)


@contextlib.contextmanager
def layout_map_scope(layout_map: LayoutMap) -> Iterator[LayoutMap]:
    """Within this context, a ``Variable`` with a ``path`` and no layout takes ``layout_map[path]``.

    Where nothing matches, the map's ``on_missing`` applies (by default the variable is fully
    replicated). Scopes nest; the innermost wins.

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
