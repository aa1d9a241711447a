"""``narrow_exactly`` (docs/design.md#dtypes: JAX without x64) against a per-element oracle that shares no code with it:
Python ints for integers, ``struct`` bit patterns for floats (IEEE 754 by hand for NaN payloads)."""

from __future__ import annotations

import math
import struct

import numpy as np
import pytest

from layoutcore import LayoutError
from layoutcore.driver import NARROWED, narrow_exactly


def _f64_bits(v: float) -> int:
    return int(struct.unpack("<Q", struct.pack("<d", v))[0])


def _float_oracle(bits64: int) -> int | None:
    """The float32 bits that stand exactly for the float64 ``bits64``, or None where none does."""
    sign, exponent, mantissa = bits64 >> 63, (bits64 >> 52) & 0x7FF, bits64 & ((1 << 52) - 1)
    if exponent == 0x7FF and mantissa:  # NaN: the payload must survive in 23 bits
        return None if mantissa & ((1 << 29) - 1) else (sign << 31) | (0xFF << 23) | (mantissa >> 29)
    value = struct.unpack("<d", struct.pack("<Q", bits64))[0]
    try:
        packed = struct.pack("<f", value)  # rounds to nearest; OverflowError beyond float32's range
    except OverflowError:
        return None
    back = struct.unpack("<f", packed)[0]
    return int(struct.unpack("<I", packed)[0]) if _f64_bits(back) == bits64 else None


def _bits_draw(n: int, seed: int) -> np.ndarray:
    """float64 bit patterns: random ones (rarely fit), widened float32 patterns (all fit, NaNs included)
    and widened ones with one low bit set (never fit)."""
    rng = np.random.default_rng(seed)
    random64 = rng.integers(0, 2**64, size=n, dtype=np.uint64)
    f32 = rng.integers(0, 2**32, size=n, dtype=np.uint64)
    widened = []
    for b in f32.tolist():
        s, e, m = b >> 31, (b >> 23) & 0xFF, b & 0x7FFFFF
        if e == 0xFF:
            widened.append((s << 63) | (0x7FF << 52) | (m << 29))
        else:
            v = struct.unpack("<f", struct.pack("<I", b))[0]
            widened.append(_f64_bits(v))
    widened_arr = np.array(widened, np.uint64)
    nudged = widened_arr ^ np.uint64(1)
    return np.concatenate([random64, widened_arr, nudged])


def test_float64_every_element_against_struct() -> None:
    bits = _bits_draw(300, seed=1)
    specials = [_f64_bits(v) for v in (0.0, -0.0, math.inf, -math.inf, 0.1, 1e300, 5e-324, 2.0**-149, 3.4e38)]
    bits = np.concatenate([np.array(specials, np.uint64), bits])
    expected = [_float_oracle(int(b)) for b in bits.tolist()]
    fits = sum(e is not None for e in expected)
    assert 200 < fits < len(expected)  # the draw holds both kinds
    for start in range(0, len(bits), 37):  # whole arrays and their slices; the first misfit is the oracle's
        chunk = bits[start : start + 37]
        want = expected[start : start + 37]
        got = narrow_exactly(chunk.view(np.float64))
        if all(w is not None for w in want):
            assert got.first is None and got.value is not None and got.value.dtype == np.float32
            assert got.value.view(np.uint32).tolist() == want
        else:
            assert got.value is None
            assert got.first == (next(i for i, w in enumerate(want) if w is None),)
    for b, w in zip(bits.tolist(), expected, strict=True):  # one element at a time, 0-d
        got = narrow_exactly(np.array(b, np.uint64).view(np.float64))
        assert (got.value.view(np.uint32).item() if got.value is not None else None) == w, hex(b)


def test_complex128_fits_where_both_parts_do() -> None:
    parts = _bits_draw(40, seed=2).view(np.float64)
    rng = np.random.default_rng(3)
    re, im = rng.permutation(parts), rng.permutation(parts)
    for r, i in zip(re.tolist(), im.tolist(), strict=True):
        z = np.array([r], np.float64).astype(np.complex128)
        z.view(np.float64)[1] = i
        want_r, want_i = _float_oracle(_f64_bits(r)), _float_oracle(_f64_bits(i))
        got = narrow_exactly(z)
        if want_r is None or want_i is None:
            assert got.value is None and got.first == (0,)
        else:
            assert got.value is not None and got.value.dtype == np.complex64
            assert got.value.view(np.uint32).tolist() == [want_r, want_i]


@pytest.mark.parametrize(("name", "low", "high"), [("int64", -(2**31), 2**31 - 1), ("uint64", 0, 2**32 - 1)])
def test_integers_fit_within_the_32_bit_range(name: str, low: int, high: int) -> None:
    info = np.iinfo(name)
    values = [v for v in (0, 1, low, high, low - 1, high + 1, int(info.min), int(info.max), 2**40, 7) if v >= info.min]
    for v in values:
        got = narrow_exactly(np.array([[v]], name))
        if low <= v <= high:
            assert got.value is not None and got.value.dtype == np.dtype(NARROWED[name]) and got.value.item() == v
        else:
            assert got.value is None and got.first == (0, 0)
    ok = np.array([[1, 2, 3], [4, high, 6]], name)
    assert narrow_exactly(ok).value.tolist() == ok.tolist()  # type: ignore[union-attr]
    bad = ok.copy()
    bad[1, 0] = high + 1
    bad[1, 2] = high + 1
    assert narrow_exactly(bad).first == (1, 0)  # the first, row-major


def test_layouts_and_byte_orders() -> None:
    x = np.arange(24.0).reshape(4, 6)
    got = narrow_exactly(x.T.astype(">f8"))  # non-contiguous, big-endian
    assert got.value is not None and got.value.tolist() == x.T.tolist() and got.value.dtype == np.float32
    empty = narrow_exactly(np.zeros((0, 3), np.int64))
    assert empty.value is not None and empty.value.shape == (0, 3) and empty.first is None


@pytest.mark.parametrize("dtype", [np.float32, np.int32, np.bool_])
def test_only_64_bit_dtypes_are_taken(dtype: type) -> None:
    with pytest.raises(LayoutError, match="narrow_exactly"):
        narrow_exactly(np.zeros(2, dtype))
