"""tf-keras models under :func:`layoutcore.layout_map_scope` (docs/design.md#trees-and-model-code, the seed's ``layout_map_scope``).

tf-keras (the ``tf_keras`` package, tf.keras 2) already knows how to give a model's variables
DTensor layouts: inside its ``layout_map_scope`` every ``tf.Variable`` starts as a lazy
variable, and once the model's structure is known (a subclassed model's first call, a functional
or sequential model's construction) tf-keras replaces each one with a ``dtensor.DVariable`` whose
layout is ``layout_map[path]``. The path is the attribute path joined by ``"."``: ``"d1.kernel"``
for a subclassed model's ``self.d1``, ``"<layer name>.kernel"`` for functional and sequential
models. Where the lookup gives ``None`` it replicates the variable on ``get_default_mesh()``.

layoutcore hands tf-keras a view of its own :class:`~layoutcore.LayoutMap` with exactly those two
methods: lookups follow layoutcore's rules (the map's ``match`` mode, exact keys first, several
matches an error), and each entry is converted with
:func:`~layoutcore_tensorflow.to_tensorflow_layout`. keras 3 (the ``keras`` package, which
``tf.keras`` is unless ``TF_USE_LEGACY_KERAS=1``) has no DTensor distribution on TF.
"""

from __future__ import annotations

import contextlib
import functools
import importlib.util
import sys
from collections.abc import Iterator, Sequence
from typing import Any, Protocol

from layoutcore import DriverUnavailableError, Layout, LayoutError, LayoutMap, UnsupportedLayoutError
from layoutcore.driver import Limitation

from ._convert import to_tensorflow_layout, to_tensorflow_mesh


class TensorFlowDriver(Protocol):
    """What the scopes need of the TF driver (a protocol: the driver module imports this one)."""

    @property
    def name(self) -> str: ...
    @property
    def _tf(self) -> Any: ...


__all__ = ["TF_KERAS_INSTALL", "keras_layout_map_scope"]

#: What gives tf-keras models their layouts.
TF_KERAS_INSTALL = "pip install 'layoutcore[tf-keras]'"


def keras_layout_map_scope(driver: TensorFlowDriver, layout_map: LayoutMap) -> contextlib.AbstractContextManager[Any]:
    """tf-keras' ``layout_map_scope`` over ``layout_map``, or, without tf-keras, a scope that refuses
    to create a ``tf.Variable`` (which would otherwise silently stay a plain, unlaid-out variable)."""
    if importlib.util.find_spec("tf_keras") is None:
        return _refusing_scope(driver)
    return _tf_keras_scope(driver, _keras_view_class()(layout_map))


@contextlib.contextmanager
def _tf_keras_scope(driver: TensorFlowDriver, view: Any) -> Iterator[None]:
    """tf-keras' scope, with a creator in front that refuses keras 3's variables.

    tf-keras makes every ``tf.Variable`` of the scope lazy, keras 3's too, which then fail with a bare
    ``AssertionError`` inside tf-keras (or would never get a layout): refused by name instead.
    """

    def refuse_keras3(next_creator: Any, **kwargs: Any) -> Any:
        if _called_from_keras3():
            raise UnsupportedLayoutError(
                f"A keras 3 variable ({kwargs.get('name') or 'unnamed'}) was created inside "
                "layoutcore.layout_map_scope on the tensorflow driver. keras 3 has no DTensor distribution on "
                "TensorFlow; build the model with tf-keras (TF_USE_LEGACY_KERAS=1 makes tf.keras tf-keras), or use "
                "keras 3 on JAX with layoutcore.keras.ModelParallel.",
                driver=driver.name,
                feature=Limitation.KERAS3,
            )
        return next_creator(**kwargs)

    with view.scope(), driver._tf.variable_creator_scope(refuse_keras3):
        yield


def _called_from_keras3(depth: int = 40) -> bool:
    """Whether a caller up the stack is keras 3's code (the ``keras`` package, not ``tf_keras``)."""
    frame = sys._getframe(2)
    for _ in range(depth):
        if frame is None:
            return False
        module = frame.f_globals.get("__name__", "")
        if module == "keras" or module.startswith("keras."):
            return True
        frame = frame.f_back  # type: ignore[assignment]  # None ends the loop above
    return False


@contextlib.contextmanager
def _refusing_scope(driver: TensorFlowDriver) -> Iterator[None]:
    tf = driver._tf

    def refuse(next_creator: Any, **kwargs: Any) -> Any:
        raise DriverUnavailableError(
            f"A tf.Variable ({kwargs.get('name') or 'unnamed'}) was created inside layoutcore.layout_map_scope on the "
            "tensorflow driver, but tf-keras is not installed, so nothing can give it its layout. Install it with "
            f"{TF_KERAS_INSTALL} and build the model with tf_keras (keras 3 has no DTensor distribution on "
            "TensorFlow), or create the variable with layoutcore.Variable(value, path=...).",
            driver=driver.name,
            install=TF_KERAS_INSTALL,
        )

    with tf.variable_creator_scope(refuse):
        yield


@functools.cache
def _keras_view_class() -> type:
    """A subclass of tf-keras' ``LayoutMap`` answering from a layoutcore map (made once, on first use).

    tf-keras asks ``layout_map[path]`` without the variable's shape, so it cannot check an
    entry's rank, and TF then fails with its own ``UnknownError``. Its one function that makes
    the ``DVariable`` (``_create_dvariable(layout_map, path, variable)``, tf-keras 2.21) is
    wrapped, for layoutcore's maps only, to resolve the path with the shape first by
    :meth:`~layoutcore.LayoutMap.layout_for`: a wrong rank, an ambiguous path, an unmatched path
    under ``on_missing="error"``, or a map without a mesh raise layoutcore's errors naming the path.
    """
    from tf_keras.dtensor.experimental import LayoutMap as KerasLayoutMap

    class LayoutcoreKerasLayoutMap(KerasLayoutMap):
        """tf-keras' view of a layoutcore :class:`~layoutcore.LayoutMap`: ``map[path]`` is the
        ``dtensor.Layout`` of layoutcore's lookup and ``get_default_mesh()`` the map's mesh."""

        def __init__(self, layout_map: LayoutMap) -> None:
            super().__init__(mesh=None)
            self._layoutcore_map = layout_map
            self._resolved: dict[str, Layout] = {}

        def resolve(self, path: str, shape: Sequence[int | None]) -> None:
            """Look ``path`` up with the variable's shape; the next ``self[path]`` answers with it."""
            self._resolved[path] = self._layoutcore_map.layout_for(
                path, tuple(0 if s is None else s for s in shape), kind="tf-keras variable"
            )

        def __getitem__(self, key: str) -> Any:
            layout = self._resolved.pop(key, None)
            if layout is None:  # asked without a shape (not through _create_dvariable)
                layout = self._layoutcore_map[key]
                if layout is None:
                    return None
            if layout.mesh is None:
                raise LayoutError(
                    f"The layout {layout.axes} for tf-keras variable {key!r} has no mesh; give the LayoutMap a mesh.",
                    value=layout,
                )
            return to_tensorflow_layout(layout)

        def get_default_mesh(self) -> Any:
            mesh = self._layoutcore_map.mesh
            if mesh is None:
                raise LayoutError(
                    "A tf-keras variable that no LayoutMap entry matches is replicated on the map's mesh, and this "
                    "LayoutMap has none; build it with LayoutMap(mesh).",
                    value=self._layoutcore_map,
                )
            return to_tensorflow_mesh(mesh)

    from tf_keras.src.dtensor import layout_map as keras_layout_map

    create = getattr(keras_layout_map, "_create_dvariable", None)
    if create is not None:

        @functools.wraps(create)
        def create_dvariable(layout_map: Any, object_path: str, variable: Any) -> Any:
            if isinstance(layout_map, LayoutcoreKerasLayoutMap):
                layout_map.resolve(object_path, variable.shape.as_list())
            return create(layout_map, object_path, variable)

        keras_layout_map._create_dvariable = create_dvariable
    return LayoutcoreKerasLayoutMap
