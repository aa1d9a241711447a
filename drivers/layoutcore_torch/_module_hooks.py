"""``distribute_module``'s hooks for DTensor activations (``activations="dtensor"``): placing a submodule's
inputs and outputs by ``input_layouts`` / ``output_layouts``, and running the forward pass with torch's math
attention kernel, whose backward pass DTensor can shard."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from layoutcore import Layout, LayoutError

__all__ = ["ModuleLayouts", "install_dtensor_hooks", "per_module"]

#: What ``input_layouts`` / ``output_layouts`` take: a Layout (the first positional input, or the output),
#: a sequence of Layouts (one per positional input or output element; ``None`` leaves that one alone),
#: or a mapping from submodule name (``""`` is the module itself) to either.
ModuleLayouts = Layout | Sequence[Layout | None] | Mapping[str, Layout | Sequence[Layout | None]]


def install_dtensor_hooks(
    module: Any,
    inputs: Mapping[str, tuple[Layout | None, ...]],
    outputs: Mapping[str, tuple[Layout | None, ...]],
    driver: Any,
) -> None:
    """Run ``module``'s forward under the math attention kernel and place the named submodules' inputs and
    outputs (``inputs`` / ``outputs`` from :func:`per_module`)."""
    # torch's default CPU attention kernel (flash) has no DTensor sharding rule for its backward pass (torch
    # 2.13: NotImplementedError for aten._scaled_dot_product_flash_attention_for_cpu_backward); the math
    # kernel is made of ordinary ops that DTensor shards. So the module's forward runs with the math kernel.
    attention = _MathAttention()
    module.register_forward_pre_hook(attention.enter, prepend=True)
    module.register_forward_hook(attention.exit, always_call=True)
    for name, layouts in inputs.items():
        module.get_submodule(name).register_forward_pre_hook(_InputHook(driver, name, layouts))
    for name, layouts in outputs.items():
        module.get_submodule(name).register_forward_hook(_OutputHook(driver, name, layouts))


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
        return tuple(_place_each(self.driver, self.name, args, self.layouts, "input"))


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
        return type(output)(_place_each(self.driver, self.name, output, self.layouts, "output"))


def _place_each(
    driver: Any, name: str, values: Sequence[Any], layouts: tuple[Layout | None, ...], kind: str
) -> list[Any]:
    """``values`` (a module's positional inputs or its outputs, ``kind``) with the first ``len(layouts)`` placed
    by their layouts (``None`` leaves one alone)."""
    if len(layouts) > len(values):
        counted, got = ("positional inputs", "was called with") if kind == "input" else ("outputs", "returned")
        raise LayoutError(
            f"{kind}_layouts for module {name or '<root>'!r} lay out {len(layouts)} {counted}, but forward {got} "
            f"{len(values)}.",
            value=layouts,
        )
    placed = list(values)
    for index, layout in enumerate(layouts):
        if layout is not None:
            placed[index] = _place(driver, values[index], layout, f"{kind} {index} of module {name!r}")
    return placed


def _place(driver: Any, value: Any, layout: Layout, what: str) -> Any:
    """``value`` laid out by ``layout``: a DTensor is relaid out (pending sums reduced), a tensor distributed."""
    import torch

    if driver.is_distributed(value):
        return driver.relayout(value, layout)
    if not isinstance(value, torch.Tensor):
        raise LayoutError(f"{what} is a {type(value).__name__}, not a tensor; it cannot take {layout}.", value=value)
    return driver.distribute_tensor(value, layout)


def per_module(module: Any, spec: ModuleLayouts | None, what: str) -> dict[str, tuple[Layout | None, ...]]:
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
