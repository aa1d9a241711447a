"""The PyTorch DTensor driver's hooks.

Two modes, picked per call without any set-up by the user (:mod:`._mode`):

* **Real process group.** When ``torch.distributed`` already has a default group (``torchrun``,
  gloo, nccl), a mesh position is a rank: device ``"CPU:3"`` (``"CUDA:3"`` under nccl) is rank 3.
  Each process holds its own shards; ``unpack``/``pack`` see the local ones only. A mesh must
  list its ranks in ascending order: torch 2.13's collectives misplace data on a permuted rank
  grid, so the driver refuses one (``UnsupportedLayoutError``, feature ``"permuted_devices"``).
* **Single-process simulation.** Otherwise the first data operation starts a ``"fake"`` default
  process group over ``LAYOUTCORE_CPU_DEVICES`` ranks and runs every torch call inside
  ``LocalTensorMode(n)`` for a mesh of ``n`` devices, so each simulated rank holds real data of
  its own (a ``LocalTensor``). Mesh position ``p`` is simulated by rank ``p``: the device names are
  labels, as in JAX, because ``LocalTensorMode`` gives wrong data on permuted rank grids.
  Nothing starts at import or driver construction, so a real group started before the first
  data operation wins; :func:`layoutcore_torch.release_simulation` ends the simulation.

**Whose memory** (docs/design.md#data-functions-made-precise). Every shard the driver makes is its own copy: ``distribute_tensor``,
``pack`` and ``Variable`` copy each device's block out of the caller's array or tensor (a
*snapshot*: later writes to the caller's array do not show through, and writes through the result,
in-place ops and optimizer steps included, never reach the caller). In the simulation each rank owns
its storage, so an in-place update of a replicated tensor is applied once per rank, as on a real
group. torch's own ``distribute_tensor`` keeps views of its input instead (a replicated or dim-0
sharded DTensor aliases the caller's tensor), which the driver does not use for that reason.

Conversions live in :mod:`._convert`, torch's tensor factories in :mod:`._factories`. Layouts the
driver does not declare, hence refused with :class:`~layoutcore.UnsupportedLayoutError` before torch
is called:

* ``multi_axis_any_order``: needs torch's private ``_StridedShard``, which gives wrong data
  on plain inputs under ``LocalTensorMode`` and has no uneven semantics we can match.
* ``uneven_multi_axis``: torch chunks level by level (5 over 2x2 -> 2,1,1,1), the contract
  flat over the product (2,2,1,0).

Relayout runs ``DTensor.redistribute`` where torch's own plan moves the physical floor, and
``relayout_plan``'s transfers as one ``all_to_all_single`` elsewhere and across meshes
(:mod:`._relayout`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, ClassVar

import numpy as np

from layoutcore import DriverUnavailableError, Layout, LayoutError, Mesh, UnsupportedLayoutError
from layoutcore.driver import BoundLayout, Capability, Driver, ProcessGroup, RelayoutMove, numpy_dtype

from . import _convert, _factories, _private, _relayout, _staged
from ._mode import ProcessGroupMode, World, warn_if_untested

__all__ = ["TorchDriver"]


#: Same-width dtypes gloo's collectives move, for those it has none for (by canonical name).
_GLOO_CARRIERS = {
    "int16": "float16",
    "uint16": "float16",
    "uint32": "int32",
    "uint64": "int64",
    "float8_e4m3fn": "uint8",
    "float8_e5m2": "uint8",
    "float8_e8m0fnu": "uint8",
}


class TorchDriver(Driver):
    """layoutcore on ``torch.distributed.tensor`` (see the module docstring for the two modes)."""

    name = "torch"
    capabilities = frozenset(
        {Capability.UNEVEN, Capability.MULTI_AXIS, Capability.RELAYOUT_ACROSS_MESHES, Capability.RELAYOUT_AT_FLOOR}
    )
    requires = ("torch",)
    install_hint = "pip install 'layoutcore[torch]'"
    native_types: ClassVar[tuple[str, ...]] = ("torch.distributed.tensor.DTensor",)
    #: Each rank's block is copied out of the caller's input (module docstring, "Whose memory").
    input_aliasing = "snapshot"

    def __init__(self) -> None:
        super().__init__()
        import torch
        import torch.distributed as dist

        if not dist.is_available():
            raise DriverUnavailableError(
                f"torch {torch.__version__} was built without torch.distributed, which DTensor needs.",
                driver=self.name,
                install=self.install_hint,
            )
        from torch.distributed.tensor import DTensor

        warn_if_untested(torch.__version__)
        self._torch = torch
        self._DTensor = DTensor
        self._mode = ProcessGroupMode(self._forget)
        self._meshes = _convert.MeshTable(self._mode, self.bind_mesh)

    # ==========================================================================================
    # Mode and conversions (public through layoutcore_torch's functions)
    # ==========================================================================================
    def world(self) -> World:
        """The current default group, starting the simulation if there is none (first data use)."""
        return self._mode.world()

    def spmd(self, n: int) -> Any:
        """Context for torch calls on a mesh of ``n`` devices: ``LocalTensorMode(n)`` (under the simulation's
        lock) when simulated, else nothing."""
        return self._mode.spmd(n)

    def release_simulation(self) -> bool:
        """Destroy the fake default group this driver started; returns whether there was one.

        Distributed tensors made in the simulation cannot be used afterwards.
        """
        return self._mode.release_simulation()

    def _forget(self) -> None:
        self._meshes.clear()
        self.forget_meshes()

    def device_mesh(self, mesh: Mesh) -> Any:
        """The ``DeviceMesh`` of ``mesh`` (abstract or device-bound), one per Mesh value and world."""
        return self._meshes.device_mesh(mesh)

    def mesh_of(self, device_mesh: Any) -> Mesh:
        """The Mesh a ``DeviceMesh`` was made from by :meth:`device_mesh`, else read from it."""
        return self._meshes.mesh_of(device_mesh, concrete=False)

    def placements(self, layout: Layout) -> tuple[Any, ...]:
        """Torch placements of ``layout``, one per mesh axis."""
        return _convert.placements(layout)

    def layout_from_placements(self, placements: Sequence[Any], device_mesh: Any, rank: int) -> Layout:
        """The Layout of ``placements`` on ``device_mesh`` (the Mesh it was made from) for a rank-``rank`` tensor."""
        return _convert.layout_from_placements(placements, self.mesh_of(device_mesh), rank)

    # ==========================================================================================
    # Required hooks
    # ==========================================================================================
    def list_devices(self, device_type: str | None = None) -> list[str]:
        dist = self._torch.distributed
        if dist.is_initialized():
            world = self.world()
            kind, size = world.device_type.upper(), world.size
        else:  # no group yet: report what the simulation will have, without starting it
            from layoutcore.driver import cpu_device_count

            kind, size = "CPU", cpu_device_count()
        if device_type is not None and device_type.upper() != kind:
            return []
        return [f"{kind}:{r}" for r in range(size)]

    def is_distributed(self, value: Any) -> bool:
        return isinstance(value, self._DTensor)

    def prepare_input(self, value: Any) -> Any:
        """Torch tensors pass through; anything else becomes one through NumPy (zero-copy when it can:
        ``native_distribute`` copies each block anyway).

        Raises:
            LayoutError: a value torch cannot hold (e.g. a NumPy dtype torch lacks).
        """
        torch = self._torch
        if isinstance(value, torch.Tensor):
            return value
        array = np.asarray(value)
        try:
            # torch.from_numpy rejects read-only, non-native byte order and negative strides (a[::-1]).
            if not array.flags.writeable or not array.dtype.isnative or any(s < 0 for s in array.strides):
                array = np.array(array, dtype=array.dtype.newbyteorder("="), order="C")
            return _convert.from_numpy(array)  # ml_dtypes' bfloat16/float8 as torch's, bit for bit
        except (TypeError, RuntimeError) as exc:
            raise LayoutError(
                f"torch cannot hold a value of dtype {array.dtype} (shape {array.shape}): {exc}", value=value
            ) from None

    def native_distribute(self, value: Any, layout: Layout, devices: tuple[str, ...]) -> Any:
        """Each (local) rank gets its own copy of its block, wrapped by ``DTensor.from_local``.

        Not torch's ``distribute_tensor``, whose shards are views of ``value`` (see "Whose memory" in the
        module docstring); copying each block once costs what ``distribute_tensor``'s own chunking costs
        for a non-leading tensor axis, and no more than a replicated rank's own storage needs.
        """
        mesh = layout.require_mesh()
        source = value.detach()
        shape = tuple(int(s) for s in source.shape)
        blocks = layout.device_slices(shape)
        positions = self.local_positions(mesh, devices)
        shards = {p: source[blocks[p]].clone(memory_format=self._torch.contiguous_format) for p in positions}
        result = self._from_local(shards, layout, shape, source)
        if value.requires_grad:  # as torch's distribute_tensor: a leaf that requires grad like its input
            with self.spmd(mesh.size):
                result.requires_grad_(True)
        return result

    def native_unpack(self, tensor: Any) -> list[Any]:
        mesh = self._meshes.mesh_of(tensor.device_mesh, concrete=True)
        with self.spmd(mesh.size):  # an op on a LocalTensor enters LocalTensorMode: under the simulation's lock
            local = tensor.to_local()
        return self._per_position(local, mesh)

    def _per_position(self, local: Any, mesh: Mesh) -> list[Any]:
        """Per local mesh position, its plain tensor of ``local`` (a DTensor's local tensor)."""
        if self.world().simulated:
            if _private.is_local_tensor(local):
                per_rank = _private.local_tensors(local)
                return [per_rank[p] for p in range(mesh.size)]
            return [local] * mesh.size  # an op's replicated result that torch collapsed to one tensor
        return [local] * len(self.local_positions(mesh, self.bind_mesh(mesh)))

    def native_pack(
        self, components: list[Any], layout: Layout, devices: tuple[str, ...], global_shape: tuple[int, ...]
    ) -> Any:
        """``DTensor.from_local`` over a copy of each component (the result never aliases the caller's)."""
        mesh = layout.require_mesh()
        positions = list(self.local_positions(mesh, devices))
        if not positions:
            raise LayoutError(f"This rank ({self.world().rank}) has no device in {mesh!r}.", value=mesh)
        shards = {
            p: self.prepare_input(c).detach().clone(memory_format=self._torch.contiguous_format)
            for p, c in zip(positions, components, strict=True)
        }
        return self._from_local(shards, layout, global_shape, next(iter(shards.values())))

    def native_pack_owned(
        self, blocks: list[np.ndarray], layout: Layout, devices: tuple[str, ...], global_shape: tuple[int, ...]
    ) -> Any:
        """``DTensor.from_local`` over the handed-over blocks themselves (``torch.from_numpy``, no clone);
        a block listed for several devices (replicas) is copied for each further one, since torch's
        in-place ops write each rank's local tensor."""
        mesh = layout.require_mesh()
        positions = list(self.local_positions(mesh, devices))
        if not positions:
            raise LayoutError(f"This rank ({self.world().rank}) has no device in {mesh!r}.", value=mesh)
        seen: set[int] = set()
        shards = {}
        for p, block in zip(positions, blocks, strict=True):
            local = self.prepare_input(block)
            shards[p] = local.clone() if id(block) in seen else local
            seen.add(id(block))
        return self._from_local(shards, layout, global_shape, next(iter(shards.values())))

    def native_fill(self, tensor: Any, blocks: list[np.ndarray], layout: Layout, devices: tuple[str, ...]) -> Any:
        """``copy_`` into each local tensor of ``tensor`` (storage and ``data_ptr`` kept)."""
        torch = self._torch
        locals_ = self.native_unpack(tensor)
        with torch.no_grad(), self.spmd(layout.require_mesh().size):
            for local, block in zip(locals_, blocks, strict=True):
                local.copy_(self.prepare_input(block))
        return tensor

    # -- streaming loads (layoutcore.checkpoint._staging; the work is in ._staged) -----------------
    def native_host_views(self, tensor: Any, layout: Layout, devices: tuple[str, ...]) -> list[Any] | None:
        """Each CPU local tensor's own memory as a NumPy array (file bytes are read straight into it).

        Taken from the stored block (:func:`_private.local_block`), not ``to_local()``, whose result is a
        view of the same memory made by an autograd function (3 ms a tensor on 8 simulated ranks, a
        ``LocalTensor`` dispatch per rank): NumPy writes reach the same bytes either way."""
        mesh = self._meshes.mesh_of(tensor.device_mesh, concrete=True)
        return [_staged.host_view(local) for local in self._per_position(_private.local_block(tensor), mesh)]

    def native_empty(self, layout: Layout, devices: tuple[str, ...], global_shape: tuple[int, ...], dtype: Any) -> Any:
        """On a GPU (``nccl``): a DTensor over ``torch.empty`` local tensors on this rank's device; else None."""
        world = self.world()
        if world.device_type != "cuda" or world.simulated:
            return None
        torch = self._torch
        mesh = layout.require_mesh()
        shapes = layout.local_shapes(global_shape)
        device = torch.device("cuda", torch.cuda.current_device())
        shards = {p: _staged.empty_local(torch, shapes[p], dtype, device) for p in self.local_positions(mesh, devices)}
        like = _staged.empty_local(torch, (0,), dtype, device)
        return self._from_local(shards, layout, global_shape, like)

    def native_staging_buffer(self, nbytes: int, tensor: Any) -> np.ndarray:
        """Pinned host memory where ``tensor`` (a DTensor, or a plain tensor a save stages) lives on a GPU,
        else plain host memory."""
        locals_ = self.native_unpack(tensor)[:1] if self.is_distributed(tensor) else [tensor]
        on_gpu = any(local.device.type == "cuda" for local in locals_)
        return _staged.staging_buffer(self._torch, nbytes, on_gpu)

    def native_write_rows(self, tensor: Any, index: int, rows: tuple[int, int], staged: np.ndarray) -> Any:
        """``copy_`` of the staged rows into local tensor ``index`` (asynchronous from pinned memory on a GPU)."""
        local = self.native_unpack(tensor)[index]
        return _staged.write_rows(self._torch, local, rows, staged)

    def native_staged_save(self, component: Any) -> bool:
        """A CUDA local tensor: a save streams it through pinned staging buffers (CPU ones are their own host copy)."""
        return bool(component.device.type == "cuda")

    def native_read_rows(self, component: Any, rows: tuple[int, int], staged: np.ndarray) -> Any:
        """``copy_`` of rows of a local tensor into the staged buffer (asynchronous from a GPU into pinned memory)."""
        return _staged.read_rows(self._torch, component, rows, staged)

    def native_relayout(self, tensor: Any, layout: Layout, devices: tuple[str, ...]) -> Any:
        """``DTensor.redistribute`` where torch's plan moves the floor (it also reduces pending sums,
        ``Partial``, into ``layout``); elsewhere, and across meshes, ``relayout_plan``'s transfers in one
        ``all_to_all_single`` (:mod:`._relayout`). On a real group, a dtype gloo has no collectives for
        moves as a same-width view (:meth:`_carried`)."""
        return self.native_relayout_planned(tensor, self.relayout_move(tensor, layout, devices))

    def native_relayout_planned(self, tensor: Any, move: RelayoutMove) -> Any:
        carried = self._carried(tensor)
        if carried is not None:
            carrier = str(carried.dtype).removeprefix("torch.")
            return self._uncarried(self._relayout_any(carried, move.retyped(carrier)), tensor.dtype)
        return self._relayout_any(tensor, move)

    def _carried(self, tensor: Any) -> Any:
        """``tensor`` as a same-width view of a dtype gloo's collectives move, where ``tensor``'s dtype has
        none (int16, uint16/32/64, float8: "Invalid scalar type", measured on torch 2.13 with 2 gloo ranks)
        and no pending sum needs its arithmetic; else None. The collectives only copy, so the bits survive."""
        carrier = _GLOO_CARRIERS.get(str(tensor.dtype).removeprefix("torch."))
        if carrier is None or self.world().simulated or any(p.is_partial() for p in tensor.placements):
            return None
        return self._view(tensor, getattr(self._torch, carrier))

    def _uncarried(self, tensor: Any, dtype: Any) -> Any:
        return self._view(tensor, dtype)

    def _view(self, tensor: Any, dtype: Any) -> Any:
        """A DTensor over this rank's block viewed as ``dtype`` (same width), with ``tensor``'s layout."""
        return self._DTensor.from_local(
            tensor.to_local().view(dtype),
            tensor.device_mesh,
            tensor.placements,
            run_check=False,
            shape=tensor.shape,
            stride=tensor.stride(),
        )

    def _relayout_any(self, tensor: Any, move: RelayoutMove) -> Any:
        layout = move.layout
        mesh = layout.require_mesh()
        device_mesh = self.device_mesh(mesh)
        placements = _convert.placements(layout)
        same = tensor.device_mesh is device_mesh and tuple(tensor.placements) == placements
        if same and self.recorded_layout(tensor) == layout:
            return tensor  # already laid out so, on this very Mesh
        planned = None if same else _relayout.relayout_at_floor(self, tensor, move)
        if planned is not None:
            return planned
        with self.spmd(mesh.size):
            moved = tensor.redistribute(device_mesh, placements)
            if moved is tensor:  # the same placements on an equal DeviceMesh, but another Layout: a new object
                moved = self._DTensor.from_local(
                    tensor.to_local(),
                    device_mesh,
                    placements,
                    run_check=False,
                    shape=tensor.shape,
                    stride=tensor.stride(),
                )
            # Blocks read as stored: two to_local() calls cost 1.2 ms of a 6 ms 8x8 relayout (simulated).
            if _shares_storage(_private.local_block(moved), _private.local_block(tensor)):
                # Where no data moves (e.g. Replicate -> Shard on a 1-device mesh) torch hands back a view
                # of the source's block: an in-place update of one would change the other.
                moved = self._DTensor.from_local(
                    moved.to_local().clone(),
                    device_mesh,
                    placements,
                    run_check=False,
                    shape=moved.shape,
                    stride=moved.stride(),
                )
            return moved

    def native_fetch_layout(self, tensor: Any) -> Layout:
        mesh = self._meshes.mesh_of(tensor.device_mesh, concrete=True)
        return _convert.layout_from_placements(tensor.placements, mesh, tensor.ndim)

    def native_to_numpy(self, tensor: Any) -> np.ndarray:
        carried = self._carried(tensor)
        if carried is not None:  # gloo gathers no such dtype: gather its bits
            return self.native_to_numpy(carried).view(numpy_dtype(str(tensor.dtype).removeprefix("torch.")))
        with self.spmd(tensor.device_mesh.size()):
            full = _private.waited(tensor.full_tensor())  # a pending collective finishes in the mode
        if _private.is_local_tensor(full):  # simulated: every rank holds the same gathered value
            full = _private.local_tensors(full)[0]
        # A replicated full_tensor is the stored shard itself: copy it so the caller cannot write into it.
        return _convert.to_numpy(full, copy=True)

    # ==========================================================================================
    # Optional hooks
    # ==========================================================================================
    def is_traced(self, value: Any) -> bool:
        """Whether this call runs under ``torch.compile``'s tracer (dynamo), where ``value`` is a fake tensor.

        The driver does not declare ``Capability.TRACED``, so the front-end then raises
        ``UnsupportedLayoutError(feature="traced")``: dynamo cannot trace layoutcore's bookkeeping (locks,
        weak references) nor build a ``DeviceMesh``, and under ``LocalTensorMode`` it would not see the
        simulated ranks. Call layoutcore outside the compiled function, and DTensor's own ``redistribute``
        inside it.
        """
        return bool(self._torch.compiler.is_compiling())

    def native_mesh(self, tensor: Any) -> Mesh:
        """The concrete mesh of ``tensor``, pending sums (``Partial``) included."""
        return self._meshes.mesh_of(tensor.device_mesh, concrete=True)

    def local_positions(self, mesh: Mesh, devices: tuple[str, ...]) -> Sequence[int]:
        world = self.world()
        if world.simulated:
            return range(mesh.size)
        return [p for p, d in enumerate(devices) if _convert.rank_of(d) == world.rank]

    def native_call_with_layout(
        self,
        fn: Callable[..., Any],
        layout: BoundLayout,
        devices: tuple[str, ...],
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
    ) -> Any:
        """torch's own factories (``torch.ones``, ``zeros``, ``empty``, ``full``) become their DTensor twins,
        which create each shard in place; any other ``fn`` runs once and is distributed."""
        self._refuse_traced("call_with_layout", fn)
        factory = _factories.dtensor_factory(fn)
        parsed = _factories.factory_call(self._torch, fn, args, kwargs) if factory is not None else None
        if factory is None or parsed is None:
            return super().native_call_with_layout(fn, layout, devices, args, kwargs)
        size, extra, options = parsed
        self.check_layout(layout, size)
        mesh = layout.require_mesh()
        device_mesh = self.device_mesh(mesh)
        with self.spmd(mesh.size):
            # Never traced: dynamo fails inside DTensor's factories on a simulated mesh (LocalIntNode coordinates).
            make = self._torch.compiler.disable(factory)
            return make(size, *extra, device_mesh=device_mesh, placements=_convert.placements(layout), **options)

    def shape_of(self, value: Any) -> tuple[int, ...]:
        return tuple(int(s) for s in value.shape)

    def component_to_numpy(self, component: Any) -> np.ndarray:
        if isinstance(component, self._torch.Tensor):
            return _convert.to_numpy(component, copy=False)
        return np.asarray(component)

    def process_group(self) -> ProcessGroup:
        """A real ``torch.distributed`` group of several ranks (never the single-process simulation); the
        barrier is ``dist.barrier()``, bounded by the group's own timeout."""
        dist = self._torch.distributed
        if not (dist.is_initialized() and dist.get_world_size() > 1) or self.world().simulated:
            return super().process_group()

        def barrier(tag: str, timeout_s: float) -> None:
            del tag, timeout_s  # the group's timeout (init_process_group) bounds it
            dist.barrier()

        return ProcessGroup(dist.get_rank(), dist.get_world_size(), barrier, self.name)

    def variable_create(self, value: Any, layout: Layout) -> Any:
        """A DTensor ``nn.Parameter`` (gradients for floating dtypes) over its own copy of ``value``, so that
        two Variables made from one tensor never share storage."""
        with self.spmd(value.device_mesh.size()):  # every op on a LocalTensor, Parameter's detach included
            with self._torch.no_grad():
                own = value.detach().clone()
            return self._torch.nn.Parameter(own, requires_grad=own.dtype.is_floating_point or own.is_complex())

    def variable_read(self, handle: Any) -> Any:
        return handle

    def variable_assign(self, handle: Any, value: Any) -> None:
        """Copy in place, so that optimizers holding the Parameter see the new value."""
        with self._torch.no_grad(), self.spmd(handle.device_mesh.size()):
            handle.copy_(value)

    # ==========================================================================================
    # Helpers
    # ==========================================================================================
    def _refuse_traced(self, what: str, value: Any) -> None:
        """Raise ``UnsupportedLayoutError(feature="traced")`` under ``torch.compile``'s tracer (see :meth:`is_traced`).

        The front-end refuses traced values for every other data function; a ``call_with_layout``
        has no value to check before its hook runs.
        """
        if self._torch.compiler.is_compiling():
            raise UnsupportedLayoutError(
                f"The torch driver cannot {what} inside torch.compile (a traced "
                f"{type(value).__module__}.{type(value).__qualname__}); call layoutcore outside the compiled "
                "function, and DTensor.redistribute inside it (capability 'traced' not supported by torch).",
                driver=self.name,
                feature=Capability.TRACED,
                value=value,
            )

    def _from_local(self, shards: dict[int, Any], layout: Layout, shape: tuple[int, ...], like: Any) -> Any:
        """A DTensor over ``shards`` (mesh position -> this rank's own tensor, of ``like``'s dtype), without
        any collective.

        ``run_check=False``: the front-end already checked shapes and replicas; torch's check would
        silently overwrite differing replicas from the first rank of each group instead of raising.
        """
        mesh = layout.require_mesh()
        device_mesh = self.device_mesh(mesh)
        placements = _convert.placements(layout)
        size, stride = self._torch.Size(shape), _convert.contiguous_stride(shape)
        if self.world().simulated:
            with self.spmd(mesh.size):
                local = _private.make_local_tensor(shards)
                if len(shards) == mesh.size and not local.requires_grad:  # every rank present, no autograd
                    return _private.simulated_dtensor(self._DTensor, local, device_mesh, placements, size, stride)
                return self._DTensor.from_local(
                    local, device_mesh, placements, run_check=False, shape=size, stride=stride
                )
        if not shards:  # this rank holds no position of the mesh: torch's empty local shard
            return self._DTensor.from_local(
                like.new_empty(0), device_mesh, placements, run_check=False, shape=size, stride=stride
            )
        (local,) = shards.values()
        return self._DTensor.from_local(local, device_mesh, placements, run_check=False, shape=size, stride=stride)


def _shares_storage(a: Any, b: Any) -> bool:
    """Whether two local blocks (plain tensors, or LocalTensors of one tensor per simulated rank) share
    memory on any rank."""
    if _private.is_local_tensor(a) and _private.is_local_tensor(b):
        ours, theirs = _private.local_tensors(a), _private.local_tensors(b)
        return any(_shares_storage(t, theirs[r]) for r, t in ours.items() if r in theirs)
    if _private.is_local_tensor(a) or _private.is_local_tensor(b):
        return False
    if a.numel() == 0 or b.numel() == 0:
        return False
    return bool(a.untyped_storage().data_ptr() == b.untyped_storage().data_ptr())
