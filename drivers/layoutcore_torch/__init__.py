"""layoutcore's PyTorch DTensor driver (``LAYOUTCORE_DRIVER=torch``).

Importing this package does not import torch; the driver imports it when it is created, and
starts the single-process simulation (a ``"fake"`` process group plus ``LocalTensorMode``) only
on its first data operation, and only when no process group exists. See :class:`TorchDriver`.

Public conversions (each binds an abstract mesh the way the driver does):

* :func:`to_torch_mesh` / :func:`from_torch_mesh`: ``Mesh`` <-> ``DeviceMesh``.
* :func:`to_torch_placements` / :func:`from_torch_placements`: ``Layout`` <-> placements.
* :func:`distribute_module_parameters`: an ``nn.Module``'s parameters laid out by a ``LayoutMap``.
* :func:`distribute_module`: the same, plus forward hooks, so that model code runs on local tensors between
  laid-out layers (or on DTensors, ``activations="dtensor"``).
* :func:`from_tp_plan`: a Hugging Face transformers tensor-parallel plan as a ``LayoutMap``.
* :class:`LayoutcoreStorageReader`: a torch DCP ``StorageReader`` over any checkpoint layoutcore reads
  (``torch.distributed.checkpoint.load(state_dict, storage_reader=LayoutcoreStorageReader(path))``;
  it needs a real process group). Imported on first use: it subclasses torch's own class.
"""

from __future__ import annotations

from collections.abc import Sequence
from contextlib import AbstractContextManager
from typing import Any, cast

from layoutcore import Layout, LayoutError, Mesh, get_driver

from ._driver import TorchDriver
from ._module import Activations, ModuleLayouts, distribute_module, distribute_module_parameters
from ._tp_plan import TpPlanLayoutMap, from_tp_plan

__all__ = [
    "Activations",
    "LayoutcoreStorageReader",
    "ModuleLayouts",
    "TorchDriver",
    "TpPlanLayoutMap",
    "distribute_module",
    "distribute_module_parameters",
    "from_torch_mesh",
    "from_torch_placements",
    "from_tp_plan",
    "release_simulation",
    "spmd",
    "to_torch_mesh",
    "to_torch_placements",
    "torch_driver",
]


def torch_driver() -> TorchDriver:
    """The process's torch driver instance (``layoutcore.get_driver("torch")``).

    Raises:
        DriverUnavailableError: torch is not installed.
        LayoutError: the name ``"torch"`` is registered to another driver class.
    """
    driver = get_driver("torch")
    if not isinstance(driver, TorchDriver):
        raise LayoutError(f"The 'torch' driver is {driver!r}, not layoutcore_torch.TorchDriver.", value=driver)
    return driver


def to_torch_mesh(mesh: Mesh) -> Any:
    """The ``torch.distributed.DeviceMesh`` for ``mesh`` (an abstract mesh takes the first devices).

    In the simulation the DeviceMesh covers ranks ``0 .. mesh.size-1`` in row-major order (the device
    names are labels); in a real group device ``"CPU:r"`` is rank ``r``. Starts the simulation if no
    process group exists yet.

    Raises:
        LayoutError: not a Mesh, or it needs devices the driver does not have.
    """
    if not isinstance(mesh, Mesh):
        raise LayoutError(f"to_torch_mesh expects a layoutcore Mesh. Received: {mesh!r}", value=mesh)
    return torch_driver().device_mesh(mesh)


def from_torch_mesh(device_mesh: Any) -> Mesh:
    """The layoutcore ``Mesh`` of a ``DeviceMesh``: the one it was made from by :func:`to_torch_mesh`,
    else shape and ``mesh_dim_names`` with devices ``"CPU:<rank>"`` (``"CUDA:<rank>"``) in row-major order.

    Raises:
        LayoutError: the DeviceMesh has no ``mesh_dim_names``.
    """
    return torch_driver().mesh_of(device_mesh)


def to_torch_placements(layout: Layout) -> tuple[Any, ...]:
    """Torch placements of ``layout``, one per mesh axis in mesh order.

    ``Shard(d)`` on each mesh axis that tensor axis ``d`` uses (repeated for a multi-axis entry), else
    ``Replicate()``. For an uneven tensor axis over several mesh axes torch's placements chunk level by
    level, unlike layoutcore's flat rule, so the driver refuses such a (layout, shape) pair.

    Raises:
        LayoutError: the layout has no mesh.
        UnsupportedLayoutError: a tensor axis over several mesh axes out of mesh order.
    """
    if not isinstance(layout, Layout):
        raise LayoutError(f"to_torch_placements expects a layoutcore Layout. Received: {layout!r}", value=layout)
    return torch_driver().placements(layout)


def from_torch_placements(placements: Sequence[Any], device_mesh: Any, rank: int) -> Layout:
    """The ``Layout`` of ``placements`` on ``device_mesh`` for a tensor of rank ``rank``.

    Raises:
        UnsupportedLayoutError: a ``Partial`` or ``_StridedShard`` placement.
        LayoutError: the placement count differs from the mesh's rank, a Shard dim is out of range, or
            the DeviceMesh has no ``mesh_dim_names``.
    """
    if isinstance(rank, bool) or not isinstance(rank, int) or rank < 0:
        raise LayoutError(f"rank must be an int >= 0. Received: rank={rank!r}", value=rank)
    return torch_driver().layout_from_placements(placements, device_mesh, rank)


def spmd(mesh: Mesh) -> AbstractContextManager[Any]:
    """The context in which to run your own torch code on DTensors over ``mesh``.

    In the simulation it is ``LocalTensorMode(mesh.size)``, under which each torch op runs once per
    simulated rank and collectives move real data. Outside it DTensor would compute as if every simulated
    rank were rank 0 (wrong data), so a torch op on simulated data there raises ``UnsupportedLayoutError``
    (feature ``"torch op outside spmd"``); shape reads, ``to_local()`` and ``detach`` stay allowed. It also holds the simulation's process-wide lock: ``LocalTensorMode`` is not
    thread-safe, so torch code on simulated DTensors from several threads runs one thread at a time
    (run it all under ``spmd``). Under a real process group it does nothing.

    Example::

        with layoutcore_torch.spmd(mesh):
            y = model(x)  # model's parameters and x are DTensors on mesh
    """
    if not isinstance(mesh, Mesh):
        raise LayoutError(f"spmd expects a layoutcore Mesh. Received: {mesh!r}", value=mesh)
    return cast("AbstractContextManager[Any]", torch_driver().spmd(mesh.size))


def release_simulation() -> bool:
    """End the single-process simulation so that a real process group can be started.

    Destroys the ``"fake"`` default process group that the torch driver started (if it did), and
    forgets every DeviceMesh made for it; DTensors made in the simulation cannot be used afterwards.
    Returns whether a simulation was running.
    """
    return torch_driver().release_simulation()


def __getattr__(name: str) -> Any:
    """``LayoutcoreStorageReader`` on first use (its base class is torch's: importing it imports torch)."""
    if name == "LayoutcoreStorageReader":
        from ._storage_reader import LayoutcoreStorageReader

        return LayoutcoreStorageReader
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
