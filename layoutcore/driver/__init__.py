"""What a driver author imports: the hook contract, the front-end, capabilities, the registry.

A driver subclasses :class:`Driver` (the front-end: it validates every call once, binds the
mesh, gates capabilities and records results) and implements the hooks of
:class:`DriverHooks`; it declares its :class:`Capability` set, and refuses what no capability
lifts with ``UnsupportedLayoutError(feature=Limitation...)``. The dtype helpers
(:data:`ALL_DTYPES`, :func:`dtype_name`, :func:`numpy_dtype`, :func:`itemsize`, ...) are layoutcore's one
source of dtype names and sizes. It registers under the
``layoutcore.drivers`` entry-point group (:data:`ENTRY_POINT_GROUP`) or with
:func:`register_driver`. Users import :mod:`layoutcore`, never this module.
"""

from __future__ import annotations

from .. import _dtypes
from .._capabilities import Capability, Feature, Limitation
from .._config import CPU_DEVICES_ENV, cpu_device_count, environ_setting
from .._devices import canonical_device, canonical_devices
from .._dtypes import *  # noqa: F403  (the dtype helpers, one source: their __all__ is ours too)
from .._layout import BoundLayout
from .._relayout_schedule import Piece, RelayoutSchedule, relayout_schedule
from ._cache import LRUCache
from ._capabilities import required_capabilities
from ._frontend import Driver, HoldsValue
from ._hooks import DriverHooks, VariableHandle
from ._host_memory import ALIGN, HUGE_PAGE, aligned_empty
from ._processes import SINGLE_PROCESS, Barrier, ProcessGroup
from ._registry import DRIVER_ENV, ENTRY_POINT_GROUP, DriverInfo, driver_infos, register_driver
from ._relayout_move import RelayoutMove

__all__ = [
    "ALIGN",
    "CPU_DEVICES_ENV",
    "DRIVER_ENV",
    "ENTRY_POINT_GROUP",
    "HUGE_PAGE",
    "SINGLE_PROCESS",
    "Barrier",
    "BoundLayout",
    "Capability",
    "Driver",
    "DriverHooks",
    "DriverInfo",
    "Feature",
    "HoldsValue",
    "LRUCache",
    "Limitation",
    "Piece",
    "ProcessGroup",
    "RelayoutMove",
    "RelayoutSchedule",
    "VariableHandle",
    "aligned_empty",
    "canonical_device",
    "canonical_devices",
    "cpu_device_count",
    "driver_infos",
    "environ_setting",
    "register_driver",
    "relayout_schedule",
    "required_capabilities",
]
__all__ += _dtypes.__all__
