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
from typing import Any, cast

from .._layout import BoundLayout, Layout
from .._relayout_plan import RelayoutPlan, relayout_plan
from .._relayout_schedule import RelayoutSchedule, relayout_schedule
from ._cache import LRUCache

__all__ = ["RelayoutMove"]

_LOCK = threading.Lock()
_PLANS: LRUCache[Any, RelayoutPlan] = LRUCache(256)
_SCHEDULES: LRUCache[Any, RelayoutSchedule] = LRUCache(256)


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

    __slots__ = ("_dtype", "_read_dtype", "_read_source", "_source", "_target", "devices", "layout", "shape")

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
        self._source: Layout | None = None
        self._dtype: str | None = None
        layout.require_mesh()
        self.layout = cast("BoundLayout", layout)
        self.devices = devices
        self._target: Layout | None = None
        self.shape = shape

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
            self._dtype = self._read_dtype()
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
            self._source = self._read_source()
        return self._source

    def reversed(self) -> RelayoutMove:
        """The move back, from the target to the source."""
        return RelayoutMove.between(self.target, self.source, self.shape, self.dtype)

    def retyped(self, dtype: str) -> RelayoutMove:
        """The same move of another dtype of the same width (a bit view)."""
        move = RelayoutMove(self._read_source, lambda: dtype, self.layout, self.devices, self.shape)
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
