"""layoutcore: one vocabulary for where distributed data lives.

A named device :class:`Mesh`, a per-tensor :class:`Layout`, and a :class:`LayoutMap` from
variable paths to layouts, with the same data functions on NumPy (the reference driver),
JAX, TensorFlow DTensor and PyTorch DTensor. Importing layoutcore imports no framework.
"""

from __future__ import annotations

from . import geometry, propagation
from ._api import (
    call_with_layout,
    copy_to_mesh,
    distribute_tensor,
    fetch_layout,
    list_devices,
    pack,
    relayout,
    to_numpy,
    unpack,
)
from ._capabilities import Capability, required_capabilities
from ._config import CPU_DEVICES_ENV, ConfigurationError, cpu_device_count
from ._driver import DriverHooks, VariableHandle
from ._errors import (
    AmbiguousLayoutError,
    DriverNotFoundError,
    DriverUnavailableError,
    LayoutcoreError,
    LayoutError,
    LayoutMismatchError,
    NotDistributedError,
    UnmatchedPathError,
    UnmatchedPathWarning,
    UnsupportedLayoutError,
)
from ._frontend import Driver
from ._layout import UNSHARDED, AxisSpec, Layout, TensorLayout
from ._layout_map import LayoutMap, MatchReport, current_layout_map
from ._mesh import DeviceMesh, Mesh, MeshDimension, create_mesh
from ._numpy_driver import NumpyDriver, ShardedArray
from ._plan import Plan, PlanEntry, RelayoutPlan, Transfer, plan, relayout_plan
from ._registry import (
    DRIVER_ENV,
    ENTRY_POINT_GROUP,
    DriverInfo,
    active_driver_name,
    available_drivers,
    driver_infos,
    get_driver,
    register_driver,
    set_driver,
    use_driver,
)
from ._scope import layout_map_scope
from ._trees import distribute_tree, tree_layouts
from ._variable import DVariable, Variable

__version__ = "0.1.0"

__all__ = [
    "CPU_DEVICES_ENV",
    "DRIVER_ENV",
    "ENTRY_POINT_GROUP",
    "UNSHARDED",
    "AmbiguousLayoutError",
    "AxisSpec",
    "Capability",
    "ConfigurationError",
    "DVariable",
    "DeviceMesh",
    "Driver",
    "DriverHooks",
    "DriverInfo",
    "DriverNotFoundError",
    "DriverUnavailableError",
    "Layout",
    "LayoutError",
    "LayoutMap",
    "LayoutMismatchError",
    "LayoutcoreError",
    "MatchReport",
    "Mesh",
    "MeshDimension",
    "NotDistributedError",
    "NumpyDriver",
    "Plan",
    "PlanEntry",
    "RelayoutPlan",
    "ShardedArray",
    "TensorLayout",
    "Transfer",
    "UnmatchedPathError",
    "UnmatchedPathWarning",
    "UnsupportedLayoutError",
    "Variable",
    "VariableHandle",
    "__version__",
    "active_driver_name",
    "available_drivers",
    "call_with_layout",
    "copy_to_mesh",
    "cpu_device_count",
    "create_mesh",
    "current_layout_map",
    "distribute_tensor",
    "distribute_tree",
    "driver_infos",
    "fetch_layout",
    "geometry",
    "get_driver",
    "layout_map_scope",
    "list_devices",
    "pack",
    "plan",
    "propagation",
    "register_driver",
    "relayout",
    "relayout_plan",
    "required_capabilities",
    "set_driver",
    "to_numpy",
    "tree_layouts",
    "unpack",
    "use_driver",
]
