"""Tree walking for checkpoints: a tree's structure as JSON and its ``(path, leaf)`` pairs, and back.

Paths are keys joined by ``/`` (``docs/design.md#trees-and-model-code``); dicts, lists, tuples and namedtuples are nodes, ``None``
is kept as a node, everything else is a leaf. Pure Python: no framework, no I/O.
"""

from __future__ import annotations

import collections
from collections.abc import Mapping
from typing import Any

from .._paths import is_namedtuple, keyed_children

__all__ = ["rebuild", "walk"]


def walk(tree: Any, leaves: list[tuple[str, Any]], path: str = "") -> Any:
    """The tree's structure as JSON, appending ``(path, leaf)`` for every non-None leaf."""
    if tree is None:
        return {"t": "none"}
    children = keyed_children(tree)
    if children is None:
        leaves.append((path, tree))
        return {"t": "leaf", "p": path}
    subs = [walk(v, leaves, f"{path}/{k}" if path else str(k)) for k, v in children]
    if isinstance(tree, Mapping):
        keys = [k if isinstance(k, (str, int)) and not isinstance(k, bool) else str(k) for k, _ in children]
        return {"t": "dict", "k": keys, "c": subs}
    if is_namedtuple(tree):
        return {"t": "namedtuple", "n": type(tree).__name__, "f": list(type(tree)._fields), "c": subs}
    return {"t": "list" if isinstance(tree, list) else "tuple", "c": subs}


def rebuild(node: Mapping[str, Any], values: Mapping[str, Any]) -> Any:
    kind = node["t"]
    if kind == "none":
        return None
    if kind == "leaf":
        return values[node["p"]]
    subs = [rebuild(c, values) for c in node["c"]]
    if kind == "dict":
        return dict(zip(node["k"], subs, strict=True))
    if kind == "namedtuple":
        return collections.namedtuple(node["n"], node["f"])(*subs)
    return subs if kind == "list" else tuple(subs)
