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

All tables are safe to use from many threads. The mesh tables are :class:`LRUCache` s (each locked).
A record is written in one dict operation, without a lock (every relayout writes one): the only
other writer of its key is its tensor's weak-reference callback, which runs while that tensor is
freed, when no other object can have its ``id`` yet.
"""

from __future__ import annotations

import functools
import weakref
from collections.abc import Callable, Sequence
from typing import Any, ClassVar, Final, cast, final

import numpy as np

from .._capabilities import Capability
from .._checks import short_repr
from .._config import CPU_DEVICES_ENV
from .._errors import LayoutcoreError, LayoutError, NotDistributedError, UnsupportedLayoutError
from .._layout import BoundLayout, Layout
from .._mesh import Mesh
from ._cache import LRUCache
from ._call_result import checked_call_result
from ._capabilities import required_capabilities
from ._dtype_names import dtype_name, known_dtype_name
from ._holds_value import HoldsValue
from ._hooks import DriverHooks, dtype_refusal
from ._pack import checked_pack
from ._relayout_move import RelayoutMove, require_same_mesh

__all__ = ["MESH_TABLE_SIZE", "Driver", "HoldsValue", "dtype_name", "known_dtype_name"]

#: How many mesh bindings a driver keeps (each a few hundred bytes); the oldest is dropped first.
MESH_TABLE_SIZE: Final = 1024
#: How many relayout targets (layout, shape) a driver remembers as checked and bound; the oldest is dropped first.
TARGET_TABLE_SIZE: Final = 1024


class Driver(DriverHooks):
    """Base class of every driver: the plug-in contract's hooks plus the core's final front-end.

    Subclass it, implement the hooks of :class:`~layoutcore._driver.DriverHooks` (see that module
    and ``docs/driver-authors.md``), and call ``super().__init__()`` from ``__init__``.
    """

    _lc_bound: LRUCache[Mesh, tuple[str, ...]]
    _lc_origin: LRUCache[Mesh, Mesh]
    _lc_records: dict[int, tuple[weakref.ref[Any], Layout]]
    _lc_targets: LRUCache[tuple[Layout, tuple[int, ...], frozenset[Capability]], tuple[str, ...]]

    def __new__(cls, *args: Any, **kwargs: Any) -> Driver:
        # The front-end's tables are made here, not in __init__, so a driver whose __init__
        # forgets super().__init__() still works. Names start with _lc_ so that they cannot
        # collide with a driver's own attributes.
        self = super().__new__(cls)
        self._lc_bound = LRUCache(MESH_TABLE_SIZE)
        self._lc_origin = LRUCache(MESH_TABLE_SIZE)
        self._lc_records = {}
        self._lc_targets = LRUCache(TARGET_TABLE_SIZE)
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
        self._lc_targets.clear()  # they hold bindings too

    @final
    def check_layout(self, layout: Any, global_shape: Sequence[int]) -> BoundLayout:
        """Validate ``layout`` for a tensor of ``global_shape`` on this driver.

        Hooks whose result shape is known late (``native_call_with_layout``) call it too.

        Raises:
            LayoutError: not a Layout, no mesh, or the rank differs from the tensor's.
            UnsupportedLayoutError: the layout needs a capability this driver lacks.
        """
        if not isinstance(layout, Layout):
            raise LayoutError(f"Expected a layoutcore Layout. Received: {short_repr(layout, 80)}", value=layout)
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

        def forget(ref: weakref.ref[Any], key: int = key) -> None:
            # CPython calls this while ``tensor`` is being freed, before its memory is: no other object can
            # have its id (the key) until it returns, so no newer record can appear under the key meanwhile.
            current = records.get(key)
            if current is not None and current[0] is ref:  # not a record that replaced this one
                records.pop(key, None)

        try:
            ref = weakref.ref(tensor, forget)
        except TypeError:  # not weakly referenceable: fetch_layout reads it natively
            return tensor
        records[key] = (ref, layout)  # one dict write, atomic: no lock (see forget)
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
                f"Received: {short_repr(value, 80)} ({type(value).__name__})",
                value=value,
            )
        try:
            prepared = self.prepare_input(value)
        except (ValueError, TypeError) as exc:  # ragged nested lists, objects NumPy cannot hold
            raise LayoutError(f"{what} cannot make one array of {short_repr(value, 80)}: {exc}", value=value) from None
        if isinstance(prepared, np.ndarray) and prepared.dtype.kind == "O":  # only NumPy makes object arrays
            raise LayoutError(
                f"{what} needs numbers; {short_repr(value, 80)} becomes an array of Python objects.", value=value
            )
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
        components, bound, devices, shape = checked_pack(self, components, layout, global_shape)
        return self._record(self.native_pack(components, bound, devices, shape), bound)

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
        shape = self.shape_of(tensor)
        # A target checked and bound before (for this shape, under these capabilities) passes on the memo of
        # that: check_layout and bind_mesh are pure in (layout, shape, capabilities) while the bindings stand
        # (forget_meshes clears the memo), and what they refuse raises and is never remembered.
        key = (layout, shape, self.capabilities) if type(layout) is Layout else None
        devices = None if key is None else self._lc_targets.peek(key)
        if devices is None:
            layout = self.check_layout(layout, shape)
        entry = None if traced else self._lc_records.get(id(tensor))  # recorded_layout, inlined: every call
        recorded = entry[1] if entry is not None and entry[0]() is tensor else None
        if recorded is not None and recorded == layout:
            return tensor  # laid out so already, under this very record: nothing moves, nothing to record
        if devices is None:
            devices = self.bind_mesh(layout.require_mesh())
            if key is not None:
                self._lc_targets.put(key, devices)
        if Capability.RELAYOUT_ACROSS_MESHES not in self.capabilities:
            require_same_mesh(self, tensor, layout, devices)
        move = RelayoutMove._of(self, tensor, layout, devices, shape)  # type: ignore[arg-type]  # checked: it has a mesh
        result = self.native_relayout_planned(tensor, move)
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
    def relayout_move(self, tensor: Any, layout: Layout, devices: tuple[str, ...]) -> RelayoutMove:
        """What :meth:`relayout` hands :meth:`native_relayout_planned`: ``layout`` (validated, its mesh
        bound to ``devices``), and the source layout read on first use: the front-end's record of
        ``tensor``, else its native layout, on its concrete mesh."""
        layout.require_mesh()  # raises where it has none (a hook's layout always has one)
        return RelayoutMove._of(self, tensor, layout, devices, self.shape_of(tensor))  # type: ignore[arg-type]  # it has a mesh

    @final
    def _relayout_source(self, tensor: Any) -> Layout:
        """A relayout's source: the front-end's record of ``tensor``, else its native layout, on its concrete mesh."""
        source = self.recorded_layout(tensor) or self._user_layout(self.native_fetch_layout(tensor))
        mesh = source.require_mesh()
        return source if mesh.devices is not None else Layout(source.axes, mesh.with_devices(self.bind_mesh(mesh)))

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
            raise LayoutError(f"call_with_layout needs a callable. Received: {short_repr(fn, 80)}", value=fn)
        if not isinstance(layout, Layout) or layout.mesh is None:
            self.check_layout(layout, ())
        if not self._lc_own_call:  # the contract's default: run fn here, distribute with every check
            return self.distribute_tensor(fn(*args, **kwargs), layout)
        bound = cast(BoundLayout, layout)  # a Layout with a mesh: checked above
        result = self.native_call_with_layout(fn, bound, self.bind_mesh(bound.mesh), args, kwargs)
        return checked_call_result(self, result, layout)

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
