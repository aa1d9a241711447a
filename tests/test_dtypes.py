"""layoutcore._dtypes against NumPy and ml_dtypes themselves (the oracle)."""

from __future__ import annotations

import subprocess
import sys

import ml_dtypes
import numpy as np
import pytest

from layoutcore import LayoutError
from layoutcore._dtypes import (
    ALL_DTYPES,
    X64_DTYPES,
    as_bits,
    dtype_name,
    int_view_dtype,
    itemsize,
    numpy_dtype,
    random_values,
)

# The oracle: each canonical name's dtype as NumPy / ml_dtypes spell it.
ORACLE = {
    "bool": np.dtype(np.bool_),
    "int8": np.dtype(np.int8),
    "int16": np.dtype(np.int16),
    "int32": np.dtype(np.int32),
    "int64": np.dtype(np.int64),
    "uint8": np.dtype(np.uint8),
    "uint16": np.dtype(np.uint16),
    "uint32": np.dtype(np.uint32),
    "uint64": np.dtype(np.uint64),
    "float16": np.dtype(np.float16),
    "bfloat16": np.dtype(ml_dtypes.bfloat16),
    "float32": np.dtype(np.float32),
    "float64": np.dtype(np.float64),
    "complex64": np.dtype(np.complex64),
    "complex128": np.dtype(np.complex128),
    "float8_e4m3fn": np.dtype(ml_dtypes.float8_e4m3fn),
    "float8_e5m2": np.dtype(ml_dtypes.float8_e5m2),
    "float8_e8m0fnu": np.dtype(ml_dtypes.float8_e8m0fnu),
}


def test_all_dtypes_is_the_fixed_list() -> None:
    assert tuple(ORACLE) == ALL_DTYPES
    assert len(set(ALL_DTYPES)) == 18
    assert {n for n in ALL_DTYPES if ORACLE[n].itemsize == 8 and ORACLE[n].kind != "c"} | {"complex128"} == set(
        X64_DTYPES
    )


@pytest.mark.parametrize("name", ALL_DTYPES)
def test_numpy_dtype_itemsize_and_names_agree_with_numpy(name: str) -> None:
    dt = ORACLE[name]
    assert numpy_dtype(name) == dt
    assert itemsize(name) == dt.itemsize
    assert dtype_name(dt) == name
    assert dtype_name(dt.type) == name
    assert dtype_name(name) == name
    assert dtype_name(name.upper()) == name
    assert dtype_name(dt.newbyteorder(">")) == name or dt.itemsize == 1 or dt.kind == "V"


@pytest.mark.parametrize("name", ALL_DTYPES)
def test_int_view_carries_every_bit(name: str) -> None:
    dt = ORACLE[name]
    view = int_view_dtype(name)
    assert view.kind == "u"
    assert view.itemsize == min(dt.itemsize, 8)
    raw = np.random.default_rng(0).integers(0, 256, size=4 * dt.itemsize, dtype=np.uint8)
    if name == "bool":
        raw &= 1  # only 0/1 bytes are valid bools
    a = raw.view(dt)
    bits = as_bits(a)
    np.testing.assert_array_equal(bits.reshape(-1).view(np.uint8), raw)
    assert bits.shape == ((4, 2) if name == "complex128" else (4,))


def test_as_bits_tells_nan_payloads_and_signed_zero_apart() -> None:
    a = np.array([np.nan, 0.0], dtype=ml_dtypes.bfloat16)
    b = np.array([-np.nan, -0.0], dtype=ml_dtypes.bfloat16)
    assert not np.array_equal(as_bits(a), as_bits(b))
    assert np.array_equal(as_bits(a), as_bits(a.copy()))  # NaN equals itself bitwise
    assert as_bits(np.float64(1.5).reshape(())).shape == ()


@pytest.mark.parametrize(
    ("spelling", "name"),
    [
        ("half", "float16"),
        ("bf16", "bfloat16"),
        ("float", "float32"),  # C / torch / TF: 32 bits
        ("double", "float64"),
        ("f4", "float32"),
        ("<i8", "int64"),
        (">f8", "float64"),
        ("?", "bool"),
        ("c8", "complex64"),
        ("torch.bfloat16", "bfloat16"),
        ("torch.float8_e4m3fn", "float8_e4m3fn"),
        ("torch.half", "float16"),
        ("<dtype: 'bfloat16'>", "bfloat16"),  # str(tf.bfloat16)
        ("<dtype: 'uint64'>", "uint64"),
        ("<class 'jax.numpy.float8_e5m2'>", "float8_e5m2"),  # str(jnp.float8_e5m2)
        ("dtype('float32')", "float32"),
        (bool, "bool"),
        (int, "int64"),
        (float, "float64"),  # the Python type follows NumPy
        (complex, "complex128"),
    ],
)
def test_spellings(spelling: object, name: str) -> None:
    assert dtype_name(spelling) == name


def test_an_object_with_a_dtype_like_str_is_read_by_its_text() -> None:
    class FakeTorchDtype:  # what torch.dtype looks like to a module that must not import torch
        def __str__(self) -> str:
            return "torch.bfloat16"

    class DType:  # tf.DType's shape: its class name and .name
        name = "float8_e5m2"

    assert dtype_name(FakeTorchDtype()) == "bfloat16"
    assert dtype_name(DType()) == "float8_e5m2"


@pytest.mark.parametrize(
    "bad",
    [
        "M8[s]",
        np.dtype("datetime64[s]"),
        np.dtype([("a", "i4")]),
        np.dtype(("i4", (2,))),
        "U3",
        "S3",
        "O",
        np.dtype("V8"),
        object,
        str,
        "torch.qint8",
        "float8_e4m3fnuz",
        np.dtype(ml_dtypes.int4),
        None,
        3,
    ],
)
def test_unknown_dtypes_raise_layout_error_naming_them(bad: object) -> None:
    with pytest.raises(LayoutError, match="unknown dtype") as info:
        dtype_name(bad)
    assert repr(bad) in str(info.value)
    assert info.value.value is bad


@pytest.mark.parametrize("fn", [numpy_dtype, itemsize, int_view_dtype])
def test_name_functions_take_canonical_names_only(fn: object) -> None:
    with pytest.raises(LayoutError, match="'bf16'"):
        fn("bf16")  # type: ignore[operator]


def test_importing_imports_no_ml_dtypes_until_asked() -> None:
    code = (
        "import sys, layoutcore._dtypes as d\n"
        "assert 'ml_dtypes' not in sys.modules, 'imported early'\n"
        "d.dtype_name('bfloat16'); d.itemsize('float8_e5m2')\n"
        "assert 'ml_dtypes' not in sys.modules, 'imported by a name-only call'\n"
        "d.numpy_dtype('bfloat16')\n"
        "assert 'ml_dtypes' in sys.modules\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


def test_as_bits_of_a_strided_view_is_its_elements_bits() -> None:
    a = np.arange(12, dtype=np.float32).reshape(3, 4)[:, ::2]
    np.testing.assert_array_equal(as_bits(a), np.ascontiguousarray(a).view(np.uint32))


@pytest.mark.parametrize("name", ALL_DTYPES)
def test_random_values_have_the_dtype_shape_and_special_bits(name: str) -> None:
    a = random_values(name, (64, 8), seed=1)
    assert a.dtype == ORACLE[name] and a.shape == (64, 8)
    assert np.array_equal(as_bits(a), as_bits(random_values(name, (64, 8), seed=1)))
    assert not np.array_equal(as_bits(a), as_bits(random_values(name, (64, 8), seed=2)))
    if ORACLE[name].kind == "b":
        assert set(np.unique(a.view(np.uint8))) == {0, 1}
    if name.startswith(("float", "bfloat")) and name != "float8_e4m3fn":
        assert np.isnan(a.astype(np.float64)).any()  # 512 random patterns include NaNs


def test_float8_e8m0fnu_values_are_powers_of_two_and_its_nan() -> None:
    """MX block scales: 2**(bits - 127) for bits 0..254, NaN at 0xFF; random_values starts with the NaN."""
    bits = np.arange(256, dtype=np.uint8)
    values = bits.view(numpy_dtype("float8_e8m0fnu")).astype(np.float64)
    assert [float(v) for v in values[:255]] == [2.0 ** (b - 127) for b in range(255)]
    assert np.isnan(values[255])
    drawn = random_values("float8_e8m0fnu", (4, 8), seed=3)
    assert drawn.view(np.uint8)[0, 0] == 0xFF and len(np.unique(drawn.view(np.uint8))) > 16
    assert dtype_name("e8m0") == dtype_name("torch.float8_e8m0fnu") == "float8_e8m0fnu"
