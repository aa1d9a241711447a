"""The value space: the 18 dtypes, values that expose narrowing, and bitwise comparison.

A driver declares the dtypes it holds (``Driver.supported_dtypes``); the suite takes the expected
refusals from that declaration, never from trying. For every dtype, :func:`dtype_values` builds a
global value whose bits a narrowing, a widening or an arithmetic detour would change: NaN payloads,
+/-inf and -0.0 for floats, the extremes for integers (``2**40`` in int64, ``2**63 + 1`` in uint64,
``-2**31`` in int32, ...), subnormals and random bit patterns elsewhere; ``float8_e8m0fnu`` (MX block
scales: powers of two, no sign, zero or infinity) is random bit patterns after its one NaN, ``0xFF``.
:func:`assert_device_bits` compares
each device's data with its oracle slice bit for bit (unsigned integer views), so a NaN equals itself
and ``-0.0`` differs from ``0.0``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import pytest

import layoutcore as lc
from layoutcore.driver import ALL_DTYPES, Limitation, as_bits, dtype_name, numpy_dtype, random_values

from ._oracle import Case, _where, bound_devices
from .adapter import ConformanceAdapter

__all__ = [
    "ALL_DTYPES",
    "assert_bits_equal",
    "assert_device_bits",
    "assert_dtype_refused",
    "declared_dtypes",
    "dtype_values",
]


def declared_dtypes(driver: lc.driver.Driver) -> frozenset[str]:
    """The canonical dtype names ``driver`` declares it holds (``Driver.supported_dtypes``, an attribute or
    a zero-argument hook, of dtype names or dtype objects).

    Fails the test, naming the driver, where the driver declares none: the suite takes every expected
    refusal from this declaration.
    """
    declared = getattr(driver, "supported_dtypes", None)
    if callable(declared):
        declared = declared()
    if declared is None:
        pytest.fail(
            f"driver {driver.name!r} declares no supported_dtypes: the conformance suite takes the dtypes a "
            f"driver must hold, and the ones it must refuse, from that declaration (names among {ALL_DTYPES})"
        )
    names = frozenset(dtype_name(d) for d in declared)
    unknown = names - set(ALL_DTYPES)
    assert not unknown, f"driver {driver.name!r} declares dtypes outside the canonical set: {sorted(unknown)}"
    return names


def _integer_extremes(name: str) -> list[int]:
    """Integers a narrowed or sign-changed path loses: the dtype's limits, ``2**40`` (int64) and ``2**63 + 1``
    (uint64), which no 32-bit or signed type holds."""
    info = np.iinfo(numpy_dtype(name))
    wide = {"int64": [2**40 + 3, -(2**40) - 5], "uint64": [2**63 + 1, 2**40 + 3]}.get(name, [])
    return [int(info.max), int(info.min), *wide]


def dtype_values(shape: Sequence[int], name: str, seed: int = 0, *, arithmetic: bool = False) -> np.ndarray:
    """A global value of ``shape`` and canonical dtype ``name`` that shows narrowing and misplacement.

    Random bits of the dtype (``layoutcore``'s ``random_values``: every pattern, so subnormals, huge and
    negative values; floats start with -0.0, two NaN payloads, +/-inf and a subnormal), with the integer
    extremes (:func:`_integer_extremes`) written first for integer dtypes. Random bits rarely repeat, so a
    misplaced block shows. With ``arithmetic``, every NaN is made the canonical quiet NaN: a framework's
    addition may quiet a signalling NaN or drop a payload, which only a pure move must keep.
    """
    array = np.array(random_values(name, tuple(int(n) for n in shape), seed))
    flat = array.reshape(-1)
    dt = array.dtype
    if name != "bool" and dt.kind in "iu":
        extremes = _integer_extremes(name)[: flat.size]
        flat[: len(extremes)] = np.array(extremes, dtype=object).astype(dt)
    if arithmetic and name != "bool" and dt.kind not in "iu":
        parts = flat.view(np.dtype(f"float{4 * dt.itemsize}")) if dt.kind == "c" else flat
        with np.errstate(invalid="ignore"):
            nan = np.isnan(parts)
        parts[nan] = np.array(np.nan, dtype=np.float32).astype(parts.dtype)
    return array


def assert_bits_equal(got: Any, want: np.ndarray, what: str) -> None:
    """``got`` is a NumPy array of ``want``'s shape and dtype whose bits equal ``want``'s."""
    assert isinstance(got, np.ndarray), f"{what}: got {type(got).__name__}, not a NumPy array"
    assert got.dtype == want.dtype, f"{what}: dtype {got.dtype}, expected {want.dtype} (narrowed or widened)"
    assert got.shape == want.shape, f"{what}: shape {got.shape}, expected {want.shape}"
    same = as_bits(got) == as_bits(want)
    if not same.all():
        bad = np.argwhere(~same.reshape((*want.shape, -1)).all(axis=-1) if want.dtype.itemsize == 16 else ~same)
        first = tuple(int(i) for i in bad[0])
        pytest.fail(
            f"{what}: {len(bad)} element(s) differ bitwise; first at {first}: got {got[first]!r} "
            f"(bits {as_bits(got)[first]!r}), expected {want[first]!r} (bits {as_bits(want)[first]!r})"
        )


def assert_device_bits(adapter: ConformanceAdapter, tensor: Any, x: np.ndarray, case: Case, what: str = "") -> None:
    """Every device of ``tensor`` holds exactly the bits of ``x[oracle slice]`` in ``x``'s dtype, read through
    ``adapter`` (the framework's own calls), on the mesh's devices in row-major order."""
    label = f"{what}: " if what else ""
    got = adapter.device_data(tensor)
    expected_devices = bound_devices(adapter.driver, case.mesh_shape, case.devices)
    assert [d for d, _ in got] == expected_devices, (
        f"{label}{case}: the adapter reports devices {[d for d, _ in got]}, expected {expected_devices}"
    )
    for position, ((device, data), sl) in enumerate(zip(got, case.slices(), strict=True)):
        assert_bits_equal(data, np.asarray(x[sl]), f"{label}{case}: {_where(case.mesh_shape, position, device)}")


def assert_dtype_refused(driver: lc.driver.Driver, name: str, call: Callable[[], Any], what: str) -> None:
    """``call()`` raises :class:`UnsupportedLayoutError` naming dtype ``name``, which ``driver`` does not declare."""
    try:
        result = call()
    except lc.UnsupportedLayoutError as err:
        assert isinstance(err, NotImplementedError)
        assert name in str(err), f"{what}: the refusal does not name the dtype {name!r}: {err}"
        assert err.driver == driver.name, (
            f"{what}: UnsupportedLayoutError.driver is {err.driver!r}, not {driver.name!r}"
        )
        assert err.feature == Limitation.DTYPE, f"{what}: UnsupportedLayoutError.feature is {err.feature!r}, not dtype"
        return
    except lc.LayoutcoreError as err:
        pytest.fail(f"{what}: undeclared dtype {name!r} raised {type(err).__name__}, not UnsupportedLayoutError: {err}")
    pytest.fail(
        f"{what}: the {driver.name!r} driver does not declare dtype {name!r} (supported_dtypes) but returned "
        f"{type(result).__name__} instead of raising UnsupportedLayoutError"
    )
