"""torch's tensor factories (``torch.ones``, ``zeros``, ``empty``, ``full``) and their DTensor twins.

``call_with_layout(torch.ones, layout, 4, 6)`` becomes ``torch.distributed.tensor.ones(4, 6,
device_mesh=..., placements=...)``, which creates each shard in place instead of materialising the
global value. A call the twin cannot reproduce exactly (``device=``, ``out=``, ``generator=``, an
unknown keyword) returns None and takes the general path.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

from layoutcore import LayoutError
from layoutcore.driver import dtype_name

__all__ = ["dtensor_factory", "factory_call"]


def dtensor_factory(fn: Any) -> Callable[..., Any] | None:
    """The DTensor twin of a torch factory function, or None."""
    import torch
    import torch.distributed.tensor as tdt

    table: dict[Callable[..., Any], Callable[..., Any]] = {
        torch.ones: tdt.ones,
        torch.zeros: tdt.zeros,
        torch.empty: tdt.empty,
        torch.full: tdt.full,
        # Not rand/randn: on a CPU DeviceMesh torch's DTensor random factories have no RNG tracker and
        # fail (torch 2.13: AssertionError in _dtensor_init_helper), so they take the general path.
    }
    try:
        return table.get(fn)
    except TypeError:  # unhashable callable
        return None


_FACTORY_OPTIONS = frozenset({"dtype", "requires_grad", "layout"})


def factory_call(
    torch: Any, fn: Any, args: tuple[Any, ...], kwargs: dict[str, Any]
) -> tuple[tuple[int, ...], tuple[Any, ...], dict[str, Any]] | None:
    """``(size, extra positional args, options)`` of a torch factory call, or None when it is not one we
    can forward (then the value is materialised and distributed instead)."""
    kwargs = dict(kwargs)
    size_arg: Any = kwargs.pop("size", kwargs.pop("shape", None))
    rest: tuple[Any, ...] = args
    if size_arg is None:
        if args and isinstance(args[0], (tuple, list, torch.Size)):
            size_arg, rest = args[0], args[1:]
        else:
            count = 0
            while count < len(args) and isinstance(args[count], int) and not isinstance(args[count], bool):
                count += 1
            size_arg, rest = args[:count], args[count:]
    try:
        size = tuple(int(s) for s in size_arg)
    except (TypeError, ValueError):
        return None
    if fn is torch.full:
        if "fill_value" in kwargs:
            rest = (kwargs.pop("fill_value"), *rest)
        if len(rest) != 1:
            return None
    elif rest:
        return None
    if not set(kwargs) <= _FACTORY_OPTIONS:
        return None  # device=, out=, generator=, ...: let torch do exactly what was asked
    if "dtype" in kwargs and not isinstance(kwargs["dtype"], torch.dtype):
        try:  # accept NumPy/ml_dtypes dtypes and their names, as the other drivers do
            kwargs["dtype"] = getattr(torch, dtype_name(kwargs["dtype"]))
        except LayoutError:
            return None
    if math.prod(size) < 0:
        return None
    return size, rest, kwargs
