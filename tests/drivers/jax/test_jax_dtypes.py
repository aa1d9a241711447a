"""Every dtype on the JAX driver, bit for bit; 64-bit values refused typed while jax_enable_x64 is off."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

import jax
import jax.numpy as jnp
import ml_dtypes
import numpy as np
import pytest
from layoutcore_jax import JaxDriver

import layoutcore as lc
from layoutcore._dtypes import X64_DTYPES
from layoutcore.driver import ALL_DTYPES, Limitation

# Loaded from its file, not by putting tests/drivers on sys.path: there, the folder tests/drivers/tensorflow
# would pass for the `tensorflow` package (keras then imports it, half there, on the JAX backend).
_spec = importlib.util.spec_from_file_location(
    "_dtype_checks", Path(__file__).resolve().parents[1] / "_dtype_checks.py"
)
assert _spec is not None and _spec.loader is not None
checks = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(checks)

HELD_WITHOUT_X64 = [n for n in ALL_DTYPES if n not in X64_DTYPES]


def read(component: jax.Array) -> np.ndarray:
    """JAX's own host copy of a single-device array (ml_dtypes arrays for bfloat16/float8)."""
    return np.asarray(component)


def test_jax_x64_is_off_in_this_process(driver: JaxDriver) -> None:
    assert not jax.config.jax_enable_x64  # the refusals below assume JAX's default
    assert driver.supported_dtypes() == frozenset(HELD_WITHOUT_X64)
    assert checks.documented_dtypes("JAX") == driver.supported_dtypes(), "run python docs/gen_dtype_table.py"
    assert checks.documented_dtypes("JAX, x64 on") == frozenset(ALL_DTYPES)  # checked in the x64 subprocess below


@pytest.mark.parametrize("name", HELD_WITHOUT_X64)
def test_every_data_function_moves_every_bit(driver: JaxDriver, name: str) -> None:
    checks.check_every_data_function("jax", name, read)


@pytest.mark.parametrize("name", ["bfloat16", "float8_e4m3fn", "float32"])
def test_replicas_are_compared_by_bits(driver: JaxDriver, name: str) -> None:
    checks.check_replicas_compared_by_bits("jax", name)


@pytest.mark.parametrize("name", sorted(X64_DTYPES))
def test_64_bit_values_are_refused_without_x64_naming_both_remedies(driver: JaxDriver, name: str) -> None:
    error = checks.check_refused("jax", name)
    assert 'jax.config.update("jax_enable_x64", True)' in str(error)
    assert "cast" in str(error)


def test_assign_of_a_64_bit_value_casts_to_the_variables_dtype(driver: JaxDriver) -> None:
    """Variable.assign keeps the variable's dtype (same_kind): a float64 value into a float32 variable
    is the variable's own cast, not JAX narrowing, so it is taken."""
    layout = checks.LAYOUTS[0]
    v = lc.Variable(np.zeros(checks.SHAPE, np.float32), layout, driver="jax")
    value = np.full(checks.SHAPE, 0.5, np.float64)
    v.assign(value)
    np.testing.assert_array_equal(v.numpy(), value.astype(np.float32))
    assert v.numpy().dtype == np.float32


@pytest.mark.parametrize(
    ("value", "dtype"),
    [([[1, 2]] * 8, np.int32), ([[0.5, -0.0]] * 8, np.float32), ([[1 + 2j, 3]] * 8, np.complex64)],
)
def test_python_numbers_that_fit_32_bits_are_placed_in_32_bits(driver: JaxDriver, value: object, dtype: type) -> None:
    t = lc.distribute_tensor(value, lc.Layout(("x", None), checks.MESH), driver="jax")
    assert_same = checks.assert_bits
    assert_same(lc.to_numpy(t), np.asarray(value).astype(dtype), "nested list")


@pytest.mark.parametrize("value", [[[2**40, 1]] * 8, [[0.1, 1.0]] * 8])
def test_python_numbers_that_need_64_bits_are_refused(driver: JaxDriver, value: object) -> None:
    with pytest.raises(lc.UnsupportedLayoutError, match="jax_enable_x64") as info:
        lc.distribute_tensor(value, lc.Layout(("x", None), checks.MESH), driver="jax")
    assert info.value.feature == Limitation.DTYPE


@pytest.mark.parametrize("dtype", [jnp.int64, np.float64, "complex128", np.dtype("uint64")])
def test_call_with_layout_asked_for_64_bits_is_refused(driver: JaxDriver, dtype: object) -> None:
    with pytest.raises(lc.UnsupportedLayoutError, match="jax_enable_x64") as info:
        lc.call_with_layout(jnp.zeros, checks.LAYOUTS[0], checks.SHAPE, dtype=dtype, driver="jax")
    assert info.value.feature == Limitation.DTYPE


def test_call_with_layout_of_a_64_bit_argument_that_does_not_fit_is_refused(driver: JaxDriver) -> None:
    big = np.arange(32).reshape(checks.SHAPE) + 2**40
    with pytest.raises(lc.UnsupportedLayoutError, match="int64"):
        lc.call_with_layout(lambda a: a + 1, checks.LAYOUTS[0], big, driver="jax")


@pytest.mark.parametrize("name", ["bfloat16", "float8_e4m3fn", "float8_e5m2", "float16"])
def test_native_low_precision_arrays_round_trip_as_ml_dtypes(driver: JaxDriver, name: str) -> None:
    native = jnp.arange(32, dtype=getattr(jnp, name)).reshape(checks.SHAPE)
    t = lc.distribute_tensor(native, checks.LAYOUTS[0], driver="jax")
    out = lc.to_numpy(t)
    assert out.dtype == np.dtype(getattr(ml_dtypes, name, name))
    checks.assert_bits(out, np.asarray(native), "native round trip")
    made = lc.call_with_layout(jnp.ones, checks.LAYOUTS[1], checks.SHAPE, dtype=getattr(jnp, name), driver="jax")
    checks.assert_placed("jax", made, checks.LAYOUTS[1], np.ones(checks.SHAPE, out.dtype), read)


def test_mixed_dtypes_in_pack_are_refused(driver: JaxDriver) -> None:
    checks.check_mixed_pack_refused("jax")


def test_with_x64_on_every_dtype_moves_every_bit() -> None:
    """jax_enable_x64 is process-wide and fixed before arrays are made: a subprocess with it on."""
    here = Path(__file__).resolve().parent
    program = (
        "import os, sys, jax\n"
        "jax.config.update('jax_enable_x64', True)\n"
        f"sys.path.insert(0, {str(here.parent)!r})\n"
        "import numpy as np, layoutcore as lc, _dtype_checks as checks\n"
        "from layoutcore.driver import ALL_DTYPES\n"
        "assert lc.get_driver('jax').supported_dtypes() == frozenset(ALL_DTYPES)\n"
        "for name in ('int64', 'uint64', 'float64', 'complex128'):\n"
        "    checks.check_every_data_function('jax', name, np.asarray)\n"
        "print('ok')\n"
    )
    env = {k: v for k, v in __import__("os").environ.items() if not k.startswith("LAYOUTCORE_DRIVER")}
    env["JAX_PLATFORMS"] = "cpu"
    done = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True, timeout=300, env=env)
    assert done.returncode == 0 and done.stdout.strip().endswith("ok"), done.stderr[-3000:]


def test_call_with_layout_of_a_function_returning_a_value_it_holds_keeps_its_bits(driver: JaxDriver) -> None:
    """XLA canonicalises a bfloat16 constant's NaN payloads inside jit: such a value is placed as it is."""
    x = checks.random_values("bfloat16", checks.SHAPE, seed=6)
    made = lc.call_with_layout(lambda: jnp.asarray(x), checks.LAYOUTS[0], driver="jax")
    checks.assert_placed("jax", made, checks.LAYOUTS[0], x, read)
    made = lc.call_with_layout(lambda: x.copy(), checks.LAYOUTS[1], driver="jax")
    checks.assert_placed("jax", made, checks.LAYOUTS[1], x, read)


def test_call_with_layout_of_a_function_returning_a_64_bit_numpy_value_is_refused(driver: JaxDriver) -> None:
    x = np.arange(32, dtype=np.int64).reshape(checks.SHAPE) + 2**40
    with pytest.raises(lc.UnsupportedLayoutError, match="int64") as info:
        lc.call_with_layout(lambda: x.copy(), checks.LAYOUTS[0], driver="jax")
    assert info.value.feature == Limitation.DTYPE
