"""layoutcore.propagation: hand-checked cases and TF DTensor's printed answers.

The expected layouts are written out by hand from the SPMD rule (a sharded summed axis is
all-reduced, leaving the result replicated over its mesh axes) and, for the DTensor guide's
matmuls, copied from what TF prints (tensorflow.org/guide/dtensor_overview, "SPMD expansion").
"""

from __future__ import annotations

import pickle

import pytest
from hypothesis import given
from hypothesis import strategies as st

from layoutcore import UNSHARDED, Layout, LayoutError, Mesh, UnsupportedLayoutError, propagation
from layoutcore.driver import Limitation
from layoutcore.propagation import einsum, elementwise, matmul, reduce, transpose

U = UNSHARDED
MESH = Mesh((3, 2), ("x", "y"))
MESH3 = Mesh((2, 2, 2), ("a", "b", "c"))


def L(*axes: object, mesh: Mesh = MESH) -> Layout:
    return Layout(list(axes), mesh)


# -- the DTensor guide -------------------------------------------------------------------------
def test_guide_replicated_matmul_on_the_1d_mesh_is_replicated() -> None:
    mesh = Mesh((6,), ("x",))
    out = matmul(Layout([U, U], mesh), Layout([U, U], mesh))
    assert out == Layout([U, U], mesh) and out.sharding_specs == ["unsharded", "unsharded"]


def test_guide_sharded_contracting_axis_is_summed_and_replicated() -> None:
    # TF prints: Sharding spec: ['unsharded', 'unsharded']
    assert matmul(L(U, "x"), L("x", U)).sharding_specs == ["unsharded", "unsharded"]


def test_guide_row_sharded_matmul_keeps_y() -> None:
    # TF prints: Sharding spec: ['y', 'unsharded']
    assert matmul(L("y", "x"), L("x", U)).sharding_specs == ["y", "unsharded"]


# -- matmul ------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("a", "b", "want"),
    [
        (("x", U), (U, "y"), ("x", "y")),  # rows and columns sharded: no sum
        ((U, U), (U, "y"), (U, "y")),
        (("x", U), (U, U), ("x", U)),
        (("x", "y"), ("y", U), ("x", U)),  # k over y, summed; rows stay over x
        ((U, "x"), (U, U), (U, U)),  # replicated b is sliced locally along k; then summed over x
        ((U, U), ("y", U), (U, U)),
        ((U, ("x", "y")), (("x", "y"), U), (U, U)),  # the benchmark's layout: summed over both axes
        (("y", "x"), (U, U), ("y", U)),
    ],
)
def test_matmul_rank2(a: tuple[object, ...], b: tuple[object, ...], want: tuple[object, ...]) -> None:
    assert matmul(L(*a), L(*b)) == L(*want)


def test_matmul_vectors_and_batches() -> None:
    assert matmul(L("x"), L("x")) == L()  # a dot product: a scalar, summed over x
    assert matmul(L("x", U), L(U)) == L("x")  # matrix @ vector
    assert matmul(L("y"), L("y", "x")) == L("x")  # vector @ matrix
    assert matmul(L("a", "b", U, mesh=MESH3), L("c", U, mesh=MESH3)) == L("a", "b", U, mesh=MESH3)
    # Batch axes broadcast from the right; both operands' batch shardings must agree.
    assert matmul(L("a", U, "b", mesh=MESH3), L(U, "b", "c", mesh=MESH3)) == L("a", U, "c", mesh=MESH3)


@pytest.mark.parametrize(
    ("a", "b", "named"),
    [
        (("x", U), (U, "x"), "'x'"),  # x would shard both output axes
        ((U, "x"), ("y", U), "'y'"),  # the contracting axis sharded two ways
        (("x", U), ("x", U), "'x'"),  # m and k both over x
    ],
)
def test_matmul_without_a_rule_raises_naming_the_operation(
    a: tuple[object, ...], b: tuple[object, ...], named: str
) -> None:
    with pytest.raises(UnsupportedLayoutError) as info:
        matmul(L(*a), L(*b))
    assert (
        info.value.feature is Limitation.OPERATION
        and str(info.value).startswith("matmul:")
        and named in str(info.value)
    )


def test_matmul_summed_axis_may_not_shard_the_output() -> None:
    # k over x, and b's columns over x too: summing over x would add different column blocks.
    with pytest.raises(UnsupportedLayoutError, match="matmul: mesh axis 'x'"):
        matmul(L(U, "x"), L(U, "x"))


def test_matmul_rejects_scalars_and_foreign_meshes() -> None:
    with pytest.raises(LayoutError, match="rank >= 1"):
        matmul(L(), L("x"))
    with pytest.raises(UnsupportedLayoutError, match="different meshes"):
        matmul(L(U, "x"), Layout(["x", U], Mesh((6,), ("x",))))
    with pytest.raises(LayoutError, match="Layouts"):
        matmul(("x", None), L("x", U))  # type: ignore[arg-type]


# -- einsum ------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("subscripts", "layouts", "want"),
    [
        ("ij,jk->ik", [(U, "x"), ("x", U)], (U, U)),
        ("ij,jk->ik", [("y", "x"), ("x", U)], ("y", U)),
        ("ij,jk", [("y", "x"), ("x", U)], ("y", U)),  # implicit output: ik
        ("ij,jk->ki", [("y", "x"), ("x", U)], (U, "y")),
        ("ij->ji", [("x", "y")], ("y", "x")),
        ("ij->i", [("x", "y")], ("x",)),  # y summed away
        ("ij->", [("x", "y")], ()),
        ("ii->i", [("x", U)], ("x",)),  # a diagonal: the replicated copy is sliced locally
        ("i,j->ij", [("x",), ("y",)], ("x", "y")),  # an outer product
        ("bij,bjk->bik", [("y", U, "x"), (U, "x", U)], ("y", U, U)),
        ("...ij,...jk->...ik", [("y", U, "x"), ("x", U)], ("y", U, U)),
        ("...j,j", [(U, "x"), ("x",)], (U,)),
    ],
)
def test_einsum(subscripts: str, layouts: list[tuple[object, ...]], want: tuple[object, ...]) -> None:
    assert einsum(subscripts, *(L(*axes) for axes in layouts)) == L(*want)


def test_einsum_matches_matmul_on_the_guide() -> None:
    for a, b in [(L(U, "x"), L("x", U)), (L("y", "x"), L("x", U))]:
        assert einsum("ij,jk->ik", a, b) == matmul(a, b)


@pytest.mark.parametrize(
    ("subscripts", "ranks", "match"),
    [
        ("ij,jk->ik", (2,), "2 operand"),
        ("ijk,jk->ik", (2, 2), "term 'ijk'"),
        ("ij,jk->iz", (2, 2), "'z'"),
        ("ij,jk->ii", (2, 2), "repeats"),
        ("i1,jk->ik", (2, 2), "bad term"),
    ],
)
def test_einsum_bad_subscripts_raise_layout_error(subscripts: str, ranks: tuple[int, ...], match: str) -> None:
    with pytest.raises(LayoutError, match=match):
        einsum(subscripts, *(L(*([U] * r)) for r in ranks))


def test_einsum_conflicts_raise() -> None:
    with pytest.raises(UnsupportedLayoutError) as info:
        einsum("ij,ij->ij", L("x", U), L("y", U))
    assert info.value.feature is Limitation.OPERATION and str(info.value).startswith("einsum")
    with pytest.raises(UnsupportedLayoutError, match="shards at most one"):
        einsum("ij,ij->", L("x", U), L(U, "x"))  # i and j both over x: the sum would miss blocks


# -- elementwise, reduce, transpose ------------------------------------------------------------
def test_elementwise_broadcasts_from_the_right_and_sharded_wins() -> None:
    assert elementwise(L("x", U), L(U, "y")) == L("x", "y")
    assert elementwise(L("x", U), L("y")) == L("x", "y")
    assert elementwise(L(U, U), L()) == L(U, U)
    assert elementwise(L("x", "y")) == L("x", "y")
    with pytest.raises(UnsupportedLayoutError, match="elementwise"):
        elementwise(L("x", U), L("y", U))
    with pytest.raises(UnsupportedLayoutError, match="elementwise"):
        elementwise(L("x", U), L(U, "x"))
    with pytest.raises(LayoutError):
        elementwise()


def test_reduce() -> None:
    assert reduce(L("x", "y"), 0) == L("y")
    assert reduce(L("x", "y"), (0, 1)) == L()
    assert reduce(L("x", "y")) == L()
    assert reduce(L("x", "y"), -1, keepdims=True) == L("x", U)
    assert reduce(L(U, "y"), [1], keepdims=True) == L(U, U)
    for bad in (2, (0, 0), 1.5, True):
        with pytest.raises(LayoutError, match="reduce"):
            reduce(L("x", "y"), bad)  # type: ignore[arg-type]


def test_transpose() -> None:
    assert transpose(L("x", U)) == L(U, "x")
    assert transpose(L("x", U, "y"), (2, 0, 1)) == L("y", "x", U)
    assert transpose(L("x", U, "y"), (-1, 0, 1)) == L("y", "x", U)
    for bad in ((0, 0, 1), (0, 1), (0, 1, 3)):
        with pytest.raises(LayoutError, match="permutation"):
            transpose(L("x", U, "y"), bad)


def test_plans_name_the_all_reduce_axes() -> None:
    plan = propagation.plan_matmul(L(U, ("x", "y")), L(("x", "y"), U))
    assert plan.summed == ("x", "y") and plan.layout == L(U, U) and plan.entry("k") == ("x", "y")
    assert propagation.plan_matmul(L("x", U), L(U, "y")).summed == ()
    assert propagation.plan_reduce(L("x", "y"), 1).summed == ("y",)
    assert pickle.loads(pickle.dumps(plan)) == plan


def test_unbound_layouts_propagate_without_a_mesh() -> None:
    assert matmul(Layout([U, "x"]), Layout(["x", U])) == Layout([U, U])


# -- invariants on random layouts --------------------------------------------------------------
ENTRIES = st.sampled_from([None, "a", "b", "c", ("a", "b"), ("c", "a")])


def _layouts(rank: int) -> st.SearchStrategy[Layout]:
    def ok(axes: list[object]) -> bool:
        names = [n for e in axes if e is not None for n in ((e,) if isinstance(e, str) else e)]  # type: ignore[union-attr]
        return len(names) == len(set(names))

    return st.lists(ENTRIES, min_size=rank, max_size=rank).filter(ok).map(lambda axes: Layout(axes, MESH3))


@given(_layouts(2), _layouts(2))
def test_matmul_output_is_valid_and_never_shards_a_summed_axis(a: Layout, b: Layout) -> None:
    try:
        plan = propagation.plan_matmul(a, b)
    except UnsupportedLayoutError as exc:
        assert exc.feature is Limitation.OPERATION and str(exc).startswith("matmul")
        return
    out_names = [n for d in range(plan.layout.rank) for n in plan.layout.mesh_axes(d)]
    assert not set(out_names) & set(plan.summed)
    # Rows follow a's rows, columns b's columns, wherever either operand shards them.
    assert plan.layout.axes[0] == a.axes[0] and plan.layout.axes[1] == b.axes[1]
    k = a.axes[1] if a.axes[1] is not None else b.axes[0]
    assert set(plan.summed) == set(() if k is None else (k,) if isinstance(k, str) else k)
    assert einsum("ij,jk->ik", a, b) == plan.layout


@given(_layouts(3), st.permutations([0, 1, 2]))
def test_transpose_round_trips(layout: Layout, order: list[int]) -> None:
    inverse = [order.index(i) for i in range(3)]
    assert transpose(transpose(layout, order), inverse) == layout
    assert einsum("abc->" + "".join("abc"[i] for i in order), layout) == transpose(layout, order)


def test_propagation_never_hashes_the_mesh(monkeypatch: pytest.MonkeyPatch) -> None:
    """The caches key on entries and axis names: hashing a mesh hashes every device name (about
    1 ms for 65 536 devices), which would make each call as slow as the mesh is big."""
    big = Mesh((256, 4), ("x", "y"), [f"CPU:{i}" for i in range(1024)])

    def boom(self: Mesh) -> int:
        raise AssertionError("propagation hashed a Mesh")

    monkeypatch.setattr(Mesh, "__hash__", boom)
    a, b = Layout(["y", "x"], big), Layout(["x", None], big)
    assert matmul(a, b) == Layout(["y", None], big)
    assert propagation.plan_matmul(a, b).layout.mesh is big
    assert einsum("ij,jk->ki", a, b) == Layout([None, "y"], big)
    assert elementwise(a, a) == a and reduce(a, 0) == Layout(["x"], big) and transpose(a) == Layout(["x", "y"], big)
