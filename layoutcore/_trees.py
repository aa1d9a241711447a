"""Trees of arrays: a layout for every leaf by path, and placing a whole tree (docs/design.md#trees-and-model-code).

A *tree* is nested dicts (any ``Mapping``), lists, tuples and namedtuples; anything else is a
leaf. A leaf *has a layout* when it has a ``.shape`` (NumPy arrays, framework tensors, JAX
``ShapeDtypeStruct``s, ...). A leaf's *path* is the keys from the root joined by ``separator``
(list and tuple indices and namedtuple field names included: ``"layers/0/kernel"``), the same
strings a :class:`~layoutcore.LayoutMap` is written against. Framework-free: JAX pytrees that are
not built from these containers (flax NNX state, optax states) go through
``layoutcore_jax.tree_shardings``.
"""

from __future__ import annotations

from typing import Any

from ._api import DriverArg, distribute_tensor
from ._errors import LayoutError
from ._layout import Layout
from ._layout_map import LayoutMap
from ._paths import _check_separator, _children, _join, _rebuild, flatten_with_paths
from ._paths import map_leaves as _map_leaves

__all__ = ["distribute_tree", "flatten_with_paths", "tree_layouts"]  # flatten_with_paths: from _paths


def tree_layouts(layout_map: LayoutMap, tree: Any, *, separator: str = "/") -> Any:
    """The same structure as ``tree``, with ``layout_map.layout_for(path, leaf.shape)`` for each leaf.

    A leaf without a ``.shape`` gets ``None``. A path nothing in the map matches gets a fully
    replicated layout on the map's mesh.

    Example:
        >>> import numpy as np
        >>> from layoutcore import LayoutMap, Mesh
        >>> lm = LayoutMap(Mesh((2,), ("model",)))
        >>> lm["dense.*kernel"] = (None, "model")
        >>> tree_layouts(lm, {"dense": {"kernel": np.zeros((4, 6)), "bias": np.zeros(6)}})["dense"]["kernel"].axes
        (None, 'model')

    Raises:
        LayoutError: ``layout_map`` is not a LayoutMap, or an entry's rank differs from its leaf's
            (naming the path); see :meth:`LayoutMap.layout_for`.
        AmbiguousLayoutError: a path matches several patterns.
    """
    if not isinstance(layout_map, LayoutMap):
        raise LayoutError(f"tree_layouts expects a LayoutMap. Received: {layout_map!r}", value=layout_map)
    separator = _check_separator(separator)

    def layout_of(path: str, leaf: Any) -> Layout | None:
        if not hasattr(leaf, "shape"):
            return None
        return layout_map.layout_for(path, tuple(leaf.shape), kind="leaf")

    return _map_leaves(tree, layout_of, separator)


def distribute_tree(tree: Any, layouts: Any, *, driver: DriverArg = None) -> Any:
    """Place every leaf of ``tree`` by the layout at the same place in ``layouts``.

    ``layouts`` has ``tree``'s structure (as :func:`tree_layouts` returns), or is a
    :class:`LayoutMap`, which is first turned into that with ``separator="/"``. A ``None``
    layout leaves its leaf as it is. Returns the same structure with each placed leaf the
    driver's native distributed tensor.

    Raises:
        LayoutError: the structures differ (naming the path), a layout is neither a Layout nor
            ``None``, or a leaf does not fit its layout.
        UnsupportedLayoutError: the driver cannot express a leaf's layout.
    """
    if isinstance(layouts, LayoutMap):
        layouts = tree_layouts(layouts, tree)

    def walk(node: Any, spec: Any, path: str) -> Any:
        where = repr(path) if path else "the root"
        children = _children(node)
        if children is None:
            if spec is None:
                return node
            if not isinstance(spec, Layout):
                raise LayoutError(
                    f"distribute_tree: the layout at {where} must be a Layout or None. Received: {spec!r}", value=spec
                )
            return distribute_tensor(node, spec, driver=driver)
        spec_children = _children(spec)
        keys = [k for k, _ in children]
        # Mappings pair by key (the layouts may list them in another order), sequences by index.
        by_key = dict(spec_children) if spec_children is not None else {}
        if spec_children is None or sorted(by_key) != sorted(keys) or len(spec_children) != len(keys):
            raise LayoutError(
                f"distribute_tree: the layouts do not have the tree's structure at {where}: the tree has keys "
                f"{keys}, the layouts {spec if spec_children is None else [k for k, _ in spec_children]!r}.",
                value=spec,
            )
        return _rebuild(node, [walk(child, by_key[key], _join(path, key, "/")) for key, child in children])

    return walk(tree, layouts, "")
