"""Pure tree flattening: containers, children, paths (no dispatch, so planning can use it).

A *tree* is nested dicts (any ``Mapping``), lists, tuples and namedtuples; anything else is a
leaf. A leaf's *path* is the keys from the root joined by ``separator`` (list and tuple indices
and namedtuple field names included: ``"layers/0/kernel"``).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from ._errors import LayoutError

__all__ = ["flatten_with_paths", "is_namedtuple", "keyed_children", "map_leaves"]


def is_namedtuple(node: object) -> bool:
    """Whether ``node`` is a namedtuple (a tuple whose type has ``_fields``)."""
    return isinstance(node, tuple) and hasattr(type(node), "_fields")


def keyed_children(node: Any) -> list[tuple[Any, Any]] | None:
    """``(key, child)`` pairs of a container node with the keys as they are (a mapping's own keys,
    list indices as ints, namedtuple field names), or ``None`` for a leaf.

    The one definition of what a tree node is, shared by path flattening here and by the
    checkpoint's structure record (``layoutcore.checkpoint._tree``), which keeps key types.
    """
    if isinstance(node, Mapping):
        return list(node.items())
    if is_namedtuple(node):
        return list(zip(type(node)._fields, node, strict=True))
    if isinstance(node, (list, tuple)):
        return list(enumerate(node))
    return None


def _children(node: Any) -> list[tuple[str, Any]] | None:
    """``(key, child)`` pairs of a container node with keys as path components, or ``None`` for a leaf."""
    pairs = keyed_children(node)
    return None if pairs is None else [(str(k), v) for k, v in pairs]


def _rebuild(node: Any, values: list[Any]) -> Any:
    """A container of ``node``'s kind holding ``values`` (in ``node``'s key order)."""
    if isinstance(node, Mapping):
        pairs = dict(zip(node.keys(), values, strict=True))
        if type(node) is dict:
            return pairs
        try:  # OrderedDict, FrozenDict, ...: keep the user's mapping type where it can be rebuilt
            mapping_type: Any = type(node)  # its constructor's signature is the user's
            return mapping_type(pairs)
        except Exception:  # a mapping type that takes other arguments: a plain dict holds the same items
            return pairs
    if is_namedtuple(node):
        return type(node)(*values)
    if isinstance(node, list):
        return list(values)
    return tuple(values)


def _join(prefix: str, key: str, separator: str) -> str:
    return f"{prefix}{separator}{key}" if prefix else key


def _check_separator(separator: object) -> str:
    if not isinstance(separator, str):
        raise LayoutError(f"separator must be a string. Received: {separator!r}", value=separator)
    return separator


def flatten_with_paths(tree: Any, separator: str = "/") -> list[tuple[str, Any]]:
    """Every leaf of ``tree`` that has a ``.shape``, with its path, in tree order.

    Mappings are walked in their iteration order, sequences by index. Leaves without a
    ``.shape`` (``None``, Python numbers, strings, ...) are skipped.

    Example:
        >>> import numpy as np
        >>> flatten_with_paths({"dense": {"kernel": np.zeros((2, 3))}, "layers": [np.zeros(4), None]})[1][0]
        'layers/0'

    Raises:
        LayoutError: ``separator`` is not a string.
    """
    separator = _check_separator(separator)
    out: list[tuple[str, Any]] = []

    def walk(node: Any, path: str) -> None:
        children = _children(node)
        if children is None:
            if hasattr(node, "shape"):
                out.append((path, node))
            return
        for key, child in children:
            walk(child, _join(path, key, separator))

    walk(tree, "")
    return out


def map_leaves(tree: Any, fn: Callable[[str, Any], Any], separator: str) -> Any:
    """``tree`` with every leaf replaced by ``fn(path, leaf)`` (containers rebuilt by kind)."""

    def walk(node: Any, path: str) -> Any:
        children = _children(node)
        if children is None:
            return fn(path, node)
        return _rebuild(node, [walk(child, _join(path, key, separator)) for key, child in children])

    return walk(tree, "")
