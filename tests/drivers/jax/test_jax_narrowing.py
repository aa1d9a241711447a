"""JAX with jax_enable_x64 off: 64-bit values stored in 32 bits only where every element fits exactly.

docs/design.md#dtypes: ``np.arange(8)``, ``np.zeros(3)``, ``np.arange(16.0)`` and small uint64/complex128 values are
placed in int32/float32/uint32/complex64 with equal values (one DtypeNarrowingWarning per dtype); 2**40,
0.1, 2**63 + 1, 0.1j and a float64 NaN payload float32 cannot carry are refused with
UnsupportedLayoutError naming the dtype, the element and the remedies. The oracle: each element
widened back with NumPy (and Python ints) equals the input bit for bit.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from layoutcore_jax import JaxDriver

import layoutcore as lc
from layoutcore import DtypeNarrowingWarning
from layoutcore.driver import Limitation, _registry, as_bits
from layoutcore.driver._fill import pack_owned

MESH = lc.Mesh((4, 2), ("x", "y"))
ROWS = lc.Layout(("x",), MESH)
REPLICATED = lc.Layout((None,), MESH)


def _nan64(bits: int) -> float:
    return float(np.array([bits], np.uint64).view(np.float64)[0])


def _float64_with_bits(*bits: int) -> np.ndarray:
    return np.array(bits, np.uint64).view(np.float64)


#: (value, the 32-bit dtype it is stored in)
FITTING: list[tuple[np.ndarray, type]] = [
    (np.arange(8), np.int32),
    (np.zeros(8), np.float32),
    (np.arange(16.0), np.float32),
    (np.array([0, 1, 2**32 - 1, 7, 8, 9, 10, 11], np.uint64), np.uint32),
    (np.array([-(2**31), 2**31 - 1, 0, -1, 5, 6, 7, 8], np.int64), np.int32),
    (np.array([1 + 2j, -0.0 - 0.0j, np.inf, 0.5j, 3, 4, 5, 6], np.complex128), np.complex64),
    # -0.0, infinities, the quiet NaN, a signalling NaN and a negative payload float32 can carry
    (np.concatenate([[-0.0, np.inf, -np.inf, 2.0**-149], _float64_with_bits(
        0x7FF8000000000000, 0x7FF0000020000000, 0xFFFC000040000000, 0x3FF0000000000000)]), np.float32),
]  # fmt: skip


def _widened_back(out: np.ndarray, x: np.ndarray) -> None:
    """``out`` (32-bit) holds ``x``'s values exactly: widened back (NaNs by their bits) it equals ``x`` bitwise."""
    assert out.shape == x.shape
    if x.dtype.kind in "iu":
        assert [int(v) for v in out.tolist()] == [int(v) for v in x.tolist()]
        return
    parts_out = out.reshape(-1, 1).view(np.float32).reshape(-1)
    parts_x = x.reshape(-1, 1).view(np.float64).reshape(-1)
    for got, want in zip(as_bits(parts_out).tolist(), as_bits(parts_x).tolist(), strict=True):
        exponent, mantissa = (got >> 23) & 0xFF, got & 0x7FFFFF
        if exponent == 0xFF and mantissa:  # a NaN: sign, all-ones exponent, payload shifted by 29 bits
            widened = ((got >> 31) << 63) | (0x7FF << 52) | (mantissa << 29)
        else:
            widened = int(np.array([got], np.uint32).view(np.float32).astype(np.float64).view(np.uint64)[0])
        assert widened == want, f"{got:#010x} widens to {widened:#018x}, expected {want:#018x}"


ENTRY_POINTS: dict[str, Callable[[np.ndarray], Any]] = {
    "distribute_tensor": lambda x: lc.distribute_tensor(x, ROWS, driver="jax"),
    "copy_to_mesh": lambda x: lc.copy_to_mesh(x, REPLICATED, driver="jax"),
    "relayout of a plain value": lambda x: lc.relayout(x, ROWS, driver="jax"),
    "pack": lambda x: lc.pack([x[s] for s in ROWS.device_slices(x.shape)], ROWS, driver="jax"),
    "Variable": lambda x: lc.Variable(x, ROWS, driver="jax").value,
    "pack_owned (checkpoint loads)": lambda x: pack_owned(
        lc.get_driver("jax"), [x[s].copy() for s in ROWS.device_slices(x.shape)], ROWS, x.shape
    ),
    "call_with_layout argument": lambda x: lc.call_with_layout(lambda a: a, ROWS, x, driver="jax"),
    "call_with_layout result": lambda x: lc.call_with_layout(lambda: x.copy(), ROWS, driver="jax"),
}


def test_x64_is_off() -> None:
    assert not jax.config.jax_enable_x64


@pytest.mark.parametrize("entry", list(ENTRY_POINTS))
@pytest.mark.parametrize(("x", "narrow"), FITTING, ids=lambda v: getattr(v, "dtype", v).__str__())
def test_values_that_fit_are_stored_in_32_bits_unchanged(
    driver: JaxDriver, entry: str, x: np.ndarray, narrow: type
) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DtypeNarrowingWarning)
        t = ENTRY_POINTS[entry](x)
    if entry.startswith("call_with_layout") and x.dtype.kind == "f" and np.isnan(x).any():
        # XLA canonicalises NaNs that a jitted identity passes through (a computation, not a move):
        # the values fit, so they are taken; the NaN bits are the data functions' promise, checked there
        assert t.dtype == narrow
        return
    assert t.dtype == narrow  # the recorded dtype is the 32-bit one, as jax.device_put's
    assert lc.fetch_layout(t) == (REPLICATED if entry == "copy_to_mesh" else ROWS)
    out = lc.to_numpy(t)
    _widened_back(out, x)
    for shard in t.addressable_shards:  # each device holds its block, read by JAX itself
        _widened_back(np.asarray(shard.data), x[shard.index])


def test_variable_assign_of_a_fitting_value(driver: JaxDriver) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DtypeNarrowingWarning)
        v = lc.Variable(np.arange(8), ROWS, driver="jax")
        v.assign(np.arange(8) * 3)
    assert v.dtype == np.int32
    assert v.numpy().tolist() == [3 * i for i in range(8)]
    with pytest.raises(lc.LayoutMismatchError, match="1099511627776"):  # the int32 variable never wraps it
        v.assign(np.arange(8) + 2**40)
    assert v.numpy().tolist() == [3 * i for i in range(8)]


REFUSED = {
    "int64 2**40": (np.array([1, 2, 2**40, 4, 5, 6, 7, 8], np.int64), "int64", "(2,)", "1099511627776"),
    "float64 0.1": (np.array([0.5, 0.1, 1, 1, 1, 1, 1, 1]), "float64", "(1,)", "0.1"),
    "uint64 2**63+1": (np.array([0] * 7 + [2**63 + 1], np.uint64), "uint64", "(7,)", str(2**63 + 1)),
    "complex128 0.1j": (np.array([1, 0.1j, 0, 0, 0, 0, 0, 0]), "complex128", "(1,)", "0.1j"),
    "float64 NaN payload": (
        _float64_with_bits(*[0x3FF0000000000000] * 3, 0x7FF8000000000001, *[0] * 4),
        "float64",
        "(3,)",
        "0x7ff8000000000001",
    ),
    "float64 subnormal": (np.array([5e-324] + [0.0] * 7), "float64", "(0,)", "5e-324"),
}


@pytest.mark.parametrize("entry", [e for e in ENTRY_POINTS if e != "call_with_layout result"])
@pytest.mark.parametrize("case", list(REFUSED))
def test_values_that_would_change_are_refused_naming_dtype_element_and_remedies(
    driver: JaxDriver, entry: str, case: str
) -> None:
    x, name, index, shown = REFUSED[case]
    with warnings.catch_warnings():
        # nothing was narrowed on the way to the refusal (pack narrows the components that fit before it)
        warnings.simplefilter("ignore" if entry.startswith("pack") else "error", DtypeNarrowingWarning)
        with pytest.raises(lc.UnsupportedLayoutError) as info:
            ENTRY_POINTS[entry](x)
    err = info.value
    assert err.feature == Limitation.DTYPE and err.driver == "jax" and err.value == name
    text = str(err)
    assert name in text and shown in text, text
    if entry == "pack":  # the index in its component
        assert "component" in text, text
    elif entry.startswith("pack_owned"):
        assert "block" in text, text
    else:
        assert index in text, text
    assert 'jax.config.update("jax_enable_x64", True)' in text and "x.astype(np." in text


def test_a_function_returning_a_value_that_would_change_is_refused(driver: JaxDriver) -> None:
    x = np.arange(8) + 2**40
    with pytest.raises(lc.UnsupportedLayoutError, match=r"int64.*element \(0,\) is 1099511627776"):
        lc.call_with_layout(lambda: x.copy(), ROWS, driver="jax")


def test_python_numbers_follow_the_same_rule(driver: JaxDriver) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DtypeNarrowingWarning)
        t = lc.distribute_tensor([1, 2, 3, 4, 5, 6, 7, 2**31 - 1], ROWS, driver="jax")
    assert t.dtype == np.int32 and lc.to_numpy(t).tolist() == [1, 2, 3, 4, 5, 6, 7, 2**31 - 1]
    with pytest.raises(lc.UnsupportedLayoutError, match="int64"):
        lc.distribute_tensor([1, 2, 3, 4, 5, 6, 7, 2**31], ROWS, driver="jax")
    with pytest.raises(lc.UnsupportedLayoutError, match="float64"):
        lc.distribute_tensor(0.1, lc.Layout((), MESH), driver="jax")


@pytest.fixture
def fresh_driver() -> JaxDriver:
    """A jax driver instance that has warned about nothing yet.

    The root conftest keeps driver instances from test to test (and puts them back afterwards), so
    the registered instance may already have said its once-per-dtype warnings in an earlier test
    (the conformance suite narrows int64 too): drop it, and the registry makes a new one.
    """
    with _registry._lock:
        _registry._instances.pop("jax", None)
    d = lc.get_driver("jax")
    assert isinstance(d, JaxDriver)
    return d


def test_the_warning_is_issued_once_per_dtype_naming_it(fresh_driver: JaxDriver) -> None:
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        for _ in range(3):
            lc.distribute_tensor(np.arange(8), ROWS, driver="jax")
            lc.pack([np.zeros(1)] * 4, lc.Layout(("x",), lc.Mesh((4,), ("x",))), driver="jax")
        lc.distribute_tensor(np.arange(8, dtype=np.uint64), ROWS, driver="jax")
    narrowing = [w for w in seen if issubclass(w.category, DtypeNarrowingWarning)]
    assert [str(w.message).split()[4] for w in narrowing] == ["int64", "float64", "uint64"]
    assert all("jax_enable_x64" in str(w.message) for w in narrowing)
    assert all(w.filename == __file__ for w in narrowing), [w.filename for w in narrowing]  # the caller's line
    assert issubclass(DtypeNarrowingWarning, UserWarning) and lc.DtypeNarrowingWarning is DtypeNarrowingWarning


def test_a_request_for_a_64_bit_dtype_is_refused_not_narrowed(driver: JaxDriver) -> None:
    with pytest.raises(lc.UnsupportedLayoutError, match="int64") as info:
        lc.call_with_layout(jnp.zeros, ROWS, (8,), dtype=np.int64, driver="jax")
    assert info.value.feature == Limitation.DTYPE


def test_a_framework_tensor_that_fits_is_narrowed_too(driver: JaxDriver) -> None:
    """Another framework's CPU tensor (here a read-only NumPy view standing for one) comes through __array__."""

    class Tensor:
        def __init__(self, a: np.ndarray) -> None:
            self._a = a
            self.shape, self.dtype = a.shape, a.dtype

        def __array__(self, dtype: Any = None, copy: Any = None) -> np.ndarray:
            return self._a

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DtypeNarrowingWarning)
        t = lc.distribute_tensor(Tensor(np.arange(8.0)), ROWS, driver="jax")
    assert t.dtype == np.float32 and lc.to_numpy(t).tolist() == list(range(8))
