"""``tree_shardings``: a LayoutMap over any JAX pytree, as ``NamedSharding``s for ``jax.jit`` (docs/design.md#trees-and-model-code)."""

from __future__ import annotations

import functools
import sys
from collections.abc import Callable, Hashable
from typing import Any

import numpy as np

from layoutcore import Layout, LayoutError, LayoutMap, get_driver
from layoutcore.driver import LRUCache

__all__ = ["tree_paths", "tree_shardings"]


@functools.cache
def _key_readers() -> dict[type, Callable[[Any], str]]:
    from jax import tree_util

    return {
        tree_util.DictKey: lambda k: str(k.key),
        tree_util.SequenceKey: lambda k: str(k.idx),
        tree_util.GetAttrKey: lambda k: str(k.name),
        tree_util.FlattenedIndexKey: lambda k: str(k.key),
    }


def _key_name(key: Any) -> str:
    """One pytree key as a path component: dict keys and attribute names as themselves, indices in decimal."""
    reader = _key_readers().get(type(key))
    return reader(key) if reader is not None else str(key)


#: (treedef, separator) -> paths. jax's flatten_with_path costs ~100x a plain flatten (jax 0.10.2), and a
#: treedef fixes its key paths (keys live in the treedef: dict keys, node aux data), so a training loop
#: that asks for the same structure again pays only the plain flatten.
_PATHS: LRUCache[Hashable, tuple[str, ...]] = LRUCache(256)


def _nnx_variable_leaf() -> Callable[[Any], bool] | None:
    """``is_leaf`` stopping at flax NNX Variables (so a path ends at ``kernel``, not ``kernel/value``).

    Only when flax.nnx is already imported: a tree can hold NNX Variables only then, and layoutcore
    never imports flax itself.
    """
    nnx = sys.modules.get("flax.nnx")
    variable = getattr(nnx, "Variable", None)
    if variable is None:
        return None
    return lambda node: isinstance(node, variable)


def _leaf_shape(leaf: Any) -> tuple[int, ...]:
    """The global shape of a leaf: an array's, an NNX Variable's value's, a Python scalar's ``()``."""
    shape = getattr(leaf, "shape", None)
    if shape is None:
        shape = np.shape(leaf.get_value() if hasattr(leaf, "get_value") else leaf)
    return tuple(int(s) for s in shape)


def tree_paths(tree: Any, *, separator: str = "/") -> tuple[list[tuple[str, Any]], Any]:
    """``([(path, leaf), ...], treedef)`` of a JAX pytree, paths as a LayoutMap sees them.

    Keys are joined by ``separator``: dict keys and attribute/field names as they are, list and
    tuple indices in decimal. flax NNX Variables are leaves (their ``.value`` is not a path
    component), so NNX state, linen params and optax states that hold either are named by the
    parameter paths: ``"layers/0/kernel"``, and ``"0/mu/layers/0/kernel"`` in ``optax.adam``'s state.
    """
    import jax

    if not isinstance(separator, str):
        raise LayoutError(f"separator must be a string. Received: {separator!r}", value=separator)
    is_leaf = _nnx_variable_leaf()
    leaves, treedef = jax.tree_util.tree_flatten(tree, is_leaf=is_leaf)
    key: Hashable = (treedef, separator)
    try:
        paths = _PATHS.get(key)
    except TypeError:  # a node whose aux data is unhashable: no caching for this structure
        key, paths = None, None
    if paths is None:
        with_path, _ = jax.tree_util.tree_flatten_with_path(tree, is_leaf=is_leaf)
        paths = tuple(separator.join(_key_name(k) for k in path) for path, _ in with_path)
        if key is not None:
            _PATHS.put(key, paths)
    return list(zip(paths, leaves, strict=True)), treedef


def tree_shardings(layout_map: LayoutMap, tree: Any, *, separator: str = "/", driver: Any = None) -> Any:
    """A ``NamedSharding`` for every leaf of a JAX pytree, by ``layout_map.layout_for(path, leaf.shape)``.

    Works on any pytree: dicts, lists, tuples, namedtuples, flax NNX ``State`` (an NNX Variable is one
    leaf; its ``.value`` is not part of the path), linen ``params`` dicts and optax states. The result
    has the tree's structure with each leaf (or NNX Variable) replaced by its sharding, which
    ``jax.jit(in_shardings=, out_shardings=)`` and ``jax.device_put`` take as a pytree prefix. Leaves
    are arrays, ``jax.ShapeDtypeStruct``s (``jax.eval_shape`` output, so nothing is allocated) or
    Python scalars (rank 0). A path nothing matches is replicated on the map's mesh.

    Args:
        layout_map: the map; its patterns are matched against the paths of :func:`tree_paths`.
        tree: the pytree.
        separator: joins the keys of a path.
        driver: the JAX driver to bind meshes with (default: the registered ``"jax"`` driver).

    Raises:
        LayoutError: ``layout_map`` is not a LayoutMap, or an entry's rank differs from its leaf's
            (naming the path).
        AmbiguousLayoutError: a path matches several patterns.
        UnsupportedLayoutError: JAX cannot lay out a leaf by its layout (an uneven dimension).
    """
    import jax

    from ._driver import JaxDriver

    if not isinstance(layout_map, LayoutMap):
        raise LayoutError(f"tree_shardings expects a layoutcore LayoutMap. Received: {layout_map!r}", value=layout_map)
    drv = get_driver("jax" if driver is None else driver)
    if not isinstance(drv, JaxDriver):
        raise LayoutError(f"tree_shardings needs the JAX driver. Received: {drv!r}", value=drv)
    leaves, treedef = tree_paths(tree, separator=separator)
    shardings = []
    checked: dict[tuple[Layout, tuple[int, ...]], Any] = {}  # layers repeat: check each (layout, shape) once
    for path, leaf in leaves:
        shape = _leaf_shape(leaf)
        layout = layout_map.layout_for(path, shape, kind="leaf")
        sharding = checked.get((layout, shape))
        if sharding is None:
            drv.check_layout(layout, shape)  # uneven dims: layoutcore's typed refusal, not JAX's at jit time
            sharding = checked[layout, shape] = drv.named_sharding(layout)
        shardings.append(sharding)
    return jax.tree_util.tree_unflatten(treedef, shardings)
