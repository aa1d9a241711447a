"""One bounded, thread-safe least-recently-used cache for the front-end and every driver.

Conversions between layoutcore's hashable values and a framework's objects are pure and
recomputable, so a cache bounded in entries that evicts the least recently used one keeps a
long-running process (a new mesh per request, a sweep over layouts) from growing without
limit, while the hot entries of a training loop stay. A lock makes each operation atomic: a
driver is shared by threads, and an ``OrderedDict`` reordered by two threads at once corrupts.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Hashable
from typing import Generic, Protocol, TypeVar, cast, overload

__all__ = ["LRUCache"]

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")
D = TypeVar("D")
_MISSING: object = object()


_KC = TypeVar("_KC", contravariant=True)
_VC = TypeVar("_VC", covariant=True)


class _Peek(Protocol[_KC, _VC]):
    @overload
    def __call__(self, key: _KC, /) -> _VC | None: ...
    @overload
    def __call__(self, key: _KC, default: D, /) -> _VC | D: ...


class LRUCache(Generic[K, V]):
    """At most ``maxsize`` entries; a hit makes its entry the most recent, an insert past the bound
    evicts the least recent.

    Example:
        >>> cache: LRUCache[str, int] = LRUCache(2)
        >>> _ = cache.put("a", 1), cache.put("b", 2), cache.get("a"), cache.put("c", 3)
        >>> sorted(cache.keys())
        ['a', 'c']

    Raises:
        ValueError: ``maxsize`` is not a positive int (at construction).
    """

    __slots__ = ("_data", "_lock", "maxsize", "peek")

    #: ``peek(key[, default])``: the value cached for ``key``, else ``default`` (``None``), without making it
    #: the most recent and without the lock: the dict's own ``get`` (a C call, no Python frame, for a lookup
    #: on every call; a read is atomic under the GIL, and CPython's dict lookup tolerates a concurrent
    #: write). Entries read only so age from their :meth:`put`.
    peek: _Peek[K, V]

    def __init__(self, maxsize: int) -> None:
        if not isinstance(maxsize, int) or isinstance(maxsize, bool) or maxsize < 1:
            raise ValueError(f"LRUCache maxsize must be a positive int. Received: {maxsize!r}")
        self.maxsize = maxsize
        self._data: OrderedDict[K, V] = OrderedDict()
        self._lock = threading.Lock()
        self.peek = cast("_Peek[K, V]", self._data.get)  # its overloads are dict.get's, typed as the cache's

    @overload
    def get(self, key: K) -> V | None: ...
    @overload
    def get(self, key: K, default: D) -> V | D: ...
    def get(self, key: K, default: object = None) -> object:
        """The value cached for ``key`` (now the most recent), else ``default``."""
        with self._lock:
            value = self._data.get(key, _MISSING)
            if value is _MISSING:
                return default
            self._data.move_to_end(key)
            return value

    def put(self, key: K, value: V) -> V:
        """Cache ``value`` for ``key`` as the most recent entry, evicting the least recent past ``maxsize``;
        returns ``value``."""
        with self._lock:
            self._data[key] = value
            self._data.move_to_end(key)
            if len(self._data) > self.maxsize:
                self._data.popitem(last=False)
        return value

    def setdefault(self, key: K, value: V) -> V:
        """The value cached for ``key`` (now the most recent), else ``value``, cached."""
        with self._lock:
            kept = self._data.setdefault(key, value)
            self._data.move_to_end(key)
            if len(self._data) > self.maxsize:
                self._data.popitem(last=False)
            return kept

    def __getitem__(self, key: K) -> V:
        """The value cached for ``key`` (now the most recent).

        Raises:
            KeyError: nothing is cached for ``key``.
        """
        with self._lock:
            value = self._data[key]
            self._data.move_to_end(key)
            return value

    def __setitem__(self, key: K, value: V) -> None:
        self.put(key, value)

    def get_or_compute(self, key: K, compute: Callable[[], V]) -> V:
        """The cached value for ``key``, computing and caching it on a miss.

        ``compute`` runs outside the lock (it may be slow or call back into the cache); two
        threads missing at once both compute, and the later result is kept: both are equal.
        """
        with self._lock:
            try:
                found = self._data[key]
            except KeyError:
                pass
            else:
                self._data.move_to_end(key)
                return found
        value = compute()
        self.put(key, value)
        return value

    def pop(self, key: K) -> V | None:
        """Remove ``key``'s entry and return its value (``None`` where there was none)."""
        with self._lock:
            return self._data.pop(key, None)

    def clear(self) -> None:
        """Drop every entry."""
        with self._lock:
            self._data.clear()

    def keys(self) -> list[K]:
        """The cached keys, least recent first (a snapshot)."""
        with self._lock:
            return list(self._data)

    def __contains__(self, key: object) -> bool:
        with self._lock:
            return key in self._data

    def __len__(self) -> int:
        with self._lock:
            return len(self._data)

    def __repr__(self) -> str:
        return f"LRUCache({self.maxsize})"
