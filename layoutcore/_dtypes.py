"""The dtypes layoutcore moves, by canonical name (no framework import).

Every driver holds the dtypes its framework has among :data:`ALL_DTYPES` and declares them
(``Driver.supported_dtypes``); the front-end refuses the others with
:class:`~layoutcore.UnsupportedLayoutError` naming the dtype (``docs/design.md#dtypes``).
Names are NumPy's; bfloat16 and the float8 types are ``ml_dtypes``' (imported only when such a
dtype is asked for). Moving data never needs a dtype's arithmetic: :func:`int_view_dtype` and
:func:`as_bits` give the same-width unsigned integer view that carries the bits.
"""

from __future__ import annotations

import re
from typing import Any, Final, NamedTuple

import numpy as np

from ._errors import LayoutError

__all__ = [
    "ALL_DTYPES",
    "ML_DTYPES",
    "NARROWED",
    "X64_DTYPES",
    "Narrowing",
    "as_bits",
    "dtype_name",
    "int_view_dtype",
    "itemsize",
    "narrow_exactly",
    "numpy_dtype",
    "random_values",
]

#: The 18 canonical dtype names, in this order (the order of tables and test axes).
ALL_DTYPES: Final[tuple[str, ...]] = (
    "bool",
    "int8",
    "int16",
    "int32",
    "int64",
    "uint8",
    "uint16",
    "uint32",
    "uint64",
    "float16",
    "bfloat16",
    "float32",
    "float64",
    "complex64",
    "complex128",
    "float8_e4m3fn",
    "float8_e5m2",
    "float8_e8m0fnu",
)

#: The dtypes made of 64-bit numbers: what JAX with ``jax_enable_x64`` off would narrow.
X64_DTYPES: Final[frozenset[str]] = frozenset({"int64", "uint64", "float64", "complex128"})

#: The 32-bit dtype each of :data:`X64_DTYPES` narrows to (JAX's rule with ``jax_enable_x64`` off).
NARROWED: Final[dict[str, str]] = {
    "int64": "int32",
    "uint64": "uint32",
    "float64": "float32",
    "complex128": "complex64",
}

_ITEMSIZE: Final[dict[str, int]] = {
    "bool": 1,
    "int8": 1,
    "int16": 2,
    "int32": 4,
    "int64": 8,
    "uint8": 1,
    "uint16": 2,
    "uint32": 4,
    "uint64": 8,
    "float16": 2,
    "bfloat16": 2,
    "float32": 4,
    "float64": 8,
    "complex64": 8,
    "complex128": 16,
    "float8_e4m3fn": 1,
    "float8_e5m2": 1,
    "float8_e8m0fnu": 1,
}
_INTEGERS: Final[frozenset[str]] = frozenset(n for n in _ITEMSIZE if n.startswith(("bool", "int", "uint")))
_ML_DTYPES: Final[frozenset[str]] = frozenset({"bfloat16", "float8_e4m3fn", "float8_e5m2", "float8_e8m0fnu"})
#: ml_dtypes' names of the dtypes NumPy lacks (bfloat16 and the float8 types), for drivers' bit views.
ML_DTYPES: Final[frozenset[str]] = _ML_DTYPES

# Spellings other than the canonical names, lower-cased. "float"/"double" follow C, torch and
# TF ("float" is 32 bits), not NumPy's np.dtype("float") (64 bits): a string names a C-like type;
# the Python type ``float`` itself still maps to float64, as NumPy does.
_ALIASES: Final[dict[str, str]] = {
    "bool_": "bool",
    "boolean": "bool",
    "half": "float16",
    "fp16": "float16",
    "f16": "float16",
    "bf16": "bfloat16",
    "float": "float32",
    "fp32": "float32",
    "f32": "float32",
    "single": "float32",
    "double": "float64",
    "fp64": "float64",
    "f64": "float64",
    "cfloat": "complex64",
    "cdouble": "complex128",
    "complex": "complex128",
    "short": "int16",
    "int": "int32",
    "long": "int64",
    "byte": "int8",
    "ubyte": "uint8",
    "char": "int8",
    "e4m3": "float8_e4m3fn",
    "fp8_e4m3": "float8_e4m3fn",
    "fp8_e4m3fn": "float8_e4m3fn",
    "e5m2": "float8_e5m2",
    "fp8_e5m2": "float8_e5m2",
    "e8m0": "float8_e8m0fnu",
    "fp8_e8m0": "float8_e8m0fnu",
    "float8_e8m0": "float8_e8m0fnu",
    "f8_e8m0": "float8_e8m0fnu",
}

# Framework dtype str forms: "torch.bfloat16", "<dtype: 'bfloat16'>" (TF),
# "<class 'jax.numpy.bfloat16'>" (a JAX scalar type), "dtype('float32')", "tf.float32".
_WRAPPED = re.compile(
    r"""^(?:(?:torch|tf|tensorflow|jnp|jax\.numpy|np|numpy|ml_dtypes)\.(?P<a>\w+)
        |<dtype:\s*'(?P<b>\w+)'>
        |<class\s+'(?:[\w.]*\.)?(?P<c>\w+)'>
        |dtype\(\s*'(?P<d>\w+)'\s*\))$""",
    re.VERBOSE,
)


def _from_string(text: str) -> str | None:
    key = text.strip()
    match = _WRAPPED.match(key)
    if match:
        key = next(g for g in match.groups() if g is not None)
    lower = key.lower()
    if lower in _ITEMSIZE:
        return lower
    if lower in _ALIASES:
        return _ALIASES[lower]
    try:  # NumPy's own codes: "f4", "<i8", "?", "c8", ...
        dt = np.dtype(key)
    except (TypeError, ValueError):
        return None
    return dt.name if dt.name in _ITEMSIZE and dt.kind in "biufc" else None


def dtype_name(x: Any) -> str:
    """The canonical name (one of :data:`ALL_DTYPES`) of a dtype given in any common form.

    Args:
        x: a NumPy or ml_dtypes dtype or scalar type (``np.float32``, ``ml_dtypes.bfloat16``), a
            string (canonical names, NumPy codes like ``"f4"``, aliases ``"half"``, ``"bf16"``,
            ``"float"`` (32 bits, as in C, torch and TF), ``"double"``), a framework dtype
            (``torch.bfloat16``, ``tf.bfloat16``, ``jnp.bfloat16``) or its ``str``, or the Python
            types ``bool``, ``int`` (int64), ``float`` (float64), ``complex`` (complex128).

    Raises:
        LayoutError: ``x`` names no dtype among :data:`ALL_DTYPES` (text, bytes, records,
            dates, object, or an unknown spelling); the message names ``x``.
    """
    name: str | None = None
    if isinstance(x, np.dtype):
        name = x.name if x.kind in "biufcV" and x.fields is None and x.subdtype is None else None
    elif isinstance(x, str):
        name = _from_string(x)
    elif isinstance(x, type) and issubclass(x, (bool, int, float, complex)):
        name = {bool: "bool", int: "int64", float: "float64", complex: "complex128"}.get(x)
        if name is None:
            name = _safe_np_name(x)
    elif isinstance(x, type) and issubclass(x, np.generic):
        name = _safe_np_name(x)
    else:
        # Framework dtypes (torch.dtype, tf.DType, a jax/ml_dtypes scalar type) by their text,
        # so no framework is imported here. tf.DType has ``.name``; torch.dtype's str is "torch.x".
        tf_name = getattr(x, "name", None)
        if isinstance(tf_name, str) and type(x).__name__ == "DType":
            name = _from_string(tf_name)
        if name is None:
            name = _from_string(str(x))
    if name is None or name not in _ITEMSIZE:
        raise LayoutError(
            f"unknown dtype {x!r}: layoutcore moves {', '.join(ALL_DTYPES)} "
            "(text, bytes, records, dates and objects are not dtypes it holds)",
            value=x,
        )
    return name


def _safe_np_name(x: Any) -> str | None:
    try:
        dt = np.dtype(x)
    except (TypeError, ValueError):
        return None
    return dt.name if dt.kind in "biufcV" and dt.fields is None else None


def numpy_dtype(name: str) -> np.dtype[Any]:
    """The NumPy dtype of canonical ``name`` (ml_dtypes' for bfloat16 and float8, imported here).

    Raises:
        LayoutError: ``name`` is not one of :data:`ALL_DTYPES`.
    """
    _check(name)
    if name in _ML_DTYPES:
        import ml_dtypes  # lazy: only these dtypes need it

        found: np.dtype[Any] = np.dtype(getattr(ml_dtypes, name))
        return found
    return np.dtype(name)


def itemsize(name: str) -> int:
    """Bytes per element of canonical ``name`` (bool: 1, complex128: 16).

    Raises:
        LayoutError: ``name`` is not one of :data:`ALL_DTYPES`.
    """
    _check(name)
    return _ITEMSIZE[name]


def int_view_dtype(name: str) -> np.dtype[Any]:
    """The unsigned integer NumPy dtype that carries ``name``'s bits.

    Same width for every dtype but complex128 (16 bytes, wider than any NumPy integer): its view
    is ``uint64`` with a trailing axis of 2 (see :func:`as_bits`).

    Raises:
        LayoutError: ``name`` is not one of :data:`ALL_DTYPES`.
    """
    return np.dtype(f"uint{8 * min(itemsize(name), 8)}")


def as_bits(array: np.ndarray[Any, Any]) -> np.ndarray[Any, Any]:
    """``array``'s bits as unsigned integers, for bitwise comparison (NaN payloads, -0.0 included).

    Shape ``array.shape`` for every dtype but complex128, whose result has a trailing axis of 2.

    Raises:
        LayoutError: ``array``'s dtype is not one of :data:`ALL_DTYPES`.
    """
    name = dtype_name(array.dtype)
    view = int_view_dtype(name)
    a = np.asarray(array)
    if not a.flags.c_contiguous:  # not np.ascontiguousarray: it makes a 0-d array 1-d
        a = a.copy(order="C")
    if name == "complex128":
        return a.reshape((*a.shape, 1)).view(view)
    return a.view(view)


def random_values(name: str, shape: tuple[int, ...], seed: int = 0) -> np.ndarray[Any, Any]:
    """An array of dtype ``name`` and ``shape`` made of random bits: every bit pattern can occur
    (NaN payloads, -0.0, infinities, subnormals), so only a bit-exact move keeps it (compare with
    :func:`as_bits`). bool holds 0 and 1 only (its other bytes are no valid bools).

    Raises:
        LayoutError: ``name`` is not one of :data:`ALL_DTYPES`.
    """
    dtype = numpy_dtype(name)
    count = int(np.prod(shape, dtype=np.int64))
    raw = np.random.default_rng(seed).integers(0, 256, size=count * dtype.itemsize, dtype=np.uint8)
    if name == "bool":
        raw &= 1
    out = raw.view(dtype)
    if name == "float8_e8m0fnu":  # powers of two only: no sign, zero or infinity; its one NaN first
        out[:1] = np.array([0xFF], np.uint8)[: len(out)].view(dtype)
    elif name not in _INTEGERS:  # float kinds: the special values first, whatever the draw
        with np.errstate(all="ignore"):
            special = np.array([-0.0, np.nan, np.inf, -np.inf, 5e-324, 1.0], dtype=np.float64).astype(dtype)
        bits = as_bits(special)
        bits.reshape(-1)[1] ^= 1  # a second NaN payload (the mantissa stays non-zero)
        special = bits.view(dtype).reshape(special.shape)
        out[: len(special)] = special[: len(out)]
    return out.reshape(shape)


def _check(name: str) -> None:
    if name not in _ITEMSIZE:
        raise LayoutError(f"unknown dtype name {name!r}: expected one of {', '.join(ALL_DTYPES)}", value=name)


class DtypeNarrowingWarning(UserWarning):
    """A 64-bit value was stored in its 32-bit dtype (:data:`NARROWED`) because every element fits
    exactly (JAX with ``jax_enable_x64`` off); issued once per dtype and driver."""


class Narrowing(NamedTuple):
    """:func:`narrow_exactly`'s answer.

    Attributes:
        value: the array in its :data:`NARROWED` dtype, every element bit-exact; ``None`` where
            some element does not fit.
        first: ``None`` where every element fits; else the index (one int per axis, row-major
            first) of the first element that does not.
    """

    value: np.ndarray[Any, Any] | None
    first: tuple[int, ...] | None


_LOW29: Final = np.uint64((1 << 29) - 1)  # float64 mantissa bits below float32's 23
_MANT52: Final = np.uint64((1 << 52) - 1)


def narrow_exactly(array: np.ndarray[Any, Any]) -> Narrowing:
    """``array`` (int64, uint64, float64 or complex128) in its 32-bit dtype (:data:`NARROWED`) if
    every element is exactly representable there, else the index of the first that is not.

    Integers fit when in range. A float fits when its float32 value widens back to the same bits:
    -0.0 and +/-inf fit, 0.1 and 1e300 and float64 subnormals do not. A NaN fits when float32
    can carry its payload (the 29 low mantissa bits are zero); it keeps its sign, payload and
    quiet bit (a signalling NaN stays signalling: the bits are moved, not converted). complex128
    fits where both parts do. Shape ``array.shape``; any byte order.

    Raises:
        LayoutError: ``array``'s dtype is not one of :data:`X64_DTYPES`.
    """
    a = np.asarray(array)
    name = dtype_name(a.dtype)
    if name not in NARROWED:
        raise LayoutError(f"narrow_exactly takes {', '.join(NARROWED)}; received dtype {name}", value=name)
    if not a.dtype.isnative or not a.flags.c_contiguous:
        a = a.astype(a.dtype.newbyteorder("="), order="C")
    flat = a.reshape(-1)  # 1-d: 0-d comparisons would give scalars, not arrays
    if name == "complex128":
        out, fits = _narrow_floats(flat.view(np.float64))
        value, ok = out.view(np.complex64), fits[0::2] & fits[1::2]
    elif name == "float64":
        value, ok = _narrow_floats(flat)
    else:
        info = np.iinfo(NARROWED[name])
        if not flat.size or (flat.min() >= info.min and flat.max() <= info.max):  # two reductions: the common case
            return Narrowing(flat.astype(NARROWED[name]).reshape(a.shape), None)
        value, ok = flat, (flat >= info.min) & (flat <= info.max)
    if ok.all():
        return Narrowing(value.reshape(a.shape), None)
    first = np.unravel_index(int(np.argmin(ok)), a.shape)
    return Narrowing(None, tuple(int(i) for i in first))


def _narrow_floats(x: np.ndarray[Any, Any]) -> tuple[np.ndarray[Any, Any], np.ndarray[Any, Any]]:
    """float64 ``x`` (native, C-order) as float32, and where each element is exact (see narrow_exactly)."""
    with np.errstate(all="ignore"):
        out = x.astype(np.float32)  # round to nearest: exact where the value fits
        # Widening is exact and astype keeps the sign of zero and infinity, so value equality is bit
        # equality for every non-NaN element (compared in float64 without a widened copy).
        fits = x == out
    if fits.all():
        return out, fits
    nan = np.isnan(x)
    if nan.any():  # NaNs by their bits: the hardware conversion would quiet a signalling NaN
        payload = x.view(np.uint64)[nan]
        fits[nan] = (payload & _LOW29) == 0
        sign = (payload >> np.uint64(63)) << np.uint64(31)
        out.view(np.uint32)[nan] = (sign | np.uint64(0x7F800000) | ((payload & _MANT52) >> np.uint64(29))).astype(
            np.uint32
        )
    return out, fits
