"""keras 3 bridge: layoutcore meshes, layouts and maps as ``keras.distribution`` values (docs/design.md#trees-and-model-code).

Importing this module imports neither keras nor any framework; keras (and, for
:class:`ModelParallel`, layoutcore's driver for the keras backend) is imported on first use.

* :func:`to_keras_mesh`, :func:`to_keras_layout`: value conversions, refused with
  :class:`~layoutcore.UnsupportedLayoutError` where keras cannot express a layout (a tensor axis
  over several mesh axes: keras' ``TensorLayout`` rejects tuple entries).
* :func:`to_keras_layout_map`: a ``keras.distribution.LayoutMap`` that gives every path the answer
  the layoutcore map gives, under the *installed* keras' own match rule (``re.fullmatch`` from keras
  3.14, ``re.search`` before), by rewriting patterns where the rules differ.
* :func:`from_keras_layout_map` (and :func:`from_keras_mesh`): the other way, a keras ``LayoutMap``
  (keras-hub's ``Backbone.get_layout_map(mesh)``) as a layoutcore map with the same answers under
  the installed keras' match rule, so ``plan`` / ``explain`` and :class:`ModelParallel` take keras-hub's rules.
* ``ModelParallel(layout_map, *, batch_dim_name=None)``: a ``keras.distribution.Distribution`` that
  gives each keras variable ``layout_map.layout_for(variable.path, variable.shape)``, as the
  layoutcore map itself answers (its match rule, multi-axis entries included), on the JAX backend.

Start-up order: JAX fixes its CPU device count when it first runs an operation. Build the mesh's
driver (``ModelParallel(...)``, ``to_keras_mesh(...)`` or ``layoutcore.get_driver("jax")``) before
any keras operation, or set ``JAX_NUM_CPU_DEVICES`` in the environment; otherwise a mesh larger
than JAX's devices is refused with a :class:`~layoutcore.LayoutError` that says so.
"""

from __future__ import annotations

import functools
import re
import sys
from typing import TYPE_CHECKING, Any, Literal, cast

from ._capabilities import Capability, Limitation
from ._errors import LayoutError, UnsupportedLayoutError
from ._layout import Layout
from ._layout_map import LayoutMap
from ._mesh import Mesh

__all__ = [
    "ModelParallel",
    "from_keras_layout_map",
    "from_keras_mesh",
    "keras_match_rule",
    "to_keras_layout",
    "to_keras_layout_map",
    "to_keras_mesh",
]

KerasMatch = Literal["search", "fullmatch", "match"]
_DRIVERS = {"jax": "jax", "tensorflow": "tensorflow"}  # keras backend -> layoutcore driver


def _keras() -> Any:
    try:
        import keras
    except ImportError as exc:
        from ._errors import DriverUnavailableError

        raise DriverUnavailableError(
            f"layoutcore.keras needs keras 3 ({exc}); install it with: pip install 'keras>=3'",
            driver="keras",
            install="pip install 'keras>=3'",
        ) from exc
    return keras


def _backend_driver(what: str) -> Any:
    """layoutcore's driver for the running keras backend (it binds abstract meshes to devices)."""
    from .driver._registry import get_driver

    backend = _keras().backend.backend()
    name = _DRIVERS.get(backend)
    if name is None:
        raise UnsupportedLayoutError(
            f"{what} needs a keras backend with distribution support (jax; tensorflow for values only); "
            f"keras runs on {backend!r}. Set KERAS_BACKEND=jax before importing keras.",
            driver="keras",
            feature=Limitation.BACKEND,
            value=backend,
        )
    return get_driver(name)


def _bind(mesh: Mesh, driver: Any) -> tuple[str, ...]:
    """The devices ``mesh`` uses on ``driver``; a mesh too big for a JAX that keras started first says so."""
    try:
        devices: tuple[str, ...] = driver.bind_mesh(mesh)
        return devices
    except LayoutError as exc:
        if driver.name != "jax" or (mesh.devices is not None and not mesh.devices[0].upper().startswith("CPU")):
            raise
        raise LayoutError(
            f"{exc} If keras (or any JAX operation) ran before layoutcore's JAX driver started, JAX came up with "
            "its default device count. Create the ModelParallel / call layoutcore.get_driver('jax') before any "
            "keras operation, or set JAX_NUM_CPU_DEVICES (or LAYOUTCORE_CPU_DEVICES) before starting Python.",
            value=mesh,
        ) from None


def to_keras_mesh(mesh: Mesh) -> Any:
    """The ``keras.distribution.DeviceMesh`` of ``mesh``: same shape, axis names and devices, row-major.

    An abstract mesh is bound to devices by layoutcore's driver for the keras backend (its first
    ``mesh.size`` devices). Device names are written as keras writes them (``"cpu:0"``).

    Raises:
        LayoutError: ``mesh`` is not a Mesh, or names more/other devices than the backend has.
        UnsupportedLayoutError: the keras backend has no layoutcore driver (torch, numpy).
    """
    if not isinstance(mesh, Mesh):
        raise LayoutError(f"to_keras_mesh expects a layoutcore Mesh. Received: {mesh!r}", value=mesh)
    devices = _bind(mesh, _backend_driver("to_keras_mesh"))
    return _keras_mesh(mesh.shape, mesh.axis_names, devices)


@functools.lru_cache(maxsize=256)
def _keras_mesh(shape: tuple[int, ...], axis_names: tuple[str, ...], devices: tuple[str, ...]) -> Any:
    # keras names devices "<platform>:<id>"; layoutcore's canonical names are "<TYPE>:<id>".
    names = [d.rsplit("/device:", 1)[-1].lower() for d in devices]
    return _keras().distribution.DeviceMesh(shape=shape, axis_names=list(axis_names), devices=names)


def _axes_for_keras(layout: Layout, what: str) -> tuple[str | None, ...]:
    multi = [(dim, axis) for dim, axis in enumerate(layout.axes) if isinstance(axis, tuple)]
    if multi:
        dim, axis = multi[0]
        raise UnsupportedLayoutError(
            f"{what}: keras' TensorLayout cannot split one tensor axis over several mesh axes; {layout} splits "
            f"axis {dim} over {axis}. Use layoutcore.keras.ModelParallel (JAX backend), which can.",
            driver="keras",
            feature=Capability.MULTI_AXIS,
            value=layout,
        )
    return cast("tuple[str | None, ...]", layout.axes)  # no entry is a tuple: refused above


def to_keras_layout(layout: Layout) -> Any:
    """The ``keras.distribution.TensorLayout`` of ``layout`` (on :func:`to_keras_mesh` of its mesh, if any).

    Raises:
        LayoutError: ``layout`` is not a Layout.
        UnsupportedLayoutError: an entry names several mesh axes (keras' TensorLayout rejects it).
    """
    if not isinstance(layout, Layout):
        raise LayoutError(f"to_keras_layout expects a layoutcore Layout. Received: {layout!r}", value=layout)
    axes = _axes_for_keras(layout, "to_keras_layout")
    mesh = None if layout.mesh is None else to_keras_mesh(layout.mesh)
    return _keras().distribution.TensorLayout(axes, device_mesh=mesh)


@functools.lru_cache(maxsize=1)
def keras_match_rule() -> KerasMatch:
    """How the installed keras' ``LayoutMap`` tries a pattern against a path, measured on keras itself.

    ``"fullmatch"`` (keras >= 3.14), ``"search"`` (keras 3.0 to 3.13) or ``"match"``.
    """
    probe = _keras().distribution.LayoutMap(None)  # no mesh: nothing is started
    probe["b"] = (None,)
    if probe["abc"] is not None:
        return "search"
    if probe["bc"] is not None:
        return "match"
    return "fullmatch"


_ANY = "(?s:.*)"  # any string, newlines included, whatever flags the pattern sets


def _whole(pattern: str, mode: str) -> str:
    """A regex that matches a whole path exactly when ``pattern`` matches it under ``mode``."""
    if mode == "fullmatch":
        return f"(?:{pattern})"
    if mode == "match":
        return f"(?:{pattern}){_ANY}"
    return f"{_ANY}(?:{pattern}){_ANY}"


def to_keras_layout_map(layout_map: LayoutMap) -> Any:
    """A ``keras.distribution.LayoutMap`` giving every path the layoutcore map's answer under keras' own rule.

    Where the installed keras matches patterns as the map does and nothing else differs, the
    patterns are copied unchanged. Otherwise each pattern is rewritten into one that matches,
    under keras' rule, exactly the paths the map gives its layout: the map's match mode (search,
    match, fullmatch) is made explicit with ``\\A``/``\\Z`` and ``(?s:.*)``; a key that another
    pattern would also match keeps its exact-key priority through a negative lookahead on the
    other patterns; ``on_multiple="first"`` excludes every earlier pattern's paths from a later one.
    Paths that several patterns match still raise (keras' ``ValueError``, as the map's
    ``AmbiguousLayoutError``). Every rewritten pattern is compiled before it is used.

    Raises:
        LayoutError: not a LayoutMap, or a pattern cannot be rewritten (its inline global flags, e.g.
            ``(?i)``, cannot move inside a group); the message names it.
        UnsupportedLayoutError: a layout keras cannot express (a multi-axis entry).
    """
    if not isinstance(layout_map, LayoutMap):
        raise LayoutError(
            f"to_keras_layout_map expects a layoutcore LayoutMap. Received: {layout_map!r}", value=layout_map
        )
    keras = _keras()
    rule = keras_match_rule()
    mode = layout_map.match
    first = layout_map.on_multiple == "first"
    matchers = {p: getattr(re.compile(p), mode) for p in layout_map}
    keys = list(layout_map)
    out = keras.distribution.LayoutMap(None if layout_map.mesh is None else to_keras_mesh(layout_map.mesh))
    for index, pattern in enumerate(keys):
        layout = layout_map[pattern]
        assert layout is not None
        axes = _axes_for_keras(layout, f"to_keras_layout_map (pattern {pattern!r})")
        # Literal keys of other entries that this pattern would also match: those paths go to their own key.
        shadowed = [k for k in keys if k != pattern and matchers[pattern](k)]
        own_literal = not matchers[pattern](pattern)  # the exact key itself must still find this entry
        earlier = keys[:index] if first else []
        if rule == mode and not shadowed and not own_literal and not earlier:
            translated = pattern
        else:
            guards = "".join(f"(?!{re.escape(k)}\\Z)" for k in shadowed)
            guards += "".join(f"(?!{_whole(p, mode)}\\Z)" for p in earlier)
            body = f"{guards}{_whole(pattern, mode)}"
            if own_literal:
                body = f"{re.escape(pattern)}|{body}"
            # A whole-path regex works under fullmatch as it is; search and match need both anchors.
            translated = f"(?:{body})" if rule == "fullmatch" else f"\\A(?:{body})\\Z"
            try:
                re.compile(translated)
            except re.error as exc:
                raise LayoutError(
                    f"to_keras_layout_map cannot rewrite pattern {pattern!r} for keras' {rule} rule ({exc}); "
                    "move inline flags such as (?i) into a scoped group, e.g. '(?i:dense)/kernel'.",
                    value=pattern,
                ) from None
        out[translated] = keras.distribution.TensorLayout(axes)
    return out


def from_keras_mesh(device_mesh: Any) -> Mesh:
    """The layoutcore ``Mesh`` of a ``keras.distribution.DeviceMesh``: same shape, axis names and devices.

    keras writes devices ``"cpu:0"`` (or holds JAX ``Device`` objects); layoutcore ``"CPU:0"``.

    Raises:
        LayoutError: not a keras DeviceMesh, or a device layoutcore cannot name.
    """
    keras = _keras()
    if not isinstance(device_mesh, keras.distribution.DeviceMesh):
        raise LayoutError(f"from_keras_mesh expects a keras DeviceMesh. Received: {device_mesh!r}", value=device_mesh)
    names = []
    for device in list(getattr(device_mesh.devices, "flat", device_mesh.devices)):
        if isinstance(device, str):
            platform, _, index = device.rpartition(":")
        else:  # a JAX Device
            platform, index = str(getattr(device, "platform", "")), str(getattr(device, "id", ""))
        if not platform or not index.isdigit():
            raise LayoutError(f"Cannot name keras mesh device {device!r} as '<TYPE>:<id>'.", value=device)
        names.append(f"{platform.upper()}:{int(index)}")
    return Mesh(tuple(int(s) for s in device_mesh.shape), tuple(device_mesh.axis_names), devices=tuple(names))


def from_keras_layout_map(keras_layout_map: Any) -> LayoutMap:
    """A layoutcore :class:`~layoutcore.LayoutMap` giving every path the layout the keras map gives it.

    keras' rule is carried over: an exact key first, else every key tried as a regex with the installed
    keras' match (``re.fullmatch`` from keras 3.14, :func:`keras_match_rule`), several matches an error
    (keras' ``ValueError``, layoutcore's ``AmbiguousLayoutError``), no match replicated. The map's mesh is
    :func:`from_keras_mesh` of the keras map's ``device_mesh``. keras-hub's ``Backbone.get_layout_map(mesh)``
    is the main input: ``ModelParallel(from_keras_layout_map(GemmaBackbone.get_layout_map(mesh)))`` lays out
    every variable as keras-hub intended, and ``layoutcore.plan`` / ``explain`` show what its rules leave
    replicated.

    Raises:
        LayoutError: not a keras LayoutMap; a key that is not a valid regex (keras fails on it at lookup).
        UnsupportedLayoutError: (feature ``keras_layout_map``) an entry on another mesh than the map's, an
            entry with a mesh where the map has none, or an axis entry that is not a mesh axis name or
            ``None``; the message names the key.
    """
    keras = _keras()
    if not isinstance(keras_layout_map, keras.distribution.LayoutMap):
        raise LayoutError(
            f"from_keras_layout_map expects a keras.distribution.LayoutMap. Received: {keras_layout_map!r}",
            value=keras_layout_map,
        )
    keras_mesh = keras_layout_map.device_mesh
    mesh = None if keras_mesh is None else from_keras_mesh(keras_mesh)
    result = LayoutMap(mesh, match=keras_match_rule(), on_multiple="error")
    for key in keras_layout_map:
        tensor_layout = keras_layout_map[key]  # an exact key finds its own entry
        entry_mesh = getattr(tensor_layout, "device_mesh", None)
        if entry_mesh is not None and (mesh is None or from_keras_mesh(entry_mesh) != mesh):
            raise UnsupportedLayoutError(
                f"keras LayoutMap entry {key!r} is on mesh {entry_mesh!r}, not on the map's mesh {keras_mesh!r}; a "
                "layoutcore LayoutMap has one mesh.",
                driver="keras",
                feature=Limitation.KERAS_LAYOUT_MAP,
                value=key,
            )
        axes = tuple(tensor_layout.axes)
        if not all(a is None or (isinstance(a, str) and (mesh is None or a in mesh.axis_names)) for a in axes):
            raise UnsupportedLayoutError(
                f"keras LayoutMap entry {key!r} has axes {axes}; layoutcore takes mesh axis names or None.",
                driver="keras",
                feature=Limitation.KERAS_LAYOUT_MAP,
                value=key,
            )
        result[key] = Layout(axes, mesh)
    return result


def _model_parallel_arguments(keras: Any, layout_map: Any, batch_dim_name: str | None) -> tuple[Mesh, str]:
    """``ModelParallel``'s checked arguments: the map's mesh and the batch axis (default: the mesh's first).

    Raises:
        LayoutError: not a LayoutMap, no mesh, or a batch axis not in the mesh.
        UnsupportedLayoutError: the keras backend is not JAX.
    """
    if not isinstance(layout_map, LayoutMap):
        raise LayoutError(f"ModelParallel expects a layoutcore LayoutMap. Received: {layout_map!r}", value=layout_map)
    if layout_map.mesh is None:
        raise LayoutError("ModelParallel needs a LayoutMap with a mesh: LayoutMap(mesh).", value=layout_map)
    backend = keras.backend.backend()
    if backend != "jax":
        raise UnsupportedLayoutError(
            f"layoutcore.keras.ModelParallel lays out variables on keras' JAX backend; keras runs on "
            f"{backend!r} (its TensorFlow distribution is a prototype, torch has none). "
            "Set KERAS_BACKEND=jax before importing keras.",
            driver="keras",
            feature=Limitation.BACKEND,
            value=backend,
        )
    mesh = layout_map.mesh
    if batch_dim_name is None:
        return mesh, mesh.axis_names[0]
    if batch_dim_name not in mesh.axis_names:
        raise LayoutError(
            f"batch_dim_name must be an axis of {mesh}. Received: {batch_dim_name!r}", value=batch_dim_name
        )
    return mesh, batch_dim_name


def _check_batch_axis_divides(distribution: Any, mesh: Mesh, batch_dim_name: str) -> None:
    """Refuse a multi-process keras ``distribution`` whose process count the batch axis's size does not divide.

    Raises:
        LayoutError: keras' rule for sharding the dataset is broken.
    """
    if not distribution._is_multi_process:
        return
    num_processes = distribution.num_processes
    replicas = mesh.axis_size(batch_dim_name)
    if num_processes > replicas and num_processes % replicas:
        raise LayoutError(
            f"With {num_processes} processes, the batch axis {batch_dim_name!r} (size {replicas}) must "
            "divide the process count (keras' rule for sharding the dataset).",
            value=batch_dim_name,
        )


def _model_parallel_class() -> type:
    keras = _keras()

    base = keras.distribution.ModelParallel

    # A subclass of keras' public ModelParallel (keras checks isinstance on it), initialised as its base
    # Distribution: keras' own __init__ takes only a keras LayoutMap.
    class ModelParallel(base):  # type: ignore[misc,valid-type]  # keras' class, found at run time
        """A keras ModelParallel laying out each variable by a layoutcore :class:`~layoutcore.LayoutMap`.

        A keras variable at ``variable.path`` gets ``layout_map.layout_for(variable.path,
        variable.shape)``: the map's own match rule and ``on_multiple``, multi-axis entries included,
        replicated where nothing matches; optimizer slots take their variable's layout (keras copies
        it). Input batches are split over ``batch_dim_name`` (default: the mesh's first axis); a
        layer output at ``"<layer path>/output"`` is constrained where the map has an entry for it.

        Args:
            layout_map: a layoutcore LayoutMap with a mesh.
            batch_dim_name: the mesh axis the batch is split over.
            auto_shard_dataset: as keras' ``ModelParallel``.

        Raises:
            LayoutError: not a LayoutMap, no mesh, an unknown batch axis, or a mesh larger than JAX's
                devices (the message says how to get more).
            UnsupportedLayoutError: the keras backend is not JAX.
        """

        def __init__(
            self, layout_map: LayoutMap, *, batch_dim_name: str | None = None, auto_shard_dataset: bool = True
        ) -> None:
            mesh, batch_dim_name = _model_parallel_arguments(keras, layout_map, batch_dim_name)
            self._driver = _backend_driver("ModelParallel")
            _bind(mesh, self._driver)
            super(base, self).__init__(to_keras_mesh(mesh), batch_dim_name, auto_shard_dataset)
            self._layoutcore_map = layout_map
            self._layout_map = None  # keras' own map: unused, every lookup below goes to layoutcore's
            _check_batch_axis_divides(self, mesh, batch_dim_name)

        @property
        def layout_map(self) -> LayoutMap:
            """The layoutcore map."""
            return self._layoutcore_map

        @property
        def num_model_replicas(self) -> int:
            mesh = self._layoutcore_map.mesh
            assert mesh is not None, "ModelParallel's LayoutMap has a mesh"
            return mesh.axis_size(self.batch_dim_name)

        def layout_for(self, path: str, shape: Any) -> Layout:
            """The layoutcore layout a keras variable at ``path`` with ``shape`` gets."""
            shape = tuple(int(s) for s in shape)
            layout = self._layoutcore_map.layout_for(path, shape, kind="keras variable")
            self._driver.check_layout(layout, shape)  # uneven dims: layoutcore's typed refusal
            return layout

        def get_data_layout(self, data_shape: Any) -> Any:
            axes = [self.batch_dim_name] + [None] * (len(data_shape) - 1)
            return keras.distribution.TensorLayout(axes, self.device_mesh)

        def get_variable_layout(self, variable: Any) -> Any:
            if getattr(variable, "_layout", None) is not None:  # keras' rule: an explicit layout stands
                return variable._layout
            # A NamedSharding, which keras' JAX backend takes as a layout: it can hold multi-axis entries.
            return self._driver.named_sharding(self.layout_for(variable.path, variable.shape))

        def get_tensor_layout(self, path: str) -> Any:
            layout = self._layoutcore_map.get(path)
            return None if layout is None else self._driver.named_sharding(layout)

        def __repr__(self) -> str:
            return (
                f"<layoutcore.keras.ModelParallel mesh={self._layoutcore_map.mesh!r}, "
                f"batch_dim_name={self.batch_dim_name!r}, {len(self._layoutcore_map)} entries>"
            )

    ModelParallel.__module__ = __name__
    ModelParallel.__qualname__ = "ModelParallel"
    return ModelParallel


if TYPE_CHECKING:
    ModelParallel: Any


def __getattr__(name: str) -> Any:
    # ModelParallel subclasses keras' Distribution, so it is built (and keras imported) on first use.
    if name == "ModelParallel":
        cls = _model_parallel_class()
        setattr(sys.modules[__name__], name, cls)
        return cls
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
