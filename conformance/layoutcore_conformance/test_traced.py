"""Inside the framework's compiler (docs/design.md#data-functions-made-precise): ``jax.jit``, ``tf.function``, ``torch.compile``
(``adapter.compile``).

A driver that declares ``Capability.TRACED``: ``distribute_tensor`` and ``relayout`` called inside the
compiler apply the layout as the framework's sharding constraint, so the compiled function's result holds
the same per-device data, with the same layout as ``native_fetch_layout`` reads it, as the same calls
outside the compiler (both checked against the oracle). ``fetch_layout`` inside returns the layout where
the framework knows it there, else raises a layoutcore error; it never returns another layout.
``call_with_layout`` inside works or raises a layoutcore error.

A driver without it: the same calls raise ``UnsupportedLayoutError`` with feature ``"traced"`` (a
compiler may run them outside its graph instead, on concrete values: then the result must be right).
A silently dropped layout or a raw framework error fails either way. The NumPy reference driver has no
compiler (``adapter.compile`` gives ``None``): nothing is traced there, so its cases are skipped, saying so.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

import layoutcore as lc

from ._oracle import Case, assert_device_data, assert_native_layout, concrete
from .adapter import ConformanceAdapter

MESH = ((2, 2), ("x", "y"))
SHAPE = (4, 6)
SPECS: dict[str, tuple[Any, ...]] = {
    "replicated": (None, None),
    "rows": ("x", None),
    "cols": (None, "y"),
    "both": ("x", "y"),
    "both_swapped": ("y", "x"),
}
#: Distribute cases and relayout moves: each compiles anew (torch.compile takes seconds), so a few that cover
#: one axis, two axes in and out of mesh order, sharding and gathering.
DISTRIBUTE = ["replicated", "rows", "both", "both_swapped"]
MOVES = [("rows", "cols"), ("both", "replicated"), ("replicated", "both_swapped")]
FEATURE = "traced"


def _case(spec: str) -> Case:
    return Case(MESH[0], MESH[1], SPECS[spec], SHAPE, "float32")


def _traced(driver: lc.driver.Driver) -> bool:
    return lc.driver.Capability.TRACED in driver.capabilities


def _compiled(adapter: ConformanceAdapter, fn: Callable[..., Any]) -> Callable[..., Any]:
    compiled = adapter.compile(fn)
    if compiled is None:  # nothing is ever traced there, whatever the driver declares
        pytest.skip(f"the {adapter.driver.name} driver's framework has no compiler (adapter.compile is None)")
    return compiled


def _layoutcore_error(exc: BaseException) -> lc.LayoutcoreError | None:
    """The layoutcore error ``exc`` is or wraps (compilers re-raise through their own frames)."""
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        if isinstance(current, lc.LayoutcoreError):
            return current
        seen.add(id(current))
        current = current.__cause__ or current.__context__
    return None


def _run_or_refuse(driver: lc.driver.Driver, call: Callable[[], Any], what: str) -> Any | None:
    """``call()``'s result; ``None`` once a driver without ``traced`` was seen to refuse it properly.

    A driver with ``traced`` must not raise. One without it must raise ``UnsupportedLayoutError``
    (feature ``"traced"``, naming the driver), or return a result that the caller then checks.
    """
    try:
        return call()
    except Exception as exc:  # judged below: typed and expected, or a defect
        err = _layoutcore_error(exc)
        if _traced(driver) or not isinstance(err, lc.UnsupportedLayoutError):
            raise AssertionError(
                f"{what}: the {driver.name} driver (traced {'declared' if _traced(driver) else 'not declared'}) "
                f"raised {type(exc).__name__}: {exc}"
            ) from exc
        assert err.feature == FEATURE and err.driver == driver.name, (
            f"{what}: UnsupportedLayoutError(feature={err.feature!r}, driver={err.driver!r}); expected feature "
            f"{FEATURE!r} and driver {driver.name!r}"
        )
        return None


def _check_fetched(driver: lc.driver.Driver, fetched: list[Any], layout: lc.Layout, what: str) -> None:
    """What ``fetch_layout`` gave inside the compiler: the layout, or a layoutcore error (not known there)."""
    assert fetched, f"{what}: the compiled function never ran its Python body"
    for got in fetched:
        if isinstance(got, lc.Layout):
            assert concrete(driver, got) == concrete(driver, layout), (
                f"{what}: fetch_layout inside the compiler gave {got!r}, not {layout!r}"
            )
        else:
            assert isinstance(got, lc.LayoutcoreError), f"{what}: fetch_layout inside the compiler raised {got!r}"


def _fetch(value: Any) -> Any:
    try:
        return lc.fetch_layout(value)
    except lc.LayoutcoreError as err:
        return err


@pytest.mark.parametrize("spec", DISTRIBUTE)
def test_distribute_tensor_inside_the_compiler(
    driver: lc.driver.Driver, adapter: ConformanceAdapter, spec: str
) -> None:
    case = _case(spec)
    layout = case.layout()
    x = case.values()
    fetched: list[Any] = []

    def place(v: Any) -> Any:
        out = lc.distribute_tensor(v, layout)
        fetched.append(_fetch(out))
        return out

    compiled = _compiled(adapter, place)
    result = _run_or_refuse(driver, lambda: compiled(adapter.from_numpy(x)), f"distribute_tensor inside {case}")
    if result is None:
        return
    outside = lc.distribute_tensor(x, layout)
    assert_device_data(adapter, outside, x, case, what="distribute_tensor outside the compiler")
    assert_device_data(adapter, result, x, case, what="distribute_tensor inside the compiler")
    assert_native_layout(driver, result, layout, f"the compiled distribute_tensor's result, {case}")
    _check_fetched(driver, fetched, layout, f"distribute_tensor {case}")


@pytest.mark.parametrize(("source", "target"), MOVES)
def test_relayout_inside_the_compiler(
    driver: lc.driver.Driver, adapter: ConformanceAdapter, source: str, target: str
) -> None:
    src, dst = _case(source), _case(target)
    x = src.values()
    fetched: list[Any] = []

    def move(t: Any) -> Any:
        out = lc.relayout(t, dst.layout())
        fetched.append(_fetch(out))
        return out

    compiled = _compiled(adapter, move)
    tensor = lc.distribute_tensor(x, src.layout())
    result = _run_or_refuse(driver, lambda: compiled(tensor), f"relayout inside, {source} -> {target}")
    if result is None:
        return
    outside = lc.relayout(tensor, dst.layout())
    assert_device_data(adapter, outside, x, dst, what="relayout outside the compiler")
    assert_device_data(adapter, result, x, dst, what=f"relayout inside the compiler, {source} -> {target}")
    assert_native_layout(driver, result, dst.layout(), f"the compiled relayout's result, {source} -> {target}")
    assert_device_data(adapter, tensor, x, src, what="the compiled relayout's input")
    _check_fetched(driver, fetched, dst.layout(), f"relayout {source} -> {target}")


@pytest.mark.parametrize("spec", ["both"])
def test_framework_op_then_relayout_inside_the_compiler(
    driver: lc.driver.Driver, adapter: ConformanceAdapter, spec: str
) -> None:
    """A framework op's traced output (no layoutcore call made it) relaid out inside the compiler."""
    case = _case(spec)
    target = case.with_spec(SPECS["replicated"] if spec == "both" else SPECS["cols"])
    x = case.values()
    compiled = _compiled(adapter, lambda t: lc.relayout(adapter.identity_op(t), target.layout()))
    tensor = lc.distribute_tensor(x, case.layout())
    result = _run_or_refuse(driver, lambda: compiled(tensor), f"relayout(t + 0) inside, {case}")
    if result is None:
        return
    assert_device_data(adapter, result, x, target, what="relayout(t + 0) inside the compiler")
    assert_native_layout(driver, result, target.layout(), f"the compiled relayout(t + 0)'s result, {case}")


def test_call_with_layout_inside_the_compiler(driver: lc.driver.Driver, adapter: ConformanceAdapter) -> None:
    """``call_with_layout`` inside the compiler works (ones, laid out) or raises a layoutcore error."""
    case = _case("both")
    layout = case.layout()
    ones = adapter.ones_fn()
    compiled = _compiled(adapter, lambda v: lc.call_with_layout(ones, layout, SHAPE) + v)
    zeros = lc.distribute_tensor(np.zeros(SHAPE, np.float32), layout)
    try:
        result = compiled(zeros)
    except Exception as exc:  # a typed refusal is allowed here; anything else is a defect
        err = _layoutcore_error(exc)
        assert err is not None, f"call_with_layout inside the compiler raised {type(exc).__name__}: {exc}"
        return
    assert_device_data(adapter, result, np.ones(SHAPE, np.float32), case, what="call_with_layout inside the compiler")
    assert_native_layout(driver, result, layout, "the compiled call_with_layout's result")
