"""layoutcore: one vocabulary for where distributed data lives.

A named device :class:`Mesh`, a per-tensor :class:`Layout`, and a :class:`LayoutMap` from
variable paths to layouts, with the same data functions on NumPy (the reference driver),
JAX, TensorFlow DTensor and PyTorch DTensor. Importing layoutcore imports no framework.
"""

from __future__ import annotations

from typing import Any

from . import geometry, propagation
from ._api import (
    call_with_layout,
    copy_to_mesh,
    distribute_tensor,
    fetch_layout,
    layout_map_scope,
    list_devices,
    pack,
    relayout,
    to_numpy,
    unpack,
)
from ._config import ConfigurationError
from ._dtypes import DtypeNarrowingWarning
from ._errors import (
    AmbiguousLayoutError,
    CheckpointError,
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
from ._layout import UNSHARDED, AxisSpec, Layout, TensorLayout
from ._layout_map import LayoutMap, MatchReport, current_layout_map
from ._mesh import DeviceMesh, Mesh, MeshDimension, create_mesh
from ._plan import Plan, PlanEntry, plan
from ._relayout_plan import RelayoutPlan, Transfer, relayout_plan
from ._tensor_spec import TensorSpec
from ._trees import distribute_tree, tree_layouts
from ._variable import DVariable, Variable
from .driver._registry import (
    active_driver_name,
    available_drivers,
    get_driver,
    set_driver,
    use_driver,
)

__version__ = "0.1.0"

__all__ = [
    "UNSHARDED",
    "AmbiguousLayoutError",
    "AxisSpec",
    "CheckpointError",
    "ConfigurationError",
    "DVariable",
    "DeviceMesh",
    "DriverNotFoundError",
    "DriverUnavailableError",
    "DtypeNarrowingWarning",
    "Layout",
    "LayoutError",
    "LayoutMap",
    "LayoutMismatchError",
    "LayoutcoreError",
    "MatchReport",
    "Mesh",
    "MeshDimension",
    "NotDistributedError",
    "Plan",
    "PlanEntry",
    "RelayoutPlan",
    "TensorLayout",
    "TensorSpec",
    "Transfer",
    "UnmatchedPathError",
    "UnmatchedPathWarning",
    "UnsupportedLayoutError",
    "Variable",
    "__version__",
    "active_driver_name",
    "available_drivers",
    "call_with_layout",
    "copy_to_mesh",
    "create_mesh",
    "current_layout_map",
    "distribute_tensor",
    "distribute_tree",
    "fetch_layout",
    "geometry",
    "get_driver",
    "layout_map_scope",
    "list_devices",
    "pack",
    "plan",
    "propagation",
    "relayout",
    "relayout_plan",
    "set_driver",
    "to_numpy",
    "tree_layouts",
    "unpack",
    "use_driver",
]

#: Names that moved to the driver-author package (``layoutcore.driver``) or the reference driver's
#: (``layoutcore.numpy``): still reachable here, with a DeprecationWarning naming the new path.
_MOVED: dict[str, str] = {
    "CPU_DEVICES_ENV": "layoutcore.driver",
    "Capability": "layoutcore.driver",
    "DRIVER_ENV": "layoutcore.driver",
    "Driver": "layoutcore.driver",
    "DriverHooks": "layoutcore.driver",
    "DriverInfo": "layoutcore.driver",
    "ENTRY_POINT_GROUP": "layoutcore.driver",
    "NumpyDriver": "layoutcore.numpy",
    "ShardedArray": "layoutcore.numpy",
    "VariableHandle": "layoutcore.driver",
    "cpu_device_count": "layoutcore.driver",
    "driver_infos": "layoutcore.driver",
    "register_driver": "layoutcore.driver",
    "required_capabilities": "layoutcore.driver",
}


def __getattr__(name: str) -> Any:
    where = _MOVED.get(name)
    if where is None:
        raise AttributeError(f"module 'layoutcore' has no attribute {name!r}")
    import importlib
    import warnings

    warnings.warn(
        f"layoutcore.{name} moved to {where}.{name}; import it from {where} (the top-level alias will be removed).",
        DeprecationWarning,
        stacklevel=2,
    )
    return getattr(importlib.import_module(where), name)
