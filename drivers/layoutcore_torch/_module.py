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

from collections.abc import Mapping, Sequence
from typing import Any, Literal

from layoutcore import Layout, LayoutError, LayoutMap, UnsupportedLayoutError, get_driver
from layoutcore.driver import Limitation
from layoutcore.geometry import chunk_size

__all__ = ["ModuleLayouts", "distribute_module", "distribute_module_parameters"]

#: What ``input_layouts`` / ``output_layouts`` take: a Layout (the first positional input, or the output),
#: a sequence of Layouts (one per positional input or output element; ``None`` leaves that one alone),
#: or a mapping from submodule name (``""`` is the module itself) to either.
ModuleLayouts = Layout | Sequence[Layout | None] | Mapping[str, Layout | Sequence[Layout | None]]


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
    if not isinstance(layout_map, LayoutMap):
        raise LayoutError(f"Expected a layoutcore LayoutMap. Received: {layout_map!r}", value=layout_map)
    drv = get_driver(driver if driver is not None else "torch")
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
            _refuse_what_torch_cannot_shard(drv, owner, local_name, name, layout)
            plan.append((name, param, layout))
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
    driver: Any = None,
) -> Any:
    """Lay out ``module``'s parameters by ``layout_map`` and place its forward inputs and outputs (DESIGN §6).

    Parameters are laid out as :func:`distribute_module_parameters` does. For each module named in
    ``input_layouts``, a forward pre-hook places its positional inputs before ``forward`` runs (a plain
    tensor is distributed, a DTensor relaid out); for each module named in ``output_layouts``, a forward
    hook relays its output out after it, reducing pending sums (``Partial``) into the target layout.
    ``module``'s forward runs with torch's math attention kernel (``sdpa_kernel(SDPBackend.MATH)``), whose
    backward pass DTensor can shard (the default CPU kernel's cannot). In the single-process simulation, run the forward and backward passes under
    ``layoutcore_torch.spmd(mesh)``.

    Args:
        module: a ``torch.nn.Module``.
        layout_map: the parameters' layouts.
        input_layouts: a ``Layout`` for the module's first positional input, a sequence (one per positional
            input, ``None`` to leave one alone), or a mapping from submodule name (``""`` for ``module``
            itself, ``"encoder.layers.0"``) to either.
        output_layouts: the same for outputs (a tensor, or a tuple/list of tensors).
        driver: the driver (default: the ``"torch"`` driver).

    Returns:
        ``module`` itself.

    Raises:
        LayoutError: a bad layout map or parameter layout (see :func:`distribute_module_parameters`), a
            submodule name ``module`` does not have, or an entry that is not a Layout; at forward time, a
            layout for an input the call did not pass or for a value that is not a tensor.
        UnsupportedLayoutError: torch cannot shard a parameter so (naming it).
    """
    import torch

    if not isinstance(module, torch.nn.Module):
        raise LayoutError(f"distribute_module expects a torch.nn.Module. Received: {module!r}", value=module)
    inputs = _per_module(module, input_layouts, "input_layouts")
    outputs = _per_module(module, output_layouts, "output_layouts")
    drv = get_driver(driver if driver is not None else "torch")
    distribute_module_parameters(module, layout_map, driver=drv)
    # torch's default CPU attention kernel (flash) has no DTensor sharding rule for its backward pass (torch
    # 2.13: NotImplementedError for aten._scaled_dot_product_flash_attention_for_cpu_backward); the math
    # kernel is made of ordinary ops that DTensor shards. So the module's forward runs with the math kernel.
    attention = _MathAttention()
    module.register_forward_pre_hook(attention.enter, prepend=True)
    module.register_forward_hook(attention.exit, always_call=True)
    for name, layouts in inputs.items():
        module.get_submodule(name).register_forward_pre_hook(_InputHook(drv, name, layouts))
    for name, layouts in outputs.items():
        module.get_submodule(name).register_forward_hook(_OutputHook(drv, name, layouts))
    return module


class _MathAttention:
    """Forward pre-hook and always-called forward hook that run the forward pass under
    ``sdpa_kernel(SDPBackend.MATH)`` (one entered context per thread and nesting level)."""

    __slots__ = ("_local",)

    def __init__(self) -> None:
        import threading

        self._local = threading.local()

    def enter(self, _module: Any, _args: tuple[Any, ...]) -> None:
        from torch.nn.attention import SDPBackend, sdpa_kernel

        context = sdpa_kernel([SDPBackend.MATH])
        context.__enter__()
        stack = getattr(self._local, "stack", None)
        if stack is None:
            stack = self._local.stack = []
        stack.append(context)

    def exit(self, _module: Any, _args: tuple[Any, ...], _output: Any) -> None:
        stack = getattr(self._local, "stack", None)
        if stack:
            stack.pop().__exit__(None, None, None)


class _InputHook:
    """Forward pre-hook: place the positional inputs by their layouts."""

    __slots__ = ("driver", "layouts", "name")

    def __init__(self, driver: Any, name: str, layouts: tuple[Layout | None, ...]) -> None:
        self.driver, self.name, self.layouts = driver, name, layouts

    def __call__(self, _module: Any, args: tuple[Any, ...]) -> tuple[Any, ...]:
        if len(self.layouts) > len(args):
            raise LayoutError(
                f"input_layouts for module {self.name or '<root>'!r} lay out {len(self.layouts)} positional inputs, "
                f"but forward was called with {len(args)}.",
                value=self.layouts,
            )
        placed = list(args)
        for index, layout in enumerate(self.layouts):
            if layout is not None:
                placed[index] = _place(self.driver, args[index], layout, f"input {index} of module {self.name!r}")
        return tuple(placed)


class _OutputHook:
    """Forward hook: relay out the output (each element of a tuple/list output) by its layout."""

    __slots__ = ("driver", "layouts", "name")

    def __init__(self, driver: Any, name: str, layouts: tuple[Layout | None, ...]) -> None:
        self.driver, self.name, self.layouts = driver, name, layouts

    def __call__(self, _module: Any, _args: tuple[Any, ...], output: Any) -> Any:
        if not isinstance(output, (tuple, list)):
            if len(self.layouts) != 1:
                raise LayoutError(
                    f"output_layouts for module {self.name!r} lay out {len(self.layouts)} outputs, but forward "
                    "returned one value.",
                    value=self.layouts,
                )
            (layout,) = self.layouts
            return (
                output if layout is None else _place(self.driver, output, layout, f"the output of module {self.name!r}")
            )
        if len(self.layouts) > len(output):
            raise LayoutError(
                f"output_layouts for module {self.name!r} lay out {len(self.layouts)} outputs, but forward returned "
                f"{len(output)}.",
                value=self.layouts,
            )
        placed = list(output)
        for index, layout in enumerate(self.layouts):
            if layout is not None:
                placed[index] = _place(self.driver, output[index], layout, f"output {index} of module {self.name!r}")
        return type(output)(placed)


def _place(driver: Any, value: Any, layout: Layout, what: str) -> Any:
    """``value`` laid out by ``layout``: a DTensor is relaid out (pending sums reduced), a tensor distributed."""
    import torch

    if driver.is_distributed(value):
        return driver.relayout(value, layout)
    if not isinstance(value, torch.Tensor):
        raise LayoutError(f"{what} is a {type(value).__name__}, not a tensor; it cannot take {layout}.", value=value)
    return driver.distribute_tensor(value, layout)


def _per_module(module: Any, spec: ModuleLayouts | None, what: str) -> dict[str, tuple[Layout | None, ...]]:
    """``{submodule name: layouts}`` from an ``input_layouts``/``output_layouts`` argument, checked."""
    if spec is None:
        return {}
    entries: Mapping[str, Any] = spec if isinstance(spec, Mapping) else {"": spec}
    result: dict[str, tuple[Layout | None, ...]] = {}
    for name, value in entries.items():
        if not isinstance(name, str):
            raise LayoutError(f"{what} keys are submodule names (str). Received: {name!r}", value=name)
        try:
            module.get_submodule(name)
        except AttributeError:
            raise LayoutError(f"{what} names submodule {name!r}, which the module does not have.", value=name) from None
        layouts = (value,) if isinstance(value, Layout) else tuple(value) if isinstance(value, Sequence) else None
        if layouts is None or not all(x is None or isinstance(x, Layout) for x in layouts):
            raise LayoutError(
                f"{what}[{name!r}] must be a Layout or a sequence of Layouts (None to skip one). Received: {value!r}",
                value=value,
            )
        for layout in layouts:
            if layout is not None and layout.mesh is None:
                raise LayoutError(f"{what}[{name!r}]: {layout!r} has no mesh.", value=layout)
        result[name] = layouts
    return result


def _refuse_what_torch_cannot_shard(driver: Any, owner: Any, local_name: str, name: str, layout: Layout) -> None:
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
        raise UnsupportedLayoutError(
            f"The torch driver's single-process simulation cannot train parameter {name!r} (an Embedding's "
            f"vocabulary axis) sharded by {layout}: torch 2.13's backward fails under LocalTensorMode. Shard its "
            "axis 1, or run on a real process group, where this works.",
            driver="torch",
            feature=Limitation.SIMULATED_VOCAB_SHARDING,
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
