"""The JAX driver: layoutcore's contract on ``jax.sharding``."""

from __future__ import annotations

import math
import weakref
from collections.abc import Callable, Hashable, Sequence
from typing import TYPE_CHECKING, Any, cast

import numpy as np

from layoutcore import Layout, LayoutError, Mesh, UnsupportedLayoutError
from layoutcore.driver import (
    ALL_DTYPES,
    ML_DTYPES,
    NARROWED,
    X64_DTYPES,
    Capability,
    Driver,
    Limitation,
    LRUCache,
    ProcessGroup,
    RelayoutMove,
)

from . import _relayout_choice
from ._convert import (
    AxisTypeName,
    _devices_by_name,
    _to_named_sharding,
    from_jax_mesh,
    from_jax_sharding,
    from_partition_spec,
    narrowed_exactly,
    warn_narrowed,
    x64_remedies,
    x64_request,
)

if TYPE_CHECKING:
    import jax
    from jax.sharding import NamedSharding


def _array(value: Any) -> jax.Array:
    """Type JAX's untyped results (``device_put``, ``jit`` calls) as the arrays they are."""
    return cast("jax.Array", value)


__all__ = ["JaxDriver"]

#: Writable NumPy inputs up to this size are copied before device_put; larger ones only if JAX aliased them.
_COPY_BELOW_BYTES = 1 << 20

# NumPy dtype kinds a jax.Array cannot hold: objects, str, bytes, datetime, timedelta; and void
# (records), except ml_dtypes' bfloat16 and float8, whose kind is "V" too.
_NOT_JAX_KINDS = "OUSVMm"
_ML_DTYPE_NAMES = ML_DTYPES
_ALL = frozenset(ALL_DTYPES)
_WITHOUT_X64 = _ALL - X64_DTYPES


def _jax_numpy(value: np.ndarray, what: str) -> np.ndarray:
    """``value`` as an array JAX takes: native byte order; dtypes JAX cannot hold refused typed.

    Raises:
        UnsupportedLayoutError: ``feature="dtype"``, naming the dtype.
    """
    dtype = value.dtype
    if dtype.kind in _NOT_JAX_KINDS and not (dtype.kind == "V" and dtype.name in _ML_DTYPE_NAMES):
        raise UnsupportedLayoutError(
            f"The jax driver holds numbers and booleans only; {what} has dtype {dtype!r} "
            f"({'Python objects' if dtype.kind == 'O' else 'text, bytes, records or dates'}). Convert it to a numeric "
            "dtype first, or use the numpy driver.",
            driver="jax",
            feature=Limitation.DTYPE,
            value=dtype,
        )
    if not dtype.isnative:  # big-endian data: the same numbers in this machine's byte order
        return value.astype(dtype.newbyteorder("="))
    return value


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


_CACHE_SIZE = 1024


class JaxDriver(Driver):
    """layoutcore on ``jax.sharding``: a :class:`~layoutcore.Mesh` is a ``jax.sharding.Mesh``
    over the same devices in row-major order, a :class:`~layoutcore.Layout` is a
    ``NamedSharding(mesh, PartitionSpec(*layout.axes))``, and a distributed tensor is a
    ``jax.Array``.

    ==================  ====================================================================
    layoutcore          JAX call
    ==================  ====================================================================
    distribute_tensor   ``jax.device_put(x, NamedSharding)``
    unpack              ``array.addressable_shards`` in mesh order (this process's only)
    pack                ``jax.make_array_from_single_device_arrays`` (after layoutcore's checks)
    relayout            the fastest move at the floor (``_relayout_choice``): ``jax.device_put``,
                        JAX's compiled reshard, the plan's ``ppermute`` rounds, or host copies
    fetch_layout        ``array.sharding`` (``NamedSharding`` or ``SingleDeviceSharding``)
    to_numpy            one copy per distinct shard; a collective across processes
    call_with_layout    ``jax.jit(fn, out_shardings=NamedSharding)``: each device builds its shard
    ==================  ====================================================================

    Inside ``jax.jit`` (traced values, :attr:`~layoutcore.driver.Capability.TRACED`), ``distribute_tensor``
    and ``relayout`` apply the layout as ``jax.lax.with_sharding_constraint`` (``jax.sharding.reshard``
    on Explicit axes), ``call_with_layout`` constrains its result the same way, and ``fetch_layout``
    returns a layout the driver applied in this trace, or the one JAX's type carries (Explicit axes);
    on Auto axes JAX decides other shardings only when it compiles, so there it raises
    :class:`~layoutcore.UnsupportedLayoutError` rather than guess.

    Capabilities: several mesh axes on one tensor axis, in any order, and relayout across meshes.
    Uneven dimensions are not a JAX layout (JAX 0.10 rejects them everywhere), so they are
    refused with :class:`~layoutcore.UnsupportedLayoutError` before JAX is called.

    Args:
        axis_types: the ``jax.sharding.AxisType`` of the meshes the driver builds: ``"auto"``
            (default) or ``"explicit"``. See the JAX driver page for why Auto is the default.
    """

    name = "jax"
    capabilities = frozenset(
        {
            Capability.MULTI_AXIS,
            Capability.MULTI_AXIS_ANY_ORDER,
            Capability.RELAYOUT_ACROSS_MESHES,
            Capability.RELAYOUT_AT_FLOOR,
            Capability.TRACED,
        }
    )
    #: ``jax.Array``'s implementation class, and JAX's tracer base (values inside ``jax.jit``).
    native_types = ("jaxlib._jax.ArrayImpl", "jax._src.core.Tracer")
    requires = ("jax",)
    install_hint = "pip install 'layoutcore[jax]'"

    def __init__(self, *, axis_types: AxisTypeName = "auto") -> None:
        super().__init__()
        if axis_types not in ("auto", "explicit"):
            raise LayoutError(f"axis_types must be 'auto' or 'explicit'. Received: {axis_types!r}", value=axis_types)
        import jax

        self._jax = jax
        self._named_sharding_type = jax.sharding.NamedSharding
        self._tracer_type = jax.core.Tracer
        self._axis_types: AxisTypeName = axis_types
        self._by_name = _devices_by_name()  # applies LAYOUTCORE_CPU_DEVICES before JAX starts
        self._names = list(self._by_name)
        self._multiprocess = jax.process_count() > 1
        if self._multiprocess:  # across processes relayout keeps device_put (_relayout's docstring)
            self.capabilities = self.capabilities - {Capability.RELAYOUT_AT_FLOOR}  # type: ignore[misc]  # per instance
        self._process_index = jax.process_index()
        self._shardings = LRUCache[Any, Any](_CACHE_SIZE)  # Layout -> NamedSharding
        self._mesh_order = LRUCache[Any, Any](_CACHE_SIZE)  # jax.sharding.Mesh -> its devices, flat
        self._fetched = LRUCache[Any, Any](_CACHE_SIZE)
        self._local: dict[tuple[str, ...], tuple[int, ...]] = {}
        self._compiled = LRUCache[Any, Any](_CACHE_SIZE)
        # Layouts this driver applied to tracers (the front-end keeps no records for traced values).
        self._traced: dict[int, tuple[weakref.ref[Any], Layout]] = {}
        self._narrowed: set[str] = set()  # dtypes whose narrowing this driver has warned about
        # Types seen to be concrete jax.Arrays (no Tracer): isinstance(value, jax.Array) goes through
        # ABCMeta (~0.3 us), a set lookup of the type does not. A type, so every instance is one too.
        self._concrete_types: set[type] = set()
        self._quieted = _dtypes_named(_QUIETED_FLOATS)

    # -- conversions (cached on the hashable values) --------------------------------------------
    def named_sharding(self, layout: Layout) -> NamedSharding:
        """The ``NamedSharding`` this driver uses for ``layout`` (its mesh bound to devices here).

        Raises:
            LayoutError: ``layout`` has no mesh, or its mesh cannot be bound (see ``bind_mesh``).
        """
        if not isinstance(layout, Layout) or layout.mesh is None:
            self.check_layout(layout, ())
        return self._sharding(layout, self.bind_mesh(layout.require_mesh()))

    def _sharding(self, layout: Layout, devices: tuple[str, ...]) -> NamedSharding:
        sharding = self._shardings.peek(layout)
        if sharding is None:
            mesh = layout.require_mesh()
            concrete = mesh if mesh.devices is not None else mesh.with_devices(devices)
            sharding = self._shardings.put(layout, _to_named_sharding(Layout(layout.axes, concrete), self._axis_types))
        return sharding

    # -- required hooks --------------------------------------------------------------------------
    def list_devices(self, device_type: str | None = None) -> list[str]:
        if device_type is None:
            return list(self._names)
        prefix = device_type.upper() + ":"
        return [name for name in self._names if name.split("/device:")[-1].startswith(prefix)]

    def is_distributed(self, value: Any) -> bool:
        """A concrete ``jax.Array`` on a ``NamedSharding``.

        An array on one device (``SingleDeviceSharding``, what ``jnp.asarray`` makes) is a plain
        value, as a NumPy array is: ``distribute_tensor`` places it, and the functions that need a
        distributed tensor refuse it with ``NotDistributedError``.
        """
        kind = type(value)
        if kind not in self._concrete_types:
            if not isinstance(value, self._jax.Array) or isinstance(value, self._tracer_type):
                return False
            self._concrete_types.add(kind)  # a handful of types at most (JAX's array implementations)
        return isinstance(value.sharding, self._named_sharding_type)

    def shape_of(self, value: Any) -> tuple[int, ...]:
        """A concrete ``jax.Array``'s own shape (JAX keeps it a tuple of ints); else ``tuple(int(s) ...)``."""
        if type(value) in self._concrete_types:
            shape: tuple[int, ...] = value.shape
            return shape
        return tuple(int(s) for s in value.shape)

    def is_traced(self, value: Any) -> bool:
        """A JAX tracer: a value inside ``jax.jit`` (or another JAX transformation)."""
        return isinstance(value, self._tracer_type)

    def _constrain(self, value: Any, layout: Layout, devices: tuple[str, ...]) -> Any:
        """Apply ``layout`` to a traced value as JAX's sharding constraint, and note it for fetch_layout."""
        sharding = self._sharding(layout, devices)
        if self._axis_types == "explicit":
            jax = self._jax
            if not jax.sharding.get_abstract_mesh().axis_names and not jax.typeof(value).sharding.mesh.axis_names:
                # JAX would fail later, when it lowers the jitted function, with its own ValueError.
                raise UnsupportedLayoutError(
                    "On Explicit mesh axes, JAX needs to know the mesh inside jax.jit: the traced value carries "
                    "none and no mesh is set. Call the jitted function inside `with jax.set_mesh(mesh):` "
                    "(layoutcore_jax.to_jax_mesh(mesh, axis_types='explicit')), or pass it an input laid out on "
                    "that mesh.",
                    driver=self.name,
                    feature=Capability.TRACED,
                    value=layout,
                )
            out = jax.sharding.reshard(value, sharding)
        else:
            out = self._jax.lax.with_sharding_constraint(value, sharding)
        return self._note_traced(out, layout)

    def _note_traced(self, out: Any, layout: Layout) -> Any:
        """Record that JAX will lay out the traced ``out`` by ``layout`` (for as long as the tracer lives)."""
        key = id(out)
        traced = self._traced

        def forget(_: Any, key: int = key) -> None:
            traced.pop(key, None)

        traced[key] = (weakref.ref(out, forget), layout)
        return out

    def prepare_input(self, value: Any) -> Any:
        """``jax.Array`` passes; NumPy arrays, nested lists, scalars and other frameworks' CPU tensors
        (through ``__array__``) become NumPy arrays JAX takes, of their own dtype (a 64-bit one
        without ``jax_enable_x64`` is the front-end's to narrow or refuse: :meth:`narrow_input`).

        Raises:
            UnsupportedLayoutError: a dtype JAX cannot hold (``feature=Limitation.DTYPE``).
        """
        if isinstance(value, self._jax.Array):
            return value
        if isinstance(value, np.ndarray):
            return _jax_numpy(value, "the value")
        return _jax_numpy(np.asarray(value), "the value")

    def narrow_input(self, value: Any, name: str, what: str) -> Any:
        """With ``jax_enable_x64`` off, a 64-bit value in JAX's 32-bit dtype (``jax.device_put``'s rule)
        where every element fits exactly (``narrow_exactly``: integers in range, floats and NaN
        payloads bit for bit, complex per part), with a :class:`~layoutcore.driver.DtypeNarrowingWarning`
        the first time for each dtype.

        Raises:
            UnsupportedLayoutError: ``feature=Limitation.DTYPE``: an element would change (naming the
                dtype, the first such element and its index, and the remedies), or ``name`` is not
                a 64-bit dtype narrowed here.
        """
        if name not in X64_DTYPES or self._jax.config.jax_enable_x64:
            raise self.dtype_refusal(name)
        out = narrowed_exactly(value, name, what)
        if name not in self._narrowed:
            self._narrowed.add(name)
            warn_narrowed(name)
        return out

    def supported_dtypes(self) -> frozenset[str]:
        """All 18 with ``jax_enable_x64`` on; with it off (JAX's default), all but int64, uint64,
        float64 and complex128, which JAX stores in 32 bits (a value of them whose every element
        fits is narrowed: :meth:`narrow_input`). Read at every call: the flag can change while
        the driver lives."""
        return _ALL if self._jax.config.jax_enable_x64 else _WITHOUT_X64

    def unsupported_dtype_reason(self, name: str) -> str:
        if name in X64_DTYPES:
            return (
                f"with jax_enable_x64 off JAX stores {name} values in {NARROWED[name]}, which may change them; "
                f"{x64_remedies(name)}"
            )
        return super().unsupported_dtype_reason(name)

    def native_distribute(self, value: Any, layout: Layout, devices: tuple[str, ...]) -> jax.Array:
        if self.is_traced(value):
            return _array(self._constrain(value, layout, devices))
        sharding = self._sharding(layout, devices)
        if not (isinstance(value, np.ndarray) and value.flags.writeable):
            return _array(self._jax.device_put(value, sharding))
        # A snapshot (Driver.input_aliasing): on CPU, device_put aliases 64-byte-aligned contiguous blocks
        # of a NumPy input zero-copy (may_alias=False does not stop it in jax 0.10.2), so a later write by
        # the caller would show through. Small inputs are copied first (cheaper than checking); large ones
        # are placed, checked for aliasing shards, and placed again from a private copy only if one aliases.
        # Across processes every process must make the same device_put calls: each one checks that the
        # value is equal on all processes (a collective), and whether JAX aliases a block depends on
        # this process's allocation (64-byte alignment). A second, data-dependent device_put here ran a
        # collective its peer did not (gloo: "Received data size doesn't match"), so copy up front.
        if value.nbytes <= _COPY_BELOW_BYTES or not sharding.is_fully_addressable:
            return _array(self._jax.device_put(value.copy(), sharding))
        out = _array(self._jax.device_put(value, sharding))
        low = value.ctypes.data
        high = low + value.nbytes
        if any(low <= shard.data.unsafe_buffer_pointer() < high for shard in out.addressable_shards):
            out = _array(self._jax.device_put(value.copy(), sharding))
        return out

    def native_unpack(self, tensor: jax.Array) -> list[jax.Array]:
        shards = tensor.addressable_shards
        sharding = tensor.sharding
        if len(shards) == 1:
            return [shards[0].data]
        by_device = {shard.device: shard.data for shard in shards}
        # addressable_shards follows the mesh's device order today; ordering by the mesh makes
        # that a guarantee of ours rather than an accident of JAX's.
        return [by_device[d] for d in self._device_order(sharding.mesh) if d in by_device]

    def _device_order(self, jax_mesh: jax.sharding.Mesh) -> tuple[jax.Device, ...]:
        order = self._mesh_order.get(jax_mesh)
        if order is None:
            order = self._mesh_order.put(jax_mesh, tuple(jax_mesh.devices.flat))
        return cast("tuple[jax.Device, ...]", order)

    def native_pack(
        self, components: list[Any], layout: Layout, devices: tuple[str, ...], global_shape: tuple[int, ...]
    ) -> jax.Array:
        return self._pack(components, layout, devices, global_shape, snapshot=True)

    def native_pack_owned(
        self, blocks: list[np.ndarray], layout: Layout, devices: tuple[str, ...], global_shape: tuple[int, ...]
    ) -> jax.Array:
        """As :meth:`native_pack`, without the snapshot copy: the blocks are handed over."""
        return self._pack(blocks, layout, devices, global_shape, snapshot=False)

    def _pack(
        self,
        components: list[Any],
        layout: Layout,
        devices: tuple[str, ...],
        global_shape: tuple[int, ...],
        *,
        snapshot: bool,
    ) -> jax.Array:
        jax = self._jax
        sharding = self._sharding(layout, devices)
        positions = self.local_positions(layout.require_mesh(), devices)
        # device_put onto the component's own device is free for a jax.Array already there.
        arrays = []
        for i, (p, component) in enumerate(zip(positions, components, strict=True)):
            if isinstance(component, np.ndarray):
                component = _jax_numpy(component, f"component {i}")
                # a private copy of a caller's NumPy component, as in native_distribute (the snapshot rule)
                component = component.copy() if snapshot else component
            arrays.append(jax.device_put(component, self._by_name[devices[p]]))
        return _array(jax.make_array_from_single_device_arrays(global_shape, sharding, arrays))

    def native_relayout(self, tensor: jax.Array, layout: Layout, devices: tuple[str, ...]) -> jax.Array:
        return self.native_relayout_planned(tensor, self.relayout_move(tensor, layout, devices))

    def native_relayout_planned(self, tensor: jax.Array, move: RelayoutMove) -> jax.Array:
        layout, devices = move.layout, move.devices
        if isinstance(tensor, self._tracer_type):
            # Inside jax.jit: JAX's own constraint (XLA picks the collectives; see _relayout's docstring).
            return _array(self._constrain(tensor, layout, devices))
        if 0 in move.shape:  # the tensor's shape, as the front-end read it
            # Nothing to move, and XLA's programs (the bit views below, the floor plan's shard_map, even
            # device_put between meshes) hand a zero-size result back replicated or refuse its shard
            # shapes (measured, jax 0.10.2): the empty target is made directly on the target sharding.
            return _array(self._jax.device_put(np.zeros(tensor.shape, tensor.dtype), self._sharding(layout, devices)))
        dtype = tensor.dtype
        if dtype in self._quieted:  # dtype objects, not names: dtype.name runs Python code in NumPy
            # XLA's CPU collectives turn every bfloat16 NaN into the one quiet NaN (0x7fc1 -> 0x7fc0;
            # measured, jax 0.10.2), and its ppermute does the same to float8_e5m2 (0x7e -> 0x7f): the
            # bits of these small floats move as same-width unsigned ints (an elementwise view keeps the sharding).
            bitcast = self._jax.lax.bitcast_convert_type
            carrier = np.dtype(f"uint{8 * tensor.dtype.itemsize}")
            moved = self.native_relayout_planned(_array(bitcast(tensor, carrier)), move.retyped(carrier.name))
            return _array(bitcast(moved, tensor.dtype))
        # Every call passes here: each function call costs (the cache's lookup is _sharding's, inlined).
        sharding = self._shardings.peek(layout) or self._sharding(layout, devices)
        planned = _relayout_choice.relayout_at_floor(self, tensor, move, sharding, dtype)
        if planned is not None:  # device_put would move more than relayout_plan's floor
            return planned
        out: jax.Array = self._jax.device_put(tensor, sharding)
        if out is tensor:
            # Same NamedSharding (the layouts differ only by mesh name, or abstract vs concrete mesh):
            # JAX hands back its input, but the result must be a new object, so that its layout record
            # does not replace the input's. A new Array over the same immutable buffers copies nothing.
            out = _array(
                self._jax.make_array_from_single_device_arrays(
                    tensor.shape, sharding, [shard.data for shard in tensor.addressable_shards]
                )
            )
        return out

    def native_fetch_layout(self, tensor: jax.Array) -> Layout:
        if self.is_traced(tensor):
            return self._traced_layout(tensor)
        key = (tensor.sharding, tensor.ndim)
        layout = self._fetched.get(key)
        if layout is None:
            layout = self._fetched.put(key, from_jax_sharding(tensor.sharding, tensor.ndim))
        return cast("Layout", layout)

    def _traced_layout(self, tensor: Any) -> Layout:
        entry = self._traced.get(id(tensor))
        noted = entry[1] if entry is not None and entry[0]() is tensor else None
        aval_sharding = getattr(self._jax.typeof(tensor), "sharding", None)
        mesh = getattr(aval_sharding, "mesh", None)
        explicit = self._jax.sharding.AxisType.Explicit
        if mesh is not None and mesh.axis_names and all(t == explicit for t in mesh.axis_types):
            # Explicit axes: the sharding is part of JAX's type, known while tracing (on an abstract mesh).
            # The type is the truth; a note that agrees with it only restores the user's mesh (its name).
            typed = from_partition_spec(aval_sharding.spec, from_jax_mesh(mesh), ndim=tensor.ndim)  # type: ignore[union-attr]  # has a mesh: so a NamedSharding
            return noted if noted is not None and noted.axes == typed.axes else typed
        if noted is not None:  # Auto axes: the constraint this driver applied while tracing
            return noted
        raise UnsupportedLayoutError(
            f"JAX does not know the layout of this traced value ({self._jax.typeof(tensor)}) while tracing: on Auto "
            "mesh axes the compiler chooses it. fetch_layout inside jax.jit answers for values laid out there by "
            "distribute_tensor/relayout/call_with_layout, or on a driver with axis_types='explicit'.",
            driver=self.name,
            feature=Capability.TRACED,
            value=tensor,
        )

    def native_to_numpy(self, tensor: jax.Array) -> np.ndarray:
        if not tensor.is_fully_addressable:
            from jax.experimental import multihost_utils

            # Every process must make this call: it is a collective gather.
            return np.array(multihost_utils.process_allgather(tensor, tiled=True))
        out = np.empty(tensor.shape, dtype=tensor.dtype)
        for shard in tensor.addressable_shards:
            if shard.replica_id == 0:  # write each distinct block once
                out[shard.index] = np.asarray(shard.data)
        return out

    # -- optional hooks --------------------------------------------------------------------------
    def process_group(self) -> ProcessGroup:
        """``jax.distributed``'s processes; the barrier is ``multihost_utils.sync_global_devices``, which
        fails when JAX's coordination service sees a peer die (it takes no timeout of its own)."""
        if not self._multiprocess:
            return super().process_group()
        from jax.experimental import multihost_utils

        def barrier(tag: str, timeout_s: float) -> None:
            del timeout_s  # sync_global_devices takes none; a dead peer fails it through the coordination service
            multihost_utils.sync_global_devices(tag)

        return ProcessGroup(self._process_index, self._jax.process_count(), barrier, self.name)

    def local_positions(self, mesh: Mesh, devices: tuple[str, ...]) -> Sequence[int]:
        """Mesh positions of this process's devices (all of them in a single-process run)."""
        if not self._multiprocess:
            return range(len(devices))
        local = self._local.get(devices)
        if local is None:
            local = self._local[devices] = tuple(
                p for p, d in enumerate(devices) if self._by_name[d].process_index == self._process_index
            )
        return local

    def native_call_with_layout(
        self,
        fn: Callable[..., Any],
        layout: Layout,
        devices: tuple[str, ...],
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
    ) -> jax.Array:
        """``jax.jit(fn, out_shardings=NamedSharding)``: every device computes only its own shard.

        Array arguments (``jax.Array``, ``np.ndarray``) are traced; every other argument (shapes,
        dtypes, Python numbers) is static. Compiled functions are cached on ``fn``, the static
        arguments and the layout when they are hashable.

        Raises:
            LayoutError: ``fn`` does not return one array, or the layout's rank differs from it.
            UnsupportedLayoutError: the result's shape does not divide evenly by the layout.
        """
        jax = self._jax
        leaves, treedef = jax.tree_util.tree_flatten((args, kwargs))
        if not jax.config.jax_enable_x64:
            leaves = self._x64_off_arguments(fn, leaves)
        traced = tuple(isinstance(leaf, np.ndarray | jax.Array) for leaf in leaves)
        static = tuple(leaf for leaf, t in zip(leaves, traced, strict=True) if not t)
        dynamic = [leaf for leaf, t in zip(leaves, traced, strict=True) if t]
        key: Hashable | None = (fn, treedef, traced, static, layout)
        try:
            entry = self._compiled.get(key)
        except TypeError:  # an unhashable static argument: compile for this call only
            key, entry = None, None
        if entry is None:
            # [jitted, plain, out]: jit is made only once the result's shape is checked
            entry = [None, self._rebuilding_call(fn, treedef, traced, static), None]
            if key is not None:
                self._compiled.put(key, entry)
        out = entry[2]
        if out is None:
            out, held = self._checked_result_shape(fn, entry[1], layout, dynamic)
            if held:
                # fn returns a value it already holds (a constant of the trace), not one it computes: placed
                # as it is, since XLA would turn a bfloat16 constant's NaN payloads into the one quiet NaN.
                # Not cached: the constant is this call's.
                if key is not None:
                    self._compiled.pop(key)
                return _array(jax.device_put(np.asarray(held[0]), self._sharding(layout, devices)))
            if not dynamic:  # the result's shape depends on the static arguments only: checked for good
                entry[2] = out
        return self._run_compiled(entry, out, layout, devices, dynamic)

    def _rebuilding_call(
        self, fn: Callable[..., Any], treedef: Any, traced: tuple[bool, ...], static: tuple[Any, ...]
    ) -> Callable[..., Any]:
        """``fn`` as a function of the traced leaves only: the static leaves are put back in place.

        A 64-bit NumPy result with ``jax_enable_x64`` off is narrowed exactly, or refused.
        """
        jax = self._jax

        def call(*arrays: Any) -> Any:
            values = iter(arrays)
            constants = iter(static)
            rebuilt = [next(values) if t else next(constants) for t in traced]
            call_args, call_kwargs = jax.tree_util.tree_unflatten(treedef, rebuilt)
            result = fn(*call_args, **call_kwargs)
            if isinstance(result, np.ndarray | np.generic) and not jax.config.jax_enable_x64:
                # JAX would narrow a 64-bit NumPy result silently: exactly, or refused
                return self._held_argument(np.asarray(result), None, f"{fn!r}'s result")
            return result

        return call

    def _checked_result_shape(
        self, fn: Callable[..., Any], plain: Callable[..., Any], layout: Layout, dynamic: list[Any]
    ) -> tuple[Any, list[Any]]:
        """Trace ``plain`` on ``dynamic``: its result's ``ShapeDtypeStruct``, checked against ``layout``.

        The second item holds the result when it is a constant of the trace (and no argument is
        traced by an outer jit), else it is empty.

        Raises:
            LayoutError: ``fn`` does not return one array, or the layout's rank differs from it.
            UnsupportedLayoutError: the result's shape does not divide evenly by the layout.
        """
        jax = self._jax
        closed, out = jax.make_jaxpr(plain, return_shape=True)(*dynamic)
        if not isinstance(out, jax.ShapeDtypeStruct):
            raise LayoutError(
                f"call_with_layout needs a function that returns one array; {fn!r} returned {out!r}.", value=out
            )
        # Refuse uneven or wrong-rank results with layoutcore's own errors before jit sees them.
        self.check_layout(layout, tuple(int(s) for s in out.shape))
        held = [c for v, c in zip(closed.jaxpr.constvars, closed.consts, strict=True) if v is closed.jaxpr.outvars[0]]
        if held and not any(self.is_traced(a) for a in dynamic):
            return out, held
        return out, []

    def _run_compiled(
        self, entry: list[Any], out: Any, layout: Layout, devices: tuple[str, ...], dynamic: list[Any]
    ) -> jax.Array:
        """Run the cache ``entry``'s function jitted with ``out_shardings`` for ``layout`` (jitted once).

        Raises:
            LayoutError: jit returned another sharding than asked for.
        """
        jax = self._jax
        sharding = self._sharding(layout, devices)
        jitted = entry[0]
        if jitted is None:
            jitted = entry[0] = jax.jit(entry[1], out_shardings=sharding)
        if math.prod(out.shape) == 0 and not any(self.is_traced(a) for a in dynamic):
            # jit gives every device the full (empty) shape here (jax 0.10.2); an empty value costs nothing to place.
            return _array(jax.device_put(np.empty(out.shape, out.dtype), sharding))
        result = jitted(*dynamic)
        if self.is_traced(result):
            # Inside an outer jax.jit. On Auto axes out_shardings constrains the result already; on Explicit
            # ones JAX 0.10.2 drops it from the nested call's type (the outer output came back replicated),
            # so the layout is applied as JAX's own constraint (reshard) either way.
            return _array(self._constrain(result, layout, devices))
        if result.sharding != sharding:  # jit honours out_shardings; never hand back anything else
            raise LayoutError(f"jax.jit returned sharding {result.sharding}, not {sharding}.", value=result.sharding)
        return _array(result)

    def _x64_off_arguments(self, fn: Callable[..., Any], leaves: list[Any]) -> list[Any]:
        """``call_with_layout``'s arguments with ``jax_enable_x64`` off: 64-bit NumPy arrays narrowed exactly.

        Raises:
            UnsupportedLayoutError: an array that does not fit; or an explicit request for a 64-bit
                dtype (``dtype=np.int64``), which JAX would answer in 32 bits and only warn (as a
                TensorSpec asking for a 64-bit dtype is refused).
        """
        for leaf in leaves:
            name = x64_request(leaf)
            if name is not None:
                raise UnsupportedLayoutError(
                    f"call_with_layout: {fn!r} is asked for {name} (argument {_short(leaf)}), but "
                    f"{self.unsupported_dtype_reason(name)}.",
                    driver=self.name,
                    feature=Limitation.DTYPE,
                    value=name,
                )
        return [self._held_argument(leaf, i) for i, leaf in enumerate(leaves)]

    def _held_argument(self, leaf: Any, index: int | None, what: str = "") -> Any:
        """A 64-bit NumPy ``call_with_layout`` argument (or result) narrowed exactly; anything else unchanged.

        Raises:
            UnsupportedLayoutError: it does not fit (see :meth:`narrow_input`).
        """
        if not isinstance(leaf, np.ndarray) or leaf.dtype.name not in X64_DTYPES:
            return leaf
        return self.narrow_input(leaf, leaf.dtype.name, what or f"call_with_layout argument {index}")

    def __repr__(self) -> str:
        return f"<JaxDriver {len(self._names)} devices, axis_types={self._axis_types!r}>"


#: Floats whose NaN payloads XLA's CPU collectives may rewrite: relaid out as same-width unsigned ints.
_QUIETED_FLOATS = frozenset({"bfloat16", "float16", "float8_e4m3fn", "float8_e5m2", "float8_e8m0fnu"})


def _dtypes_named(names: frozenset[str]) -> frozenset[np.dtype[Any]]:
    """The NumPy dtypes of ``names`` (ml_dtypes' for the small floats, JAX's own dependency); a name neither
    NumPy nor the installed ml_dtypes knows is left out: no array can have that dtype here."""
    import ml_dtypes

    found = set()
    for name in names:
        try:
            found.add(np.dtype(getattr(ml_dtypes, name, name)))
        except TypeError:
            continue
    return frozenset(found)
