"""Lay out an ``nn.Module`` by a LayoutMap: its parameters, and the inputs and outputs of its forward calls.

:func:`distribute_module_parameters` is torch's counterpart of ``layout_map_scope``; :func:`distribute_module`
adds forward hooks, as torch's ``parallelize_module`` (``PrepareModuleInput`` / ``PrepareModuleOutput``)
does, but with layoutcore ``Layout`` values.

What torch cannot shard is refused with :class:`~layoutcore.UnsupportedLayoutError` naming the parameter,
before any parameter is replaced (measured on torch 2.13; never silently replicated):

* ``MultiheadAttention.in_proj_weight`` / ``in_proj_bias`` sharded on axis 0 (feature
  ``"fused_qkv_projection"``): the fused q/k/v projection's output is unflattened to ``(3, embed_dim)``,
  which torch's sharding propagation rejects ("Cannot unflatten unevenly sharded tensor"). Shard
  ``out_proj`` and the feed-forward ``Linear`` layers instead, or axis 1 of ``in_proj_weight``.
* ``Embedding.weight`` sharded on axis 0 (the vocabulary) **in the single-process simulation** (feature
  ``"simulated_vocab_sharding"``): the backward pass fails inside torch (``AssertionError`` in
  ``MaskPartial._reduce_value`` under ``LocalTensorMode``). It trains on a real process group (gloo,
  measured), where the driver lets it through.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from typing import Any, Literal

from layoutcore import Layout, LayoutError, LayoutMap, UnsupportedLayoutError, get_driver
from layoutcore.driver import Limitation
from layoutcore.geometry import chunk_size

from ._module_hooks import ModuleLayouts, install_dtensor_hooks, per_module

__all__ = ["Activations", "ModuleLayouts", "distribute_module", "distribute_module_parameters"]

#: What flows between laid-out layers: ``"local"`` plain per-rank tensors (as torch's ``ColwiseParallel`` /
#: ``RowwiseParallel`` hand them over), or ``"dtensor"`` DTensors end to end.
Activations = Literal["local", "dtensor"]


def distribute_module_parameters(module: Any, layout_map: LayoutMap, *, driver: Any = None) -> dict[str, Layout]:
    """Replace every parameter of ``module`` by a DTensor ``nn.Parameter`` laid out by ``layout_map``.

    Each parameter is looked up by its dotted name from ``module.named_parameters()`` (``"0.weight"``,
    ``"encoder.layers.1.bias"``) with the map's own rules (exact key first, then its regex match mode);
    a parameter nothing matches is fully replicated on the map's mesh. Parameters are replaced in place
    on their owning submodule, keeping ``requires_grad``; a parameter shared by several submodules is
    distributed once. torch's ``distribute_module`` does the same with a hand-written ``partition_fn``.

    Args:
        module: a ``torch.nn.Module``.
        layout_map: the layouts, as for :func:`layoutcore.layout_map_scope`.
        driver: the driver (default: the ``"torch"`` driver).

    Returns:
        The layout given to each parameter, by dotted name.

    Raises:
        LayoutError: a matched layout's rank differs from the parameter's (naming the parameter), a
            layout has no mesh, or nothing matches and the map has no mesh to replicate on.
        AmbiguousLayoutError: a name matches several patterns (``on_multiple="error"``).
        UnsupportedLayoutError: torch cannot shard that parameter so (see the module docstring), or the
            driver cannot express the layout for its shape; the message names the parameter.
    """
    import torch

    if not isinstance(module, torch.nn.Module):
        raise LayoutError(f"distribute_module_parameters expects a torch.nn.Module. Received: {module!r}", value=module)
    drv = get_driver(driver if driver is not None else "torch")
    return _distribute_parameters(module, layout_map, drv, local_activations=False)


def _distribute_parameters(
    module: Any, layout_map: LayoutMap, drv: Any, *, local_activations: bool
) -> dict[str, Layout]:
    """:func:`distribute_module_parameters` on a checked module; ``local_activations``: an Embedding's vocabulary
    axis may be sharded in the simulation (local activations compute its lookup without DTensor's MaskPartial),
    and attention heads must not be split between ranks (:func:`_refuse_split_heads`)."""
    import torch

    if not isinstance(layout_map, LayoutMap):
        raise LayoutError(f"Expected a layoutcore LayoutMap. Received: {layout_map!r}", value=layout_map)
    # Plan first, so that a bad entry raises before any parameter is replaced.
    plan: list[tuple[str, Any, Layout]] = []
    done: set[int] = set()
    for prefix, owner in module.named_modules(remove_duplicate=False):
        for local_name, param in list(owner.named_parameters(recurse=False)):
            name = f"{prefix}.{local_name}" if prefix else local_name
            if id(param) in done:
                continue
            done.add(id(param))
            layout = layout_map.layout_for(name, tuple(param.shape), kind="parameter")
            _refuse_what_torch_cannot_shard(drv, owner, local_name, name, layout, local_activations)
            plan.append((name, param, layout))
    if local_activations:  # local activations: model code reshapes each rank's part by head_dim
        _refuse_split_heads(module, {name: layout for name, _param, layout in plan})
    replaced: dict[int, Any] = {}
    result: dict[str, Layout] = {}
    for name, param, layout in plan:
        value = drv.distribute_tensor(param.detach(), layout)
        with _spmd(drv, layout):  # Parameter() detaches: an op on the simulation's LocalTensors
            replaced[id(param)] = torch.nn.Parameter(value, requires_grad=param.requires_grad)
        result[name] = layout
    # Re-register on every owner (shared parameters included) only after all succeeded.
    for _prefix, owner in module.named_modules(remove_duplicate=False):
        for local_name, param in list(owner.named_parameters(recurse=False)):
            distributed = replaced.get(id(param))
            if distributed is not None:
                owner.register_parameter(local_name, distributed)
    return result


def distribute_module(
    module: Any,
    layout_map: LayoutMap,
    *,
    input_layouts: ModuleLayouts | None = None,
    output_layouts: ModuleLayouts | None = None,
    activations: Activations | None = None,
    driver: Any = None,
) -> Any:
    """Lay out ``module``'s parameters by ``layout_map`` and run its forward on them (docs/design.md#trees-and-model-code).

    Parameters are laid out as :func:`distribute_module_parameters` does. Then, by ``activations`` (default:
    ``"dtensor"`` when ``input_layouts`` or ``output_layouts`` is given, since layouts for activations place
    DTensors, as ``distribute_module(module, layout_map, input_layouts=..., output_layouts=...)`` always did;
    ``"local"`` otherwise):

    * ``"local"``: the model's own code sees plain per-rank tensors between laid-out layers, as
      torch's ``ColwiseParallel`` / ``RowwiseParallel`` hand them over, so real model code (rotary
      embeddings, masks, reshapes by head count, ``model(input_ids=..., labels=...)`` returning a
      ``ModelOutput``) runs unchanged. Each submodule that owns parameters gets a style from its own
      parameters' layouts:

      - ``Linear`` with ``weight`` sharded on axis 0 (bias alike or absent), *column-parallel*: takes its
        input as the same on every rank, hands out its local shard of the last axis;
      - ``Linear`` with ``weight`` sharded on axis 1 (bias replicated or absent), *row-parallel*: takes the
        local shard of the last axis, sums the ranks' partial outputs, hands out the replicated result;
      - ``Embedding`` with ``weight`` sharded on axis 0, *vocabulary-parallel*: each rank looks up the ids it
        holds and the ranks' lookups are summed (also in the simulation; with ``padding_idx``, ``max_norm``
        or ``sparse`` it goes through DTensor, which the simulation refuses as ``"simulated_vocab_sharding"``);
      - any other module with a sharded parameter: input taken as replicated, output gathered (replicated);
      - a module whose parameters are all replicated (norms): runs on their local values.

      A :func:`layoutcore_torch.from_tp_plan` map also carries the plan's wishes that parameter layouts
      cannot: ``colwise_rep`` / ``colwise_gather_output`` gather the output, ``replicated_with_grad_allreduce``
      sums the gradients of replicated parameters that see per-rank activations. Every rank must pass the
      same inputs (tensor parallelism). ``input_layouts`` / ``output_layouts`` need ``"dtensor"``. Model code
      reshapes a projection's local output by its attention module's ``head_dim`` (transformers' q/k/v
      projections), so each rank must hold whole heads: a column-parallel ``Linear`` under a module with an
      int ``head_dim`` whose heads do not divide over its shards (4 key/value heads over 8 ranks) is refused.
    * ``"dtensor"``: DTensors flow end to end. For each module named in ``input_layouts``, a forward pre-hook
      places its positional inputs before ``forward`` runs (a plain tensor is distributed, a DTensor relaid
      out); for each module named in ``output_layouts``, a forward hook relays its output out after it,
      reducing pending sums (``Partial``) into the target layout. Model code that mixes its own plain tensors
      with activations fails inside torch here; that is what ``"local"`` is for.

    With ``"dtensor"``, ``module``'s forward runs with torch's math attention kernel (``sdpa_kernel(SDPBackend.MATH)``),
    whose backward pass DTensor can shard (the default CPU kernel's cannot). In the single-process simulation, run
    the forward and backward passes and the optimizer step under ``layoutcore_torch.spmd(mesh)``.

    Args:
        module: a ``torch.nn.Module``.
        layout_map: the parameters' layouts.
        input_layouts: (``"dtensor"`` only) a ``Layout`` for the module's first positional input, a sequence
            (one per positional input, ``None`` to leave one alone), or a mapping from submodule name (``""``
            for ``module`` itself, ``"encoder.layers.0"``) to either.
        output_layouts: (``"dtensor"`` only) the same for outputs (a tensor, or a tuple/list of tensors).
        activations: ``"local"`` or ``"dtensor"`` (above); ``None`` (default) infers it from the layouts.
        driver: the driver (default: the ``"torch"`` driver).

    Returns:
        ``module`` itself.

    Raises:
        LayoutError: a bad layout map or parameter layout (see :func:`distribute_module_parameters`), a
            submodule name ``module`` does not have, an entry that is not a Layout, ``input_layouts`` /
            ``output_layouts`` with an explicit ``activations="local"``, an unknown ``activations``, attention
            heads split between ranks under local activations (naming the parameter, its heads and the ranks);
            at forward time, a layout for an input the call did not pass or for a value that is not a tensor.
        UnsupportedLayoutError: torch cannot shard a parameter so (naming it).
    """
    import torch

    if not isinstance(module, torch.nn.Module):
        raise LayoutError(f"distribute_module expects a torch.nn.Module. Received: {module!r}", value=module)
    placed = input_layouts is not None or output_layouts is not None
    if activations is None:
        activations = "dtensor" if placed else "local"
    if activations not in ("local", "dtensor"):
        raise LayoutError(f"activations must be 'local' or 'dtensor'. Received: {activations!r}", value=activations)
    if activations == "local" and placed:
        raise LayoutError(
            "input_layouts / output_layouts place DTensor activations, but activations='local' was passed: the "
            "model's code would get plain per-rank tensors. Pass activations='dtensor' (the default when layouts "
            "are given), or drop the layouts.",
            value=input_layouts if input_layouts is not None else output_layouts,
        )
    inputs = per_module(module, input_layouts, "input_layouts")
    outputs = per_module(module, output_layouts, "output_layouts")
    drv = get_driver(driver if driver is not None else "torch")
    layouts = _distribute_parameters(module, layout_map, drv, local_activations=activations == "local")
    if activations == "local":  # attention runs on plain local tensors: any kernel
        _install_local_styles(module, layouts, layout_map, drv)
        return module
    install_dtensor_hooks(module, inputs, outputs, drv)
    return module


def _install_local_styles(module: Any, layouts: Mapping[str, Layout], layout_map: LayoutMap, driver: Any) -> None:
    """Give each submodule owning parameters its local-activation style (see :func:`distribute_module`)."""
    import re

    import torch

    hints: tuple[tuple[re.Pattern[str], str], ...] = tuple(getattr(layout_map, "module_hints", ()))
    for prefix, owner in module.named_modules():
        own = dict(owner.named_parameters(recurse=False))
        if not own:
            continue
        lays = {n: driver.layout_from_placements(p.placements, p.device_mesh, p.ndim) for n, p in own.items()}
        hint = next((h for pattern, h in hints if pattern.search(prefix)), None)
        name = prefix or "<root>"
        sharded = {n for n, lay in lays.items() if not lay.is_fully_replicated()}
        style: Any
        if not sharded:
            style = _ReplicatedParameters(driver, name, owner, sum_gradients=hint == "sum_gradients")
        elif isinstance(owner, torch.nn.Linear) and "weight" in lays and set(lays) <= {"weight", "bias"}:
            w, b = lays["weight"], lays.get("bias")
            if w.axes[0] is not None and w.axes[1] is None and (b is None or b.axes == (w.axes[0],)):
                style = _ColumnParallel(driver, w, gather=hint == "gather_output")
            elif w.axes[0] is None and w.axes[1] is not None and (b is None or b.is_fully_replicated()):
                style = _RowParallel(driver, w, in_features=owner.in_features)
            else:
                style = _Gathered(driver, w)
        elif isinstance(owner, torch.nn.Embedding) and _VocabularyParallel.handles(owner, lays["weight"]):
            _VocabularyParallel(driver, owner, lays["weight"]).install(owner)
            continue
        else:
            style = _Gathered(driver, next(lays[n] for n in sharded))
        owner.register_forward_pre_hook(style.before)
        owner.register_forward_hook(style.after, always_call=True)


def _placements(layout: Layout, shard_axes: tuple[str, ...], dim: int, kind: str = "shard") -> list[Any]:
    """One placement per mesh axis of ``layout``'s mesh: ``Shard(dim)`` (or ``Partial()``) on ``shard_axes``."""
    mesh = layout.mesh
    assert mesh is not None
    return list(_placements_cached(mesh.axis_names, shard_axes, dim, kind))


@functools.lru_cache(maxsize=1024)
def _placements_cached(
    axis_names: tuple[str, ...], shard_axes: tuple[str, ...], dim: int, kind: str
) -> tuple[Any, ...]:
    from torch.distributed.tensor import Partial, Replicate, Shard

    on = Partial() if kind == "partial" else Shard(dim)
    return tuple(on if name in shard_axes else Replicate() for name in axis_names)


def _shards(layout: Layout, axes: tuple[str, ...]) -> int:
    """How many blocks a tensor axis split over mesh ``axes`` of ``layout``'s mesh has."""
    mesh = layout.mesh
    assert mesh is not None
    count = 1
    for name in axes:
        count *= mesh.shape[mesh.axis_names.index(name)]
    return count


def _to_dtensor(driver: Any, value: Any, layout: Layout, placements: list[Any], shape: Any = None) -> Any:
    """``value`` as a DTensor with ``placements``: a plain tensor is this rank's part, a DTensor is relaid out."""
    from torch.distributed.tensor import DTensor

    device_mesh = driver.device_mesh(layout.mesh)
    if isinstance(value, DTensor):
        return value if list(value.placements) == placements else value.redistribute(device_mesh, placements)
    if shape is None:
        return DTensor.from_local(value, device_mesh, placements, run_check=False)
    stride, step = [], 1
    for size in reversed(shape):  # contiguous strides of the global shape
        stride.append(step)
        step *= int(size)
    return DTensor.from_local(
        value, device_mesh, placements, run_check=False, shape=tuple(shape), stride=tuple(reversed(stride))
    )


def _local(driver: Any, value: Any, layout: Layout, placements: list[Any]) -> Any:
    """A DTensor output relaid out to ``placements`` and handed on as this rank's plain tensor."""
    from torch.distributed.tensor import DTensor

    if not isinstance(value, DTensor):
        return value
    if list(value.placements) != placements:
        value = value.redistribute(driver.device_mesh(layout.mesh), placements)
    return value.to_local()


class _ColumnParallel:
    """``Linear`` with its output features sharded: replicated input in, local shard of the last axis out
    (``gather``: the replicated output), as torch's ``ColwiseParallel``."""

    __slots__ = ("axes", "driver", "gather", "layout")

    def __init__(self, driver: Any, weight: Layout, *, gather: bool) -> None:
        self.driver, self.layout, self.gather = driver, weight, gather
        self.axes = weight.mesh_axes(0)

    def before(self, _module: Any, args: tuple[Any, ...]) -> tuple[Any, ...]:
        replicated = _placements(self.layout, (), 0)
        return (_to_dtensor(self.driver, args[0], self.layout, replicated), *args[1:])

    def after(self, _module: Any, _args: Any, output: Any) -> Any:
        dim = output.ndim - 1
        return _local(self.driver, output, self.layout, _placements(self.layout, () if self.gather else self.axes, dim))


class _RowParallel:
    """``Linear`` with its input features sharded: local shard of the last axis in, the ranks' partial
    outputs summed into the replicated output, as torch's ``RowwiseParallel``."""

    __slots__ = ("axes", "driver", "in_features", "layout", "shards")

    def __init__(self, driver: Any, weight: Layout, *, in_features: int) -> None:
        self.driver, self.layout, self.in_features = driver, weight, in_features
        self.axes = weight.mesh_axes(1)
        self.shards = _shards(weight, self.axes)

    def before(self, _module: Any, args: tuple[Any, ...]) -> tuple[Any, ...]:
        x = args[0]
        placements = _placements(self.layout, self.axes, x.ndim - 1)
        width = x.shape[-1]
        if self.shards > 1 and isinstance(width, int) and width == self.in_features:
            # The whole input (the model's code made it replicated, e.g. a norm's output): each rank takes its part.
            whole = _to_dtensor(self.driver, x, self.layout, _placements(self.layout, (), 0))
            return (_to_dtensor(self.driver, whole, self.layout, placements), *args[1:])
        shape = (*x.shape[:-1], self.in_features)
        return (_to_dtensor(self.driver, x, self.layout, placements, shape), *args[1:])

    def after(self, _module: Any, _args: Any, output: Any) -> Any:
        return _local(self.driver, output, self.layout, _placements(self.layout, (), 0))


class _Gathered:
    """Any other module with a sharded parameter: its first input taken as replicated, every tensor output
    gathered into a replicated one. Always right; it moves more than the two styles above."""

    __slots__ = ("driver", "layout")

    def __init__(self, driver: Any, layout: Layout) -> None:
        self.driver, self.layout = driver, layout

    def before(self, _module: Any, args: tuple[Any, ...]) -> tuple[Any, ...]:
        import torch

        if not args or not isinstance(args[0], torch.Tensor):
            return args
        return (_to_dtensor(self.driver, args[0], self.layout, _placements(self.layout, (), 0)), *args[1:])

    def after(self, _module: Any, _args: Any, output: Any) -> Any:
        from torch.utils import _pytree

        replicated = _placements(self.layout, (), 0)
        return _pytree.tree_map(lambda v: _local(self.driver, v, self.layout, replicated), output)


class _ReplicatedParameters:
    """A module whose parameters are all replicated (norms): its forward runs on their local values.

    Their gradients are each rank's own (``Replicate``), right when the module sees the same activations on
    every rank; ``sum_gradients`` (a plan's ``replicated_with_grad_allreduce``, for per-head norms that see
    only this rank's heads) sums them over the ranks instead. In the simulation a replicated parameter whose
    gradient differs between ranks without ``sum_gradients`` is refused: a real group would silently keep
    different copies of it.
    """

    __slots__ = ("driver", "name", "saved", "sum_gradients")

    def __init__(self, driver: Any, name: str, owner: Any, *, sum_gradients: bool) -> None:
        self.driver, self.name, self.sum_gradients = driver, name, sum_gradients
        self.saved: list[dict[str, Any]] = []

    def before(self, module: Any, args: tuple[Any, ...]) -> None:
        from torch.distributed.tensor import DTensor, Partial

        saved = {}
        for local_name, param in list(module._parameters.items()):
            if not isinstance(param, DTensor):
                continue
            saved[local_name] = param
            if self.sum_gradients:
                local = param.to_local(grad_placements=[Partial()] * param.device_mesh.ndim)
            else:
                local = param.to_local()
                if local.requires_grad and _simulated(self.driver):
                    local.register_hook(_SameOnEveryRank(f"{self.name}.{local_name}"))
            module._parameters[local_name] = local
        self.saved.append(saved)

    def after(self, module: Any, _args: Any, output: Any) -> Any:
        if self.saved:
            module._parameters.update(self.saved.pop())
        return output


class _SameOnEveryRank:
    """Gradient hook (simulation only): refuse a replicated parameter's gradient that differs between ranks."""

    __slots__ = ("name",)

    def __init__(self, name: str) -> None:
        self.name = name

    def __call__(self, grad: Any) -> None:
        from . import _private

        if not _private.is_local_tensor(grad):
            return
        import torch

        values = list(_private.local_tensors(grad).values())
        if all(torch.equal(values[0], v) for v in values[1:]):
            return
        raise UnsupportedLayoutError(
            f"Replicated parameter {self.name!r} gets a different gradient on each simulated rank: its module sees "
            "per-rank activations (e.g. a per-head norm between column- and row-parallel layers). A real group "
            "would keep diverging copies of it. Shard it, or sum its gradients over the ranks (from_tp_plan's "
            "'replicated_with_grad_allreduce').",
            driver="torch",
            feature=Limitation.PER_RANK_GRADIENTS,
            value=self.name,
        )


class _VocabularyParallel:
    """``Embedding`` with its vocabulary sharded: each rank looks up the ids in its rows (others give zeros)
    and the ranks' lookups are summed, as torch's ``RowwiseParallel`` does for an Embedding. Written with
    local ops and one reduction, so the simulation trains it too (DTensor's own ``MaskPartial`` path fails
    there, torch 2.13)."""

    __slots__ = ("axes", "driver", "layout", "owner", "rows")

    def __init__(self, driver: Any, owner: Any, layout: Layout) -> None:
        self.driver, self.layout, self.owner, self.rows = driver, layout, owner, owner.num_embeddings
        self.axes = layout.mesh_axes(0)

    @staticmethod
    def handles(owner: Any, layout: Layout) -> bool:
        """Whether ``owner`` (an Embedding) with ``layout`` on its weight takes this style: vocabulary sharded,
        no option that a local lookup would change, and no rank with an empty block of rows."""
        if layout.rank != 2 or layout.axes[0] is None or layout.axes[1] is not None:
            return False
        if owner.padding_idx is not None or owner.max_norm is not None or owner.sparse or owner.scale_grad_by_freq:
            return False
        shards = _shards(layout, layout.mesh_axes(0))
        block = chunk_size(owner.num_embeddings, shards)
        return bool(block * (shards - 1) < owner.num_embeddings)

    def install(self, owner: Any) -> None:
        owner.forward = self.forward  # an instance attribute: nn.Module.__call__ calls it

    def forward(self, ids: Any) -> Any:
        import torch
        import torch.nn.functional as F

        replicated = _placements(self.layout, (), 0)
        # This rank's first and last row id (per-rank tensors in the simulation), cut as the weight's rows are.
        # Made on every call: a per-rank tensor kept from one spmd context into another misbehaves (a bench
        # whose first call ran under nested spmd contexts then ran 4x slower), and it costs one arange.
        rows = _to_dtensor(self.driver, torch.arange(self.rows), self.layout, replicated)
        owned = _local(self.driver, rows, self.layout, _placements(self.layout, self.axes, 0))
        low, high = owned[0], owned[-1]
        ids = _local(self.driver, ids, self.layout, replicated)
        inside = (ids >= low) & (ids <= high)
        local_ids = torch.where(inside, ids - low, torch.zeros_like(ids))
        out = F.embedding(local_ids, self.owner.weight.to_local())
        out = out * inside.unsqueeze(-1).to(out.dtype)
        partial = _to_dtensor(self.driver, out, self.layout, _placements(self.layout, self.axes, 0, "partial"))
        return _local(self.driver, partial, self.layout, replicated)


def _refuse_what_torch_cannot_shard(
    driver: Any, owner: Any, local_name: str, name: str, layout: Layout, local_vocabulary: bool = False
) -> None:
    """Raise where torch 2.13 cannot run ``owner`` with its parameter ``local_name`` laid out by ``layout``."""
    import torch

    if layout.rank == 0 or layout.axes[0] is None:
        return
    if isinstance(owner, torch.nn.MultiheadAttention) and local_name in ("in_proj_weight", "in_proj_bias"):
        raise UnsupportedLayoutError(
            f"torch cannot shard parameter {name!r} (MultiheadAttention's fused q/k/v projection) on axis 0 by "
            f"{layout}: its output is unflattened to (3, embed_dim), which DTensor's sharding propagation refuses. "
            "Keep it replicated, or shard axis 1, out_proj or the feed-forward layers.",
            driver="torch",
            feature=Limitation.FUSED_QKV_PROJECTION,
            value=layout,
        )
    if isinstance(owner, torch.nn.Embedding) and local_name == "weight" and _simulated(driver):
        if local_vocabulary and _VocabularyParallel.handles(owner, layout):
            return
        raise UnsupportedLayoutError(
            f"The torch driver's single-process simulation cannot train parameter {name!r} (an Embedding's "
            f"vocabulary axis) sharded by {layout} with DTensors flowing (activations='dtensor', or an Embedding with "
            "padding_idx/max_norm/sparse): torch 2.13's backward fails under LocalTensorMode. Use activations='local', "
            "shard its axis 1, or run on a real process group, where this works.",
            driver="torch",
            feature=Limitation.SIMULATED_VOCAB_SHARDING,
            value=layout,
        )


#: Output projections of an attention module: their axis 0 holds the model's hidden features, not heads.
_OUTPUT_PROJECTIONS = frozenset({"o_proj", "out_proj", "c_proj", "wo", "dense"})


def _refuse_split_heads(module: Any, layouts: Mapping[str, Layout]) -> None:
    """Raise where a column-parallel ``Linear`` under an attention module (a module with an int ``head_dim``,
    as transformers' attention classes have) would give a rank part of a head: with local activations the
    model's code reshapes each rank's output to ``(..., -1, head_dim)``, which fails deep inside attention
    (4 key/value heads over 8 ranks) or, where sizes happen to fit, mixes heads."""
    import torch

    for prefix, attention in module.named_modules():
        head_dim = getattr(attention, "head_dim", None)
        if not isinstance(head_dim, int) or head_dim <= 0 or isinstance(attention, torch.nn.MultiheadAttention):
            continue
        for child, linear in attention.named_children():
            name = f"{prefix}.{child}.weight" if prefix else f"{child}.weight"
            layout = layouts.get(name)
            if not isinstance(linear, torch.nn.Linear) or child in _OUTPUT_PROJECTIONS or layout is None:
                continue
            if layout.axes[0] is None or linear.out_features % head_dim:
                continue
            heads, ranks = linear.out_features // head_dim, _shards(layout, layout.mesh_axes(0))
            if heads % ranks:
                raise LayoutError(
                    f"Parameter {name!r} holds {heads} attention heads of {head_dim} features ({prefix or '<root>'}"
                    f".head_dim), and {layout} splits them over {ranks} ranks: each rank must hold whole heads, or "
                    f"the model's reshape by head_dim fails inside attention. Use a mesh axis whose size divides "
                    f"{heads}, or replicate {child}.",
                    value=layout,
                )


def _simulated(driver: Any) -> bool:
    world = getattr(driver, "world", None)
    return bool(world is not None and world().simulated)


def _spmd(driver: Any, layout: Layout) -> Any:
    import contextlib

    spmd = getattr(driver, "spmd", None)
    mesh = layout.mesh
    return spmd(mesh.size) if spmd is not None and mesh is not None else contextlib.nullcontext()
