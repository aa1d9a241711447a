"""What the front-end knows of one relayout, handed to :meth:`DriverHooks.native_relayout_planned`.

The front-end has validated the target layout and bound its mesh; it knows (or can read once)
the source layout. A driver that runs its own data movement needs both on concrete meshes, the
plan and its schedule: :class:`RelayoutMove` carries them, each computed by the core at most once
per move and cached across moves (per layouts, shape, dtype), so that no driver fetches the source
again, binds the target again or plans a second time.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from typing import Any, Protocol, cast

from .._capabilities import Capability
from .._dtypes import dtype_name
from .._errors import UnsupportedLayoutError
from .._layout import BoundLayout, Layout
from .._relayout_plan import RelayoutPlan, relayout_plan
from .._relayout_schedule import RelayoutSchedule, relayout_schedule
from ._cache import LRUCache

__all__ = ["RelayoutMove", "require_same_mesh"]

_LOCK = threading.Lock()
_PLANS: LRUCache[Any, RelayoutPlan] = LRUCache(256)
_SCHEDULES: LRUCache[Any, RelayoutSchedule] = LRUCache(256)


class _SourceReader(Protocol):
    """What reads a front-end move's source layout (the front-end: :meth:`Driver._relayout_source`)."""

    def _relayout_source(self, tensor: Any) -> Layout: ...


def _concrete(layout: Layout, devices: tuple[str, ...]) -> Layout:
    mesh = layout.require_mesh()
    return layout if mesh.devices is not None else Layout(layout.axes, mesh.with_devices(devices))


class RelayoutMove:
    """One relayout as the front-end sees it.

    Attributes:
        layout: the target layout as the caller gave it (validated; its mesh may be abstract).
        devices: the target mesh's devices, row-major (what the front-end bound).
        shape: the global shape.

    :attr:`target` (``layout`` on the concrete mesh), :attr:`source` (the tensor's layout on its
    concrete mesh), :attr:`dtype`, :attr:`plan` and :meth:`schedule` are computed on first use only (a driver that hands the move to its framework
    pays nothing for them).
    """

    __slots__ = (
        "_dtype",
        "_read_dtype",
        "_read_source",
        "_reader",
        "_source",
        "_target",
        "_tensor",
        "devices",
        "layout",
        "shape",
    )
    _read_source: Callable[[], Layout] | None
    _read_dtype: Callable[[], str] | None
    _reader: _SourceReader | None
    _tensor: Any

    def __init__(
        self,
        read_source: Callable[[], Layout],
        read_dtype: Callable[[], str],
        layout: Layout,
        devices: tuple[str, ...],
        shape: tuple[int, ...],
    ) -> None:
        self._read_source = read_source
        self._read_dtype = read_dtype
        self._reader = self._tensor = None
        self._source: Layout | None = None
        self._dtype: str | None = None
        if layout.mesh is None:  # (not require_mesh() and cast() on every relayout: two calls)
            layout.require_mesh()  # raises
        self.layout: BoundLayout = layout  # type: ignore[assignment]  # its mesh is set: checked above
        self.devices = devices
        self._target: Layout | None = None
        self.shape = shape

    @classmethod
    def _of(
        cls, reader: _SourceReader, tensor: Any, layout: BoundLayout, devices: tuple[str, ...], shape: tuple[int, ...]
    ) -> RelayoutMove:
        """The front-end's move of ``tensor`` (``layout`` checked and bound to ``devices``; ``shape`` its
        global shape): its source is read by ``reader._relayout_source(tensor)``, its dtype from
        ``tensor.dtype``, on first use. Made on every relayout, so without two closures and ``__init__``."""
        move = object.__new__(cls)
        move._reader, move._tensor, move._read_source, move._read_dtype = reader, tensor, None, None
        move._source = move._dtype = move._target = None
        move.layout, move.devices, move.shape = layout, devices, shape
        return move

    @property
    def target(self) -> Layout:
        """``layout`` on the concrete target mesh (made once, when first asked)."""
        if self._target is None:
            self._target = _concrete(self.layout, self.devices)
        return self._target

    @property
    def dtype(self) -> str:
        """The dtype's canonical name (read once, when first asked)."""
        if self._dtype is None:
            read = self._read_dtype
            self._dtype = dtype_name(self._tensor.dtype) if read is None else read()
        return self._dtype

    @classmethod
    def between(cls, source: Layout, target: Layout, shape: tuple[int, ...], dtype: str) -> RelayoutMove:
        """A move between two layouts on concrete meshes (a driver's own derived move: a reverse
        plan for a gradient, a scalar planned as shape ``(1,)``)."""
        devices = target.require_mesh().devices
        assert devices is not None and source.require_mesh().devices is not None
        move = cls(lambda: source, lambda: dtype, target, tuple(devices), shape)
        move._source, move._dtype = source, dtype
        return move

    @property
    def source(self) -> Layout:
        """The tensor's layout on its concrete mesh (read once, when first asked)."""
        if self._source is None:
            read, reader = self._read_source, self._reader
            self._source = read() if read is not None else cast("_SourceReader", reader)._relayout_source(self._tensor)
        return self._source

    def reversed(self) -> RelayoutMove:
        """The move back, from the target to the source."""
        return RelayoutMove.between(self.target, self.source, self.shape, self.dtype)

    def retyped(self, dtype: str) -> RelayoutMove:
        """The same move of another dtype of the same width (a bit view)."""
        move = RelayoutMove(lambda: self.source, lambda: dtype, self.layout, self.devices, self.shape)
        move._source, move._dtype = self._source, dtype
        return move

    @property
    def plan(self) -> RelayoutPlan:
        """:func:`~layoutcore.relayout_plan` of the move (cached per layouts, shape and dtype)."""
        key = (self.source, self.target, self.shape, self.dtype)
        with _LOCK:
            found = _PLANS.get(key)
        if found is None:
            found = relayout_plan(self.source, self.target, self.shape, self.dtype)
            with _LOCK:
                _PLANS.put(key, found)
        return found

    def schedule(self, participants: Sequence[Any] | None = None, *, rounds: bool = False) -> RelayoutSchedule:
        """:func:`~layoutcore.driver.relayout_schedule` of :attr:`plan` (cached per move and arguments)."""
        named = None if participants is None else tuple(participants)
        key = (self.source, self.target, self.shape, self.dtype, named, rounds)
        with _LOCK:
            found = _SCHEDULES.get(key)
        if found is None:
            found = relayout_schedule(self.plan, participants, rounds=rounds)
            with _LOCK:
                _SCHEDULES.put(key, found)
        return found


def require_same_mesh(driver: Any, tensor: Any, layout: Layout, devices: tuple[str, ...]) -> None:
    """Refuse a relayout of ``tensor`` by ``driver`` (a front-end :class:`~layoutcore.driver.Driver`
    without ``RELAYOUT_ACROSS_MESHES``) onto another mesh than its own (``layout``'s, bound to ``devices``).

    Raises:
        UnsupportedLayoutError: ``feature=Capability.RELAYOUT_ACROSS_MESHES``.
    """
    # The mesh the front-end recorded for a hook's result (checked against the native truth
    # by fetch_layout); else the tensor's native mesh, named as the user bound its devices.
    # Fields, not Mesh copies: this runs on every call.
    mesh = layout.require_mesh()
    recorded = driver.recorded_layout(tensor)
    source = recorded.require_mesh() if recorded is not None else driver.user_mesh(driver.native_mesh(tensor))
    source_devices = driver.bind_mesh(source) if source.devices is None else source.devices
    if (source.shape, source.axis_names, source.name, source_devices) != (
        mesh.shape,
        mesh.axis_names,
        mesh.name,
        devices,
    ):
        raise UnsupportedLayoutError(
            f"The {driver.name} driver relayouts within one mesh only: {source!r} -> {mesh!r} "
            f"(capability {Capability.RELAYOUT_ACROSS_MESHES.value!r} not supported by {driver.name}).",
            driver=driver.name,
            feature=Capability.RELAYOUT_ACROSS_MESHES,
            value=layout,
        )
