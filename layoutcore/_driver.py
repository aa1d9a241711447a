"""The driver plug-in contract.

A driver connects layoutcore's values to one framework. Subclass :class:`Driver`, implement
the **required** ``native_*`` hooks (each maps to one framework call), optionally override the
**optional** hooks, declare :attr:`Driver.capabilities`, and register the class under the
``layoutcore.drivers`` entry-point group::

    [project.entry-points."layoutcore.drivers"]
    mydriver = "my_package:MyDriver"

The **inherited** public methods (``distribute_tensor``, ``pack``, ...) are what users reach
through ``layoutcore.distribute_tensor(...)``. They validate every argument, bind abstract
meshes to devices, refuse layouts outside the declared capabilities with
:class:`UnsupportedLayoutError`, check packed components (count, shapes, dtypes, replicas),
and only then call the hooks with arguments that are known good. So a hook never has to
re-validate, and every driver reports bad input the same way.

Hooks receive ``devices``: the canonical names of the devices the layout's mesh is bound to,
in row-major mesh order (``devices[p]`` holds ``layout.device_slices(shape)[p]``).

The framework is imported lazily, inside the hooks or ``__init__``; the driver module itself
must import only layoutcore's public API, so that ``layoutcore drivers`` can list it without
the framework installed. Declare the importable modules it needs in :attr:`Driver.requires`
and the command that installs them in :attr:`Driver.install_hint`.
"""

from __future__ import annotations

import abc
import contextlib
import os
import threading
import weakref
from collections.abc import Callable, Sequence
from typing import Any, ClassVar, TypeVar

import numpy as np

from ._capabilities import Capability, required_capabilities
from ._errors import LayoutcoreError, LayoutError, NotDistributedError, UnsupportedLayoutError
from ._layout import Layout
from ._mesh import Mesh

__all__ = ["CPU_DEVICES_ENV", "ConfigurationError", "Driver", "VariableHandle", "cpu_device_count"]

#: Environment variable: how many CPU devices each driver exposes in one process.
CPU_DEVICES_ENV = "LAYOUTCORE_CPU_DEVICES"
DEFAULT_CPU_DEVICES = 8


_T = TypeVar("_T")


class ConfigurationError(LayoutcoreError, ValueError):
    """An environment variable or setting holds a bad value."""


def cpu_device_count() -> int:
    """``LAYOUTCORE_CPU_DEVICES`` (default 8): CPU devices a driver exposes in one process.

    Raises:
        ConfigurationError: the variable is not a positive integer.
    """
    raw = os.environ.get(CPU_DEVICES_ENV, "").strip()
    if not raw:
        return DEFAULT_CPU_DEVICES
    try:
        count = int(raw)
    except ValueError:
        count = 0
    if count <= 0:
        raise ConfigurationError(f"{CPU_DEVICES_ENV} must be a positive integer. Received: {raw!r}", value=raw)
    return count


class VariableHandle:
    """The default variable state: a box holding the current native value."""

    __slots__ = ("value",)

    def __init__(self, value: Any) -> None:
        self.value = value


class Driver(abc.ABC):
    """Base class of every driver. See the module docstring for the required/optional split."""

    #: Registered name, e.g. ``"jax"``.
    name: ClassVar[str] = ""
    #: What the driver can express beyond even one-axis layouts (see :class:`Capability`).
    capabilities: ClassVar[frozenset[Capability]] = frozenset()
    #: Top-level modules that must be importable for the driver to work.
    requires: ClassVar[tuple[str, ...]] = ()
    #: The command that installs what :attr:`requires` names.
    install_hint: ClassVar[str] = ""
    #: ``"module:Class"`` of the conformance suite's raw-data adapter for this driver
    #: (a ``layoutcore_conformance.ConformanceAdapter`` subclass using only framework calls).
    conformance_adapter: ClassVar[str] = ""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._bound: dict[Mesh, tuple[str, ...]] = {}
        self._origin: dict[Mesh, Mesh] = {}
        self._made_with: dict[int, tuple[weakref.ref[Any], Layout]] = {}

    # ==========================================================================================
    # Required hooks
    # ==========================================================================================
    @abc.abstractmethod
    def list_devices(self, device_type: str | None = None) -> list[str]:
        """Canonical names of the devices this driver can place data on (``"CPU:0"`` ...).

        Args:
            device_type: only devices of this type (case-insensitive), e.g. ``"CPU"``.
        """

    @abc.abstractmethod
    def is_distributed(self, value: Any) -> bool:
        """Whether ``value`` is this driver's native distributed tensor."""

    @abc.abstractmethod
    def native_distribute(self, value: Any, layout: Layout, devices: tuple[str, ...]) -> Any:
        """Place a global value by ``layout``. ``value`` is a NumPy array or framework tensor
        (not a distributed one) whose shape fits ``layout``.

        JAX: ``jax.device_put(x, NamedSharding)``; TF: ``dtensor.relayout(copy_to_mesh(x))``;
        torch: ``distribute_tensor``.
        """

    @abc.abstractmethod
    def native_unpack(self, tensor: Any) -> list[Any]:
        """The local per-device components, in row-major mesh order.

        JAX: ``addressable_shards``; TF: ``dtensor.unpack``; torch: ``to_local``.
        """

    @abc.abstractmethod
    def native_pack(
        self, components: list[Any], layout: Layout, devices: tuple[str, ...], global_shape: tuple[int, ...]
    ) -> Any:
        """Build a distributed tensor from components already checked against ``layout``
        (count, shapes, dtypes and replica equality).

        JAX: ``make_array_from_single_device_arrays``; TF: ``dtensor.pack``; torch:
        ``DTensor.from_local(shape=, stride=)``.
        """

    @abc.abstractmethod
    def native_relayout(self, tensor: Any, layout: Layout, devices: tuple[str, ...]) -> Any:
        """The same global value with another (validated) layout.

        JAX: ``device_put(a, sharding)``; TF: ``dtensor.relayout``; torch: ``redistribute``.
        """

    @abc.abstractmethod
    def native_fetch_layout(self, tensor: Any) -> Layout:
        """The layout of ``tensor``, on a concrete mesh (the base maps it back to the mesh the
        user gave, which may have been abstract)."""

    @abc.abstractmethod
    def native_to_numpy(self, tensor: Any) -> np.ndarray:
        """The global value as a new NumPy array, for any layout."""

    # ==========================================================================================
    # Optional hooks (defaults shown)
    # ==========================================================================================
    def native_call_with_layout(
        self,
        fn: Callable[..., Any],
        layout: Layout,
        devices: tuple[str, ...],
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
    ) -> Any:
        """Call ``fn`` so that its result is laid out by ``layout``.

        The default materialises ``fn(*args, **kwargs)`` and distributes it; override it where
        the framework can create each shard in place (``jax.jit(out_shardings=)``,
        ``dtensor.call_with_layout``). The result's shape is only known once ``fn`` is traced or
        run, so an override must call :meth:`check_layout` with that shape *before* creating the
        shards (the inherited ``distribute_tensor`` does it for the default path); the inherited
        ``call_with_layout`` verifies the returned tensor's layout afterwards.
        """
        return self.distribute_tensor(fn(*args, **kwargs), layout)

    def shape_of(self, value: Any) -> tuple[int, ...]:
        """Global shape of a native value (distributed or not)."""
        return tuple(int(s) for s in value.shape)

    def component_to_numpy(self, component: Any) -> np.ndarray:
        """A component as a NumPy array, for pack's replica check (default ``np.asarray``)."""
        return np.asarray(component)

    def prepare_input(self, value: Any) -> Any:
        """Turn a user's global value into something :meth:`native_distribute` takes.

        The default leaves arrays and tensors (anything with ``shape`` and ``dtype``) alone
        and converts the rest (nested lists, scalars) with ``np.asarray``.
        """
        if hasattr(value, "shape") and hasattr(value, "dtype"):
            return value
        return np.asarray(value)

    def local_positions(self, mesh: Mesh, devices: tuple[str, ...]) -> Sequence[int]:
        """Mesh positions whose devices belong to this process (default: all of them).

        Multi-process drivers override it; ``unpack`` and ``pack`` then hold these only.
        """
        return range(mesh.size)

    def variable_create(self, value: Any, layout: Layout) -> Any:
        """Create a variable's state from a distributed value (default: a box)."""
        return VariableHandle(value)

    def variable_read(self, handle: Any) -> Any:
        """The variable's current distributed value."""
        return handle.value

    def variable_assign(self, handle: Any, value: Any) -> None:
        """Store ``value`` (already distributed with the variable's layout)."""
        handle.value = value

    # ==========================================================================================
    # Inherited public API (validates, then calls the hooks)
    # ==========================================================================================
    def bind_mesh(self, mesh: Mesh) -> tuple[str, ...]:
        """The devices ``mesh`` runs on here, row-major.

        An abstract mesh takes this driver's first ``mesh.size`` devices.

        Raises:
            LayoutError: the mesh names a device this driver does not have, or needs more
                devices than it has (the message says how to get more).
        """
        try:
            return self._bound[mesh]
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
        with self._lock:
            self._bound[mesh] = devices
            self._origin.setdefault(mesh.with_devices(devices), mesh)
        return devices

    def remember_layout(self, tensor: _T, layout: Layout) -> _T:
        """Record that ``tensor`` was made with ``layout``; returns ``tensor``.

        A native sharding cannot tell an abstract mesh from the concrete mesh it was bound to,
        nor two meshes that differ only by name; so hooks that create tensors should return
        ``self.remember_layout(result, layout)``, and :meth:`fetch_layout` then gives back the
        user's exact Layout. The record lives as long as the tensor (objects that cannot be
        weakly referenced are not recorded and fall back to :meth:`native_fetch_layout`).
        """
        key = id(tensor)
        made_with = self._made_with

        def forget(_: Any, key: int = key) -> None:
            made_with.pop(key, None)

        with contextlib.suppress(TypeError):  # not weakly referenceable: fetch_layout reads it natively
            made_with[key] = (weakref.ref(tensor, forget), layout)
        return tensor

    def recorded_layout(self, tensor: Any) -> Layout | None:
        """The layout recorded by :meth:`remember_layout` for this very object, if any."""
        entry = self._made_with.get(id(tensor))
        if entry is None or entry[0]() is not tensor:
            return None
        return entry[1]

    def user_mesh(self, concrete: Mesh) -> Mesh:
        """The mesh the user first bound to ``concrete``'s devices (maybe abstract), else ``concrete``."""
        return self._origin.get(concrete, concrete)

    def check_layout(self, layout: Any, global_shape: Sequence[int]) -> Layout:
        """Validate ``layout`` for a tensor of ``global_shape`` on this driver.

        Raises:
            LayoutError: not a Layout, no mesh, or the rank differs from the tensor's.
            UnsupportedLayoutError: the layout needs a capability this driver lacks.
        """
        if not isinstance(layout, Layout):
            raise LayoutError(f"Expected a layoutcore Layout. Received: {layout!r}", value=layout)
        if layout.mesh is None:
            raise LayoutError(f"{layout!r} has no mesh; bind one with layout.with_mesh(mesh).", value=layout)
        for capability, why in required_capabilities(layout, global_shape).items():
            if capability not in self.capabilities:
                raise UnsupportedLayoutError(
                    f"The {self.name} driver cannot lay out shape {tuple(global_shape)} by {layout}: {why} "
                    f"(capability {capability.value!r} not supported by {self.name}).",
                    driver=self.name,
                    feature=capability.value,
                    value=layout,
                )
        return layout

    def distribute_tensor(self, value: Any, layout: Layout) -> Any:
        """Place a global value by ``layout``; a distributed input (or a Variable) is relaid out.

        Raises:
            LayoutError, UnsupportedLayoutError: see :meth:`check_layout`.
        """
        from ._variable import Variable

        if isinstance(value, Variable):  # its current value, not the Variable object
            value = value.value
        if self.is_distributed(value):
            return self.relayout(value, layout)
        value = self.prepare_input(value)
        self.check_layout(layout, self.shape_of(value))
        return self.native_distribute(value, layout, self.bind_mesh(layout.mesh))  # type: ignore[arg-type]

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

    def unpack(self, tensor: Any) -> list[Any]:
        """This process's per-device components of ``tensor``, in row-major mesh order."""
        return list(self.native_unpack(self.require_distributed(tensor, "unpack")))

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
        mesh: Mesh = layout.mesh  # type: ignore[assignment]
        devices = self.bind_mesh(mesh)
        positions = list(self.local_positions(mesh, devices))
        # Nested lists and scalars become NumPy arrays; arrays and framework tensors pass unchanged.
        components = [c if hasattr(c, "shape") and hasattr(c, "dtype") else np.asarray(c) for c in components]
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
        dtypes = {str(getattr(c, "dtype", None)) for c in components}
        if len(dtypes) > 1:
            raise LayoutError(
                f"pack needs components of one dtype. Received dtypes {sorted(dtypes)}.", value=components
            )
        shape = (
            _infer_global_shape(layout, positions, shapes)
            if global_shape is None
            else layout.check_shape(tuple(int(s) for s in global_shape))
        )
        self.check_layout(layout, shape)
        expected = layout.local_shapes(shape)
        for device_pos, got in zip(positions, shapes, strict=True):
            if got != expected[device_pos]:
                raise LayoutError(
                    f"Component for device {devices[device_pos]} has shape {got}; {layout} with global shape "
                    f"{shape} gives it shape {expected[device_pos]}.",
                    value=got,
                )
        self._check_replicas(components, layout, positions, devices)
        return self.native_pack(components, layout, devices, shape)

    def relayout(self, tensor: Any, layout: Layout) -> Any:
        """The same global value laid out by ``layout``.

        Raises:
            LayoutError, UnsupportedLayoutError: see :meth:`check_layout`; also for a move to
                another mesh without :attr:`Capability.RELAYOUT_ACROSS_MESHES`.
        """
        tensor = self.require_distributed(tensor, "relayout")
        self.check_layout(layout, self.shape_of(tensor))
        devices = self.bind_mesh(layout.mesh)  # type: ignore[arg-type]
        if Capability.RELAYOUT_ACROSS_MESHES not in self.capabilities:
            # Compare fields rather than building bound Mesh copies: this runs on every relayout.
            mesh: Mesh = layout.mesh  # type: ignore[assignment]
            source: Mesh = self.fetch_layout(tensor).mesh  # type: ignore[assignment]
            if (source.shape, source.axis_names, source.name, self.bind_mesh(source)) != (
                mesh.shape,
                mesh.axis_names,
                mesh.name,
                devices,
            ):
                raise UnsupportedLayoutError(
                    f"The {self.name} driver relayouts within one mesh only: {source!r} -> {mesh!r} "
                    f"(capability {Capability.RELAYOUT_ACROSS_MESHES.value!r} not supported by {self.name}).",
                    driver=self.name,
                    feature=Capability.RELAYOUT_ACROSS_MESHES.value,
                    value=layout,
                )
        return self.native_relayout(tensor, layout, devices)

    def fetch_layout(self, tensor: Any) -> Layout:
        """The layout ``tensor`` was made with (recorded, else read from the tensor)."""
        tensor = self.require_distributed(tensor, "fetch_layout")
        recorded = self.recorded_layout(tensor)
        if recorded is not None:
            return recorded
        layout = self.native_fetch_layout(tensor)
        if layout.mesh is None:
            return layout
        return layout.with_mesh(self.user_mesh(layout.mesh))

    def to_numpy(self, tensor: Any) -> np.ndarray:
        """The global value of ``tensor`` as a NumPy array (any layout)."""
        return self.native_to_numpy(self.require_distributed(tensor, "to_numpy"))

    def call_with_layout(self, fn: Callable[..., Any], layout: Layout, *args: Any, **kwargs: Any) -> Any:
        """Call a tensor-creating ``fn`` and return its result laid out by ``layout``."""
        if not callable(fn):
            raise LayoutError(f"call_with_layout needs a callable. Received: {fn!r}", value=fn)
        if not isinstance(layout, Layout) or layout.mesh is None:
            self.check_layout(layout, ())
        result = self.native_call_with_layout(fn, layout, self.bind_mesh(layout.mesh), args, kwargs)  # type: ignore[arg-type]
        got = self.fetch_layout(result)
        if got != layout:  # a driver bug, not a user error: never hand back a wrongly laid out value
            raise LayoutcoreError(f"{self.name} call_with_layout produced {got}, not {layout}.", value=got)
        return result

    # ==========================================================================================
    # Helpers for subclasses
    # ==========================================================================================
    def require_distributed(self, value: Any, what: str) -> Any:
        """Return ``value`` (a Variable's value) if it is this driver's tensor, else raise.

        Raises:
            NotDistributedError: ``value`` is not a distributed tensor of this driver.
        """
        from ._variable import Variable

        if isinstance(value, Variable):
            value = value.value
        if not self.is_distributed(value):
            raise NotDistributedError(
                f"{what} needs a distributed tensor of the {self.name} driver. Received: "
                f"{type(value).__module__}.{type(value).__qualname__}. Distribute it first with "
                "distribute_tensor(value, layout), or pick its driver with driver=...",
                value=value,
            )
        return value

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
            equal_nan = first.dtype.kind in "fc"
            differing = [
                devices[positions[i]]
                for i in members[1:]
                if not np.array_equal(first, self.component_to_numpy(components[i]), equal_nan=equal_nan)
            ]
            if differing:
                raise LayoutError(
                    f"Replicas of block {block} under {layout} hold different data: device(s) {differing} differ "
                    f"from device {devices[positions[members[0]]]}. Replicated components must be equal.",
                    value=differing,
                )

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.name!r}>"


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
