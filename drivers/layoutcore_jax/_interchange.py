"""TensorSpec <-> JAX: ``NamedSharding`` + ``ShapeDtypeStruct``, and restore targets for Orbax users.

A layoutcore layout and a ``NamedSharding`` are the same thing (a mesh and a partition spec,
multi-axis entries major to minor, ceil chunks), so both directions are lossless for every
layout JAX accepts. Refused (typed): ``PartitionSpec.UNCONSTRAINED`` and pending reductions
(``unreduced``/``reduced``) coming in; an uneven layout going out to a ``ShapeDtypeStruct``
(JAX 0.10 refuses non-divisible shapes on ``Explicit`` axes and the JAX driver does not hold
uneven arrays); a 64-bit dtype while ``jax_enable_x64`` is off (JAX would narrow it).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from layoutcore import Layout, LayoutError, TensorSpec, UnsupportedLayoutError
from layoutcore.driver import Capability, Limitation

from ._convert import from_jax_sharding, to_named_sharding

__all__ = ["orbax_restore_args", "spec_from_jax", "to_restore_target", "to_shape_dtype_struct"]

_WIDE = {"int64", "uint64", "float64", "complex128"}


def to_shape_dtype_struct(spec: TensorSpec, *, axis_types: str = "auto") -> Any:
    """The ``jax.ShapeDtypeStruct`` of ``spec``, its sharding the ``NamedSharding`` of its layout.

    Raises:
        UnsupportedLayoutError: an uneven layout (``feature="uneven"``), or a 64-bit dtype with
            ``jax_enable_x64`` off (``feature="dtype"``).
    """
    import jax

    from layoutcore._dtypes import numpy_dtype

    if not isinstance(spec, TensorSpec):
        raise LayoutError(f"Expected a layoutcore TensorSpec. Received: {spec!r}", value=spec)
    if not spec.layout.is_even(spec.shape):
        raise UnsupportedLayoutError(
            f"JAX cannot hold shape {spec.shape} under {spec.layout}: an axis its shards do not divide evenly.",
            driver="jax",
            feature=Capability.UNEVEN,
            value=spec,
        )
    if spec.dtype in _WIDE and not jax.config.jax_enable_x64:
        raise UnsupportedLayoutError(
            f"JAX with jax_enable_x64 off would store {spec.dtype} in 32 bits; enable it with "
            'jax.config.update("jax_enable_x64", True) first.',
            driver="jax",
            feature=Limitation.DTYPE,
            value=spec,
        )
    sharding = to_named_sharding(spec.layout, axis_types=axis_types)  # type: ignore[arg-type]  # a spec's layout has a mesh
    return jax.ShapeDtypeStruct(spec.shape, numpy_dtype(spec.dtype), sharding=sharding)


def spec_from_jax(value: Any) -> TensorSpec:
    """The :class:`TensorSpec` of a ``jax.Array`` or a sharded ``jax.ShapeDtypeStruct``.

    Raises:
        LayoutError: no sharding, or a sharding without a layout (see ``from_jax_sharding``).
    """
    sharding = getattr(value, "sharding", None)
    if sharding is None:
        raise LayoutError(f"{value!r} has no sharding, so no layout.", value=value)
    shape = tuple(int(s) for s in value.shape)
    return TensorSpec(shape, value.dtype, from_jax_sharding(sharding, len(shape)))


def to_restore_target(tree: Any) -> Any:
    """``tree`` with each :class:`TensorSpec` or ``Layout``-less leaf mapped to a ``ShapeDtypeStruct``.

    Give the result to Orbax as the restore target
    (``StandardCheckpointer().restore(path, to_restore_target(specs))``) and Orbax reads each
    array straight into the layout: e.g. the specs of ``layoutcore.checkpoint.inspect(path)``
    with their layouts replaced. Dicts, lists and tuples are kept; other leaves pass through.
    """
    if isinstance(tree, TensorSpec):
        return to_shape_dtype_struct(tree)
    if isinstance(tree, Layout):
        raise LayoutError("to_restore_target needs TensorSpec leaves (a Layout has no shape or dtype).", value=tree)
    if isinstance(tree, Mapping):
        return {k: to_restore_target(v) for k, v in tree.items()}
    if isinstance(tree, (list, tuple)) and not hasattr(type(tree), "_fields"):
        return type(tree)(to_restore_target(v) for v in tree)
    return tree


def orbax_restore_args(tree: Any) -> Any:
    """Orbax ``ArrayRestoreArgs`` for a tree of :class:`TensorSpec` (``PyTreeCheckpointer`` users).

    ``PyTreeCheckpointer().restore(path, item=target, restore_args=orbax_restore_args(specs))``
    with ``target = to_restore_target(specs)``.
    """
    from orbax.checkpoint import checkpoint_utils  # type: ignore[import-not-found]  # optional, not in the type env

    return checkpoint_utils.construct_restore_args(to_restore_target(tree))
