"""The dtype axis: every data function that moves data, over the 18 dtypes (``docs/design.md#dtypes``).

Each test runs once per canonical dtype (``bool`` ... ``float8_e5m2``). A dtype the driver declares in
``Driver.supported_dtypes`` must come through bit for bit: each device's data (read by the adapter, the
framework's own calls) equals the bits of its oracle slice, ``to_numpy`` returns the same dtype (ml_dtypes'
for bfloat16 and float8), and nothing is narrowed (int64 ``2**40``, uint64 ``2**63 + 1``, float64 ``1/3``),
widened (bfloat16 held as float32) or sent through arithmetic (``-0.0``, NaN, inf, subnormals). A dtype it
does not declare must be refused with ``UnsupportedLayoutError`` naming the dtype: the expectation comes
from the declaration, never from trying.

The cases are fixed and small: a ``(4, 6)`` value on a 2x2 mesh, split over ``x`` and replicated over ``y``
(so replicas exist for ``pack``'s NaN-replica check); relayout to ``(None, "y")`` on the same mesh and to a
1-D mesh of 4 devices. The random meshes and layouts are the property tests' job.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

import layoutcore as lc
from layoutcore.driver import Capability, Driver, dtype_name

from ._oracle import Case, assert_refused, needs_cross_mesh
from ._values import (
    ALL_DTYPES,
    assert_bits_equal,
    assert_device_bits,
    assert_dtype_refused,
    declared_dtypes,
    dtype_values,
)
from .adapter import ConformanceAdapter

SHAPE = (4, 6)
MESH = ((2, 2), ("x", "y"))
SOURCE_SPEC = ("x", None)  # split over x, replicated over y
SAME_MESH_SPEC = (None, "y")
OTHER_MESH = Case((4,), ("z",), ("z", None), SHAPE)

pytestmark = pytest.mark.parametrize("name", ALL_DTYPES)


def _case(name: str, spec: tuple[Any, ...] = SOURCE_SPEC) -> Case:
    return Case(MESH[0], MESH[1], spec, SHAPE, name)


def _supported(driver: Driver, name: str) -> bool:
    return name in declared_dtypes(driver)


def _native(adapter: ConformanceAdapter, x: np.ndarray, name: str) -> Any:
    """``x`` as a plain framework tensor, checked to keep the dtype (an adapter that converts is a suite bug)."""
    value = adapter.from_numpy(x)
    got = dtype_name(value.dtype)
    assert got == name, f"adapter.from_numpy gave a {got} tensor for a {name} array"
    return value


def test_distribute(driver: Driver, adapter: ConformanceAdapter, name: str) -> None:
    case = _case(name)
    x = dtype_values(SHAPE, name)
    if not _supported(driver, name):
        assert_dtype_refused(driver, name, lambda: lc.distribute_tensor(x, case.layout()), "distribute_tensor")
        return
    assert_device_bits(adapter, lc.distribute_tensor(x, case.layout()), x, case, "distribute_tensor(NumPy)")
    native = _native(adapter, x, name)
    assert_device_bits(adapter, lc.distribute_tensor(native, case.layout()), x, case, "distribute_tensor(framework)")


def test_to_numpy(driver: Driver, adapter: ConformanceAdapter, name: str) -> None:
    if not _supported(driver, name):
        pytest.skip(f"{name} is not declared: test_distribute checks its refusal; there is nothing to read")
    case = _case(name)
    x = dtype_values(SHAPE, name, seed=1)
    tensor = lc.distribute_tensor(x, case.layout())
    assert_bits_equal(lc.to_numpy(tensor), x, "to_numpy")
    native = lc.distribute_tensor(_native(adapter, x, name), case.layout())
    assert_bits_equal(lc.to_numpy(native), x, "to_numpy of a distributed framework tensor")


def test_unpack_pack(driver: Driver, adapter: ConformanceAdapter, name: str) -> None:
    """Components bit for bit; ``pack(unpack(t))`` and ``pack`` of framework pieces round-trip. The replicas over
    ``y`` hold NaN where the dtype has one: ``pack``'s replica check must take a NaN as equal to itself."""
    case = _case(name)
    x = dtype_values(SHAPE, name, seed=2)
    layout = case.layout()
    if not _supported(driver, name):
        pieces = [np.array(x[sl]) for sl in case.slices()]
        assert_dtype_refused(driver, name, lambda: lc.pack(pieces, layout, global_shape=SHAPE), "pack")
        return
    tensor = lc.distribute_tensor(x, layout)
    components = lc.unpack(tensor)
    assert len(components) == case.size
    for position, (component, sl) in enumerate(zip(components, case.slices(), strict=True)):
        assert_bits_equal(driver.component_to_numpy(component), np.asarray(x[sl]), f"unpack component {position}")
    repacked = lc.pack(components, layout)
    assert_device_bits(adapter, repacked, x, case, "pack(unpack(t))")
    assert lc.fetch_layout(repacked) == layout
    pieces = [_native(adapter, np.array(x[sl]), name) for sl in case.slices()]
    assert_device_bits(adapter, lc.pack(pieces, layout, global_shape=SHAPE), x, case, "pack(framework pieces)")
    # Replicas that really differ are still refused (the NaN rule does not let everything through).
    differing = [np.array(x[sl]) for sl in case.slices()]
    differing[1] = dtype_values(differing[1].shape, name, seed=9)
    with pytest.raises(lc.LayoutError):
        lc.pack(differing, layout, global_shape=SHAPE)


def test_relayout_same_mesh(driver: Driver, adapter: ConformanceAdapter, name: str) -> None:
    case, target = _case(name), _case(name, SAME_MESH_SPEC)
    x = dtype_values(SHAPE, name, seed=3)
    if not _supported(driver, name):  # a plain value to relayout is placed as distribute_tensor would
        assert_dtype_refused(driver, name, lambda: lc.relayout(x, target.layout()), "relayout of a plain value")
        return
    tensor = lc.distribute_tensor(x, case.layout())
    moved = lc.relayout(tensor, target.layout())
    assert_device_bits(adapter, moved, x, target, "relayout there")
    assert lc.fetch_layout(moved) == target.layout()
    assert_device_bits(adapter, lc.relayout(moved, case.layout()), x, case, "relayout back")
    replicated = lc.relayout(tensor, lc.Layout.replicated(case.mesh(), 2))
    assert_device_bits(adapter, replicated, x, case.with_spec((None, None)), "relayout to replicated")
    assert_device_bits(adapter, tensor, x, case, "the source after relayout")


def test_relayout_across_meshes(driver: Driver, adapter: ConformanceAdapter, name: str) -> None:
    if not _supported(driver, name):
        pytest.skip(f"{name} is not declared: test_distribute checks its refusal; there is nothing to relayout")
    case = _case(name)
    target = Case(OTHER_MESH.mesh_shape, OTHER_MESH.axis_names, OTHER_MESH.spec, SHAPE, name)
    assert needs_cross_mesh(driver, case, target)
    x = dtype_values(SHAPE, name, seed=4)
    tensor = lc.distribute_tensor(x, case.layout())
    if Capability.RELAYOUT_ACROSS_MESHES not in driver.capabilities:
        missing = {Capability.RELAYOUT_ACROSS_MESHES.value}
        assert_refused(driver, missing, lambda: lc.relayout(tensor, target.layout()), f"relayout across meshes {name}")
        return
    moved = lc.relayout(tensor, target.layout())
    assert_device_bits(adapter, moved, x, target, "relayout to another mesh")
    assert_device_bits(adapter, lc.relayout(moved, case.layout()), x, case, "relayout back to the first mesh")


def test_copy_to_mesh(driver: Driver, adapter: ConformanceAdapter, name: str) -> None:
    case = _case(name, (None, None))
    x = dtype_values(SHAPE, name, seed=5)
    layout = case.layout()
    if not _supported(driver, name):
        assert_dtype_refused(driver, name, lambda: lc.copy_to_mesh(x, layout), "copy_to_mesh")
        return
    assert_device_bits(adapter, lc.copy_to_mesh(x, layout), x, case, "copy_to_mesh(NumPy)")
    native = _native(adapter, x, name)
    assert_device_bits(adapter, lc.copy_to_mesh(native, layout), x, case, "copy_to_mesh(framework)")


def test_call_with_layout(driver: Driver, adapter: ConformanceAdapter, name: str) -> None:
    """``call_with_layout`` of a function that makes a framework tensor of the dtype (``adapter.from_numpy`` of a
    constant, called inside, as ``tf.constant(x)`` would be)."""
    case = _case(name)
    x = dtype_values(SHAPE, name, seed=6)
    layout = case.layout()
    if not _supported(driver, name):
        assert_dtype_refused(driver, name, lambda: lc.call_with_layout(lambda: x.copy(), layout), "call_with_layout")
        return
    _native(adapter, x, name)  # the adapter keeps the dtype
    made = lc.call_with_layout(lambda: adapter.from_numpy(x), layout)
    assert_device_bits(adapter, made, x, case, "call_with_layout")


def test_variable(driver: Driver, adapter: ConformanceAdapter, name: str) -> None:
    case = _case(name)
    x = dtype_values(SHAPE, name, seed=7)
    layout = case.layout()
    if not _supported(driver, name):
        assert_dtype_refused(driver, name, lambda: lc.Variable(x, layout), "Variable")
        return
    variable = lc.Variable(x, layout)
    assert_device_bits(adapter, variable.value, x, case, "Variable(x)")
    y = dtype_values(SHAPE, name, seed=8)
    variable.assign(_native(adapter, y, name))
    assert_device_bits(adapter, variable.value, y, case, "Variable.assign(framework tensor)")
    variable.assign(lc.distribute_tensor(x, layout))
    assert_device_bits(adapter, variable.value, x, case, "Variable.assign(distributed)")
    variable.assign(y)
    assert_device_bits(adapter, variable.value, y, case, "Variable.assign(NumPy)")
    assert_bits_equal(variable.numpy(), y, "Variable.numpy()")
