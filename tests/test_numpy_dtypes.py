"""Every dtype on the NumPy reference driver, bit for bit, and the front-end's dtype gate.

The gate (``Driver.supported_dtypes``) is checked with a NumPy driver that declares fewer dtypes:
every data function that takes a value refuses the others typed, before a hook runs.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import layoutcore as lc
from layoutcore.driver import ALL_DTYPES, Limitation, numpy_dtype
from layoutcore.numpy import NumpyDriver

sys.path.insert(0, str(Path(__file__).resolve().parent / "drivers"))
import _dtype_checks as checks


def read(component: np.ndarray) -> np.ndarray:
    return np.asarray(component)


@pytest.fixture
def numpy_driver() -> str:
    lc.set_driver("numpy")
    return "numpy"


def test_every_dtype_is_declared() -> None:
    assert NumpyDriver().supported_dtypes() == frozenset(ALL_DTYPES)
    assert checks.documented_dtypes("NumPy") == NumpyDriver().supported_dtypes(), "run python docs/gen_dtype_table.py"


@pytest.mark.parametrize("name", ALL_DTYPES)
def test_every_data_function_moves_every_bit(numpy_driver: str, name: str) -> None:
    checks.check_every_data_function(numpy_driver, name, read)


@pytest.mark.parametrize("name", ["bfloat16", "float8_e4m3fn", "float8_e5m2", "float32", "complex128"])
def test_replicas_are_compared_by_bits(numpy_driver: str, name: str) -> None:
    checks.check_replicas_compared_by_bits(numpy_driver, name)


def test_replicas_holding_the_same_nan_are_equal_and_signed_zeros_are_not(numpy_driver: str) -> None:
    layout = lc.Layout(("x", None), checks.MESH)
    x = np.full(checks.SHAPE, np.nan, dtype=numpy_dtype("bfloat16"))
    blocks = [x[s].copy() for s in layout.device_slices(checks.SHAPE)]
    checks.assert_bits(lc.to_numpy(lc.pack(blocks, layout)), x, "NaN replicas")
    zeros = [np.zeros((2, 4), np.float32) for _ in blocks]
    zeros[1] = -zeros[1]  # -0.0 == 0.0 as numbers, not as data
    with pytest.raises(lc.LayoutError, match="Replicas"):
        lc.pack(zeros, layout)


def test_mixed_dtypes_in_pack_are_refused(numpy_driver: str) -> None:
    checks.check_mixed_pack_refused(numpy_driver)


class Narrow(NumpyDriver):
    """A NumPy driver that declares no bfloat16 and no float64."""

    name = "narrow"

    def supported_dtypes(self) -> frozenset[str]:
        return frozenset(ALL_DTYPES) - {"bfloat16", "float64"}

    def unsupported_dtype_reason(self, name: str) -> str:
        return f"narrow keeps no {name}; use float32"


@pytest.fixture
def narrow() -> str:
    lc.driver.register_driver("narrow", lambda: Narrow(num_devices=8), replace=True)
    return "narrow"


@pytest.mark.parametrize("name", ["bfloat16", "float64"])
def test_the_front_end_refuses_undeclared_dtypes_in_every_data_function(narrow: str, name: str) -> None:
    error = checks.check_refused(narrow, name)
    assert "narrow keeps no" in str(error) and error.value == name


def test_the_front_end_checks_call_with_layout_results_and_nested_lists(narrow: str) -> None:
    layout = checks.LAYOUTS[0]
    with pytest.raises(lc.UnsupportedLayoutError, match="float64") as info:
        lc.call_with_layout(np.zeros, layout, checks.SHAPE, driver=narrow)  # NumPy's default float64
    assert info.value.feature == Limitation.DTYPE
    with pytest.raises(lc.UnsupportedLayoutError, match="float64"):
        lc.distribute_tensor([[0.5] * 4] * 8, layout, driver=narrow)
    t = lc.distribute_tensor(np.ones(checks.SHAPE, np.float32), layout, driver=narrow)
    variable = lc.Variable(t, driver=narrow)
    variable.assign(np.full(checks.SHAPE, 2.0))  # float64 into a float32 variable: the variable's own cast
    checks.assert_bits(variable.numpy(), np.full(checks.SHAPE, 2.0, np.float32), "assign cast")


def test_the_default_reason_names_what_the_driver_holds() -> None:
    class Default(NumpyDriver):
        def supported_dtypes(self) -> frozenset[str]:
            return frozenset({"float32", "int32"})

    reason = Default().unsupported_dtype_reason("bfloat16")
    assert "bfloat16" in reason and "int32, float32" in reason


@pytest.mark.parametrize("value", [np.zeros(4, "datetime64[s]"), np.array(["a", "b", "c", "d"])])
def test_dtypes_outside_the_17_are_the_drivers_business(value: Any) -> None:
    """The gate knows the 18 only: the NumPy driver holds text and dates as NumPy does."""
    layout = lc.Layout(("x",), lc.Mesh((4,), ("x",)))
    np.testing.assert_array_equal(lc.to_numpy(lc.distribute_tensor(value, layout, driver="numpy")), value)
