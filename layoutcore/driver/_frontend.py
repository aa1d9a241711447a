"""The public front-end of every driver, owned by the core.

:class:`Driver` adds the public methods (``distribute_tensor``, ``unpack``, ``pack``,
``relayout``, ``fetch_layout``, ``copy_to_mesh``, ``to_numpy``, ``call_with_layout``, mesh
binding, capability checks and variable plumbing) to the plug-in contract of
:class:`~layoutcore._driver.DriverHooks`. They are ``typing.final``: a subclass that overrides one
fails at class creation. Each one validates, binds the layout's mesh, checks capabilities, calls
one hook, and records the layout of the tensor the hook returns.

**Records.** A native sharding cannot tell an abstract mesh from the concrete mesh it was bound
to, nor two meshes that differ only by name; so the front-end records, for every tensor a
creating hook returns, the :class:`Layout` it was asked for. The record lives as long as the
tensor (a weak reference keyed by ``id``; objects that cannot be weakly referenced are not
recorded), so the table is bounded by the live tensors. ``fetch_layout`` never trusts a record
blindly: it reads :meth:`~DriverHooks.native_fetch_layout` too and raises ``LayoutcoreError`` where
the two disagree on anything but the mesh's name and abstractness (which is what the record
restores). A tensor without record (the output of a framework operation) is mapped back to the
mesh the user bound to its devices.

**Mesh bindings** (mesh -> devices, and concrete mesh -> the user's mesh) are kept for the
:data:`MESH_TABLE_SIZE` most recently bound meshes: a loop over thousands of distinct meshes
costs bounded memory. An evicted binding is recomputed on next use; a tensor *without* record on
an evicted mesh reads back with its concrete mesh.

All tables are safe to use from many threads (one re-entrant lock guards every write).
"""

from __future__ import annotations

import functools
import threading
import weakref
from collections.abc import Callable, Sequence
from typing import Any, ClassVar, Final, cast, final

import numpy as np

from .._capabilities import Capability
from .._checks import short_repr
from .._config import CPU_DEVICES_ENV
from .._dtypes import as_bits
from .._dtypes import dtype_name as _canonical_dtype_name
from .._errors import LayoutcoreError, LayoutError, NotDistributedError, UnsupportedLayoutError
from .._layout import BoundLayout, Layout
from .._mesh import Mesh
from ._cache import LRUCache
from ._capabilities import required_capabilities
from ._hooks import DriverHooks, dtype_refusal

__all__ = ["MESH_TABLE_SIZE", "Driver", "HoldsValue"]

#: How many mesh bindings a driver keeps (each a few hundred bytes); the oldest is dropped first.
MESH_TABLE_SIZE: Final = 1024


class HoldsValue:
    """Base of objects that stand for their current distributed :attr:`value` (``layoutcore.Variable``).

    Every front-end method that takes a tensor takes such an object too, and uses its ``value``;
    the front-end needs no import of the class that defines it.
    """

    __slots__ = ()

    @property
    def value(self) -> Any:
        """The current native distributed tensor."""
        raise NotImplementedError


class Driver(DriverHooks):
    """Base class of every driver: the plug-in contract's hooks plus the core's final front-end.

    Subclass it, implement the hooks of :class:`~layoutcore._driver.DriverHooks` (see that module
    and ``docs/driver-authors.md``), and call ``super().__init__()`` from ``__init__``.
    """

    _lc_lock: threading.RLock
    _lc_bound: LRUCache[Mesh, tuple[str, ...]]
    _lc_origin: LRUCache[Mesh, Mesh]
    _lc_records: dict[int, tuple[weakref.ref[Any], Layout]]

    def __new__(cls, *args: Any, **kwargs: Any) -> Driver:
        # The front-end's tables are made here, not in __init__, so a driver whose __init__
        # forgets super().__init__() still works. Names start with _lc_ so that they cannot
        # collide with a driver's own attributes.
        self = super().__new__(cls)
        self._lc_lock = threading.RLock()
        self._lc_bound = LRUCache(MESH_TABLE_SIZE)
        self._lc_origin = LRUCache(MESH_TABLE_SIZE)
        self._lc_records = {}
        return self

    def __init__(self) -> None:
        pass

    #: Whether the class overrides ``is_traced`` (set per class): the hot path skips the call otherwise.
    _lc_traces: ClassVar[bool] = False
    #: Whether the class overrides ``native_call_with_layout`` (set per class): else the front-end runs ``fn``.
    _lc_own_call: ClassVar[bool] = False

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        cls._lc_traces = cls.is_traced is not DriverHooks.is_traced
        cls._lc_own_call = cls.native_call_with_layout is not DriverHooks.native_call_with_layout
        overridden = sorted(_FINAL_METHODS.intersection(vars(cls)))
        if overridden:
            raise TypeError(
                f"{cls.__qualname__} overrides {overridden}, which layoutcore.Driver keeps final (validation, "
                "mesh binding and layout records are the core's); implement the native_* hooks instead."
            )

    # ==========================================================================================
    # Mesh binding and capability checks
    # ==========================================================================================
    @final
    def bind_mesh(self, mesh: Mesh) -> tuple[str, ...]:
        """The devices ``mesh`` runs on here, row-major.

        An abstract mesh takes this driver's first ``mesh.size`` devices.

        Raises:
            LayoutError: the mesh names a device this driver does not have, or needs more
                devices than it has (the message says how to get more).
        """
        try:
            return self._lc_bound[mesh]
        except KeyError:
            pass
        available = self.list_devices()
        hint = f"set {CPU_DEVICES_ENV} (now {len(available)} devices) before the framework starts"
        if mesh.devices is None:
            if mesh.size > len(available):
                raise LayoutError(
                    f"{mesh} needs {mesh.size} devices but the {self.name} driver has {len(available)}: "
                    f"{available}; {hint}.",
                    value=mesh,
                )
            devices = tuple(available[: mesh.size])
        else:
            known = set(available)
            missing = [d for d in mesh.devices if d not in known]
            if missing:
                raise LayoutError(
                    f"{mesh!r} names device(s) {missing} that the {self.name} driver does not have "
                    f"(it has {available}); {hint}.",
                    value=mesh,
                )
            devices = mesh.devices
        concrete = mesh if mesh.devices is not None else mesh.with_devices(devices)
        self._lc_bound.put(mesh, devices)
        self._lc_origin.setdefault(concrete, mesh)
        return devices

    @final
    def user_mesh(self, concrete: Mesh) -> Mesh:
        """The mesh the user first bound to ``concrete``'s devices (maybe abstract), else ``concrete``."""
        return self._lc_origin.get(concrete, concrete)

    @final
    def forget_meshes(self) -> None:
        """Drop every mesh binding (a driver whose devices change, e.g. a new torch process group)."""
        self._lc_bound.clear()
        self._lc_origin.clear()

    @final
    def check_layout(self, layout: Any, global_shape: Sequence[int]) -> BoundLayout:
        """Validate ``layout`` for a tensor of ``global_shape`` on this driver.

        Hooks whose result shape is known late (``native_call_with_layout``) call it too.

        Raises:
            LayoutError: not a Layout, no mesh, or the rank differs from the tensor's.
            UnsupportedLayoutError: the layout needs a capability this driver lacks.
        """
        if not isinstance(layout, Layout):
            raise LayoutError(f"Expected a layoutcore Layout. Received: {_short(layout)}", value=layout)
        if layout.mesh is None:
            raise LayoutError(f"{layout!r} has no mesh; bind one with layout.with_mesh(mesh).", value=layout)
        for capability, why in required_capabilities(layout, global_shape).items():
            if capability not in self.capabilities:
                raise UnsupportedLayoutError(
                    f"The {self.name} driver cannot lay out shape {tuple(global_shape)} by {layout}: {why} "
                    f"(capability {capability.value!r} not supported by {self.name}).",
                    driver=self.name,
                    feature=capability,
                    value=layout,
                )
        return cast(BoundLayout, layout)  # its mesh is set: checked above

    # ==========================================================================================
    # Layout records
    # ==========================================================================================
    @final
    def recorded_layout(self, tensor: Any) -> Layout | None:
        """The layout the front-end recorded for this very object, if any (not checked; see
        :meth:`fetch_layout` for the checked answer)."""
        entry = self._lc_records.get(id(tensor))
        if entry is None or entry[0]() is not tensor:
            return None
        return entry[1]

    @final
    def _record(self, tensor: Any, layout: Layout) -> Any:
        """Record that ``tensor`` (a hook's result) has ``layout``; returns ``tensor``."""
        key = id(tensor)
        records = self._lc_records
        entry = records.get(key)
        if entry is not None and entry[0]() is tensor and (entry[1] is layout or entry[1] == layout):
            return tensor  # already recorded so: the common case of a no-op relayout
        lock = self._lc_lock

        def forget(ref: weakref.ref[Any], key: int = key) -> None:
            with lock:
                current = records.get(key)
                if current is not None and current[0] is ref:  # not a newer object that reuses the id
                    del records[key]

        try:
            ref = weakref.ref(tensor, forget)
        except TypeError:  # not weakly referenceable: fetch_layout reads it natively
            return tensor
        with lock:
            records[key] = (ref, layout)
        return tensor

    @final
    def _user_layout(self, native: Layout) -> Layout:
        """A natively read layout on the mesh the user bound to its devices."""
        return native if native.mesh is None else native.with_mesh(self.user_mesh(native.mesh))

    @final
    def _require_traced(self, what: str, value: Any) -> None:
        """Refuse a traced value unless the driver declares :attr:`Capability.TRACED`."""
        if Capability.TRACED not in self.capabilities:
            raise UnsupportedLayoutError(
                f"The {self.name} driver cannot {what} a value inside its framework's compiler "
                f"({type(value).__module__}.{type(value).__qualname__}); call it outside the compiled function "
                f"(capability {Capability.TRACED.value!r} not supported by {self.name}).",
                driver=self.name,
                feature=Capability.TRACED,
                value=value,
            )

    @final
    def _agrees(self, recorded: Layout, native: Layout) -> bool:
        """Whether ``native`` (a hook's reading, or another record) places data as ``recorded``
        does: the same mesh up to its name and abstractness, over the same devices, and the same
        axes up to mesh axes of size 1 (which split nothing; TF reads them back as unsharded)."""
        if recorded is native:
            return True
        if recorded.axes != native.axes and _placement(recorded) != _placement(native):
            return False
        mine, theirs = recorded.mesh, native.mesh
        if mine is None or theirs is None or mine is theirs:
            return mine is theirs
        if mine.shape != theirs.shape or mine.axis_names != theirs.axis_names:
            return False
        # A concrete mesh is compared by its devices, not bound: binding would make it the user's mesh
        # for those devices (:meth:`user_mesh`).
        return self.bind_mesh(mine) == (theirs.devices if theirs.devices is not None else self.bind_mesh(theirs))

    # ==========================================================================================
    # Data functions
    # ==========================================================================================
    @final
    def require_distributed(self, value: Any, what: str) -> Any:
        """Return ``value`` (a Variable's value) if it is this driver's tensor, else raise.

        Raises:
            NotDistributedError: ``value`` is not a distributed tensor of this driver.
            UnsupportedLayoutError: ``value`` is traced (inside the framework's compiler), where
                nothing can be read to the host (``feature="traced"``).
        """
        if isinstance(value, HoldsValue):
            value = value.value
        if not self.is_distributed(value):
            if self.is_traced(value):
                raise self._traced_host_error(what, value)
            raise NotDistributedError(
                f"{what} needs a distributed tensor of the {self.name} driver. Received: "
                f"{type(value).__module__}.{type(value).__qualname__}. Distribute it first with "
                "distribute_tensor(value, layout), or pick its driver with driver=...",
                value=value,
            )
        return value

    @final
    def _host_tensor(self, tensor: Any, what: str) -> Any:
        """:meth:`require_distributed`, and refuse a traced tensor (distributed or not): nothing of a
        value inside the framework's compiler can be read to the host, whatever the capabilities."""
        tensor = self.require_distributed(tensor, what)
        if self._lc_traces and self.is_traced(tensor):
            raise self._traced_host_error(what, tensor)
        return tensor

    @final
    def _traced_host_error(self, what: str, value: Any) -> UnsupportedLayoutError:
        return UnsupportedLayoutError(
            f"{what} cannot run on a value inside the {self.name} framework's compiler "
            f"({type(value).__module__}.{type(value).__qualname__}); call it outside the compiled function.",
            driver=self.name,
            feature=Capability.TRACED,
            value=value,
        )

    @final
    def distribute_tensor(self, value: Any, layout: Layout) -> Any:
        """Place a global value by ``layout``; a distributed input (or a Variable) is relaid out.

        Raises:
            LayoutError, UnsupportedLayoutError: see :meth:`check_layout`.
        """
        if isinstance(value, HoldsValue):  # its current value, not the Variable object
            value = value.value
        if self.is_distributed(value):
            return self.relayout(value, layout)
        if self._lc_traces and self.is_traced(value):  # a sharding constraint in the compiler: no record
            self._require_traced("distribute_tensor", value)
            layout = self.check_layout(layout, self.shape_of(value))
            return self.native_distribute(value, layout, self.bind_mesh(layout.require_mesh()))
        value = self._held_dtype(self._global_value(value, "distribute_tensor"), "the value")
        layout = self.check_layout(layout, self.shape_of(value))
        result = self.native_distribute(value, layout, self.bind_mesh(layout.require_mesh()))
        return self._record(result, layout)

    @final
    def _global_value(self, value: Any, what: str) -> Any:
        """:meth:`prepare_input`, after refusing what is no array (a dict, ragged lists, None).

        Raises:
            LayoutError: ``value`` cannot be one array (named in the message).
        """
        if type(value) is np.ndarray and value.dtype.kind != "O":  # the common case, checked cheaply
            return self.prepare_input(value)
        if value is None or isinstance(value, dict | set | frozenset | str | bytes):
            raise LayoutError(
                f"{what} needs an array, a framework tensor or a nested list of numbers. "
                f"Received: {_short(value)} ({type(value).__name__})",
                value=value,
            )
        try:
            prepared = self.prepare_input(value)
        except (ValueError, TypeError) as exc:  # ragged nested lists, objects NumPy cannot hold
            raise LayoutError(f"{what} cannot make one array of {_short(value)}: {exc}", value=value) from None
        if isinstance(prepared, np.ndarray) and prepared.dtype.kind == "O":  # only NumPy makes object arrays
            raise LayoutError(f"{what} needs numbers; {_short(value)} becomes an array of Python objects.", value=value)
        return prepared

    @final
    def copy_to_mesh(self, value: Any, layout: Layout) -> Any:
        """Copy a value to every device of a *replicated* layout's mesh (as DTensor).

        Raises:
            LayoutError: the layout shards some axis (use ``distribute_tensor``/``relayout``).
        """
        if isinstance(layout, Layout) and not layout.is_fully_replicated():
            raise LayoutError(
                f"copy_to_mesh takes a fully replicated layout; {layout} shards an axis. "
                "Use distribute_tensor, or copy_to_mesh then relayout.",
                value=layout,
            )
        return self.distribute_tensor(value, layout)

    @final
    def unpack(self, tensor: Any) -> list[Any]:
        """This process's per-device components of ``tensor``, in row-major mesh order."""
        return list(self.native_unpack(self._host_tensor(tensor, "unpack")))

    @final
    def pack(self, components: Sequence[Any], layout: Layout, *, global_shape: Sequence[int] | None = None) -> Any:
        """The inverse of :meth:`unpack`: one component per (local) device, row-major.

        Args:
            components: the per-device pieces (arrays, framework tensors, or nested lists, which
                become NumPy arrays before the hooks see them).
            layout: their layout.
            global_shape: the global shape; inferred from the components when omitted.

        Raises:
            LayoutError: a wrong component count, a component whose rank or shape does not fit
                the layout, mixed dtypes, or replicas holding different data (naming the devices).
        """
        if not isinstance(layout, Layout) or layout.mesh is None:
            self.check_layout(layout, ())
        if (
            components is None
            or isinstance(components, dict | set | str | bytes)
            or not hasattr(components, "__len__")
            or getattr(components, "ndim", None) == 0  # a 0-d array has __len__ but cannot be iterated
        ):
            raise LayoutError(
                f"pack needs a sequence of per-device components. Received: {_short(components)} "
                f"({type(components).__name__})",
                value=components,
            )
        given_shape = None if global_shape is None else _shape_argument(global_shape)
        mesh = layout.require_mesh()
        devices = self.bind_mesh(mesh)
        positions = list(self.local_positions(mesh, devices))
        # Nested lists and scalars become NumPy arrays; arrays and framework tensors pass unchanged.
        components = [
            c if hasattr(c, "shape") and hasattr(c, "dtype") else self._global_value(c, "pack") for c in components
        ]
        if len(components) != len(positions):
            raise LayoutError(
                f"pack needs {len(positions)} components for {layout} (one per local device). "
                f"Received {len(components)}.",
                value=components,
            )
        shapes = [self.shape_of(c) for c in components]
        for device_pos, shape in zip(positions, shapes, strict=True):
            if len(shape) != layout.rank:
                raise LayoutError(
                    f"Component for device {devices[device_pos]} has rank {len(shape)} (shape {shape}), "
                    f"but {layout} has rank {layout.rank}.",
                    value=shape,
                )
        # Framework and NumPy components mix: compare dtypes by NumPy's name for them.
        dtypes = {dtype_name(getattr(c, "dtype", None)) for c in components}
        if len(dtypes) > 1:
            raise LayoutError(
                f"pack needs components of one dtype. Received dtypes {sorted(dtypes)}.", value=components
            )
        components = [self._held_dtype(c, f"component {i}") for i, c in enumerate(components)]
        shape = _infer_global_shape(layout, positions, shapes) if given_shape is None else given_shape
        layout.check_shape(shape)
        # Each component against the chunk rule first: a component of the wrong shape is the
        # user's error to name, before any capability question about the (wrong) global shape.
        expected = layout.local_shapes(shape)
        for index, (device_pos, got) in enumerate(zip(positions, shapes, strict=True)):
            if got != expected[device_pos]:
                raise LayoutError(
                    f"Component {index} (device {devices[device_pos]}) has shape {got}; {layout} with global shape "
                    f"{shape} gives it shape {expected[device_pos]}.",
                    value=got,
                )
        layout = self.check_layout(layout, shape)
        if not (self._lc_traces and any(self.is_traced(c) for c in components)):
            self._check_replicas(components, layout, positions, devices)
        return self._record(self.native_pack(components, layout, devices, shape), layout)

    @final
    def relayout(self, tensor: Any, layout: Layout) -> Any:
        """The same global value laid out by ``layout``.

        A value that is not a distributed tensor (a NumPy array, a framework tensor, a nested
        list, a traced value) is placed as :meth:`distribute_tensor` places it (docs/design.md#data-functions-made-precise, as
        TF's ``dtensor.relayout`` does).

        Raises:
            LayoutError, UnsupportedLayoutError: see :meth:`check_layout`; also for a move to
                another mesh without :attr:`Capability.RELAYOUT_ACROSS_MESHES`.
            LayoutcoreError: the driver handed back the input object itself for a layout that
                differs from the input's (a driver defect: one object cannot answer
                ``fetch_layout`` for two layouts).
        """
        if isinstance(tensor, HoldsValue):
            tensor = tensor.value
        if not self.is_distributed(tensor):
            return self.distribute_tensor(tensor, layout)
        traced = self._lc_traces and self.is_traced(tensor)
        if traced:
            self._require_traced("relayout", tensor)
        layout = self.check_layout(layout, self.shape_of(tensor))
        if not traced and self.recorded_layout(tensor) == layout:
            return tensor  # laid out so already, under this very record: nothing moves, nothing to record
        devices = self.bind_mesh(layout.require_mesh())
        if Capability.RELAYOUT_ACROSS_MESHES not in self.capabilities:
            # The mesh the front-end recorded for a hook's result (checked against the native truth
            # by fetch_layout); else the tensor's native mesh, named as the user bound its devices.
            # Fields, not Mesh copies: this runs on every call.
            mesh = layout.require_mesh()
            recorded = self.recorded_layout(tensor)
            source = recorded.require_mesh() if recorded is not None else self.user_mesh(self.native_mesh(tensor))
            source_devices = self.bind_mesh(source) if source.devices is None else source.devices
            if (source.shape, source.axis_names, source.name, source_devices) != (
                mesh.shape,
                mesh.axis_names,
                mesh.name,
                devices,
            ):
                raise UnsupportedLayoutError(
                    f"The {self.name} driver relayouts within one mesh only: {source!r} -> {mesh!r} "
                    f"(capability {Capability.RELAYOUT_ACROSS_MESHES.value!r} not supported by {self.name}).",
                    driver=self.name,
                    feature=Capability.RELAYOUT_ACROSS_MESHES,
                    value=layout,
                )
        result = self.native_relayout(tensor, layout, devices)
        if result is tensor:
            # The same object back: fine where it already has ``layout``. Where it differs only in
            # what the record restores (a mesh's name), the other handle's answer would change.
            before = self.recorded_layout(tensor) or self._user_layout(self.native_fetch_layout(tensor))
            if before != layout:
                raise LayoutcoreError(
                    f"The {self.name} driver's native_relayout returned its input, laid out as {before!r}, for "
                    f"{layout!r}; a driver must return a new tensor object there.",
                    value=layout,
                )
        return self._record(result, layout)

    @final
    def fetch_layout(self, tensor: Any) -> Layout:
        """The layout of ``tensor``: the one it was made with, else the one it has.

        The record of a hook's result restores what a native sharding forgets (the mesh's name and
        abstractness) and is checked against :meth:`native_fetch_layout` on every call. A tensor
        without record (a framework operation's output) is read natively, on the mesh the user
        bound to its devices.

        Raises:
            NotDistributedError: not a distributed tensor of this driver.
            LayoutcoreError: the record and the native layout disagree (a driver defect).
            UnsupportedLayoutError: a traced value, and the driver lacks ``Capability.TRACED``.
        """
        if isinstance(tensor, HoldsValue):
            tensor = tensor.value
        if not self.is_distributed(tensor) and self._lc_traces and self.is_traced(tensor):
            self._require_traced("fetch_layout", tensor)
            return self._user_layout(self.native_fetch_layout(tensor))
        tensor = self.require_distributed(tensor, "fetch_layout")
        if self._lc_traces and self.is_traced(tensor):
            self._require_traced("fetch_layout", tensor)
        native = self.native_fetch_layout(tensor)
        recorded = self.recorded_layout(tensor)
        if recorded is None:
            return self._user_layout(native)
        if not self._agrees(recorded, native):
            raise LayoutcoreError(
                f"The {self.name} driver reads {native!r} from a tensor that was made with {recorded!r}: its "
                "native_fetch_layout is wrong, or the tensor was changed in place behind layoutcore's back.",
                value=native,
            )
        return recorded

    @final
    def to_numpy(self, tensor: Any) -> np.ndarray:
        """The global value of ``tensor`` as a NumPy array (any layout)."""
        return self.native_to_numpy(self._host_tensor(tensor, "to_numpy"))

    @final
    def call_with_layout(self, fn: Callable[..., Any], layout: Layout, *args: Any, **kwargs: Any) -> Any:
        """Call a tensor-creating ``fn`` and return its result laid out by ``layout``.

        Inside the framework's compiler (a traced result, docs/design.md#data-functions-made-precise) the hook's result carries the
        layout as the framework's sharding constraint: it gets no record and no host read. Its
        layout is checked where the framework knows it while tracing (``native_fetch_layout``);
        where it does not (``UnsupportedLayoutError(feature="traced")`` from that hook), only the
        constraint the driver applied stands behind the result.

        Raises:
            LayoutError, UnsupportedLayoutError: see :meth:`check_layout`; also a traced result
                where the driver lacks :attr:`Capability.TRACED`.
            LayoutcoreError: the result is laid out otherwise (a driver defect).
        """
        if not callable(fn):
            raise LayoutError(f"call_with_layout needs a callable. Received: {_short(fn)}", value=fn)
        if not isinstance(layout, Layout) or layout.mesh is None:
            self.check_layout(layout, ())
        if not self._lc_own_call:  # the contract's default: run fn here, distribute with every check
            return self.distribute_tensor(fn(*args, **kwargs), layout)
        bound = cast(BoundLayout, layout)  # a Layout with a mesh: checked above
        result = self.native_call_with_layout(fn, bound, self.bind_mesh(bound.mesh), args, kwargs)
        traced = self._lc_traces and self.is_traced(result) and not self.is_distributed(result)
        if not traced and not self.is_distributed(result):  # the hook's default (super()): fn's plain result
            return self.distribute_tensor(result, layout)
        # A driver bug, not a user error: never hand back a wrongly laid out value. Ask the tensor
        # itself, not the record the hook's own calls may have left.
        if traced:  # a sharding constraint in the compiler: no record
            self._require_traced("call_with_layout", result)
            try:
                got = self.native_fetch_layout(result)
            except UnsupportedLayoutError as unknown:
                if unknown.feature != Capability.TRACED.value:
                    raise
                return result  # the framework fixes the layout only when it compiles: the constraint stands
        else:
            got = self.native_fetch_layout(self.require_distributed(result, "call_with_layout's result"))
            self._check_dtype(result)  # a declared set must hold for what the framework made, too
        if not self._agrees(layout, got):
            raise LayoutcoreError(f"{self.name} call_with_layout produced {got}, not {layout}.", value=got)
        return result if traced else self._record(result, layout)

    # ==========================================================================================
    # Variable plumbing (used by layoutcore.Variable)
    # ==========================================================================================
    @final
    def make_variable_state(self, value: Any, layout: Layout) -> Any:
        """A variable's state (:meth:`variable_create`) for a distributed ``value`` laid out by ``layout``."""
        state = self.variable_create(value, cast(BoundLayout, layout))  # the variable's, bound when it was made
        if self.is_distributed(state):  # torch: the nn.Parameter is itself a DTensor
            self._record(state, layout)
        return state

    @final
    def read_variable_state(self, state: Any, layout: Layout) -> Any:
        """The variable's current distributed value (:meth:`variable_read`), recorded with ``layout``."""
        return self._record(self.variable_read(state), layout)

    @final
    def assign_variable_state(self, state: Any, value: Any) -> None:
        """Store ``value`` (distributed with the variable's layout) in the state (:meth:`variable_assign`)."""
        self.variable_assign(state, value)

    # ==========================================================================================
    # Internals
    # ==========================================================================================
    @final
    def _check_replicas(
        self, components: list[Any], layout: Layout, positions: list[int], devices: tuple[str, ...]
    ) -> None:
        blocks = layout.offset_to_shard()
        groups: dict[tuple[int, ...], list[int]] = {}
        for index, device_pos in enumerate(positions):
            groups.setdefault(blocks[device_pos], []).append(index)
        for block, members in groups.items():
            if len(members) < 2:
                continue
            first = self.component_to_numpy(components[members[0]])
            differing = [
                devices[positions[i]]
                for i in members[1:]
                if not _same_data(first, self.component_to_numpy(components[i]))
            ]
            if differing:
                raise LayoutError(
                    f"Replicas of block {block} under {layout} hold different data: device(s) {differing} differ "
                    f"from device {devices[positions[members[0]]]}. Replicated components must be equal.",
                    value=differing,
                )

    @final
    def _check_dtype(self, value: Any) -> None:
        """Refuse a value of one of the 18 dtypes outside :meth:`supported_dtypes` (others pass on).

        Raises:
            UnsupportedLayoutError: ``feature=Limitation.DTYPE``, naming the dtype and the driver.
        """
        name = known_dtype_name(getattr(value, "dtype", None))
        if name is not None and name not in self.supported_dtypes():
            raise self.dtype_refusal(name)

    @final
    def dtype_refusal(self, name: str) -> UnsupportedLayoutError:
        """The ``UnsupportedLayoutError`` (``feature=Limitation.DTYPE``) the front-end raises for dtype ``name``,
        for a hook override to raise (:meth:`narrow_input`). Not raised here."""
        return dtype_refusal(self, name)

    @final
    def _held_dtype(self, value: Any, what: str) -> Any:
        """``value``, or where its dtype is one of the 18 outside :meth:`supported_dtypes` the driver's
        exact narrowing of it (:meth:`narrow_input`), checked to be of a held dtype.

        Raises:
            UnsupportedLayoutError: ``feature=Limitation.DTYPE``, from :meth:`narrow_input`.
        """
        name = known_dtype_name(getattr(value, "dtype", None))
        if name is None or name in self.supported_dtypes():
            return value
        held = self.narrow_input(value, name, what)
        self._check_dtype(held)  # a narrowing must land on a dtype the driver holds
        return held

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.name!r}>"


#: The front-end methods no driver may override (checked by ``Driver.__init_subclass__``).
_FINAL_METHODS: Final = frozenset(name for name, member in vars(Driver).items() if getattr(member, "__final__", False))


@functools.lru_cache(maxsize=4096)
def _placement(layout: Layout) -> tuple[tuple[str, ...], ...]:
    """Per tensor axis, the mesh axes of size > 1 it is split over (what places data)."""
    mesh = layout.require_mesh()
    return tuple(tuple(a for a in layout.mesh_axes(d) if mesh.axis_size(a) > 1) for d in range(layout.rank))


_KNOWN_DTYPES: LRUCache[Any, str | None] = LRUCache(1024)  # dtype objects are few: bounded anyway


def known_dtype_name(dtype: Any) -> str | None:
    """The canonical name of ``dtype`` (a NumPy, ml_dtypes or framework dtype object) if it is one of
    the 18 (``layoutcore.driver.ALL_DTYPES``), else None. Cached per dtype object: every data
    function asks."""
    try:
        return _KNOWN_DTYPES[dtype]
    except KeyError:
        pass
    except TypeError:  # unhashable: not a dtype object
        return None
    try:
        name: str | None = _canonical_dtype_name(dtype)
    except LayoutError:
        name = None
    _KNOWN_DTYPES.put(dtype, name)
    return name


def dtype_name(dtype: Any) -> str:
    """The canonical name of a NumPy, ml_dtypes or framework dtype object (``tf.float32``,
    ``torch.bfloat16``, ``jnp.bfloat16`` -> ``"float32"``, ``"bfloat16"``, ``"bfloat16"``); for
    dtypes outside the 18, NumPy's name, else ``str(dtype)``."""
    known = known_dtype_name(dtype)
    if known is not None:
        return known
    dtype = getattr(dtype, "as_numpy_dtype", dtype)  # TF DType
    try:
        return str(np.dtype(dtype).name)
    except TypeError:
        text = str(dtype)
        return text.removeprefix("torch.")


def _same_data(a: np.ndarray, b: np.ndarray) -> bool:
    """Replica equality: equal shapes, and the same bits for the 18 dtypes (so a NaN equals the same
    NaN, and -0.0 differs from 0.0, in every float kind, ml_dtypes' bfloat16 and float8 included);
    equal values, a NaN equal to a NaN, for other dtypes."""
    if a.shape != b.shape or a.dtype != b.dtype:
        return False
    if known_dtype_name(a.dtype) is not None:
        return bool(np.array_equal(as_bits(a), as_bits(b)))
    try:
        return bool(np.array_equal(a, b, equal_nan=True))
    except TypeError:  # no NaN in this dtype (integers, bools, strings, structured): plain equality
        return bool(np.array_equal(a, b))


def _shape_argument(global_shape: Any) -> tuple[int, ...]:
    """``global_shape=`` as a tuple of ints.

    Raises:
        LayoutError: not a sequence of non-negative integers (naming it).
    """
    try:
        shape = tuple(global_shape)
        if all(isinstance(s, int | np.integer) and not isinstance(s, bool) and s >= 0 for s in shape):
            return tuple(int(s) for s in shape)
    except Exception:  # not iterable, or an iteration that fails: a bad value either way
        pass
    raise LayoutError(
        f"global_shape must be a sequence of non-negative ints. Received: {_short(global_shape)}", value=global_shape
    )


def _short(value: Any, limit: int = 80) -> str:
    return short_repr(value, limit)  # never raises, even for a value whose __repr__ does


def _infer_global_shape(layout: Layout, positions: list[int], shapes: list[tuple[int, ...]]) -> tuple[int, ...]:
    """Global shape from local component shapes: the sum of the distinct blocks per axis.

    Where some blocks are not local (multi-process), the axis is assumed even; ``pack``
    then validates every shape against the chunk rule.
    """
    blocks = layout.offset_to_shard()
    result = []
    for dim in range(layout.rank):
        sizes: dict[int, int] = {}
        for device_pos, shape in zip(positions, shapes, strict=True):
            sizes.setdefault(blocks[device_pos][dim], shape[dim])
        n = layout.num_shards(dim)
        result.append(sum(sizes.values()) if len(sizes) == n else max(sizes.values(), default=0) * n)
    return tuple(result)
