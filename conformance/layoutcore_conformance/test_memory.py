"""Whose memory (docs/design.md#data-functions-made-precise): writes through a distributed value stay inside it, on every driver.

* An in-place operation on ``distribute_tensor``'s result (the framework's own, ``adapter.subtract_inplace``,
  where its arrays are mutable) and ``Variable.assign`` never change the caller's input, NumPy array or
  framework tensor.
* Two Variables made from one array, one framework tensor or one distributed tensor never share storage.
* One SGD-like step ``v -= lr * g`` (through ``Variable.assign`` of the framework's ``v - lr * g``, and in
  place, on the Variable and on a ``distribute_tensor`` result, where the framework has in-place ops) on a
  replicated and on a sharded parameter equals NumPy's.
  Each replica owns its storage, so an in-place update is applied once per replica, as on a real group.
* The other direction, the caller writing its array after ``distribute_tensor``, follows the rule the
  driver declares in ``Driver.input_aliasing``: ``"snapshot"`` (the result never changes) or ``"shares"``
  (every device sees the write), for plain, 64-byte-aligned and ``np.memmap`` inputs. Frameworks alias
  aligned host memory zero-copy (JAX ``device_put``, TF ``copy_to_mesh``, ``torch.from_numpy``), so a
  driver that claims a snapshot must copy such inputs.

Per-device data is read by the adapter (the framework's own calls) and compared with the NumPy oracle.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

import layoutcore as lc

from ._oracle import Case, assert_device_data, values
from .adapter import ConformanceAdapter

#: A 2x2 mesh and an (8, 16) float32 value: rows of 64 bytes, so the row blocks of an aligned input
#: are aligned too (the case where frameworks alias host memory instead of copying it).
MESH = ((2, 2), ("x", "y"))
SHAPE = (8, 16)
SPECS: dict[str, tuple[Any, ...]] = {
    "replicated": (None, None),
    "sharded": ("x", None),  # and replicated over "y"
    "fully_sharded": ("x", "y"),
}
INPUT_KINDS = ("plain", "aligned64", "memmap")
ALIASING_RULES = ("snapshot", "shares")


def _case(spec: str) -> Case:
    return Case(MESH[0], MESH[1], SPECS[spec], SHAPE, "float32")


def _caller_array(kind: str, x: np.ndarray, tmp_path: Path) -> np.ndarray:
    """A writable copy of ``x`` as a caller might hold it: a plain array, one whose buffer starts on a
    64-byte boundary, or a memory-mapped file."""
    if kind == "plain":
        return x.copy()
    if kind == "aligned64":
        raw = np.empty(x.nbytes + 64, dtype=np.uint8)
        start = -raw.ctypes.data % 64
        out = raw[start : start + x.nbytes].view(x.dtype).reshape(x.shape)
        assert out.ctypes.data % 64 == 0
        out[...] = x
        return out
    assert kind == "memmap", kind
    mapped = np.memmap(tmp_path / "input.bin", dtype=x.dtype, mode="w+", shape=x.shape)
    mapped[...] = x
    return mapped


def _plain_numpy(value: Any) -> np.ndarray:
    """A plain (undistributed) framework tensor as NumPy: ``.numpy()`` (torch, TF), else the array protocol."""
    return np.array(value.numpy() if hasattr(value, "numpy") else value)


@pytest.mark.parametrize("spec", list(SPECS))
def test_inplace_op_on_the_result_keeps_the_input(
    driver: lc.driver.Driver, adapter: ConformanceAdapter, spec: str
) -> None:
    case = _case(spec)
    layout = case.layout()
    x = case.values()
    keep = x.copy()
    ones = lc.distribute_tensor(np.ones(SHAPE, np.float32), layout)
    source = adapter.from_numpy(x.copy())
    for what, value in (("NumPy array", x), ("framework tensor", source)):
        tensor = lc.distribute_tensor(value, layout)
        if adapter.subtract_inplace(tensor, ones):
            assert_device_data(adapter, tensor, keep - 1, case, what=f"t -= 1 in place, t from a {what}")
        np.testing.assert_array_equal(
            _plain_numpy(value),
            keep,
            err_msg=f"{spec}: an in-place op on distribute_tensor's result reached the {what}",
        )


@pytest.mark.parametrize("spec", list(SPECS))
def test_variable_writes_keep_the_input(driver: lc.driver.Driver, adapter: ConformanceAdapter, spec: str) -> None:
    case = _case(spec)
    layout = case.layout()
    x = case.values()
    keep = x.copy()
    nines = np.full(SHAPE, 9, np.float32)
    ones = lc.distribute_tensor(np.ones(SHAPE, np.float32), layout)
    source = adapter.from_numpy(x.copy())
    for what, value in (("NumPy array", x), ("framework tensor", source)):
        variable = lc.Variable(value, layout)
        variable.assign(lc.distribute_tensor(nines, layout))
        assert_device_data(adapter, variable.value, nines, case, what=f"Variable({what}).assign(9)")
        if adapter.subtract_inplace(variable.value, ones):
            assert_device_data(adapter, variable.value, nines - 1, case, what=f"Variable({what}) -= 1 in place")
        np.testing.assert_array_equal(
            _plain_numpy(value), keep, err_msg=f"{spec}: a write through a Variable reached its initial {what}"
        )


@pytest.mark.parametrize("spec", list(SPECS))
def test_two_variables_never_share_storage(driver: lc.driver.Driver, adapter: ConformanceAdapter, spec: str) -> None:
    case = _case(spec)
    layout = case.layout()
    x = case.values()
    keep = x.copy()
    nines = np.full(SHAPE, 9, np.float32)
    ones = lc.distribute_tensor(np.ones(SHAPE, np.float32), layout)
    distributed = lc.distribute_tensor(x.copy(), layout)
    for what, value in (
        ("one NumPy array", x),
        ("one framework tensor", adapter.from_numpy(x.copy())),
        ("one distributed tensor", distributed),
    ):
        a = lc.Variable(value, layout)
        b = lc.Variable(value, layout)
        a.assign(lc.distribute_tensor(nines, layout))
        assert_device_data(adapter, b.value, keep, case, what=f"b after a.assign(9), both made from {what}")
        expected_a = nines
        if adapter.subtract_inplace(a.value, ones):
            expected_a = nines - 1
            assert_device_data(adapter, b.value, keep, case, what=f"b after a -= 1 in place, both made from {what}")
        assert_device_data(adapter, a.value, expected_a, case, what=f"a, made from {what}")
    assert_device_data(adapter, distributed, keep, case, what="the distributed tensor both Variables were made from")
    np.testing.assert_array_equal(x, keep, err_msg=f"{spec}: a write through a Variable reached the NumPy input")


@pytest.mark.parametrize("spec", list(SPECS))
def test_sgd_step_matches_numpy(driver: lc.driver.Driver, adapter: ConformanceAdapter, spec: str) -> None:
    """``w -= lr * g`` twice: through ``Variable.assign(v - lr * g)`` (every driver), then in place with the
    framework's own op where it has one. Dyadic values keep float32 exact, so the comparison is exact."""
    case = _case(spec)
    layout = case.layout()
    lr = np.float32(0.5)
    w = case.values() / np.float32(4)
    g = values(SHAPE, "float32")[::-1].copy()
    step = lc.distribute_tensor(lr * g, layout)
    param = lc.Variable(w, layout)
    param.assign(adapter.subtract(param.value, step))
    expected = w - lr * g
    assert_device_data(adapter, param.value, expected, case, what="w -= lr * g through Variable.assign")
    if adapter.subtract_inplace(param.value, step):
        expected = expected - lr * g
        assert_device_data(adapter, param.value, expected, case, what="w -= lr * g in place (once per replica)")
    # A distributed tensor used as a parameter directly (what torch's distribute_module makes of a weight).
    tensor = lc.distribute_tensor(w, layout)
    if adapter.subtract_inplace(tensor, step):
        assert_device_data(adapter, tensor, w - lr * g, case, what="w -= lr * g in place on distribute_tensor(w)")
    np.testing.assert_array_equal(w, case.values() / np.float32(4), err_msg="the SGD step wrote into the caller's w")


def test_input_aliasing_is_declared(driver: lc.driver.Driver) -> None:
    rule = getattr(driver, "input_aliasing", None)
    assert rule in ALIASING_RULES, f"Driver.input_aliasing is {rule!r}; it must be one of {ALIASING_RULES}"


@pytest.mark.parametrize("kind", INPUT_KINDS)
@pytest.mark.parametrize("spec", list(SPECS))
def test_caller_writes_follow_the_declared_rule(
    driver: lc.driver.Driver, adapter: ConformanceAdapter, spec: str, kind: str, tmp_path: Path
) -> None:
    """The caller overwrites its input after ``distribute_tensor``: a ``"snapshot"`` driver's result keeps the
    old value on every device, a ``"shares"`` driver's shows the new one on every device."""
    rule = driver.input_aliasing
    case = _case(spec)
    original = case.values()
    x = _caller_array(kind, original, tmp_path)
    tensor = lc.distribute_tensor(x, case.layout())
    assert_device_data(adapter, tensor, original, case, what=f"distribute_tensor of a {kind} input")
    x[...] = -original
    expected = original if rule == "snapshot" else -original
    assert_device_data(
        adapter, tensor, expected, case, what=f"after the caller wrote its {kind} input (the driver declares {rule!r})"
    )
