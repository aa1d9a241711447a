"""SPMD execution of the NumPy driver's ``ShardedArray`` operations (docs/design.md#spmd).

Every device computes on its own components only: for each label of the operation
(:class:`~layoutcore.propagation.Contraction`), a device works on the block its mesh
coordinate selects, slicing a replicated operand axis locally. Partial sums over a sharded
summed-away label go through :func:`_all_reduce`, a simulated all-reduce over exactly the
devices that differ on those mesh axes. No step assembles the global value.

This module never imports the driver module: results are built with ``type(operand)(...)``.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import numpy as np

from .. import geometry, propagation
from .._capabilities import Limitation
from .._errors import LayoutError, UnsupportedLayoutError
from .._layout import Layout

__all__ = ["array_function", "einsum", "elementwise", "matmul", "reduce_sum", "transpose", "ufunc"]

_WHO = "numpy"
#: Scalars an elementwise operation broadcasts to every device (a NumPy array of rank >= 1 is
#: refused: placing it is distribute_tensor's job, never an implicit replication).
_SCALARS = (int, float, complex, bool, np.generic)


def _unsupported(operation: str, message: str, value: Any = None) -> UnsupportedLayoutError:
    return UnsupportedLayoutError(f"{operation}: {message}", driver=_WHO, feature=Limitation.OPERATION, value=value)


def _is_sharded(value: Any) -> bool:
    # Duck-typed on the driver's array (this module does not import the driver module).
    return hasattr(value, "components") and hasattr(value, "layout") and hasattr(value, "devices")


def _is_scalar(value: Any) -> bool:
    return isinstance(value, _SCALARS) or (isinstance(value, np.ndarray) and value.ndim == 0)


def _check_operands(operation: str, operands: Sequence[Any], *, scalars: bool) -> list[Any]:
    """The ShardedArrays among ``operands``, all on one mesh with the same devices."""
    sharded = [op for op in operands if _is_sharded(op)]
    for op in operands:
        if not _is_sharded(op) and not (scalars and _is_scalar(op)):
            raise _unsupported(
                operation,
                f"an operand is a {type(op).__name__}, not a ShardedArray"
                + (" or a scalar" if scalars else "")
                + "; place it first with layoutcore.distribute_tensor (no implicit replication).",
                op,
            )
    devices = {op.devices for op in sharded}
    if len(devices) > 1:
        raise _unsupported(operation, f"the operands live on different devices {sorted(devices)}.", tuple(sharded))
    return sharded


def _label_sizes(operation: str, labels: Sequence[Sequence[str]], shapes: Sequence[tuple[int, ...]]) -> dict[str, int]:
    """Each label's size; size-1 axes broadcast (NumPy's rule), other mismatches raise."""
    sizes: dict[str, int] = {}
    for axis_labels, shape in zip(labels, shapes, strict=True):
        for label, size in zip(axis_labels, shape, strict=True):
            current = sizes.get(label)
            if current is None or current == 1:
                sizes[label] = size
            elif size not in (1, current):
                raise LayoutError(
                    f"{operation}: axis sizes {current} and {size} do not match or broadcast (shapes {list(shapes)}).",
                    value=tuple(shapes),
                )
    return sizes


def _block(
    entry: Any, size: int, mesh_shape: tuple[int, ...], index_of: dict[str, int], coord: tuple[int, ...]
) -> slice:
    """The part of a ``size``-long label a device at ``coord`` works on (the chunk rule)."""
    if entry is None:
        return slice(None)
    names = (entry,) if isinstance(entry, str) else entry
    axes = [index_of[n] for n in names]
    block = 0
    for axis in axes:
        block = block * mesh_shape[axis] + coord[axis]
    start, stop = geometry.chunk_bounds(size, math.prod(mesh_shape[a] for a in axes), block)
    return slice(start, stop)


def _all_reduce(partials: Iterable[np.ndarray], mesh_shape: tuple[int, ...], axes: tuple[int, ...]) -> list[np.ndarray]:
    """Simulated all-reduce (sum) over mesh axes ``axes``: each group of devices that differ only
    on those axes gets its members' sum, added in row-major device order. Members share the
    (read-only) sum, as replicas share a block.

    ``partials`` yields one partial per device, row-major; each joins its group's sum as soon as it
    arrives, so the simulation holds one partial per group, not one per device.
    """
    totals: dict[tuple[int, ...], np.ndarray] = {}
    keys = []
    for position, partial in enumerate(partials):
        coord = geometry.mesh_coordinate(mesh_shape, position)
        key = tuple(c for i, c in enumerate(coord) if i not in axes)
        keys.append(key)
        total = totals.get(key)
        if total is None:
            # A partial the local computation just made (owned, writeable) accumulates in place; a
            # view of an input (read-only) is copied first, so no input is ever written.
            owned = partial.flags.owndata and partial.flags.writeable
            totals[key] = partial if owned else np.array(partial, copy=True)
        else:
            np.add(total, partial, out=total)
    return [totals[key] for key in keys]


def _fresh(array: Any) -> np.ndarray:
    """A new read-only array: never a view of an input component (docs/design.md#data-functions-made-precise)."""
    out = np.asarray(array)
    if not out.flags.owndata:
        out = out.copy()
    out.flags.writeable = False
    return out


def _refuse_sharded_broadcast(
    operation: str, sharded: Sequence[Any], labels_per_operand: Sequence[Sequence[str]], sizes: dict[str, int]
) -> None:
    """Refuse a sharded size-1 operand axis that broadcasts against a larger one (``sizes``: per label).

    Raises:
        UnsupportedLayoutError: naming the axis and its operand's layout.
    """
    for op, labels in zip(sharded, labels_per_operand, strict=True):
        for dim, label in enumerate(labels):
            if op.shape[dim] == 1 and sizes[label] != 1 and op.layout.axes[dim] is not None:
                raise _unsupported(
                    operation,
                    f"a size-1 axis that broadcasts cannot be sharded (axis {dim} of {op.layout}).",
                    op.layout,
                )


def _execute(
    contraction: propagation.Contraction,
    operands: Sequence[Any],
    local: Callable[..., Any],
    *,
    post: Callable[[np.ndarray], np.ndarray] | None = None,
    out_shape: tuple[int, ...] | None = None,
) -> Any:
    """Run ``local`` on every device's blocks, all-reduce the partial sums, build the result(s).

    ``operands`` follow ``contraction.operands`` (scalars in between are passed unchanged);
    ``post`` runs on each device's reduced value (``mean``'s division); ``out_shape`` overrides
    the global output shape (``keepdims``' size-1 axes).
    """
    operation = contraction.operation
    sharded = [op for op in operands if _is_sharded(op)]
    first = sharded[0]
    layout: Layout = first.layout
    mesh = layout.mesh
    assert mesh is not None  # a ShardedArray's layout always has a mesh
    shapes = [op.shape for op in sharded]
    sizes = _label_sizes(operation, contraction.operands, shapes)
    entries = dict(contraction.entries)
    _refuse_sharded_broadcast(operation, sharded, contraction.operands, sizes)
    index_of = {name: i for i, name in enumerate(mesh.axis_names)}

    def device_args(position: int) -> list[Any]:
        """The operands as device ``position`` holds them, sliced to its blocks."""
        coord = geometry.mesh_coordinate(mesh.shape, position)
        blocks = {label: _block(entries[label], sizes[label], mesh.shape, index_of, coord) for label in sizes}
        args: list[Any] = []
        sharded_index = 0
        for op in operands:
            if not _is_sharded(op):
                args.append(op)
                continue
            labels = contraction.operands[sharded_index]
            sharded_index += 1
            key = tuple(
                slice(None)
                if own is not None or op.shape[dim] != sizes[label]  # already its block, or a broadcast axis
                else blocks[label]
                for dim, (label, own) in enumerate(zip(labels, op.layout.axes, strict=True))
            )
            component = op.components[position]
            args.append(component[key] if any(k != slice(None) for k in key) else component)
        return args

    summed = tuple(index_of[name] for name in contraction.summed)
    outputs: list[list[np.ndarray]]
    multi = False
    if summed:  # one output; partials stream into the all-reduce
        partials = (np.asarray(local(*device_args(position))) for position in range(mesh.size))
        outputs = [_all_reduce(partials, mesh.shape, summed)]
    else:
        results = [local(*device_args(position)) for position in range(mesh.size)]
        multi = isinstance(results[0], tuple)
        per_output = list(zip(*results, strict=True)) if multi else [results]
        outputs = [[np.asarray(r) for r in per_device] for per_device in per_output]
    if out_shape is None:
        out_shape = tuple(sizes[label] for label in contraction.output)
    built = []
    for arrays in outputs:
        if post is not None:
            arrays = _share(arrays, post)
        components = tuple(_fresh_shared(arrays))
        built.append(type(first)(components, contraction.layout, out_shape, components[0].dtype, first.devices))
    return tuple(built) if multi else built[0]


def _share(arrays: list[np.ndarray], fn: Callable[[np.ndarray], np.ndarray]) -> list[np.ndarray]:
    """``fn`` once per distinct array (replicas of an all-reduce share one)."""
    done: dict[int, np.ndarray] = {}
    return [done.setdefault(id(a), fn(a)) for a in arrays]


def _fresh_shared(arrays: list[np.ndarray]) -> list[np.ndarray]:
    return _share(arrays, _fresh)


# -- the operations ----------------------------------------------------------------------------
def elementwise(name: str, ufunc: Callable[..., Any], inputs: Sequence[Any], kwargs: dict[str, Any]) -> Any:
    """``ufunc(*inputs, **kwargs)`` on every device (broadcasting, scalars included)."""
    sharded = _check_operands(name, inputs, scalars=True)
    contraction = _planned(name, propagation.plan_elementwise, *(op.layout for op in sharded))
    return _execute(contraction, inputs, lambda *args: ufunc(*args, **kwargs))


def matmul(a: Any, b: Any, kwargs: dict[str, Any]) -> Any:
    """``a @ b``: local matmuls on each device's blocks, all-reduced over a sharded contracting axis."""
    _check_operands("matmul", (a, b), scalars=False)
    contraction = _planned("matmul", propagation.plan_matmul, a.layout, b.layout)
    return _execute(contraction, (a, b), lambda x, y: np.matmul(x, y, **kwargs))


def einsum(subscripts: str, operands: Sequence[Any], kwargs: dict[str, Any]) -> Any:
    """``np.einsum(subscripts, *operands)`` per device, all-reduced over sharded summed labels."""
    if not isinstance(subscripts, str):
        raise _unsupported("einsum", "only the subscripts-string form of np.einsum is supported.", subscripts)
    _check_operands("einsum", operands, scalars=False)
    contraction = _planned("einsum", propagation.plan_einsum, subscripts, *(op.layout for op in operands))
    return _execute(contraction, operands, lambda *args: np.einsum(subscripts, *args, **kwargs))


def reduce_sum(array: Any, axis: Any = None, dtype: Any = None, keepdims: bool = False, *, mean: bool = False) -> Any:
    """``np.sum`` (or ``np.mean``) over ``axis``: local sums, then an all-reduce over sharded reduced axes."""
    name = "mean" if mean else "sum"
    _check_operands(name, (array,), scalars=False)
    contraction = _planned(name, propagation.plan_reduce, array.layout, axis, keepdims)
    axes = propagation._normalize_axes(name, axis, array.ndim)
    accumulate = dtype
    if mean and dtype is None and not np.issubdtype(array.dtype, np.inexact):
        accumulate = np.float64  # np.mean's accumulator for integers and bools
    count = math.prod(array.shape[i] for i in axes)
    out_shape = tuple(1 if i in axes else size for i, size in enumerate(array.shape) if keepdims or i not in axes)

    def local(x: np.ndarray) -> np.ndarray:
        return np.asarray(np.sum(x, axis=axes, dtype=accumulate, keepdims=keepdims))

    post = (lambda total: np.true_divide(total, count)) if mean else None
    return _execute(contraction, (array,), local, post=post, out_shape=out_shape)


def transpose(array: Any, axes: Sequence[int] | None) -> Any:
    """``np.transpose``: each device transposes its component (into a new array); no data moves."""
    _check_operands("transpose", (array,), scalars=False)
    layout = propagation.transpose(array.layout, axes)
    order = tuple(reversed(range(array.ndim))) if axes is None else tuple(a % array.ndim for a in axes)
    components = tuple(_fresh_shared([np.transpose(c, order).copy() for c in array.components]))
    shape = tuple(array.shape[a] for a in order)
    return type(array)(components, layout, shape, array.dtype, array.devices)


def _planned(name: str, planner: Callable[..., propagation.Contraction], *args: Any) -> propagation.Contraction:
    """``planner(*args)``, naming the user's operation (``add``, ``sum``) in the plan and in a refusal."""
    try:
        contraction = planner(*args)
    except UnsupportedLayoutError as exc:
        raise _unsupported(name, str(exc).split(": ", 1)[-1], exc.value) from None
    return propagation.Contraction(
        name, contraction.operands, contraction.output, contraction.entries, contraction.summed, contraction.layout
    )


# -- NumPy's protocols -------------------------------------------------------------------------
def ufunc(function: np.ufunc, method: str, inputs: Sequence[Any], kwargs: dict[str, Any]) -> Any:
    """``ShardedArray.__array_ufunc__``: elementwise ufuncs and ``np.matmul``; ``np.add.reduce`` as ``sum``."""
    name = function.__name__
    for key in ("out", "where"):
        if key in kwargs and not (key == "where" and kwargs[key] is True):
            raise _unsupported(name, f"{key}= is not supported: a ShardedArray is immutable; use the result.", kwargs)
    if method == "reduce" and function is np.add and len(inputs) == 1:
        return reduce_sum(inputs[0], kwargs.get("axis", 0), kwargs.get("dtype"), kwargs.get("keepdims", False))
    if method != "__call__":
        raise _unsupported(f"{name}.{method}", "no SPMD rule for this ufunc method.", inputs)
    if function is np.matmul:
        return matmul(inputs[0], inputs[1], kwargs)
    if function.signature is not None:
        raise _unsupported(name, f"no SPMD rule for the generalized ufunc {name} {function.signature}.", inputs)
    return elementwise(name, function, inputs, kwargs)


def _einsum_call(subscripts: Any, *operands: Any, **kwargs: Any) -> Any:
    return einsum(subscripts, operands, kwargs)


def _sum_call(a: Any, axis: Any = None, dtype: Any = None, out: Any = None, keepdims: bool = False, **kw: Any) -> Any:
    _no_out("sum", out, kw)
    return reduce_sum(a, axis, dtype, keepdims)


def _mean_call(a: Any, axis: Any = None, dtype: Any = None, out: Any = None, keepdims: bool = False, **kw: Any) -> Any:
    _no_out("mean", out, kw)
    return reduce_sum(a, axis, dtype, keepdims, mean=True)


def _transpose_call(a: Any, axes: Any = None) -> Any:
    return transpose(a, axes)


def _matmul_call(a: Any, b: Any, **kwargs: Any) -> Any:
    return matmul(a, b, kwargs)


def _no_out(name: str, out: Any, extra: dict[str, Any]) -> None:
    if out is not None or any(v is not np._NoValue for k, v in extra.items() if k in ("initial", "where")):
        raise _unsupported(name, "out=, initial= and where= are not supported on a ShardedArray.", extra)


def _size_call(a: Any, axis: int | None = None) -> int:
    return math.prod(a.shape) if axis is None else int(a.shape[axis])


#: NumPy functions a ShardedArray runs as SPMD (and the metadata ones, which read no data); every
#: other one is refused.
_FUNCTIONS: dict[Any, Callable[..., Any]] = {
    np.shape: lambda a: a.shape,
    np.ndim: lambda a: a.ndim,
    np.size: _size_call,
    np.einsum: _einsum_call,
    np.sum: _sum_call,
    np.mean: _mean_call,
    np.transpose: _transpose_call,
    np.matmul: _matmul_call,
}


def array_function(func: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    """``ShardedArray.__array_function__``: the functions above; any other raises, never gathers."""
    handler = _FUNCTIONS.get(func)
    if handler is None:
        name = getattr(func, "__name__", repr(func))
        raise _unsupported(
            name,
            f"np.{name} has no SPMD rule for a ShardedArray (supported: ufuncs, matmul, einsum, sum, mean, "
            "transpose). Use layoutcore.to_numpy(t) to compute on the global value explicitly.",
            func,
        )
    return handler(*args, **kwargs)
