"""Lay out an ``nn.Module``'s parameters by a LayoutMap: torch's counterpart of ``layout_map_scope``."""

from __future__ import annotations

from typing import Any

from layoutcore import Layout, LayoutError, LayoutMap, get_driver

__all__ = ["distribute_module_parameters"]


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
        UnsupportedLayoutError: the torch driver cannot express a layout for that parameter's shape.
    """
    import torch

    if not isinstance(module, torch.nn.Module):
        raise LayoutError(f"distribute_module_parameters expects a torch.nn.Module. Received: {module!r}", value=module)
    if not isinstance(layout_map, LayoutMap):
        raise LayoutError(f"Expected a layoutcore LayoutMap. Received: {layout_map!r}", value=layout_map)
    drv = get_driver(driver if driver is not None else "torch")
    # Plan first, so that a bad entry raises before any parameter is replaced.
    plan: list[tuple[str, Any, str, Any, Layout]] = []
    done: dict[int, str] = {}
    for prefix, owner in module.named_modules(remove_duplicate=False):
        for local_name, param in list(owner.named_parameters(recurse=False)):
            name = f"{prefix}.{local_name}" if prefix else local_name
            if id(param) in done:
                continue
            done[id(param)] = name
            plan.append(
                (name, owner, local_name, param, layout_map.layout_for(name, tuple(param.shape), kind="parameter"))
            )
    replaced: dict[int, Any] = {}
    result: dict[str, Layout] = {}
    for name, _owner, _local, param, layout in plan:
        value = drv.distribute_tensor(param.detach(), layout)
        new = torch.nn.Parameter(value, requires_grad=param.requires_grad)
        replaced[id(param)] = new
        result[name] = layout
    # Re-register on every owner (shared parameters included) only after all succeeded.
    for _prefix, owner in module.named_modules(remove_duplicate=False):
        for local_name, param in list(owner.named_parameters(recurse=False)):
            distributed = replaced.get(id(param))
            if distributed is not None:
                owner.register_parameter(local_name, distributed)
    return result
