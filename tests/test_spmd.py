"""The NumPy driver's ShardedArray as an SPMD array (docs/design.md#spmd).

Oracles: NumPy on the global arrays (values), the pure shard math (each device's component is
its slice of the value), and :mod:`layoutcore.propagation` (layouts). A spy proves that no step
assembles a global value, and that partial sums are all-reduced over exactly the devices of the
summed mesh axes.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any
from unittest import mock

import numpy as np
import pytest
from _support import DEVICES6
from hypothesis import given
from hypothesis import strategies as st

import layoutcore as lc
from layoutcore import UNSHARDED, Layout, Mesh, UnsupportedLayoutError, propagation
from layoutcore.driver import Limitation
from layoutcore.numpy import ShardedArray, _spmd
from layoutcore.numpy import _driver as _numpy_driver

U = UNSHARDED
MESH = Mesh((3, 2), ("x", "y"), DEVICES6)


@pytest.fixture(autouse=True)
def _numpy_driver_with_devices() -> Iterator[None]:
    with lc.use_driver("numpy"):
        yield


@pytest.fixture
def no_gather(monkeypatch: pytest.MonkeyPatch) -> None:
    """Any assembly of a global value fails the test."""

    def forbidden(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("an SPMD operation assembled a global value")

    monkeypatch.setattr(_numpy_driver, "_assemble", forbidden)
    monkeypatch.setattr(ShardedArray, "__array__", forbidden)


def put(value: Any, *axes: Any, mesh: Mesh = MESH) -> ShardedArray:
    out = lc.distribute_tensor(np.asarray(value), Layout(list(axes), mesh))
    assert isinstance(out, ShardedArray)
    return out


def check(result: Any, want: np.ndarray, layout: Layout) -> None:
    """``result`` has ``layout`` and every device holds its oracle slice of ``want``."""
    assert isinstance(result, ShardedArray)
    assert result.layout == layout and result.shape == want.shape and result.dtype == want.dtype
    for component, index in zip(result.components, layout.device_slices(want.shape), strict=True):
        np.testing.assert_allclose(component, want[index], rtol=1e-6)
        assert not component.flags.writeable


A = np.array([[1, 2, 3], [4, 5, 6]])
B = np.array([[6, 5], [4, 3], [2, 1]])


# -- the DTensor guide's three examples --------------------------------------------------------
def test_guide_replicated_matmul(no_gather: None) -> None:
    mesh = Mesh((6,), ("x",), DEVICES6)
    c = put(A, U, U, mesh=mesh) @ put(B, U, U, mesh=mesh)
    assert c.layout.sharding_specs == ["unsharded", "unsharded"]
    assert [comp.tolist() for comp in c.components] == [[[20, 14], [56, 41]]] * 6


def test_guide_contracting_axis_sharded(no_gather: None) -> None:
    c = put(A, U, "x") @ put(B, "x", U)
    assert c.layout.sharding_specs == ["unsharded", "unsharded"]
    assert [comp.tolist() for comp in c.components] == [[[20, 14], [56, 41]]] * 6


def test_guide_row_sharded(no_gather: None) -> None:
    c = put(A, "y", "x") @ put(B, "x", U)
    assert c.layout.sharding_specs == ["y", "unsharded"]
    assert [comp.tolist() for comp in c.components] == [[[20, 14]], [[56, 41]]] * 3


# -- collectives -------------------------------------------------------------------------------
def test_partial_sums_all_reduce_over_exactly_the_contracting_mesh_axis(monkeypatch: pytest.MonkeyPatch) -> None:
    groups: list[list[list[int]]] = []
    real = _spmd._all_reduce

    def spy(partials: list[np.ndarray], mesh_shape: tuple[int, ...], axes: tuple[int, ...]) -> list[np.ndarray]:
        out = real(partials, mesh_shape, axes)
        by_sum: dict[int, list[int]] = {}
        for position, array in enumerate(out):
            by_sum.setdefault(id(array), []).append(position)
        groups.append(sorted(by_sum.values()))
        return out

    monkeypatch.setattr(_spmd, "_all_reduce", spy)
    put(A, "y", "x") @ put(B, "x", U)
    assert groups == [[[0, 2, 4], [1, 3, 5]]]  # devices along x (y fixed) sum together
    groups.clear()
    put(A, "x", "y") @ put(B, "y", U)
    assert groups == [[[0, 1], [2, 3], [4, 5]]]
    groups.clear()
    put(A, "x", U) @ put(B, U, "y")
    assert groups == []  # nothing summed over a sharded axis: no collective
    groups.clear()
    put(np.arange(12).reshape(3, 4), "x", "y").sum()
    assert groups == [[[0, 1, 2, 3, 4, 5]]]


def test_results_are_new_read_only_arrays() -> None:
    source = np.arange(6.0).reshape(3, 2)
    t = put(source, "x", "y")
    for result in (t + 0, t.T, np.einsum("ij->ij", t), t.sum(axis=0), t * 1.0, np.transpose(t)):
        for component in result.components:
            assert not np.shares_memory(component, source)
            assert not component.flags.writeable


# -- every operation against NumPy, on random layouts ------------------------------------------
MESHES = [Mesh((3, 2), ("x", "y")), Mesh((2, 2, 2), ("x", "y", "z")), Mesh((4,), ("x",)), Mesh((1, 3), ("x", "y"))]


def _entry(mesh: Mesh) -> st.SearchStrategy[Any]:
    names = list(mesh.axis_names)
    return st.one_of(
        st.none(),
        st.sampled_from(names),
        st.permutations(names).map(lambda p: tuple(p[:2])) if len(names) > 1 else st.none(),
    )


def _layout(mesh: Mesh, rank: int) -> st.SearchStrategy[Layout]:
    def valid(axes: list[Any]) -> bool:
        names = [n for e in axes if e is not None for n in ((e,) if isinstance(e, str) else e)]
        return len(names) == len(set(names))

    return st.lists(_entry(mesh), min_size=rank, max_size=rank).filter(valid).map(lambda a: Layout(a, mesh))


@st.composite
def _case(draw: st.DrawFn, ranks: tuple[int, ...], shared: str) -> tuple[Mesh, list[np.ndarray], list[Layout]]:
    """Operands for ``shared``: einsum-style letters per operand, e.g. ``"ij,jk"``; sizes may be uneven."""
    mesh = draw(st.sampled_from(MESHES))
    sizes = {label: draw(st.integers(1, 7)) for label in set(shared) - {","}}
    arrays, layouts = [], []
    for term, rank in zip(shared.split(","), ranks, strict=True):
        shape = tuple(sizes[c] for c in term)
        arrays.append(
            np.asarray(
                draw(st.lists(st.integers(-9, 9), min_size=int(np.prod(shape)), max_size=int(np.prod(shape)))),
                dtype=np.int64,
            ).reshape(shape)
        )
        layouts.append(draw(_layout(mesh, rank)))
    return mesh, arrays, layouts


def _run(op: Any, want: Any, plan: Any, arrays: list[np.ndarray], layouts: list[Layout]) -> None:
    """Run ``op`` on distributed operands without any gather; compare with NumPy and propagation."""
    operands = [lc.distribute_tensor(a, layout) for a, layout in zip(arrays, layouts, strict=True)]
    try:
        expected = plan(*layouts)
    except UnsupportedLayoutError as refused:
        with pytest.raises(UnsupportedLayoutError) as info:
            op(*operands)
        # The same reason, under the name of the operation the user called (add, sum, matmul, ...).
        assert str(info.value).split(": ", 1)[1] == str(refused).split(": ", 1)[1]
        return
    with (
        mock.patch.object(_numpy_driver, "_assemble", _forbidden),
        mock.patch.object(ShardedArray, "__array__", _forbidden),
    ):
        result = op(*operands)
    check(result, np.asarray(want(*arrays)), expected)


def _forbidden(*args: Any, **kwargs: Any) -> Any:
    raise AssertionError("an SPMD operation assembled a global value")


@given(case=_case((2, 2), "ij,jk"))
def test_matmul_matches_numpy(case: Any) -> None:
    _, arrays, layouts = case
    _run(lambda a, b: a @ b, np.matmul, propagation.matmul, arrays, layouts)


@given(case=_case((3, 2), "bij,jk"))
def test_batched_matmul_matches_numpy(case: Any) -> None:
    _, arrays, layouts = case
    _run(np.matmul, np.matmul, propagation.matmul, arrays, layouts)


@pytest.mark.parametrize("subscripts", ["ij,jk->ik", "ij,jk->ki", "ijk,jk->i", "ij,ij->", "ij,kj->ikj"])
@given(data=st.data())
def test_einsum_matches_numpy(subscripts: str, data: st.DataObject) -> None:
    terms = subscripts.split("->")[0]
    _, arrays, layouts = data.draw(_case(tuple(len(t) for t in terms.split(",")), terms))

    def run(*ops: Any) -> Any:
        return np.einsum(subscripts, *ops)

    _run(run, run, lambda *ls: propagation.einsum(subscripts, *ls), arrays, layouts)


@given(case=_case((2, 2), "ij,ij"), ufunc=st.sampled_from([np.add, np.multiply, np.maximum, np.subtract]))
def test_elementwise_matches_numpy(case: Any, ufunc: np.ufunc) -> None:
    _, arrays, layouts = case
    _run(ufunc, ufunc, propagation.elementwise, arrays, layouts)


@given(case=_case((2, 1), "ij,j"))
def test_broadcasting_and_scalars_match_numpy(case: Any) -> None:
    _, arrays, layouts = case
    _run(lambda a, b: 2 * a - b + 1, lambda a, b: 2 * a - b + 1, propagation.elementwise, arrays, layouts)
    _run(lambda a, b: -(a**2) / 4.0, lambda a, b: -(a**2) / 4.0, lambda a, b: a, arrays, layouts)


@given(case=_case((3,), "ijk"), axis=st.sampled_from([None, 0, 1, 2, (0, 2), (1, 2), -1]), keepdims=st.booleans())
def test_sum_and_mean_match_numpy(case: Any, axis: Any, keepdims: bool) -> None:
    _, arrays, layouts = case
    plan = lambda layout: propagation.reduce(layout, axis, keepdims)  # noqa: E731
    _run(
        lambda a: a.sum(axis=axis, keepdims=keepdims),
        lambda a: a.sum(axis=axis, keepdims=keepdims),
        plan,
        arrays,
        layouts,
    )
    _run(
        lambda a: np.mean(a, axis=axis, keepdims=keepdims),
        lambda a: np.mean(a, axis=axis, keepdims=keepdims),
        plan,
        arrays,
        layouts,
    )


@given(case=_case((3,), "ijk"), order=st.permutations([0, 1, 2]))
def test_transpose_matches_numpy(case: Any, order: list[int]) -> None:
    _, arrays, layouts = case
    _run(
        lambda a: a.transpose(order),
        lambda a: a.transpose(order),
        lambda lay: propagation.transpose(lay, order),
        arrays,
        layouts,
    )
    _run(lambda a: a.T, lambda a: a.T, propagation.transpose, arrays, layouts)


def test_float_matmul_and_mean(no_gather: None) -> None:
    rng = np.random.default_rng(0)
    a, b = rng.standard_normal((8, 6)).astype(np.float32), rng.standard_normal((6, 4)).astype(np.float32)
    c = put(a, "x", "y") @ put(b, "y", U)
    check(c, a @ b, Layout(["x", U], MESH))
    check(put(a, "x", "y").mean(axis=0), a.mean(axis=0), Layout(["y"], MESH))


# -- refusals ----------------------------------------------------------------------------------
def test_no_rule_raises_naming_the_operation() -> None:
    with pytest.raises(UnsupportedLayoutError, match=r"^matmul:") as info:
        put(A, "x", U) @ put(B, U, "x")
    assert info.value.feature is Limitation.OPERATION and "matmul" in str(info.value)
    with pytest.raises(UnsupportedLayoutError, match=r"^add:"):
        put(B, "x", U) + put(B, "y", U)
    with pytest.raises(UnsupportedLayoutError, match=r"^einsum:"):
        np.einsum("ij,ij->", put(B, "x", U), put(B, U, "x"))


def test_functions_without_a_rule_never_gather(no_gather: None) -> None:
    t = put(B, "x", U)
    for call, name in [
        (np.sort, "sort"),
        (np.cumsum, "cumsum"),
        (np.linalg.norm, "norm"),
        (np.concatenate, "concatenate"),
    ]:
        with pytest.raises(UnsupportedLayoutError, match=f"^{name}:"):
            call([t, t] if name == "concatenate" else t)
    with pytest.raises(UnsupportedLayoutError, match=r"^add\.accumulate:"):
        np.add.accumulate(t)


def test_plain_arrays_out_and_broadcast_sharding_are_refused() -> None:
    t = put(B, "x", U)
    with pytest.raises(UnsupportedLayoutError, match="distribute_tensor"):
        t + np.ones((3, 2))
    with pytest.raises(UnsupportedLayoutError, match="out="):
        np.add(t, t, out=t)
    one_row = put(np.ones((1, 2)), "x", U)  # a sharded size-1 axis cannot broadcast locally
    with pytest.raises(UnsupportedLayoutError, match="size-1"):
        t + one_row
    other = lc.distribute_tensor(B, Layout(["x", U], Mesh((3,), ("x",), DEVICES6[3:])))
    with pytest.raises(UnsupportedLayoutError, match="different devices"):
        t + other


def test_metadata_functions_read_no_data(no_gather: None) -> None:
    t = put(np.ones((6, 4)), "x", "y")
    assert (np.shape(t), np.ndim(t), np.size(t), np.size(t, 1)) == ((6, 4), 2, 24, 4)


def test_elementwise_equality_and_hash() -> None:
    t = put(B, "x", U)
    assert (t == t).dtype == np.bool_ and all(c.all() for c in (t == t).components)
    assert hash(t) == hash(t) and {t: 1}[t] == 1


def test_docs_tables_show_propagations_current_answers() -> None:
    """docs/spmd.md's generated tables (docs/gen_spmd_tables.py) list the suite's table cases, and
    their propagation column is what propagation answers now."""
    from pathlib import Path

    from layoutcore_conformance.test_spmd import TABLE

    page = (Path(__file__).resolve().parents[1] / "docs" / "spmd.md").read_text()
    tables = page.split("<!-- BEGIN spmd-tables")[1].split("<!-- END spmd-tables -->")[0]
    rows = [line.split(" | ") for line in tables.splitlines() if line.startswith("| ") and "---" not in line]
    by_case: dict[str, set[str]] = {}
    for row in rows:
        by_case.setdefault(row[0][2:], set()).add(row[1])
    assert set(by_case) == {name for name, *_ in TABLE} | {"case"}, "run python docs/gen_spmd_tables.py"
    for name, op, mesh_shape, specs, _shapes in TABLE:
        mesh = Mesh(mesh_shape, ("x", "y")[: len(mesh_shape)])
        try:
            axes = op.layout(*(Layout(s, mesh) for s in specs)).axes
            want = "[" + ", ".join("unsharded" if e is None else str(e) for e in axes) + "]"
        except UnsupportedLayoutError:
            want = "no rule"
        assert by_case[name] == {want}, name
