"""Conversions between layoutcore's values and ``tf.experimental.dtensor``'s.

* :func:`to_tensorflow_mesh` / :func:`from_tensorflow_mesh`: :class:`~layoutcore.Mesh` and
  ``dtensor.Mesh`` (full device names, global ids ``0..n-1`` in row-major order);
* :func:`to_tensorflow_layout` / :func:`from_tensorflow_layout`: :class:`~layoutcore.Layout` and
  ``dtensor.Layout``;
* the binary protobuf forms of the seed's ``Layout`` API, through TF's own protos:
  :func:`as_proto`, :func:`serialized_string`, :func:`mesh_proto`, :func:`from_str` and
  :func:`from_proto`.

Conversions are cached on the hashable layoutcore values, both ways. A native value that
layoutcore cannot represent (a single-device, ``parted`` or remote layout, TF's ``match``
token, several mesh axes on one tensor axis) raises :class:`~layoutcore.LayoutError` or
:class:`~layoutcore.UnsupportedLayoutError` without reaching any of the TF calls that crash
the interpreter on odd input (docs/framework-facts.md#tf-crash-traps).
"""

from __future__ import annotations

import contextlib
import functools
import math
import threading
from collections.abc import Callable, Iterator
from typing import Any, cast

import numpy as np

from layoutcore import Layout, LayoutcoreError, LayoutError, Mesh, get_driver
from layoutcore.driver import ALL_DTYPES, LRUCache

from ._runtime import canonical_names, configure_cpu_devices, full_name, global_device_names, tf_modules

__all__ = [
    "HELD_DTYPES",
    "MAX_NATIVE_MESHES",
    "NOT_IN_TF",
    "MeshLimitError",
    "as_proto",
    "from_proto",
    "from_str",
    "from_tensorflow_layout",
    "from_tensorflow_mesh",
    "mesh_proto",
    "refusing_unheld",
    "serialized_string",
    "to_tensorflow_layout",
    "to_tensorflow_mesh",
]

_lock = threading.Lock()

#: The most distinct ``dtensor.Mesh`` objects one process makes. TF gives every mesh it runs ops on
#: OS threads that live as long as the process (8 on the first op of an 8-device CPU mesh, 16 after
#: a relayout and a read: 1 024 meshes held 16 391 threads, measured on TF 2.21); a loop over ~4 000
#: distinct meshes ended in ``pthread_create() failed`` and an abort. Past this bound (about 4 000
#: threads) :func:`native_mesh` raises :class:`MeshLimitError` instead.
MAX_NATIVE_MESHES = 256
#: Bound of the (recomputable) layout conversion caches, in entries (least recently used out first).
_LAYOUT_CACHE_SIZE = 4096

# The TF identity of a mesh (axis names, shape, name, bound devices) -> dtensor.Mesh. Meshes that
# TF cannot tell apart (an abstract mesh and the concrete mesh it binds to) share one native mesh.
# Never evicted: TF keeps each native mesh's threads anyway.
_native_meshes: dict[tuple[tuple[str, ...], tuple[int, ...], str, tuple[str, ...]], Any] = {}
# (layout, bound devices) -> dtensor.Layout.
_native_layouts: LRUCache[tuple[Layout, tuple[str, ...]], Any] = LRUCache(_LAYOUT_CACHE_SIZE)
# dtensor.Layout.to_string() -> concrete layoutcore Layout. TF's own __hash__ serialises a
# proto (~12 us); its string is built in C++ (~2 us), so the string is the key.
_from_native: LRUCache[str, Layout] = LRUCache(_LAYOUT_CACHE_SIZE)


class MeshLimitError(LayoutcoreError, RuntimeError):
    """More distinct meshes than :data:`MAX_NATIVE_MESHES` in one process (TF keeps threads per mesh)."""


def native_mesh(mesh: Mesh, devices: tuple[str, ...], local: frozenset[str]) -> Any:
    """The ``dtensor.Mesh`` of ``mesh`` bound to ``devices`` (row-major); ``local``: this client's.

    Raises:
        LayoutError: no device of the mesh is in this client (TF crashes on such "remote" meshes).
        MeshLimitError: this would be native mesh number :data:`MAX_NATIVE_MESHES` + 1.
    """
    key = (mesh.axis_names, mesh.shape, mesh.name, devices)
    try:
        return _native_meshes[key]
    except KeyError:
        pass
    _, dtensor = tf_modules()
    positions = [p for p, d in enumerate(devices) if d in local]
    if not positions:
        # A mesh with no device here is a "remote" DTensor mesh; TF segfaults on some uses.
        raise LayoutError(
            f"{mesh!r} has no device in this client ({sorted(local)}); TF cannot use it here.", value=mesh
        )
    with _lock:
        if key not in _native_meshes and len(_native_meshes) >= MAX_NATIVE_MESHES:
            raise MeshLimitError(
                f"{mesh!r} would be the {MAX_NATIVE_MESHES + 1}th distinct mesh of this process. TensorFlow keeps a "
                "pool of OS threads for every DTensor mesh it has used until the process ends (8 to 16 per mesh on an "
                "8-device host), so layoutcore_tensorflow stops at MAX_NATIVE_MESHES="
                f"{MAX_NATIVE_MESHES}. Reuse meshes: meshes equal in axis names, shape, name and devices share one.",
                value=mesh,
            )
        native = dtensor.Mesh(
            dim_names=list(mesh.axis_names),
            global_device_ids=np.arange(mesh.size).reshape(mesh.shape),
            local_device_ids=positions,
            local_devices=[full_name(devices[p]) for p in positions],
            mesh_name=mesh.name,
        )
        return _native_meshes.setdefault(key, native)


def native_mesh_count() -> int:
    """How many distinct ``dtensor.Mesh`` objects this process has made (at most :data:`MAX_NATIVE_MESHES`)."""
    return len(_native_meshes)


def native_layout(layout: Layout, devices: tuple[str, ...], local: frozenset[str]) -> Any:
    """The ``dtensor.Layout`` of ``layout`` (mesh bound to ``devices``), cached."""
    key = (layout, devices)
    try:
        return _native_layouts[key]
    except KeyError:
        pass
    _, dtensor = tf_modules()
    mesh = layout.require_mesh()
    native = dtensor.Layout(layout.sharding_specs, native_mesh(mesh, devices, local))
    concrete = layout if mesh.devices == devices else layout.with_mesh(mesh.with_devices(devices))
    _from_native.setdefault(native.to_string(), concrete)
    return _native_layouts.setdefault(key, native)


def _bind(mesh: Mesh) -> tuple[tuple[str, ...], frozenset[str]]:
    driver: Any = get_driver("tensorflow")  # the TF driver (local_devices is its own)
    return driver.bind_mesh(mesh), driver.local_devices


def to_tensorflow_mesh(mesh: Mesh) -> Any:
    """The ``tf.experimental.dtensor.Mesh`` of ``mesh``.

    An abstract mesh is bound to the tensorflow driver's first ``mesh.size`` devices. Global
    device ids run ``0..size-1`` in row-major order and the devices are listed by full name
    (``/job:localhost/replica:0/task:0/device:CPU:0``), so ``to_string()`` is the same text
    as ``mesh.to_string()`` for a mesh of this process's devices.

    Raises:
        LayoutError: ``mesh`` is not a Mesh, or names devices TF does not have.
    """
    if not isinstance(mesh, Mesh):
        raise LayoutError(f"Expected a layoutcore Mesh. Received: {mesh!r}", value=mesh)
    devices, local = _bind(mesh)
    return native_mesh(mesh, devices, local)


def to_tensorflow_layout(layout: Layout) -> Any:
    """The ``tf.experimental.dtensor.Layout`` of ``layout`` (its mesh converted as by :func:`to_tensorflow_mesh`).

    Raises:
        LayoutError: not a Layout, or a layout without a mesh.
        UnsupportedLayoutError: an entry spans several mesh axes (TF cannot express it).
    """
    if not isinstance(layout, Layout):
        raise LayoutError(f"Expected a layoutcore Layout. Received: {layout!r}", value=layout)
    if layout.mesh is None:
        raise LayoutError(f"{layout!r} has no mesh; bind one with layout.with_mesh(mesh).", value=layout)
    layout.sharding_specs  # noqa: B018 - raises UnsupportedLayoutError for a multi-axis entry
    devices, local = _bind(layout.mesh)
    return native_layout(layout, devices, local)


def _mesh_devices(native: Any, text: str) -> list[str] | None:
    """The row-major device list of a native mesh, or ``None`` where only some are known here."""
    size = int(native.size)
    ids = [int(i) for i in np.ravel(native.global_device_ids())]
    if ids != list(range(size)):
        raise LayoutError(
            f"Global device ids must be 0..{size - 1} in row-major order. Received {ids} in {text!r}", value=text
        )
    local_ids = [int(i) for i in native.local_device_ids()]
    local_devices = list(native.local_devices())
    if len(local_ids) != len(local_devices):  # dtensor.Mesh's Python constructor does not compare them
        raise LayoutError(
            f"{len(local_ids)} local device ids for {len(local_devices)} local devices in {text!r}", value=text
        )
    if sorted(local_ids) == ids:
        # TF places the device with global id g at mesh position g.
        by_id = dict(zip(local_ids, local_devices, strict=True))
        return [by_id[g] for g in range(size)]
    if list(native.global_devices()):
        return list(native.global_devices())
    cluster, _ = global_device_names()
    local = canonical_names(local_devices)
    if len(cluster) == size and all(cluster[g] == d for g, d in zip(local_ids, local, strict=True)):
        return list(cluster)  # a multi-client mesh over the whole cluster, as create_distributed_mesh makes
    return None


def from_tensorflow_mesh(native: Any) -> Mesh:
    """The layoutcore :class:`~layoutcore.Mesh` of a ``dtensor.Mesh``.

    A multi-client mesh over the whole cluster gives every client's devices; a mesh that lists
    only some of its devices and no global device list gives an abstract mesh.

    Raises:
        LayoutError: not a ``dtensor.Mesh``; a single-device mesh (no axes); a remote mesh
            (no device in this process, which TF crashes on); axis names layoutcore rejects
            (``,``, ``|``, ``=``, whitespace, ``unsharded``, ``match``: TF's own ``from_string``
            crashes on some of them); ids that are not ``0..n-1`` row-major.
    """
    configure_cpu_devices()
    _, dtensor = tf_modules()
    if not isinstance(native, dtensor.Mesh):
        raise LayoutError(f"Expected a tf.experimental.dtensor.Mesh. Received: {native!r}", value=native)
    text = native.to_string()
    if native.is_single_device():
        raise LayoutError(
            f"A single-device DTensor mesh has no axes and is not a layoutcore Mesh: {text!r}", value=native
        )
    if native.is_remote():
        raise LayoutError(
            f"A remote DTensor mesh (no device in this process) cannot be used here: {text!r}. Convert it in a "
            "process that holds its devices.",
            value=native,
        )
    names = list(native.dim_names)
    shape = [int(s) for s in native.shape()]
    mesh = Mesh(shape, names, name=native.name)  # validates the names before anything parses them
    devices = _mesh_devices(native, text)
    return mesh if devices is None else mesh.with_devices(devices)


def from_tensorflow_layout(native: Any) -> Layout:
    """The layoutcore :class:`~layoutcore.Layout` of a ``dtensor.Layout``, on a concrete mesh.

    Raises:
        LayoutError: not a ``dtensor.Layout``; a single-device (``maximal``) or ``parted``
            layout; TF's ``match`` token; any error of :func:`from_tensorflow_mesh`.
    """
    configure_cpu_devices()
    _, dtensor = tf_modules()
    if not isinstance(native, dtensor.Layout):
        raise LayoutError(f"Expected a tf.experimental.dtensor.Layout. Received: {native!r}", value=native)
    text = native.to_string()
    try:
        return _from_native[text]
    except KeyError:
        pass
    if native.is_single_device() or native.type.name != "STATIC":
        raise LayoutError(
            f"Only static sharded layouts are layoutcore layouts; {native.type.name.lower()} layout {text!r} is not.",
            value=native,
        )
    specs = list(native.sharding_specs)
    if dtensor.MATCH in specs:
        raise LayoutError(f"TF's {dtensor.MATCH!r} placeholder is not a layout. Received: {text!r}", value=native)
    layout = Layout(specs, from_tensorflow_mesh(native.mesh))
    return _from_native.setdefault(text, layout)


# -- the seed's binary forms -------------------------------------------------------------------------
def as_proto(value: Layout | Mesh) -> Any:
    """TF's ``LayoutProto`` of a Layout or ``MeshProto`` of a Mesh (the seed's ``Layout.as_proto()``).

    A pure value conversion, as TF's own: a concrete mesh is written from its fields, whatever
    its devices (a TPU mesh on a CPU host gives its TPU device names). The devices of this
    client are listed as local ones (all of them in a single-client process); a mesh with no
    device here lists every device, as TF's ``Mesh.from_string`` of its string does. An abstract
    mesh is first bound to the tensorflow driver's devices, as by :func:`to_tensorflow_mesh`.

    Raises:
        LayoutError: not a Layout or Mesh, a layout without a mesh, or an abstract mesh larger
            than this process's device count.
        UnsupportedLayoutError: an entry spans several mesh axes (TF cannot express it).
    """
    tf_modules()
    from tensorflow.dtensor.proto import layout_pb2

    if isinstance(value, Mesh):
        return _mesh_proto(layout_pb2, value)
    if not isinstance(value, Layout):
        raise LayoutError(f"Expected a layoutcore Layout or Mesh. Received: {value!r}", value=value)
    if value.mesh is None:
        raise LayoutError(f"{value!r} has no mesh; bind one with layout.with_mesh(mesh).", value=value)
    specs = value.sharding_specs  # raises UnsupportedLayoutError for a multi-axis entry
    return layout_pb2.LayoutProto(
        sharding_specs=[layout_pb2.ShardingSpec(sharding_spec=s) for s in specs],
        mesh_config=_mesh_proto(layout_pb2, value.mesh),
        type=layout_pb2.LayoutProto.STATIC,
    )


def _mesh_proto(layout_pb2: Any, mesh: Mesh) -> Any:
    if mesh.devices is None:
        devices, local = _bind(mesh)
    else:
        devices = mesh.devices
        tf_driver: Any = get_driver("tensorflow")  # local_devices is the TF driver's own
        local = tf_driver.local_devices
    positions = [p for p, d in enumerate(devices) if d in local] or range(mesh.size)
    return layout_pb2.MeshProto(
        name=mesh.name,
        mesh_dimensions=[
            layout_pb2.MeshDimensionProto(name=a, size=s) for a, s in zip(mesh.axis_names, mesh.shape, strict=True)
        ],
        global_device_ids=range(mesh.size),
        local_device_ids=positions,
        local_devices=[full_name(devices[p]) for p in positions],
    )


def mesh_proto(layout: Layout) -> Any:
    """The ``MeshProto`` of ``layout``'s mesh (the seed's ``Layout.mesh_proto()``); pure, as :func:`as_proto`."""
    if not isinstance(layout, Layout):
        raise LayoutError(f"Expected a layoutcore Layout. Received: {layout!r}", value=layout)
    return as_proto(layout).mesh_config


def serialized_string(value: Layout | Mesh) -> bytes:
    """The serialized protobuf of ``value`` (the seed's ``Layout.serialized_string()``)."""
    return cast("bytes", as_proto(value).SerializeToString())


def from_proto(proto: Any) -> Layout | Mesh:
    """The Layout of a ``LayoutProto`` or the Mesh of a ``MeshProto``, parsed by TF.

    Raises:
        LayoutError: not one of those protos, or a value :func:`from_tensorflow_layout` refuses.
    """
    configure_cpu_devices()
    _, dtensor = tf_modules()
    from tensorflow.dtensor.proto import layout_pb2

    if isinstance(proto, layout_pb2.MeshProto):
        _check_mesh_proto(proto)
        with _typed(proto, "The MeshProto is no valid mesh"):
            return from_tensorflow_mesh(dtensor.Mesh.from_proto(proto))
    if isinstance(proto, layout_pb2.LayoutProto):
        _check_mesh_proto(proto.mesh_config)
        # TF checks the specs (e.g. b"un7harded": no axis of that name) and raises ValueError.
        with _typed(proto, "The LayoutProto is no valid layout"):
            return from_tensorflow_layout(dtensor.Layout.from_proto(proto))
    raise LayoutError(f"Expected a dtensor LayoutProto or MeshProto. Received: {type(proto).__name__}", value=proto)


@contextlib.contextmanager
def _typed(proto: Any, what: str) -> Iterator[None]:
    """Re-raise what TF (or a check downstream) raises on a proto as a LayoutError: bad input is answered by
    layoutcore's own error whatever layer noticed it; layoutcore's errors pass unchanged."""
    try:
        yield
    except LayoutcoreError:
        raise
    except Exception as exc:  # ValueError, TF's OpErrors, ...: never a framework error for bad input
        raise LayoutError(f"{what}: {type(exc).__name__}: {exc}", value=proto) from None


def from_str(data: bytes) -> Layout:
    """The Layout of a serialized ``LayoutProto`` (the seed's ``Layout.from_str(layout_str: bytes)``).

    Raises:
        LayoutError: ``data`` is not bytes or not a valid serialized layout.
    """
    if not isinstance(data, (bytes, bytearray)):
        raise LayoutError(f"from_str expects the bytes of a serialized LayoutProto. Received: {data!r}", value=data)
    tf_modules()
    from google.protobuf.message import DecodeError
    from tensorflow.dtensor.proto import layout_pb2

    proto = layout_pb2.LayoutProto()
    try:
        proto.ParseFromString(bytes(data))
    except DecodeError as exc:
        raise LayoutError(f"Not a serialized LayoutProto ({exc}): {bytes(data)[:60]!r}", value=data) from None
    if not proto.HasField("mesh_config"):
        raise LayoutError(f"The serialized LayoutProto has no mesh: {bytes(data)[:60]!r}", value=data)
    layout = from_proto(proto)
    assert isinstance(layout, Layout)
    return layout


def _check_mesh_proto(mesh: Any) -> None:
    """Refuse a ``MeshProto`` whose fields disagree, before TF reads it.

    TF builds its C++ mesh from the names and crashes on some (docs/framework-facts.md#tf-mesh-strings),
    and it accepts protos whose id and device lists disagree (3 local ids for 4 local devices, a local
    id out of range or repeated, 1 global device for 4 positions), which would give a wrong mesh. The
    lists are compared by length before any is walked, so a huge proto costs nothing.

    Raises:
        LayoutError: names or sizes layoutcore rejects; global ids other than ``0..size-1``; local ids
            out of range, repeated, or not one per local device; a global device list of another
            length than the mesh; ``use_xla_spmd`` or ``single_device`` (no layoutcore form).
    """
    try:
        shape = Mesh(
            [max(int(d.size), 1) for d in mesh.mesh_dimensions] or [1], [d.name for d in mesh.mesh_dimensions] or ["d"]
        ).shape
    except LayoutError as exc:
        raise LayoutError(f"The mesh proto holds a mesh layoutcore cannot represent: {exc}", value=mesh) from None
    size = math.prod(shape)
    problem = _mesh_proto_problem(mesh, size)
    if problem:
        raise LayoutError(f"The mesh proto is inconsistent: {problem}. Received: {_short(mesh)}", value=mesh)


def _mesh_proto_problem(mesh: Any, size: int) -> str | None:
    """What disagrees in ``mesh``'s lists (``size`` devices), or None."""
    if mesh.single_device or mesh.use_xla_spmd:
        return "a single-device mesh or use_xla_spmd has no layoutcore form"
    global_ids, local_ids = mesh.global_device_ids, mesh.local_device_ids
    if len(global_ids) != size or list(global_ids) != list(range(size)):
        return f"{len(global_ids)} global device ids for {size} devices; they must be 0..{size - 1} in row-major order"
    if len(local_ids) != len(mesh.local_devices):
        return f"{len(local_ids)} local device ids for {len(mesh.local_devices)} local devices"
    if len(set(local_ids)) != len(local_ids) or not all(0 <= i < size for i in local_ids):
        return f"local device ids must be distinct global ids in 0..{size - 1}; received {list(local_ids)[:20]}"
    if len(mesh.global_devices) not in (0, size):
        return f"{len(mesh.global_devices)} global devices for {size} devices"
    return None


def _short(proto: Any) -> str:
    text = " ".join(str(proto).split())
    return text if len(text) <= 200 else text[:200] + "..."


#: The dtypes of ``ALL_DTYPES`` TF 2.21 has no tensor of (no ``tf.dtypes`` entry; ``tf.as_dtype``
#: refuses ml_dtypes' type): MX block scales.
NOT_IN_TF = frozenset({"float8_e8m0fnu"})
#: What the TF driver holds (``supported_dtypes``).
HELD_DTYPES = frozenset(ALL_DTYPES) - NOT_IN_TF


def refusing_unheld(fn: Callable[..., Any], refusal: Callable[[str], Exception]) -> Callable[..., Any]:
    """``fn``, refusing a NumPy result of a dtype TF has no tensor of (``float8_e8m0fnu``) by name, before
    ``tf.function`` fails to convert it with a raw ``TypeError``."""

    @functools.wraps(fn)
    def call(*args: Any, **kwargs: Any) -> Any:
        out = fn(*args, **kwargs)
        if isinstance(out, np.ndarray) and out.dtype.name in NOT_IN_TF:
            raise refusal(out.dtype.name)
        return out

    return call
