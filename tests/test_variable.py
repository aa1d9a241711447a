"""Variable / DVariable: a layout for life; layout_map_scope picks layouts by path."""

from __future__ import annotations

import numpy as np
import pytest
from _support import DEVICES6

from layoutcore import (
    UNSHARDED,
    DVariable,
    Layout,
    LayoutError,
    LayoutMap,
    LayoutMismatchError,
    Mesh,
    Variable,
    call_with_layout,
    distribute_tensor,
    fetch_layout,
    layout_map_scope,
    to_numpy,
    unpack,
)
from layoutcore.driver import VariableHandle

MESH6 = Mesh((6,), ("x",), DEVICES6)
MESH32 = Mesh((3, 2), ("x", "y"), DEVICES6)
U = UNSHARDED


def test_dtensor_guide_variable_refuses_a_foreign_layout() -> None:
    layout = Layout(["x", U], MESH6)
    v = DVariable(call_with_layout(np.zeros, layout, (64, 32)))
    assert v.layout == layout and v.shape == (64, 32)
    same = call_with_layout(np.ones, layout, (64, 32))
    assert v.assign(same) is v
    np.testing.assert_array_equal(v.numpy(), np.ones((64, 32)))
    foreign = call_with_layout(np.ones, Layout([U, U], MESH32), (64, 32))
    with pytest.raises(LayoutMismatchError) as info:
        v.assign(foreign)
    err = info.value
    assert isinstance(err, LayoutError) and isinstance(err, ValueError)
    assert err.expected == layout and err.actual == Layout([U, U], MESH32)
    np.testing.assert_array_equal(v.numpy(), np.ones((64, 32)))  # unchanged by the failed assign
    assert DVariable is Variable


def test_assign_a_plain_value_keeps_the_layout() -> None:
    layout = Layout(["x", "y"], MESH32)
    v = Variable(np.zeros((6, 4)), layout)
    v.assign(np.arange(24.0).reshape(6, 4))
    assert fetch_layout(v.value) == layout and v.layout == layout
    np.testing.assert_array_equal(to_numpy(v), np.arange(24.0).reshape(6, 4))  # a Variable is accepted as a tensor
    v.assign([[1.0] * 4] * 6)
    assert to_numpy(v).sum() == 24


def test_assign_another_variable_with_the_same_layout() -> None:
    layout = Layout(["x", None], MESH32)
    v, w = Variable(np.zeros((6, 4)), layout), Variable(np.ones((6, 4)), layout)
    v.assign(w)
    np.testing.assert_array_equal(v.numpy(), np.ones((6, 4)))


@pytest.mark.parametrize("value", [np.zeros((6, 5)), np.zeros(24), np.zeros((3, 4))])
def test_assign_a_value_of_another_shape_raises(value: np.ndarray) -> None:
    v = Variable(np.zeros((6, 4)), Layout(["x", None], MESH32), path="dense/kernel")
    with pytest.raises(LayoutError) as info:
        v.assign(value)
    assert str(value.shape) in str(info.value) and "dense/kernel" in str(info.value)


def test_assign_a_distributed_value_of_another_shape_raises() -> None:
    layout = Layout(["x", None], MESH32)
    v = Variable(np.zeros((6, 4)), layout)
    with pytest.raises(LayoutError, match=r"\(9, 4\)"):
        v.assign(distribute_tensor(np.zeros((9, 4)), layout))


def test_layout_defaults() -> None:
    layout = Layout([None, "y"], MESH32)
    from_distributed = Variable(distribute_tensor(np.zeros((3, 4)), layout))
    assert from_distributed.layout == layout
    plain = Variable(np.zeros((3, 4)))
    assert plain.layout.is_fully_replicated() and plain.layout.rank == 2
    assert plain.layout.mesh is not None and plain.layout.mesh.size == 8  # every device of the driver
    assert len(unpack(plain.value)) == 8


def test_layout_map_scope_assigns_layouts_by_path() -> None:
    lm = LayoutMap(MESH32)
    lm["dense.*kernel"] = ("x", "y")
    lm["dense.*bias"] = ("y",)
    with layout_map_scope(lm):
        kernel = Variable(np.zeros((6, 4)), path="model/dense_1/kernel")
        bias = Variable(np.zeros(4), path="model/dense_1/bias")
        other = Variable(np.zeros((2, 2)), path="model/conv/kernel")
        unnamed = Variable(np.zeros((2, 2)))
        explicit = Variable(np.zeros((6, 4)), Layout(["x", None], MESH32), path="model/dense_1/kernel")
    assert kernel.layout == Layout(("x", "y"), MESH32) and kernel.path == "model/dense_1/kernel"
    assert bias.layout == Layout(("y",), MESH32)
    assert other.layout == Layout.replicated(MESH32, 2)  # nothing matches: replicated on the map's mesh
    assert unnamed.layout.mesh != MESH32  # no path: the map is not consulted
    assert explicit.layout == Layout(["x", None], MESH32)  # an explicit layout wins
    outside = Variable(np.zeros((6, 4)), path="model/dense_1/kernel")
    assert outside.layout.is_fully_replicated()


def test_layout_map_rank_mismatch_names_the_path() -> None:
    lm = LayoutMap(MESH32)
    lm["kernel"] = ("x", "y")
    with layout_map_scope(lm), pytest.raises(LayoutError) as info:
        Variable(np.zeros(6), path="dense/kernel")
    assert "'dense/kernel'" in str(info.value) and "rank" in str(info.value)


def test_layout_map_without_mesh_and_no_match_raises() -> None:
    lm = LayoutMap()
    lm["kernel"] = Layout(("x",), MESH6)
    with layout_map_scope(lm):
        assert Variable(np.zeros(6), path="dense/kernel").layout == Layout(("x",), MESH6)
        with pytest.raises(LayoutError, match="'dense/bias'"):
            Variable(np.zeros(6), path="dense/bias")


def test_layout_is_read_only_and_repr() -> None:
    v = Variable(np.zeros((6, 4), np.float32), Layout(["x", None], MESH32), path="w")
    with pytest.raises(AttributeError):
        v.layout = Layout([None, None], MESH32)  # type: ignore[misc]
    text = repr(v)
    assert "'w'" in text and "(6, 4)" in text and "float32" in text and "numpy" in text
    assert v.dtype == np.float32 and v.driver.name == "numpy"


def test_a_variable_is_distributed_by_its_value() -> None:
    v = Variable(np.arange(24.0).reshape(6, 4), Layout(["x", None], MESH32))
    moved = distribute_tensor(v, Layout([None, "y"], MESH32))
    assert fetch_layout(moved) == Layout([None, "y"], MESH32)
    np.testing.assert_array_equal(to_numpy(moved), np.arange(24.0).reshape(6, 4))


def test_handle_is_the_drivers_variable_state_and_follows_assign() -> None:
    mesh = Mesh((2,), ("x",))
    v = Variable(np.zeros(4), Layout(["x"], mesh))
    assert isinstance(v.handle, VariableHandle)
    v.assign(np.arange(4.0))
    assert v.handle.value is v.value
    assert to_numpy(v.handle.value).tolist() == [0.0, 1.0, 2.0, 3.0]


# -- assign keeps the dtype (docs/design.md#data-functions-made-precise) -------------------------------------
def test_assign_casts_what_same_kind_allows_and_keeps_the_dtype() -> None:
    v = Variable(np.zeros(6, np.float32), Layout(["x"], MESH6))
    v.assign(np.arange(6, dtype=np.int64))  # int64 -> float32 is a same_kind cast
    assert v.numpy().dtype == np.float32 and v.numpy().tolist() == [0, 1, 2, 3, 4, 5]
    v.assign(np.full(6, 0.5))  # float64 -> float32
    assert v.numpy().dtype == np.float32
    v.assign(distribute_tensor(np.ones(6, np.float64), Layout(["x"], MESH6)))  # a distributed float64
    assert v.numpy().dtype == np.float32 and v.numpy().tolist() == [1] * 6
    assert fetch_layout(v.value) == Layout(["x"], MESH6)


@pytest.mark.parametrize(
    ("variable_dtype", "value"),
    [(np.int32, np.full(6, 1.5)), (np.int64, np.ones(6, np.complex64)), (np.float32, np.ones(6, np.complex128))],
)
def test_assign_refuses_what_same_kind_cannot_cast(variable_dtype: type, value: np.ndarray) -> None:
    v = Variable(np.zeros(6, variable_dtype), Layout(["x"], MESH6))
    with pytest.raises(LayoutMismatchError) as info:
        v.assign(value)
    assert info.value.expected == np.dtype(variable_dtype) and info.value.actual == value.dtype
    assert v.numpy().tolist() == [0] * 6  # unchanged


def test_assign_refuses_an_integer_that_the_variables_integer_dtype_would_wrap() -> None:
    """same_kind casts int64 into int32, and NumPy's astype wraps 2**40 to 0: a changed value, so refused
    (a JAX int32 Variable made from np.arange narrowed without x64 meets this first)."""
    v = Variable(np.zeros(6, np.int32), Layout(["x"], MESH6))
    v.assign(np.arange(6, dtype=np.int64) - 2**31 + 6)  # fits: taken
    assert v.numpy().dtype == np.int32 and v.numpy().tolist() == [i - 2**31 + 6 for i in range(6)]
    with pytest.raises(LayoutMismatchError, match=r"element \(3,\) is 1099511627776"):
        v.assign(np.array([0, 1, 2, 2**40, 4, 5], np.int64))
    with pytest.raises(LayoutMismatchError, match=r"element \(0,\) is 300"):
        Variable(np.zeros(6, np.uint8), Layout(["x"], MESH6)).assign(np.full(6, 300, np.uint16))
    assert v.numpy().tolist() == [i - 2**31 + 6 for i in range(6)]  # unchanged


def test_assign_refuses_what_is_no_array() -> None:
    v = Variable(np.zeros(2))
    with pytest.raises(LayoutError):
        v.assign({"a": 1})


# -- keras variables: their sharding is kept or the call refuses -----------------------------------------------
def _keras_like(value: object, layout: object, path: str) -> object:
    """An object of a class named as keras 3's Variable base, without importing keras."""
    base = type("Variable", (), {"__module__": "keras.src.backend.common.variables"})
    variable = type("JaxVariable", (base,), {"__module__": "keras.src.backend.jax.core"})()
    variable.value = value  # type: ignore[attr-defined]
    variable._layout = layout  # type: ignore[attr-defined]
    variable.path = path  # type: ignore[attr-defined]
    return variable


def test_a_keras_variable_keeps_its_distributed_value_and_path() -> None:
    layout = Layout(["x", U], MESH6)
    sharded = distribute_tensor(np.arange(12.0).reshape(6, 2), layout)
    v = Variable(_keras_like(sharded, "keras TensorLayout", "dense/kernel"))
    assert v.layout == layout and v.path == "dense/kernel"
    assert v.numpy().tolist() == np.arange(12.0).reshape(6, 2).tolist()


def test_a_keras_variable_whose_sharding_would_be_lost_is_refused() -> None:
    with pytest.raises(LayoutError, match="dense/kernel"):
        Variable(_keras_like(np.zeros((6, 2)), "keras TensorLayout", "dense/kernel"))
    # Without a keras layout, the plain value is replicated as any plain value is.
    v = Variable(_keras_like(np.zeros((6, 2)), None, "dense/bias"))
    assert v.layout.is_fully_replicated() and v.path == "dense/bias"
    # With layout= the user decides.
    assert Variable(_keras_like(np.zeros((6, 2)), "kl", "k"), Layout(["x", U], MESH6)).layout == Layout(["x", U], MESH6)
