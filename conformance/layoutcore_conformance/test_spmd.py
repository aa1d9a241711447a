"""SPMD: the DTensor guide's operations on every driver (docs/design.md#spmd).

Operands are placed with ``layoutcore.distribute_tensor``; the operation itself is the
framework's own (``adapter.matmul`` / ``einsum`` / ``add`` / ``sum``: ``jnp.matmul``,
``tf.linalg.matmul``, ``torch.matmul``, the NumPy driver's ``ShardedArray``). Values must equal
NumPy's, read per device through the adapter and compared with the oracle slices of the layout
the framework reports. Pending sums (torch's ``Partial``) are carried out by the framework before
the values are compared.

The output *layout* is compared with :mod:`layoutcore.propagation`'s. The NumPy reference driver
must give propagation's layout (and refuse where propagation has no rule). A framework may
choose differently; that is measured, not asserted away: with ``LAYOUTCORE_SPMD_TABLE=FILE``
the table cases write what each framework did to ``FILE`` (JSON lines), which
``docs/gen_spmd_tables.py`` turns into the per-framework tables of ``docs/spmd.md``.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

import layoutcore as lc
from layoutcore import UNSHARDED, propagation

from ._oracle import missing_capabilities
from ._strategies import layout_specs, mesh_parts
from .adapter import ConformanceAdapter

U = UNSHARDED
TABLE_ENV = "LAYOUTCORE_SPMD_TABLE"
A = np.array([[1, 2, 3], [4, 5, 6]], dtype=np.float32)
B = np.array([[6, 5], [4, 3], [2, 1]], dtype=np.float32)


@dataclass(frozen=True)
class Op:
    """One operation: how the adapter runs it, how NumPy and propagation answer it."""

    name: str
    run: Callable[..., Any]  # (adapter, *tensors) -> result
    numpy: Callable[..., np.ndarray]
    layout: Callable[..., lc.Layout]  # propagation's answer, from the operands' layouts


def _matmul() -> Op:
    return Op("matmul", lambda ad, a, b: ad.matmul(a, b), np.matmul, propagation.matmul)


def _einsum(subscripts: str) -> Op:
    return Op(
        f"einsum {subscripts}",
        lambda ad, *ts: ad.einsum(subscripts, *ts),
        lambda *xs: np.einsum(subscripts, *xs),
        lambda *ls: propagation.einsum(subscripts, *ls),
    )


def _add() -> Op:
    return Op("add", lambda ad, a, b: ad.add(a, b), np.add, propagation.elementwise)


def _sum(axis: int | tuple[int, ...] | None) -> Op:
    return Op(
        f"sum axis={axis}",
        lambda ad, t: ad.sum(t, axis),
        lambda x: np.sum(x, axis=axis),
        lambda layout: propagation.reduce(layout, axis),
    )


# ==============================================================================================
# Helpers
# ==============================================================================================
#: Framework limitations where propagation has a rule: (driver, operation, operand ranks) -> words
#: of the framework's own error. Each has a row in the table (and so in docs/spmd.md).
KNOWN_REFUSALS: dict[tuple[str, str, tuple[int, ...]], tuple[str, ...]] = {
    # torch folds the batch axes of a 3-D @ 2-D matmul into a view, which a sharded contracting
    # axis, or an uneven sharded batch axis, refuses.
    ("torch", "matmul", (3, 2)): ("requires redistribution", "Cannot flatten unevenly sharded tensor"),
    # torch.einsum runs as bmm on views of its operands: the same refusal for a sharded contraction.
    ("torch", "einsum ij,jk->ik", (2, 2)): ("requires redistribution",),
}


@dataclass(frozen=True)
class Observed:
    """What a framework did: the layout it reports (``None``: not a mesh-axis layout), pending sums."""

    axes: tuple[Any, ...] | None
    pending: tuple[str, ...]
    text: str


def run_and_check(
    adapter: ConformanceAdapter, op: Op, mesh: lc.Mesh, arrays: Sequence[np.ndarray], layouts: Sequence[lc.Layout]
) -> Observed:
    """Place the operands, run ``op`` with the framework, check every device's values against
    NumPy (after the framework reduces any pending sums); return what the framework reported."""
    tensors = [lc.distribute_tensor(adapter.from_numpy(x), layout) for x, layout in zip(arrays, layouts, strict=True)]
    result = op.run(adapter, *tensors)
    want = np.asarray(op.numpy(*arrays))
    axes, pending, text = adapter.output_layout(result)
    reduced = adapter.reduce_pending(result) if pending else result
    final_axes, still, _ = adapter.output_layout(reduced) if pending else (axes, pending, text)
    assert not still, f"{op.name}: pending sums {still} left after reduce_pending"
    if final_axes is None:
        got = np.asarray(lc.to_numpy(reduced))
        np.testing.assert_allclose(got, want, err_msg=f"{op.name} on {layouts}: global value")
    else:
        layout = lc.Layout(final_axes, mesh)
        data = adapter.device_data(reduced)
        slices = layout.device_slices(want.shape)
        assert len(data) == len(slices), f"{op.name}: {len(data)} devices, mesh has {len(slices)}"
        for position, ((device, got), index) in enumerate(zip(data, slices, strict=True)):
            np.testing.assert_allclose(
                got, want[index], err_msg=f"{op.name} on {layouts}: device {position} ({device}) under {layout}"
            )
    return Observed(axes, tuple(pending), text)


def _specs(axes: Sequence[Any] | None) -> str:
    if axes is None:
        return "?"
    return (
        "["
        + ", ".join("unsharded" if e is None else e if isinstance(e, str) else "(" + ",".join(e) + ")" for e in axes)
        + "]"
    )


# ==============================================================================================
# The guide's three matmuls, with the guide's printed components
# ==============================================================================================
def _guide_meshes() -> tuple[lc.Mesh, lc.Mesh]:
    return lc.Mesh((6,), ("x",)), lc.Mesh((3, 2), ("x", "y"))


def test_guide_replicated_matmul(driver: lc.driver.Driver, adapter: ConformanceAdapter) -> None:
    mesh_1d, _ = _guide_meshes()
    layouts = [lc.Layout([U, U], mesh_1d)] * 2
    observed = run_and_check(adapter, _matmul(), mesh_1d, [A, B], layouts)
    assert observed.pending == () and observed.axes == (None, None), f"{driver.name}: {observed.text}"


def test_guide_sharded_contracting_axis(driver: lc.driver.Driver, adapter: ConformanceAdapter) -> None:
    _, mesh_2d = _guide_meshes()
    layouts = [lc.Layout([U, "x"], mesh_2d), lc.Layout(["x", U], mesh_2d)]
    observed = run_and_check(adapter, _matmul(), mesh_2d, [A, B], layouts)
    if driver.name in ("numpy", "tensorflow"):  # propagation's rule is TF DTensor's
        assert observed.axes == (None, None) and observed.pending == (), observed.text


def test_guide_row_sharded_matmul(driver: lc.driver.Driver, adapter: ConformanceAdapter) -> None:
    _, mesh_2d = _guide_meshes()
    layouts = [lc.Layout(["y", "x"], mesh_2d), lc.Layout(["x", U], mesh_2d)]
    tensors = [lc.distribute_tensor(adapter.from_numpy(x), lay) for x, lay in zip([A, B], layouts, strict=True)]
    result = adapter.matmul(*tensors)
    observed = run_and_check(adapter, _matmul(), mesh_2d, [A, B], layouts)
    if driver.name in ("numpy", "tensorflow"):
        assert observed.axes == ("y", None) and observed.pending == (), observed.text
        data = [d.tolist() for _, d in adapter.device_data(result)]
        assert data == [[[20, 14]], [[56, 41]]] * 3, data  # the guide's components, alternating over y


# ==============================================================================================
# Table cases: a fixed list, measured per framework (docs/spmd.md)
# ==============================================================================================
#: (name, op, mesh shape, specs per operand, shapes per operand)
TABLE: list[tuple[str, Op, tuple[int, ...], list[list[Any]], list[tuple[int, ...]]]] = [
    ("guide 1: replicated @ replicated (x=6)", _matmul(), (6,), [[U, U], [U, U]], [(2, 3), (3, 2)]),
    ("guide 2: [unsharded, x] @ [x, unsharded]", _matmul(), (3, 2), [[U, "x"], ["x", U]], [(2, 3), (3, 2)]),
    ("guide 3: [y, x] @ [x, unsharded]", _matmul(), (3, 2), [["y", "x"], ["x", U]], [(2, 3), (3, 2)]),
    ("rows and columns: [x, unsharded] @ [unsharded, y]", _matmul(), (3, 2), [["x", U], [U, "y"]], [(6, 6), (6, 6)]),
    ("contracting over y: [x, y] @ [y, unsharded]", _matmul(), (3, 2), [["x", "y"], ["y", U]], [(6, 6), (6, 6)]),
    (
        "half-sharded contraction: [unsharded, x] @ [unsharded, unsharded]",
        _matmul(),
        (3, 2),
        [[U, "x"], [U, U]],
        [(6, 6), (6, 6)],
    ),
    ("no rule: [x, unsharded] @ [unsharded, x]", _matmul(), (3, 2), [["x", U], [U, "x"]], [(6, 6), (6, 6)]),
    ("no rule: [unsharded, x] @ [y, unsharded]", _matmul(), (3, 2), [[U, "x"], ["y", U]], [(6, 6), (6, 6)]),
    (
        "batched, contracting over x: [unsharded, unsharded, x] @ [x, unsharded]",
        _matmul(),
        (3, 2),
        [[U, U, "x"], ["x", U]],
        [(2, 6, 6), (6, 6)],
    ),
    (
        "einsum ij,jk->ki: [y, x], [x, unsharded]",
        _einsum("ij,jk->ki"),
        (3, 2),
        [["y", "x"], ["x", U]],
        [(6, 6), (6, 6)],
    ),
    ("einsum ij->i: [x, y]", _einsum("ij->i"), (3, 2), [["x", "y"]], [(6, 6)]),
    ("add: [x, unsharded] + [unsharded, y]", _add(), (3, 2), [["x", U], [U, "y"]], [(6, 6), (6, 6)]),
    ("add with broadcasting: [x, unsharded] + [y]", _add(), (3, 2), [["x", U], ["y"]], [(6, 6), (6,)]),
    ("no rule: [x, unsharded] + [y, unsharded]", _add(), (3, 2), [["x", U], ["y", U]], [(6, 6), (6, 6)]),
    ("sum axis 0: [x, y]", _sum(0), (3, 2), [["x", "y"]], [(6, 6)]),
    ("sum all: [x, y]", _sum(None), (3, 2), [["x", "y"]], [(6, 6)]),
]


@pytest.mark.parametrize("index", range(len(TABLE)), ids=[row[0] for row in TABLE])
def test_table_case(driver: lc.driver.Driver, adapter: ConformanceAdapter, index: int) -> None:
    name, op, mesh_shape, specs, shapes = TABLE[index]
    names = ("x", "y")[: len(mesh_shape)]
    mesh = lc.Mesh(mesh_shape, names)
    layouts = [lc.Layout(spec, mesh) for spec in specs]
    arrays = [_values(shape, seed) for seed, shape in enumerate(shapes)]
    try:
        expected: str = _specs(op.layout(*layouts).axes)
    except lc.UnsupportedLayoutError:
        expected = "no rule"
    row: dict[str, Any] = {"driver": driver.name, "case": name, "propagation": expected}
    try:
        observed = run_and_check(adapter, op, mesh, arrays, layouts)
    except Exception as exc:
        # Refusing is right where propagation has no rule (TF DTensor raises there too); a
        # refusal of an operation with a rule is a failure on every driver.
        known = _known_refusal(driver.name, op.name, tuple(len(shape) for shape in shapes), exc)
        if expected != "no rule" and not known:
            raise
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
        row.update(framework="refused", native=f"{type(exc).__name__}: {first[:160]}", same=not known)
    else:
        got = _specs(observed.axes)
        if observed.pending:
            got += " + pending sum over " + ", ".join(observed.pending)
        row.update(framework=got, native=observed.text, same=got == expected)
        if driver.name == "numpy":  # the reference driver is propagation, exactly
            assert got == expected, f"{name}: numpy gave {got}, propagation {expected}"
    _record(row)


def _values(shape: tuple[int, ...], seed: int) -> np.ndarray:
    # Small integers in float32: every framework's sums are exact, so values compare exactly.
    return np.random.default_rng(seed).integers(-4, 5, size=shape).astype(np.float32)


def _record(row: dict[str, Any]) -> None:
    path = os.environ.get(TABLE_ENV)
    if path:
        with open(path, "a", encoding="utf-8") as out:
            out.write(json.dumps(row) + "\n")


# ==============================================================================================
# Random meshes, layouts and shapes
# ==============================================================================================
OPS: list[tuple[Op, str]] = [
    (_matmul(), "ij,jk"),
    (_matmul(), "bij,jk"),
    (_einsum("ij,jk->ik"), "ij,jk"),
    (_einsum("ij,kj->ikj"), "ij,kj"),
    (_einsum("ijk->k"), "ijk"),
    (_add(), "ij,ij"),
    (_add(), "ij,j"),
    (_sum(0), "ij"),
    (_sum(None), "ij"),
    (_sum((0, 2)), "ijk"),
]


@st.composite
def spmd_cases(
    draw: st.DrawFn, driver: lc.driver.Driver, terms: str
) -> tuple[lc.Mesh, list[np.ndarray], list[lc.Layout]]:
    """A random mesh, operand layouts for ``terms`` (einsum letters per operand), and shapes:
    even where the driver lacks uneven support, and only layouts the driver declares."""
    mesh_shape, names, _devices, _name = draw(mesh_parts())
    mesh = lc.Mesh(mesh_shape, names)
    operands = terms.split(",")
    layouts = [lc.Layout(draw(layout_specs(names, len(term))), mesh) for term in operands]
    uneven = lc.driver.Capability.UNEVEN in driver.capabilities
    sizes: dict[str, int] = {}
    for label in sorted(set(terms) - {","}):
        blocks = [
            layout.num_shards(dim)
            for term, layout in zip(operands, layouts, strict=True)
            for dim, c in enumerate(term)
            if c == label
        ]
        step = 1 if uneven else math.lcm(*blocks)
        sizes[label] = draw(st.integers(1, 7)) if uneven else step * draw(st.integers(1, 2))
    shapes = [tuple(sizes[c] for c in term) for term in operands]
    for layout, shape in zip(layouts, shapes, strict=True):
        assume(not missing_capabilities(driver, layout, shape))
    arrays = [_values(shape, seed) for seed, shape in enumerate(shapes)]
    return mesh, arrays, layouts


def _known_refusal(driver_name: str, op_name: str, ranks: tuple[int, ...], exc: Exception) -> bool:
    return any(words in str(exc) for words in KNOWN_REFUSALS.get((driver_name, op_name, ranks), ()))


#: The random cases run a third of the profile's examples per operation (ten operations; a
#: framework's first call on each new layout compiles or simulates every rank).
_EXAMPLES = max(5, settings().max_examples // 3)


@pytest.mark.parametrize("index", range(len(OPS)), ids=[f"{op.name} {terms}" for op, terms in OPS])
@settings(max_examples=_EXAMPLES)
@given(data=st.data())
def test_random_case_values_equal_numpy(
    driver: lc.driver.Driver, adapter: ConformanceAdapter, index: int, data: st.DataObject
) -> None:
    op, terms = OPS[index]
    mesh, arrays, layouts = data.draw(spmd_cases(driver, terms), label="case")
    try:
        expected: lc.Layout | None = op.layout(*layouts)
    except lc.UnsupportedLayoutError:
        expected = None
    if driver.name == "numpy" and expected is None:
        # The reference driver refuses exactly where propagation has no rule, never gathering.
        tensors = [lc.distribute_tensor(x, lay) for x, lay in zip(arrays, layouts, strict=True)]
        with pytest.raises(lc.UnsupportedLayoutError):
            op.run(adapter, *tensors)
        return
    try:
        observed = run_and_check(adapter, op, mesh, arrays, layouts)
    except AssertionError:
        raise
    except Exception as exc:
        # A framework may refuse where propagation has no rule (TF DTensor does); where it has
        # one, only a documented limitation of the framework is accepted.
        ranks = tuple(len(term) for term in terms.split(","))
        if expected is not None and not _known_refusal(driver.name, op.name, ranks, exc):
            raise
        return
    if expected is None:
        return  # the framework moved data and computed: its values were checked above
    if driver.name == "numpy":
        assert expected is not None and observed.axes == expected.axes and not observed.pending
