"""``Driver.call_with_layout``'s check of what the driver's ``native_call_with_layout`` returned."""

from __future__ import annotations

from typing import Any, Protocol

from .._capabilities import Capability
from .._errors import LayoutcoreError, UnsupportedLayoutError
from .._layout import Layout

__all__ = ["checked_call_result"]


class _Caller(Protocol):
    """What ``checked_call_result`` uses of a :class:`~layoutcore.driver.Driver` (``_frontend`` imports this module)."""

    @property
    def name(self) -> str: ...
    @property
    def _lc_traces(self) -> bool: ...
    def is_traced(self, value: Any) -> bool: ...
    def is_distributed(self, value: Any) -> bool: ...
    def native_fetch_layout(self, tensor: Any) -> Layout: ...
    def distribute_tensor(self, value: Any, layout: Layout) -> Any: ...
    def require_distributed(self, value: Any, what: str) -> Any: ...
    def _require_traced(self, what: str, value: Any) -> None: ...
    def _check_dtype(self, value: Any) -> None: ...
    def _agrees(self, recorded: Layout, native: Layout) -> bool: ...
    def _record(self, tensor: Any, layout: Layout) -> Any: ...


def checked_call_result(driver: _Caller, result: Any, layout: Layout) -> Any:
    """``result`` of ``driver.native_call_with_layout``, checked to be laid out by ``layout`` and recorded.

    A plain (not distributed, not traced) result is distributed by ``layout``; a traced one keeps
    only the framework's sharding constraint (no record).

    Raises:
        UnsupportedLayoutError: a traced result where the driver lacks :attr:`Capability.TRACED`,
            or a dtype outside the driver's supported set.
        LayoutcoreError: the result is laid out otherwise (a driver defect).
    """
    traced = driver._lc_traces and driver.is_traced(result) and not driver.is_distributed(result)
    if not traced and not driver.is_distributed(result):  # the hook's default (super()): fn's plain result
        return driver.distribute_tensor(result, layout)
    # A driver bug, not a user error: never hand back a wrongly laid out value. Ask the tensor
    # itself, not the record the hook's own calls may have left.
    if traced:  # a sharding constraint in the compiler: no record
        driver._require_traced("call_with_layout", result)
        try:
            got = driver.native_fetch_layout(result)
        except UnsupportedLayoutError as unknown:
            if unknown.feature != Capability.TRACED.value:
                raise
            return result  # the framework fixes the layout only when it compiles: the constraint stands
    else:
        got = driver.native_fetch_layout(driver.require_distributed(result, "call_with_layout's result"))
        driver._check_dtype(result)  # a declared set must hold for what the framework made, too
    if not driver._agrees(layout, got):
        raise LayoutcoreError(f"{driver.name} call_with_layout produced {got}, not {layout}.", value=got)
    return result if traced else driver._record(result, layout)
