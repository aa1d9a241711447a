"""The TensorFlow DTensor driver."""

from __future__ import annotations

import functools
import threading
import weakref
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from layoutcore import Capability, Driver, Layout, LayoutError, Mesh

from ._convert import from_tensorflow_layout, native_layout
from ._runtime import configure_cpu_devices, global_device_names, tf_modules

__all__ = ["TensorFlowDriver"]

#: Up to this many bytes ``distribute_tensor`` packs the distinct blocks of the input (0.4 ms for
#: 1 KiB to 1 MiB on a 4x2 mesh, against 2-3 ms for DTensor's ``relayout(copy_to_mesh(x))``); above
#: it, it takes DTensor's own path, whose time varied least between runs at 16-64 MiB
#: (benchmarks/bench_tensorflow.py; measurements on a shared 2-core machine).
PACK_MAX_BYTES = 4 << 20


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
    """

    name = "tensorflow"
    capabilities = frozenset({Capability.RELAYOUT_ACROSS_MESHES})
    requires = ("tensorflow",)
    install_hint = "pip install 'layoutcore[tensorflow]'"
    conformance_adapter = "layoutcore_tensorflow._conformance:TensorFlowAdapter"

    def __init__(self) -> None:
        super().__init__()
        configure_cpu_devices()
        self._tf, self._dtensor = tf_modules()
        devices, local = global_device_names()
        self._devices: tuple[str, ...] = devices
        #: This client's devices (all of them in a single-client process).
        self.local_devices: frozenset[str] = local
        self._multi_client = len(local) != len(devices)
        self._positions: dict[tuple[str, ...], tuple[int, ...]] = {}
        self._replicated: dict[tuple[Mesh, int, tuple[str, ...]], Any] = {}
        self._wrapped: weakref.WeakKeyDictionary[Any, Any] = weakref.WeakKeyDictionary()
        self._wrapped_strong: dict[Any, Any] = {}
        self._fn_lock = threading.Lock()

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
            positions = tuple(p for p, d in enumerate(devices) if d in self.local_devices)
            self._positions[devices] = positions
            return positions

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
        key = (mesh, rank, devices)
        try:
            return self._replicated[key]
        except KeyError:
            native = self._native(Layout.replicated(mesh, rank), devices)
            self._replicated[key] = native
            return native

    # -- tensors ------------------------------------------------------------------------------
    def is_distributed(self, value: Any) -> bool:
        tf = self._tf
        return isinstance(value, (tf.Tensor, tf.Variable)) and bool(self._dtensor.is_dtensor(value))

    def _tensor(self, value: Any) -> Any:
        # A DVariable is a DTensor for fetch_layout but not for unpack/relayout: read it.
        return value.read_value() if isinstance(value, self._tf.Variable) else value

    def prepare_input(self, value: Any) -> Any:
        if isinstance(value, self._tf.Variable):
            return value.read_value()
        return super().prepare_input(value)

    def native_distribute(self, value: Any, layout: Layout, devices: tuple[str, ...]) -> Any:
        dtensor = self._dtensor
        native = self._native(layout, devices)
        if layout.is_fully_replicated():
            return dtensor.copy_to_mesh(value, native)
        shape = self.shape_of(value)
        if int(np.prod(shape, dtype=np.int64)) * _itemsize(value) > PACK_MAX_BYTES:
            replicated = self._replicated_native(layout.mesh, layout.rank, devices)  # type: ignore[arg-type]
            return dtensor.relayout(dtensor.copy_to_mesh(value, replicated), native)
        # Small values: a pack of the distinct blocks, each sliced from the input once.
        slices = _slices(layout, shape)
        blocks = layout.offset_to_shard()
        made: dict[tuple[int, ...], Any] = {}
        components = []
        for position in self.local_positions(layout.mesh, devices):  # type: ignore[arg-type]  # this client's
            block = blocks[position]
            if block not in made:
                made[block] = value[slices[position]]
            components.append(made[block])
        return dtensor.pack(components, native)

    def native_unpack(self, tensor: Any) -> list[Any]:
        return list(self._dtensor.unpack(self._tensor(tensor)))

    def native_pack(
        self, components: list[Any], layout: Layout, devices: tuple[str, ...], global_shape: tuple[int, ...]
    ) -> Any:
        return self._dtensor.pack(components, self._native(layout, devices))

    def native_relayout(self, tensor: Any, layout: Layout, devices: tuple[str, ...]) -> Any:
        dtensor = self._dtensor
        tensor = self._tensor(tensor)
        native = self._native(layout, devices)
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
            return self.native_distribute(np.zeros(shape, tensor.dtype.as_numpy_dtype), layout, devices)
        if source.mesh.to_string() == native.mesh.to_string():
            return dtensor.relayout(tensor, native)
        # Another mesh. DTensor's relayout works within one mesh, and its cross-mesh copy_to_mesh
        # (replicated values only) can deadlock (a size-1 sharded source, measured on TF 2.21), so
        # the value goes through host memory: read once, then placed as distribute_tensor does.
        return self.native_distribute(self.native_to_numpy(tensor), layout, devices)

    def native_fetch_layout(self, tensor: Any) -> Layout:
        return from_tensorflow_layout(self._dtensor.fetch_layout(tensor))

    def native_to_numpy(self, tensor: Any) -> np.ndarray:
        dtensor = self._dtensor
        tensor = self._tensor(tensor)
        native = dtensor.fetch_layout(tensor)
        if native.is_fully_replicated():
            return np.array(tensor.numpy(), copy=True)
        layout = from_tensorflow_layout(native)
        mesh: Mesh = layout.mesh  # type: ignore[assignment]
        devices: tuple[str, ...] = mesh.devices  # type: ignore[assignment]
        positions = self.local_positions(mesh, devices)
        blocks = layout.offset_to_shard()
        first: dict[tuple[int, ...], int] = {}
        for index, position in enumerate(positions):
            first.setdefault(blocks[position], index)
        if len(first) < len(set(blocks)):
            # Some blocks live on other clients only: gather through DTensor, read the local copy.
            replicated = self._replicated_native(mesh, layout.rank, devices)
            return np.array(dtensor.relayout(tensor, replicated).numpy(), copy=True)
        # TF's .numpy() refuses sharded DTensors; assemble, writing every byte once.
        components = dtensor.unpack(tensor)
        shape = self.shape_of(tensor)
        slices = _slices(layout, shape)
        out = np.empty(shape, dtype=tensor.dtype.as_numpy_dtype)
        for index in first.values():
            out[slices[positions[index]]] = components[index].numpy()
        return out

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
        function = self._as_function(fn)
        output = function.get_concrete_function(*args, **kwargs).structured_outputs
        if not isinstance(output, self._tf.Tensor):
            raise LayoutError(
                f"call_with_layout needs fn to return one tensor; {fn!r} returns {type(output).__name__}.", value=fn
            )
        if output.shape.rank is not None:
            shape = tuple(0 if s is None else int(s) for s in output.shape)
            self.check_layout(layout, shape)  # a rank mismatch or an uneven axis: layoutcore's error, not TF's
        native = self._native(layout, devices)
        return self._dtensor.call_with_layout(function, native, *args, **kwargs)

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
                    return tf.function(fn, autograph=False)
            if found is None:
                found = tf.function(fn, autograph=False)
                cache[fn] = found
            return found

    # -- variables: dtensor.DVariable ---------------------------------------------------------
    def variable_create(self, value: Any, layout: Layout) -> Any:
        variable = self._dtensor.DVariable(value)
        variable._layoutcore_layout = layout  # what fetch_layout of a read answers
        return variable

    def variable_read(self, handle: Any) -> Any:
        return handle.read_value()

    def variable_assign(self, handle: Any, value: Any) -> None:
        handle.assign(value)


def _itemsize(value: Any) -> int:
    dtype = value.dtype
    return int(np.dtype(getattr(dtype, "as_numpy_dtype", dtype)).itemsize)


@functools.lru_cache(maxsize=4096)
def _slices_cached(layout: Layout, shape: tuple[int, ...]) -> tuple[tuple[slice, ...], ...]:
    return tuple(layout.device_slices(shape))


def _slices(layout: Layout, shape: tuple[int, ...]) -> tuple[tuple[slice, ...], ...]:
    return _slices_cached(layout, shape)
