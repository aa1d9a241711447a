"""The TensorFlow DTensor driver."""

from __future__ import annotations

import functools
import threading
import weakref
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, TypeVar, cast

import numpy as np

from layoutcore import Layout, LayoutError, Mesh, UnsupportedLayoutError
from layoutcore.driver import ML_DTYPES, Capability, Driver, Limitation, LRUCache, ProcessGroup, as_bits, numpy_dtype

from ._barrier import DTensorBarrier, all_gather_check
from ._convert import HELD_DTYPES, from_tensorflow_layout, native_layout, refusing_unheld
from ._dlpack import dlpack_view
from ._graph import graph_layout_string
from ._runtime import configure_cpu_devices, global_device_names, leave_layoutcore_to_python, tf_modules

if TYPE_CHECKING:
    import contextlib

    from layoutcore import LayoutMap

__all__ = ["TensorFlowDriver"]

_Hook = TypeVar("_Hook", bound=Callable[..., Any])

#: Up to this many bytes ``distribute_tensor`` packs the distinct blocks of the input (0.4 ms for
#: 1 KiB to 1 MiB on a 4x2 mesh, against 2-3 ms for DTensor's ``relayout(copy_to_mesh(x))``); above
#: it, it takes DTensor's own path, whose time varied least between runs at 16-64 MiB
#: (benchmarks/bench_tensorflow.py; measurements on a shared 2-core machine).
PACK_MAX_BYTES = 4 << 20
#: Bound of the per-mesh tables (local positions, replicated native layouts), in entries.
_TABLE_SIZE = 1024


def _serialized(hook: _Hook) -> _Hook:
    """Run a hook under the driver's lock: DTensor deadlocks when two threads issue collectives on one
    mesh at once (two replicating relayouts, measured on TF 2.21) and crashes when two threads create
    DVariables at once (a segfault in the conformance suite's thread test)."""

    @functools.wraps(hook)
    def serialized(self: TensorFlowDriver, *args: Any, **kwargs: Any) -> Any:
        with self._tf_lock:
            return hook(self, *args, **kwargs)

    return serialized  # type: ignore[return-value]  # functools.wraps keeps the signature


def _device_type(name: str) -> str:
    return name.rsplit("/device:", 1)[-1].split(":", 1)[0].upper()


class TensorFlowDriver(Driver):
    """layoutcore on ``tf.experimental.dtensor`` (TF's logical CPU devices, one or several clients).

    Native tensors are DTensors (``tf.Tensor`` placed on the DTensor device); variables are
    ``dtensor.DVariable``. TF cannot express uneven dimensions nor several mesh axes on one
    tensor axis, so neither capability is declared and the inherited checks raise
    :class:`~layoutcore.UnsupportedLayoutError` for both before TF is called.

    ``relayout`` onto another mesh goes through host memory (DTensor relayouts within one mesh
    only, and its cross-mesh ``copy_to_mesh`` of replicated values can deadlock): the value is
    read once with :meth:`to_numpy` and placed as by :meth:`distribute_tensor`, so for the
    duration of the call the whole value lives in host memory.

    Threads: DTensor deadlocks when two threads issue collectives at once (two replicating
    ``relayout`` calls on one mesh hang for good on TF 2.21) and crashes when two threads create
    DVariables at once, so every hook holds one driver-wide lock while DTensor runs: layoutcore's
    calls from many threads are safe and run one at a time. TF operations a user runs on
    DTensors from several threads are not covered.

    Memory: ``distribute_tensor`` and ``pack`` take a snapshot of NumPy input (``input_aliasing =
    "snapshot"``): TF wraps a C-contiguous, 64-byte-aligned buffer (a memmap, most small arrays,
    some row blocks) zero-copy, so such a buffer is copied first (:func:`_owned`); TF copies
    every other array itself, and layoutcore adds no second copy.

    Inside ``tf.function`` (:attr:`~layoutcore.driver.Capability.TRACED`) ``relayout`` and
    ``distribute_tensor`` add DTensor's ``Relayout`` op, and ``fetch_layout`` answers where the
    graph fixes the layout (see :mod:`layoutcore_tensorflow._graph`).

    Text: NumPy ``str``/``bytes`` arrays come back from ``to_numpy`` in the dtype they went in
    (TF holds UTF-8 bytes; see :class:`_TextDtypes`).
    """

    name = "tensorflow"
    capabilities = frozenset({Capability.RELAYOUT_ACROSS_MESHES, Capability.TRACED})
    #: A fully replicated float32 ``DVariable`` stores an all ``-0.0`` value as ``+0.0``: such a
    #: write is refused instead (:meth:`_refuse_negative_zero`).
    limitations = frozenset({Limitation.NEGATIVE_ZERO})
    #: ``distribute_tensor``/``pack`` copy the NumPy buffers TF would alias (see :func:`_owned`).
    input_aliasing = "snapshot"
    #: A DTensor is an ``EagerTensor`` on DTensor's custom device (a plain eager tensor has the same
    #: type: :meth:`is_distributed` tells them apart by its device); a ``DVariable`` is its own class.
    native_types = (
        "tensorflow.python.framework.ops.EagerTensor",
        "tensorflow.dtensor.python.d_variable.DVariable",
    )
    requires = ("tensorflow",)
    install_hint = "pip install 'layoutcore[tensorflow]'"

    def __init__(self) -> None:
        super().__init__()
        configure_cpu_devices()
        self._tf, self._dtensor = tf_modules()
        leave_layoutcore_to_python()
        devices, local = global_device_names()
        self._devices: tuple[str, ...] = devices
        #: This client's devices (all of them in a single-client process).
        self.local_devices: frozenset[str] = local
        self._multi_client = len(local) != len(devices)
        self._positions: LRUCache[tuple[str, ...], tuple[int, ...]] = LRUCache(_TABLE_SIZE)
        self._replicated: LRUCache[tuple[tuple[str, ...], tuple[int, ...], str, int, tuple[str, ...]], Any] = LRUCache(
            _TABLE_SIZE
        )
        self._wrapped: weakref.WeakKeyDictionary[Any, Any] = weakref.WeakKeyDictionary()
        self._wrapped_strong: LRUCache[Any, Any] = LRUCache(_TABLE_SIZE)
        self._fn_lock = threading.Lock()
        #: Held around every DTensor call (see the class docstring and :func:`_serialized`).
        self._tf_lock = threading.RLock()
        from tensorflow.python.framework.ops import EagerTensor

        self._eager_tensor = EagerTensor
        self._dtensor_device = self._dtensor.device_name()
        self._text = _TextDtypes()
        #: Dtypes DTensor's collectives move bit for bit on every relayout. Measured on TF 2.21, 4x2
        #: mesh: float kinds lose -0.0 where DTensor gathers by summing zero-filled blocks; float8 has
        #: no Fill kernel, uint64 no CollectiveReduceV2; bool, (u)int8, (u)int16 and uint32 fail
        #: ('y', None) -> (None, 'y'). Everything else moves as integers (docs/dtypes.md).
        self._exact_dtypes = frozenset({self._tf.int32, self._tf.int64})
        self._float8 = frozenset(self._tf.as_dtype(numpy_dtype(n)) for n in ("float8_e4m3fn", "float8_e5m2"))

    # -- devices ------------------------------------------------------------------------------
    def list_devices(self, device_type: str | None = None) -> list[str]:
        """Every device of the DTensor cluster: the logical CPUs here, or every client's after
        :func:`~layoutcore_tensorflow.initialize_multi_client` (full names, global-id order)."""
        if device_type is None:
            return list(self._devices)
        return [d for d in self._devices if _device_type(d) == device_type.upper()]

    @property
    def multi_client(self) -> bool:
        """Whether this process is one client of several (``unpack``/``pack`` hold local components)."""
        return self._multi_client

    def local_positions(self, mesh: Mesh, devices: tuple[str, ...]) -> Sequence[int]:
        """Mesh positions of this client's devices, row-major."""
        try:
            return self._positions[devices]
        except KeyError:
            return self._positions.put(devices, tuple(p for p, d in enumerate(devices) if d in self.local_devices))

    def _native(self, layout: Layout, devices: tuple[str, ...]) -> Any:
        if self._multi_client and devices != self._devices:
            # TF maps a global device id to a client by position: a multi-client mesh must list the
            # whole cluster in its global order, or some client would get a mesh it cannot run.
            raise LayoutError(
                f"In a multi-client run a mesh must span every client's devices in global order "
                f"{list(self._devices)}. {layout.mesh!r} is bound to {list(devices)}.",
                value=layout.mesh,
            )
        return native_layout(layout, devices, self.local_devices)

    def _replicated_native(self, mesh: Mesh, rank: int, devices: tuple[str, ...]) -> Any:
        key = (mesh.axis_names, mesh.shape, mesh.name, rank, devices)
        try:
            return self._replicated[key]
        except KeyError:
            return self._replicated.put(key, self._native(Layout.replicated(mesh, rank), devices))

    # -- tensors ------------------------------------------------------------------------------
    def is_distributed(self, value: Any) -> bool:
        if isinstance(value, self._eager_tensor):
            # A DTensor sits on DTensor's custom device; a plain eager tensor never does.
            return bool(value.device == self._dtensor_device)
        tf = self._tf
        if isinstance(value, tf.Variable):
            return bool(self._dtensor.is_dtensor(value))
        # Inside tf.function every tensor of a DTensor function is a DTensor; TF checks at run time.
        return self.is_traced(value)

    def is_traced(self, value: Any) -> bool:
        """A symbolic tensor of a ``tf.function`` (or ``tf.Graph``) being traced."""
        return isinstance(value, self._tf.Tensor) and not isinstance(value, self._eager_tensor)

    def _tensor(self, value: Any) -> Any:
        # A DVariable is a DTensor for fetch_layout but not for unpack/relayout: read it.
        return value.read_value() if isinstance(value, self._tf.Variable) else value

    def supported_dtypes(self) -> frozenset[str]:
        """All of ``ALL_DTYPES`` but ``float8_e8m0fnu``, which TF 2.21 has no dtype for (MX block scales)."""
        return HELD_DTYPES

    def prepare_input(self, value: Any) -> Any:
        """A ``tf.Variable``'s current value; NumPy arrays of a dtype TF holds, checked.

        Raises:
            UnsupportedLayoutError: a NumPy dtype TF has no tensor of (dates, records, objects;
                ``feature=Limitation.DTYPE``).
        """
        if isinstance(value, self._tf.Variable):
            return value.read_value()
        _refuse_unheld(value, "the value")
        return super().prepare_input(value)

    def shape_of(self, value: Any) -> tuple[int, ...]:
        """The global shape; inside ``tf.function`` a dimension TF does not know yet counts as 0.

        Raises:
            UnsupportedLayoutError: a traced tensor of unknown rank.
        """
        shape = value.shape
        if getattr(shape, "rank", 0) is None:
            raise UnsupportedLayoutError(
                f"A tensor of unknown rank inside tf.function has no layout to check: {value!r}. Give the "
                "tf.function an input_signature with known ranks.",
                driver=self.name,
                feature=Capability.TRACED,
                value=value,
            )
        return tuple(0 if s is None else int(s) for s in shape)

    @_serialized
    def native_distribute(self, value: Any, layout: Layout, devices: tuple[str, ...]) -> Any:
        return self._text.carry(self._place(value, layout, devices), value)

    def _place(self, value: Any, layout: Layout, devices: tuple[str, ...]) -> Any:
        dtensor = self._dtensor
        native = self._native(layout, devices)
        if not self._tf.executing_eagerly():
            # Tracing a tf.function: DTensor's Relayout op is the sharding constraint.
            return dtensor.relayout(self._tf.convert_to_tensor(value), native)
        if native.is_fully_replicated():  # TF's notion: a size-1 sharded axis is not replicated there
            return dtensor.copy_to_mesh(_owned(value), native)
        shape = self.shape_of(value)
        if int(np.prod(shape, dtype=np.int64)) * _itemsize(value) > PACK_MAX_BYTES and not _is_text(value):
            replicated = self._replicated_native(layout.require_mesh(), layout.rank, devices)
            placed = dtensor.relayout(dtensor.copy_to_mesh(_owned(value), replicated), native)
            return self._exact(placed, layout, native)
        # Small values: a pack of the distinct blocks, each sliced from the input once.
        slices = _slices(layout, shape)
        blocks = _blocks(layout)
        made: dict[tuple[int, ...], Any] = {}
        components = []
        for position in self.local_positions(layout.require_mesh(), devices):  # this client's
            block = blocks[position]
            if block not in made:
                made[block] = _owned(value[slices[position]])
            components.append(made[block])
        return dtensor.pack(components, native)

    @_serialized
    def native_unpack(self, tensor: Any) -> list[Any]:
        return list(self._dtensor.unpack(self._tensor(tensor)))

    @_serialized
    def native_pack(
        self, components: list[Any], layout: Layout, devices: tuple[str, ...], global_shape: tuple[int, ...]
    ) -> Any:
        for index, component in enumerate(components):
            _refuse_unheld(component, f"component {index}")
        packed = self._dtensor.pack([_owned(c) for c in components], self._native(layout, devices))
        return self._text.carry(packed, components[0])

    @_serialized
    def native_pack_owned(
        self, blocks: list[np.ndarray], layout: Layout, devices: tuple[str, ...], global_shape: tuple[int, ...]
    ) -> Any:
        """``dtensor.pack`` of the handed-over blocks, without the aliasing copy (no one writes them)."""
        for index, block in enumerate(blocks):
            _refuse_unheld(block, f"block {index}")
        return self._dtensor.pack(list(blocks), self._native(layout, devices))

    def native_fill(self, tensor: Any, blocks: list[np.ndarray], layout: Layout, devices: tuple[str, ...]) -> Any:
        """A ``DVariable`` is assigned in place (it keeps its identity); a DTensor is replaced."""
        packed = self.native_pack_owned(blocks, layout, devices, self.shape_of(tensor))
        if isinstance(tensor, self._tf.Variable):
            self.variable_assign(tensor, packed)
            return tensor
        return packed

    @_serialized
    def native_relayout(self, tensor: Any, layout: Layout, devices: tuple[str, ...]) -> Any:
        return self._text.carry(self._relayout(tensor, layout, devices), tensor)

    def _relayout(self, tensor: Any, layout: Layout, devices: tuple[str, ...]) -> Any:
        dtensor = self._dtensor
        tensor = self._tensor(tensor)
        native = self._native(layout, devices)
        if self.is_traced(tensor):
            known = graph_layout_string(self._tf, dtensor, tensor)
            if known is not None and known.split(" mesh:", 1)[1] != native.mesh.to_string():
                raise UnsupportedLayoutError(
                    f"Inside tf.function the tensorflow driver relayouts within one mesh only (DTensor's Relayout op); "
                    f"{tensor!r} is on another mesh than {layout}. Move it between meshes outside the function.",
                    driver=self.name,
                    feature=Capability.TRACED,
                    value=layout,
                )
            return self._graph_relayout(tensor, native)
        if not self._tf.executing_eagerly():
            # A DTensor captured by a tf.function being traced: DTensor's Relayout op (its own relayout
            # does this in a graph); dtensor.fetch_layout would raise "must be called eagerly".
            return self._graph_relayout(tensor, native)
        source = dtensor.fetch_layout(tensor)
        if source.to_string() == native.to_string():
            # TF's own no-op relayout costs ~1 ms. DTensors are immutable: hand back the same one,
            # or an identity where it was made with another (say abstract) mesh over these devices.
            if self.recorded_layout(tensor) == layout:
                return tensor
            return self._tf.identity(tensor)
        shape = self.shape_of(tensor)
        if 0 in shape:
            # Nothing to move; TF's collectives fail on empty shapes ("shape in CollectiveParams
            # should be non-empty"), so build the empty components directly.
            return self._place(np.zeros(shape, tensor.dtype.as_numpy_dtype), layout, devices)
        if source.mesh.to_string() == native.mesh.to_string() and not _is_text(tensor):
            moved = self._on_devices(tensor, source, native, shape)
            if moved is not None:
                return self._exact(moved, layout, native)
        # Another mesh, text, or a dtype DTensor's collectives do not move bit for bit (see
        # _exact_dtypes). DTensor's relayout works within one mesh, its cross-mesh copy_to_mesh
        # (replicated values only) can deadlock (a size-1 sharded source, measured on TF 2.21), and its
        # collectives refuse tf.string; so the value goes through host memory: read once, then placed
        # as distribute_tensor does.
        return self._place(self._to_numpy(tensor), layout, devices)

    def _on_devices(self, tensor: Any, source: Any, native: Any, shape: tuple[int, ...]) -> Any | None:
        """A same-mesh relayout through DTensor's collectives on bits they move exactly, or ``None``
        where the value must go through host memory (small values of a dtype DTensor would change)."""
        dtensor = self._dtensor
        large = int(np.prod(shape, dtype=np.int64)) * tensor.dtype.size > PACK_MAX_BYTES
        if large and not self._multi_client:
            words = self._words_relayout(tensor, source, native)
            if words is not None:
                return words
        if tensor.dtype in self._exact_dtypes:
            return dtensor.relayout(tensor, native)
        if self._multi_client:  # blocks on other clients: DTensor's collectives, on integer bits
            return self._relayout_bits(tensor, native)
        if large and tensor.dtype not in self._float8:
            # Large: DTensor's collectives on an integer view made on the devices (a bitcast, or a widening
            # cast for 1-2 byte dtypes). Through host memory the value is replicated on every device first:
            # 64 MiB float32 (x, None) -> (None, y) took 620 ms so, DTensor's own relayout 12 ms (one loaded
            # run). float8 has no such view (no TF op casts its bits): host memory.
            return self._graph_bits_relayout(tensor, native)
        return None

    def _words_relayout(self, tensor: Any, source: Any, native: Any) -> Any | None:
        """DTensor's relayout of ``tensor``'s bits as int64 words, or ``None`` where no such view exists.

        Each device views its own block (no DTensor op: ``tf.bitcast`` of a DTensor costs more than the
        relayout itself, measured) with its last axis grouped into 8-byte words, and DTensor's collectives
        move int64, the fastest exact carrier: 64 MiB (x, y) -> (y, None) on 4x2, interleaved, min
        (median): int64 words 483 (700) ms against DTensor's own float32 relayout 654 (884), int32 1653
        (2454), the same bytes as float64 422 (726), int64 440 (1078). Not for bool and float8 (TF has no
        op that views their bits), int64 (already moved as is), 16-byte dtypes, scalars, or a layout
        whose blocks' last axis is not a whole number of words.
        """
        tf, dtensor = self._tf, self._dtensor
        dtype = tensor.dtype
        rank = tensor.shape.rank
        if dtype in (tf.bool, tf.int64) or dtype in self._float8 or dtype.size not in (1, 2, 4, 8) or not rank:
            return None
        per_word = 8 // dtype.size
        last = int(tensor.shape[-1])
        if any(last // layout.num_shards(rank - 1) % per_word for layout in (source, native)):
            return None

        def to_words(block: Any) -> Any:
            grouped = block if per_word == 1 else tf.reshape(block, [*block.shape[:-1], -1, per_word])
            return tf.bitcast(grouped, tf.int64)

        def from_words(block: Any) -> Any:
            return tf.reshape(tf.bitcast(block, dtype), [*block.shape[:-1], -1])

        words = self._per_block(tensor, source, to_words)
        return self._per_block(dtensor.relayout(words, native), native, from_words)

    def _per_block(self, tensor: Any, native: Any, view: Callable[[Any], Any]) -> Any:
        """A DTensor laid out by ``native`` whose blocks are ``view`` of ``tensor``'s, each made on its device."""
        blocks = []
        for block in self._dtensor.unpack(tensor):
            with self._tf.device(block.device):
                blocks.append(view(block))
        return self._dtensor.pack(blocks, native)

    def _graph_relayout(self, tensor: Any, native: Any) -> Any:
        """DTensor's Relayout op inside a ``tf.function``, on integer bits where its collectives would
        change them (see :attr:`_exact_dtypes`): a same-width bitcast to int32/int64, 1-2 byte dtypes
        widened to int32, bool cast to int32, float8 through float32 (exact), complex128 as its two
        float64 halves. The result is a Relayout op's output, whose layout ``fetch_layout`` reads."""
        dtensor, tf = self._dtensor, self._tf
        if tensor.dtype in self._exact_dtypes or tensor.dtype == tf.string:
            return dtensor.relayout(tensor, native)
        # A same-layout Relayout last: it moves nothing, and marks the layout on the graph.
        return dtensor.relayout(self._graph_bits_relayout(tensor, native), native)

    def _graph_bits_relayout(self, tensor: Any, native: Any) -> Any:
        """DTensor's relayout of ``tensor`` on an integer view made with TF ops (in a graph, or eagerly
        on the devices): see :meth:`_graph_relayout`."""
        dtensor, tf = self._dtensor, self._tf
        dtype = tensor.dtype
        if dtype in self._exact_dtypes:
            return dtensor.relayout(tensor, native)
        if dtype == tf.complex128:
            real = self._graph_bits_relayout(tf.math.real(tensor), native)
            imag = self._graph_bits_relayout(tf.math.imag(tensor), native)
            return tf.complex(real, imag)
        if dtype == tf.bool:
            return tf.cast(dtensor.relayout(tf.cast(tensor, tf.int32), native), tf.bool)
        if dtype in self._float8:
            if dtype.name == "float8_e5m2":
                # No TF op views float8 bits, and the cast through float32 turns its NaN payloads into the
                # one quiet NaN (0x7f -> 0x7e): refuse rather than change data (exact outside tf.function).
                raise UnsupportedLayoutError(
                    "Inside tf.function the tensorflow driver cannot relayout float8_e5m2 bit for bit: TF has no op "
                    "that moves its bits, and casting changes NaN payloads. Relayout it outside the tf.function.",
                    driver=self.name,
                    feature=Limitation.DTYPE,
                    value=tensor,
                )
            return tf.cast(self._graph_bits_relayout(tf.cast(tensor, tf.float32), native), dtype)  # exact for e4m3fn
        if dtype.size < 4:
            unsigned = tf.uint8 if dtype.size == 1 else tf.uint16
            bits = tensor if dtype == unsigned else tf.bitcast(tensor, unsigned)
            moved = tf.cast(dtensor.relayout(tf.cast(bits, tf.int32), native), unsigned)
            return moved if dtype == unsigned else tf.bitcast(moved, dtype)
        carrier = tf.int32 if dtype.size == 4 else tf.int64
        return tf.bitcast(dtensor.relayout(tf.bitcast(tensor, carrier), native), dtype)

    def _relayout_bits(self, tensor: Any, native: Any) -> Any:
        """``dtensor.relayout(tensor, native)`` moving each element's bits as int32/int64 (see
        :attr:`_exact_dtypes`): this client's components are viewed on the host, 1- and 2-byte
        dtypes widened to int32 (exact both ways), 16-byte complex128 as int64 pairs along an extra
        unsharded trailing axis."""
        dtensor = self._dtensor
        dtype = np.dtype(tensor.dtype.as_numpy_dtype)
        wide = dtype.itemsize == 16
        carrier = np.int64 if dtype.itemsize >= 8 else np.int32

        def ints(component: Any) -> np.ndarray:
            bits = as_bits(component.numpy())
            return bits.view(carrier) if bits.dtype.itemsize == np.dtype(carrier).itemsize else bits.astype(carrier)

        def extra(layout: Any) -> Any:
            if not wide:
                return layout
            return dtensor.Layout([*layout.sharding_specs, dtensor.UNSHARDED], layout.mesh)

        source = dtensor.fetch_layout(tensor)
        carried = dtensor.pack([ints(c) for c in dtensor.unpack(tensor)], extra(source))
        moved = dtensor.relayout(carried, extra(native))
        unsigned = np.dtype(f"u{min(dtype.itemsize, 8)}")
        back = []
        for component in dtensor.unpack(moved):
            bits = component.numpy()
            bits = bits.view(unsigned) if bits.dtype.itemsize == unsigned.itemsize else bits.astype(unsigned)
            back.append(bits.view(dtype).reshape(bits.shape[:-1] if wide else bits.shape))
        return dtensor.pack(back, native)

    @_serialized
    def native_fetch_layout(self, tensor: Any) -> Layout:
        if self.is_traced(tensor):
            known = graph_layout_string(self._tf, self._dtensor, tensor)
            if known is None:
                raise UnsupportedLayoutError(
                    f"Inside tf.function DTensor fixes the layout of {tensor.op.type!r} outputs only when it compiles "
                    f"the function, so it is not known while tracing ({tensor!r}). Give the tensor its layout inside "
                    "the function with layoutcore.relayout (a DTensor Relayout op), or ask outside the function.",
                    driver=self.name,
                    feature=Capability.TRACED,
                    value=tensor,
                )
            return from_tensorflow_layout(self._dtensor.Layout.from_string(known))
        if not self._tf.executing_eagerly():  # a DTensor captured by a tf.function being traced
            with self._tf.init_scope():  # its layout is an eager fact: read it outside the graph
                return from_tensorflow_layout(self._dtensor.fetch_layout(tensor))
        return from_tensorflow_layout(self._dtensor.fetch_layout(tensor))

    @_serialized
    def native_to_numpy(self, tensor: Any) -> np.ndarray:
        return self._text.restore(self._to_numpy(tensor), tensor)

    def _to_numpy(self, tensor: Any) -> np.ndarray:
        dtensor = self._dtensor
        tensor = self._tensor(tensor)
        native = dtensor.fetch_layout(tensor)
        if native.is_fully_replicated():
            return np.array(tensor.numpy(), copy=True)
        layout = from_tensorflow_layout(native)
        mesh = layout.require_mesh()
        devices = cast("tuple[str, ...]", mesh.devices)  # concrete: the native layout's mesh
        positions = self.local_positions(mesh, devices)
        blocks = _blocks(layout)
        first: dict[tuple[int, ...], int] = {}
        for index, position in enumerate(positions):
            first.setdefault(blocks[position], index)
        if len(first) < len(set(blocks)):
            # Some blocks live on other clients only: gather through DTensor, read the local copy.
            replicated = self._replicated_native(mesh, layout.rank, devices)
            if tensor.dtype in self._exact_dtypes or _is_text(tensor):
                return np.array(dtensor.relayout(tensor, replicated).numpy(), copy=True)
            return np.array(self._relayout_bits(tensor, replicated).numpy(), copy=True)
        # TF's .numpy() refuses sharded DTensors; assemble, writing every byte once.
        components = dtensor.unpack(tensor)
        shape = self.shape_of(tensor)
        slices = _slices(layout, shape)
        out = np.empty(shape, dtype=tensor.dtype.as_numpy_dtype)
        for index in first.values():
            out[slices[positions[index]]] = components[index].numpy()
        return out

    @_serialized
    def native_call_with_layout(
        self,
        fn: Callable[..., Any],
        layout: Layout,
        devices: tuple[str, ...],
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
    ) -> Any:
        """``dtensor.call_with_layout`` on ``tf.function(fn)``.

        DTensor applies the layout to the output of the next op it runs; a whole
        ``tf.function`` is one op, so every device computes only its shard of a multi-op
        ``fn``. The traced output shape is checked against the layout first, so an uneven or
        wrong-rank result raises layoutcore's error instead of TF's.
        """
        # Shape-independent refusals (several mesh axes on one tensor axis) before tracing fn.
        self.check_layout(layout, (0,) * layout.rank)
        if not self._tf.executing_eagerly():
            # Inside a tf.function being traced: fn's ops join the graph, and DTensor's Relayout op
            # gives the result its layout (what dtensor.call_with_layout itself does in a graph).
            output = fn(*args, **kwargs)
            self._check_output(fn, output, layout)
            return self._dtensor.relayout(output, self._native(layout, devices))
        function = self._as_function(fn)
        self._check_output(fn, function.get_concrete_function(*args, **kwargs).structured_outputs, layout)
        native = self._native(layout, devices)
        return self._exact(self._dtensor.call_with_layout(function, native, *args, **kwargs), layout, native)

    def _exact(self, result: Any, layout: Layout, native: Any) -> Any:
        """``result`` with exactly ``native`` as its layout.

        DTensor's relayout and call_with_layout write a tensor axis sharded over a size-1 mesh axis
        as unsharded; both hold the same components, so they are packed again under ``native``.
        """
        mesh = layout.require_mesh()
        if all(a is None or mesh.axis_size(cast(str, a)) != 1 for a in layout.axes):  # TF: one axis per entry
            return result
        return self._dtensor.pack(self._dtensor.unpack(result), native)

    def _check_output(self, fn: Callable[..., Any], output: Any, layout: Layout) -> None:
        if not isinstance(output, self._tf.Tensor):
            raise LayoutError(
                f"call_with_layout needs fn to return one tensor; {fn!r} returns {type(output).__name__}.", value=fn
            )
        if output.shape.rank is not None:
            shape = tuple(0 if s is None else int(s) for s in output.shape)
            self.check_layout(layout, shape)  # a rank mismatch or an uneven axis: layoutcore's error, not TF's

    def _as_function(self, fn: Callable[..., Any]) -> Any:
        tf = self._tf
        if isinstance(fn, tf.types.experimental.GenericFunction):
            return fn
        # One tf.function per fn, so its traces are reused across calls.
        with self._fn_lock:
            cache: Any = self._wrapped
            try:
                found = cache.get(fn)
            except TypeError:  # not weak-referenceable (a builtin): keep it
                cache = self._wrapped_strong
                try:
                    found = cache.get(fn)
                except TypeError:  # unhashable: wrap anew each call
                    return tf.function(refusing_unheld(fn, self.dtype_refusal), autograph=False)
            if found is None:
                found = tf.function(refusing_unheld(fn, self.dtype_refusal), autograph=False)
                cache[fn] = found  # _wrapped_strong (builtins, which live forever) is bounded: an LRU
            return found

    # -- variables: dtensor.DVariable ---------------------------------------------------------
    @_serialized
    def variable_create(self, value: Any, layout: Layout) -> Any:
        """A ``dtensor.DVariable``; of a uint8 view for float8, whose DVariable reads fail in DTensor's
        SPMD expansion (float8_e5m2 on TF 2.21: "Unrecognized DataType enum value")."""
        bits = value.dtype in self._float8
        if not bits:
            self._refuse_negative_zero(value, "Variable")
        variable = self._dtensor.DVariable(self._viewed(value, np.uint8) if bits else value)
        variable._layoutcore_dtype = value.dtype.as_numpy_dtype if bits else None  # the dtype it holds
        return self._text.carry(variable, value)

    @_serialized
    def variable_read(self, handle: Any) -> Any:
        dtype = getattr(handle, "_layoutcore_dtype", None)
        if dtype is not None:
            return self._viewed(handle.read_value(), dtype)
        return self._text.carry(handle.read_value(), handle)

    @_serialized
    def variable_assign(self, handle: Any, value: Any) -> None:
        if getattr(handle, "_layoutcore_dtype", None) is not None:
            value = self._viewed(value, np.uint8)
        else:
            self._refuse_negative_zero(value, "Variable.assign")
        handle.assign(value)

    def _refuse_negative_zero(self, value: Any, what: str) -> None:
        """Refuse a float32 DTensor whose every element is ``-0.0``, on a fully replicated layout.

        TF 2.21's ``DVariable`` stores such a value (a ``-0.0`` splat) as ``+0.0``, at creation and on
        ``assign``; measured: any other float32 value, any sharded layout, and the other float and
        complex dtypes keep every bit. Read from this client's components.

        Raises:
            UnsupportedLayoutError: (feature ``Limitation.NEGATIVE_ZERO``) the value is such a splat.
        """
        if np.dtype(value.dtype.as_numpy_dtype) != np.float32 or not isinstance(value, self._eager_tensor):
            return  # a graph tensor (inside tf.function) has no values to read
        layout = self._dtensor.fetch_layout(value)
        if any(spec != "unsharded" for spec in layout.sharding_specs):
            return
        parts = [np.asarray(component.numpy()) for component in self._dtensor.unpack(value)]
        if parts and parts[0].size and all(bool(np.all((p == 0) & np.signbit(p))) for p in parts):
            raise UnsupportedLayoutError(
                f"{what}: every element is -0.0, which a fully replicated TF DTensor DVariable stores "
                "as +0.0 (TF 2.21); refused instead of changing the sign. Write +0.0, or use a sharded layout.",
                driver=self.name,
                feature=Limitation.NEGATIVE_ZERO,
            )

    def process_group(self) -> ProcessGroup:
        """Several DTensor clients (``dtensor.client_id``/``num_clients``) meet at a :class:`DTensorBarrier`."""
        clients = int(self._dtensor.num_clients())
        if clients <= 1:
            return super().process_group()
        barrier = DTensorBarrier(lambda: all_gather_check(self))
        return ProcessGroup(int(self._dtensor.client_id()), clients, barrier, self.name)

    def component_to_numpy(self, component: Any) -> np.ndarray:
        """A read-only NumPy view of a CPU component's own memory (DLPack, no copy), else ``component.numpy()``.

        ``.numpy()`` copies the buffer on every call (TF 2.21); DLPack shares it. NumPy has no DLPack
        code for bfloat16 and float8, so those are shared through a same-width unsigned
        ``tf.bitcast`` (which aliases the buffer) viewed back as the ml_dtypes type. Text, other
        devices and any dtype DLPack refuses fall back to ``.numpy()`` (``np.asarray`` fails on a
        rank-0 bfloat16 tensor).
        """
        view = dlpack_view(self._tf, self._eager_tensor, component)
        if view is not None:
            return view
        read = getattr(component, "numpy", None)
        return np.asarray(read() if callable(read) else component)

    def _viewed(self, tensor: Any, dtype: Any) -> Any:
        """``tensor`` (a DTensor) with each of this client's components' bits viewed as ``dtype`` (same
        width), on the same layout."""
        dtensor = self._dtensor
        views = [np.asarray(c.numpy()).view(dtype) for c in dtensor.unpack(tensor)]
        return dtensor.pack(views, dtensor.fetch_layout(tensor))

    # -- tf-keras ------------------------------------------------------------------------------
    def enter_layout_map_scope(self, layout_map: LayoutMap) -> contextlib.AbstractContextManager[Any]:
        """tf-keras' ``layout_map_scope`` with layoutcore's map: tf-keras variables get their layouts.

        Variables of tf-keras models built inside the scope take ``layout_map`` entries keyed as
        tf-keras keys them (``"d1.kernel"``), looked up by layoutcore's rules (the map's ``match``);
        unmatched ones are replicated on the map's mesh (see :mod:`layoutcore_tensorflow._keras`).
        Without tf-keras, a ``tf.Variable`` created inside the scope raises
        :class:`~layoutcore.DriverUnavailableError` naming the package to install.
        """
        from ._keras import keras_layout_map_scope

        return keras_layout_map_scope(self, layout_map)


class _TextDtypes:
    """Which DTensors hold text the caller gave as a NumPy ``str`` (``<U5``) or ``bytes`` (``S5``) array.

    TF stores text as UTF-8 bytes (``tf.string``), so ``.numpy()`` gives an array of ``bytes``
    objects; the dtype the caller put in is kept here, for as long as the tensor lives, and passed
    on to what ``relayout``, variables and reads make of it, so that ``to_numpy`` gives it back.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._table: dict[int, tuple[weakref.ref[Any], np.dtype[Any]]] = {}

    def of(self, value: Any) -> np.dtype[Any] | None:
        """The text dtype ``value`` holds (a NumPy text array's own, or a DTensor's record)."""
        if isinstance(value, np.ndarray):
            return value.dtype if value.dtype.kind in "US" else None
        entry = self._table.get(id(value))
        return entry[1] if entry is not None and entry[0]() is value else None

    def carry(self, result: Any, source: Any) -> Any:
        """``result``, recorded as holding ``source``'s text dtype where it has one."""
        dtype = self.of(source) if self._table or isinstance(source, np.ndarray) else None
        if dtype is None:
            return result
        key, table, lock = id(result), self._table, self._lock

        def forget(ref: weakref.ref[Any]) -> None:
            with lock:
                if table.get(key, (None,))[0] is ref:
                    del table[key]

        with lock:
            table[key] = (weakref.ref(result, forget), dtype)
        return result

    def restore(self, array: np.ndarray, tensor: Any) -> np.ndarray:
        """``array`` (``bytes`` objects read from ``tensor``) in the recorded text dtype (decoded for ``str``)."""
        dtype = self.of(tensor) if self._table else None
        if dtype is None:
            return array
        if dtype.kind == "S":
            return array.astype(dtype)
        return np.char.decode(array.astype(np.bytes_), "utf-8").astype(dtype)


#: TF (EIGEN_MAX_ALIGN_BYTES) wraps a NumPy buffer aligned to this many bytes without copying it.
_TF_ALIGN = 64


def _owned(value: Any) -> Any:
    """``value``, copied where TF would alias its memory: a C-contiguous NumPy array at a 64-byte
    aligned address (TF 2.21 wraps those zero-copy, so the caller's later writes would show through).
    Other arrays TF copies itself, and tensors are immutable: both pass unchanged."""
    if isinstance(value, np.ndarray) and value.flags.c_contiguous and value.ctypes.data % _TF_ALIGN == 0:
        return np.array(value, copy=True)
    return value


#: NumPy dtype kinds TF has no tensor of: dates, time spans, records (void; object arrays are the
#: front-end's to refuse). ml_dtypes' bfloat16/float8 are kind "V" too, and TF holds them.
_NOT_TF_KINDS = "MmV"
_ML_DTYPE_NAMES = ML_DTYPES  # float8_e8m0fnu among them: the front-end refuses it by name (supported_dtypes)


def _refuse_unheld(value: Any, what: str) -> None:
    """Refuse a NumPy array of a dtype TF cannot hold, before TF raises its raw ``ValueError``.

    Raises:
        UnsupportedLayoutError: ``feature=Limitation.DTYPE``, naming the dtype.
    """
    dtype = getattr(value, "dtype", None)
    if isinstance(dtype, np.dtype) and dtype.kind in _NOT_TF_KINDS and dtype.name not in _ML_DTYPE_NAMES:
        raise UnsupportedLayoutError(
            f"The tensorflow driver holds numbers, booleans and text; {what} has dtype {dtype}, which TF has "
            "no tensor of (dates, records). Convert it first (e.g. dates to int64 with "
            "x.astype(np.int64)).",
            driver="tensorflow",
            feature=Limitation.DTYPE,
            value=dtype,
        )


def _is_text(value: Any) -> bool:
    """A NumPy text/object array or a ``tf.string`` tensor (DTensor's collectives refuse strings)."""
    dtype = value.dtype
    return bool(
        getattr(dtype, "name", "") == "string" or np.dtype(getattr(dtype, "as_numpy_dtype", dtype)).kind in "USO"
    )


def _itemsize(value: Any) -> int:
    dtype = value.dtype
    return int(np.dtype(getattr(dtype, "as_numpy_dtype", dtype)).itemsize)


@functools.lru_cache(maxsize=4096)
def _slices(layout: Layout, shape: tuple[int, ...]) -> tuple[tuple[slice, ...], ...]:
    """``layout.device_slices(shape)``, cached (the geometry is pure and the pack path asks per call)."""
    return tuple(layout.device_slices(shape))


@functools.lru_cache(maxsize=4096)
def _blocks(layout: Layout) -> tuple[tuple[int, ...], ...]:
    """``layout.offset_to_shard()``, cached."""
    return tuple(layout.offset_to_shard())
