"""``transfer.plan`` against a brute-force oracle of element labels (NumPy index sets, no plan code).

Every sender element gets a unique integer label. The oracle builds each receiver tensor's labels
from the sender label arrays with ``np.concatenate`` (plain fuse) or per device, block by block
(``"per_segment"``), using only ``Layout.device_slices`` (layoutcore.geometry's shard math). Then
for each receiving rank ``r``: ``N_r`` = the receiver positions its devices hold, ``H_r`` = the
labels its own sender devices hold, and ``floor_r = |{p in N_r : label(p) not in H_r}|·itemsize``.
The pieces must cover ``N_r`` exactly once, carry the same labels on both boxes, come from a rank
that holds them, and be local exactly when that rank is ``r``.
"""

from __future__ import annotations

import math
import pickle
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from layoutcore import Layout, LayoutcoreError, Mesh, TensorSpec, TransferError, transfer

# -- the oracle ----------------------------------------------------------------------------------


def _labels(sources: dict[str, TensorSpec]) -> dict[str, np.ndarray]:
    out, base = {}, 0
    for path, spec in sources.items():
        n = math.prod(spec.shape)
        out[path] = (base + np.arange(n, dtype=np.int64)).reshape(spec.shape)
        base += n
    return out


def _devices(spec: TensorSpec, ranks: dict[str, int]) -> list[tuple[int, tuple[slice, ...]]]:
    mesh = spec.layout.mesh
    assert mesh is not None and mesh.devices is not None
    return [(ranks[d], sl) for d, sl in zip(mesh.devices, spec.layout.device_slices(spec.shape), strict=True)]


def _receiver_labels(path: str, target: TensorSpec, labels: dict[str, np.ndarray], fuse: dict[str, Any]) -> Any:
    entry = fuse.get(path)
    if entry is None:
        return labels[path]
    axis, senders, *mode = entry
    segments = [labels[s] for s in senders]
    if not mode:
        return np.concatenate(segments, axis=axis)
    out = np.full(target.shape, -1, dtype=np.int64)
    seg_specs = [TensorSpec(s.shape, target.dtype, target.layout) for s in segments]
    for d, target_slice in enumerate(target.layout.device_slices(target.shape)):
        block = np.concatenate(
            [s[spec.layout.device_slices(spec.shape)[d]] for s, spec in zip(segments, seg_specs, strict=True)],
            axis=axis,
        )
        if block.shape != out[target_slice].shape:
            return None  # the receiver's layout cannot hold this per-segment split
        out[target_slice] = block
    return out


def _check_against_oracle(sources, targets, sranks, tranks, fuse=None) -> transfer.TransferPlan | None:
    fuse = fuse or {}
    labels = _labels(sources)
    receiver = {p: _receiver_labels(p, t, labels, fuse) for p, t in targets.items()}
    if any(v is None for v in receiver.values()):
        with pytest.raises(TransferError):
            transfer.plan(sources, targets, source_ranks=sranks, target_ranks=tranks, fuse=fuse)
        return None
    p = transfer.plan(sources, targets, source_ranks=sranks, target_ranks=tranks, fuse=fuse)
    held: dict[int, set[int]] = {}
    for path, spec in sources.items():
        for rank, sl in _devices(spec, sranks):
            held.setdefault(rank, set()).update(labels[path][sl].ravel().tolist())
    floor: dict[int, int] = {}
    for path, spec in targets.items():
        needed: dict[int, set[tuple[int, ...]]] = {}
        for rank, sl in _devices(spec, tranks):
            idx = (
                np.argwhere(np.ones(spec.shape, dtype=bool)[sl]) + [s.start or 0 for s in sl]
                if spec.shape
                else np.zeros((1, 0), int)
            )
            needed.setdefault(rank, set()).update(map(tuple, idx.tolist()))
        for rank, positions in needed.items():
            lacking = sum(1 for pos in positions if int(receiver[path][pos]) not in held.get(rank, set()))
            floor[rank] = floor.get(rank, 0) + lacking * spec.itemsize
        # pieces of this receiver path: exact cover per rank, same labels, from a holder
        covered: dict[int, list[tuple[int, ...]]] = {}
        for piece in (q for q in p.pieces if q.receiver_path == path):
            (ro, rs), (so, ss) = piece.receiver_box, piece.sender_box
            assert rs == ss
            rsl = tuple(slice(o, o + s) for o, s in zip(ro, rs, strict=True))
            ssl = tuple(slice(o, o + s) for o, s in zip(so, ss, strict=True))
            got = labels[piece.sender_path][ssl]
            assert np.array_equal(receiver[path][rsl], got), piece
            assert set(got.ravel().tolist()) <= held[piece.source_rank], piece
            local = set(got.ravel().tolist()) <= held.get(piece.target_rank, set())
            assert (piece.source_rank == piece.target_rank) == local, piece
            idx = np.argwhere(np.ones(rs, dtype=bool)) + list(ro) if rs else np.zeros((1, 0), int)
            covered.setdefault(piece.target_rank, []).extend(map(tuple, idx.tolist()))
        for rank in set(needed) | set(covered):
            got_list = covered.get(rank, [])
            assert len(got_list) == len(set(got_list)), (path, rank, "an element twice")
            assert set(got_list) == needed.get(rank, set()), (path, rank)
    assert p.floor_bytes == sum(floor.values())
    assert {r: b for r, b in p.floor_per_rank.items() if b} == {r: b for r, b in floor.items() if b}
    assert p.wire_bytes == p.floor_bytes
    assert sum(s for s, _ in p.per_rank.values()) == sum(r for _, r in p.per_rank.values()) == p.wire_bytes
    return p


# -- named cases ---------------------------------------------------------------------------------
def _mesh(shape: tuple[int, ...], names: tuple[str, ...], prefix: str = "CPU") -> Mesh:
    return Mesh(shape, names, [f"{prefix}:{i}" for i in range(math.prod(shape))])


def _ranks(n: int, first: int = 0, per_rank: int = 1) -> dict[str, int]:
    return {f"CPU:{i}": first + i // per_rank for i in range(n)}


def test_rows_to_columns_between_two_groups() -> None:
    s, t = _mesh((2,), ("x",)), _mesh((2,), ("y",))
    src = {"w": TensorSpec((4, 6), "float32", Layout(("x", None), s))}
    dst = {"w": TensorSpec((4, 6), "float32", Layout((None, "y"), t))}
    p = _check_against_oracle(src, dst, _ranks(2), _ranks(2, first=2))
    assert p is not None and p.floor_bytes == 96 and p.local_bytes == 0
    assert p.per_rank == {0: (48, 0), 1: (48, 0), 2: (0, 48), 3: (0, 48)}


def test_colocated_ranks_copy_locally() -> None:
    m = _mesh((2,), ("x",))
    src = {"w": TensorSpec((4, 6), "float32", Layout(("x", None), m))}
    dst = {"w": TensorSpec((4, 6), "float32", Layout((None, "x"), m))}
    p = _check_against_oracle(src, dst, _ranks(2), _ranks(2))
    assert p is not None and p.floor_bytes == 48 and p.local_bytes == 48
    assert {q.source_rank == q.target_rank for q in p.pieces} == {True, False}


def test_replicas_are_spread_over_holders() -> None:
    # data-parallel replicas on 4 ranks -> TP over 4 other ranks: each holder sends one quarter
    src = {f"w{i}": TensorSpec((8, 8), "float32", Layout((None, None), _mesh((4,), ("dp",)))) for i in range(6)}
    dst = {f"w{i}": TensorSpec((8, 8), "float32", Layout(("tp", None), _mesh((4,), ("tp",)))) for i in range(6)}
    p = _check_against_oracle(src, dst, _ranks(4), _ranks(4, first=4))
    assert p is not None
    sent = [p.per_rank[r][0] for r in range(4)]
    mean, largest = sum(sent) / 4, max(p.nbytes(q) for q in p.pieces)
    assert max(sent) <= max(1.1 * mean, mean + largest)
    assert sent == [6 * 64] * 4


def test_replica_spread_bound_with_mixed_sizes() -> None:
    shapes = [(16, 8), (2, 8), (16, 8), (2, 8), (9, 8), (5, 8)]
    src = {f"w{i}": TensorSpec(s, "float32", Layout((None, None), _mesh((3,), ("dp",)))) for i, s in enumerate(shapes)}
    dst = {f"w{i}": TensorSpec(s, "float32", Layout((None, None), _mesh((1,), ("tp",)))) for i, s in enumerate(shapes)}
    p = _check_against_oracle(src, dst, _ranks(3), {"CPU:0": 3})
    assert p is not None
    sent = [p.per_rank[r][0] for r in range(3)]
    mean, largest = sum(sent) / 3, max(p.nbytes(q) for q in p.pieces)
    assert max(sent) <= max(1.1 * mean, mean + largest), sent


def test_fsdp_to_tp_with_fused_qkv_and_gate_up_both_forms() -> None:
    fsdp, tp = _mesh((4,), ("fsdp",)), _mesh((2,), ("tp",))
    rows = Layout(("fsdp", None), fsdp)
    src = {n: TensorSpec((r, 4), "bfloat16", rows) for n, r in [("q", 8), ("k", 4), ("v", 4), ("gate", 6), ("up", 6)]}
    col = Layout(("tp", None), tp)
    dst = {"qkv": TensorSpec((16, 4), "bfloat16", col), "gate_up": TensorSpec((12, 4), "bfloat16", col)}
    plain = {"qkv": (0, ["q", "k", "v"]), "gate_up": (0, ["gate", "up"])}
    seg = {"qkv": (0, ["q", "k", "v"], "per_segment"), "gate_up": (0, ["gate", "up"], "per_segment")}
    a = _check_against_oracle(src, dst, _ranks(4), _ranks(2, first=4), plain)
    b = _check_against_oracle(src, dst, _ranks(4), _ranks(2, first=4), seg)
    assert a is not None and b is not None
    assert set(a.pieces) != set(b.pieces)  # the two forms put different rows on each rank
    # rank 4 holds rows 0..7 of qkv: q[0:8] plainly, [q0..3; k0..1; v0..1] per segment
    assert {q.sender_path for q in a.pieces if q.target_rank == 4 and q.receiver_path == "qkv"} == {"q"}
    assert {q.sender_path for q in b.pieces if q.target_rank == 4 and q.receiver_path == "qkv"} == {"q", "k", "v"}


def test_two_axis_mesh_several_mesh_axes_on_one_tensor_axis_uneven() -> None:
    s, t = _mesh((2, 3), ("a", "b")), _mesh((3, 2), ("c", "d"))
    src = {"w": TensorSpec((7, 5), "int32", Layout((("a", "b"), None), s))}
    dst = {"w": TensorSpec((7, 5), "int32", Layout(("d", ("c",)), t))}
    _check_against_oracle(src, dst, _ranks(6, per_rank=2), _ranks(6, first=2, per_rank=3))


def test_rename_mapping_and_callable() -> None:
    m = _mesh((2,), ("x",))
    spec = TensorSpec((4, 4), "float32", Layout(("x", None), m))
    src = {"model.w": spec, "unused": spec}
    dst = {"w": TensorSpec((4, 4), "float32", Layout((None, "x"), m))}
    a = transfer.plan(src, dst, source_ranks=_ranks(2), target_ranks=_ranks(2, first=2), rename={"model.w": "w"})
    b = transfer.plan(
        src, dst, source_ranks=_ranks(2), target_ranks=_ranks(2, first=2), rename=lambda p: p.removeprefix("model.")
    )
    assert a is b  # equal resolved rename: the cached plan
    assert {q.sender_path for q in a.pieces} == {"model.w"}  # the unused sender path is not sent


def test_repeated_plan_is_cached() -> None:
    m = _mesh((2,), ("x",))
    src = {"w": TensorSpec((4, 4), "float32", Layout(("x", None), m))}
    dst = {"w": TensorSpec((4, 4), "float32", Layout((None, "x"), m))}
    a = transfer.plan(src, dst, source_ranks=_ranks(2), target_ranks=_ranks(2, first=2))
    assert transfer.plan(dict(src), dict(dst), source_ranks=_ranks(2), target_ranks=_ranks(2, first=2)) is a
    assert transfer.plan(src, dst, source_ranks=_ranks(2), target_ranks=_ranks(2, first=3)) is not a


# -- failing closed ------------------------------------------------------------------------------
def _fail(sources, targets, **kw) -> TransferError:
    kw.setdefault("source_ranks", _ranks(2))
    kw.setdefault("target_ranks", _ranks(2, first=2))
    with pytest.raises(TransferError) as info:
        transfer.plan(sources, targets, **kw)
    err = info.value
    assert isinstance(err, LayoutcoreError)
    again = pickle.loads(pickle.dumps(err))
    assert str(again) == str(err) and isinstance(again, TransferError)
    return err


def test_fails_closed_naming_the_paths() -> None:
    m = _mesh((2,), ("x",))
    f32 = TensorSpec((4, 4), "float32", Layout(("x", None), m))
    err = _fail({"a": f32}, {"a": f32, "b": f32, "c": f32})
    assert err.paths == ("b", "c") and "'b'" in str(err) and "'c'" in str(err)
    err = _fail({"a": f32}, {"a": f32.replace(dtype="bfloat16")})
    assert err.paths == ("a",) and "no casting" in str(err)
    err = _fail({"a": f32}, {"a": f32.replace(shape=(4, 2))})
    assert err.paths == ("a",)
    seg = {"q": f32, "k": f32.replace(shape=(2, 4))}
    err = _fail(seg, {"qkv": f32.replace(shape=(8, 4))}, fuse={"qkv": ["q", "k"]})
    assert err.paths == ("qkv",) and "add up to 6, not 8" in str(err)
    err = _fail(seg, {"qkv": f32.replace(shape=(6, 4))}, fuse={"qkv": ["q", "missing"]})
    assert "missing" in str(err)
    # per-segment blocks that the receiver's layout cannot hold: 3 + 3 rows over 2 devices -> 2+2, 1+1
    odd = {"q": f32.replace(shape=(3, 4)), "k": f32.replace(shape=(3, 4))}
    err = _fail(odd, {"qk": f32.replace(shape=(6, 4))}, fuse={"qk": (0, ["q", "k"], "per_segment")})
    assert err.paths == ("qk",)
    # a sender device with no rank: its elements have no sender
    err = _fail({"a": f32}, {"a": f32}, source_ranks={"CPU:0": 0})
    assert err.paths == ("a",) and "CPU:1" in str(err)
    err = _fail({"a": f32, "b": f32}, {"x": f32}, rename={"a": "x", "b": "x"})
    assert err.paths == ("x",)


# -- hypothesis over meshes and layouts ----------------------------------------------------------
@st.composite
def _spec(draw: Any, shape: tuple[int, ...], prefix: str) -> TensorSpec:
    ndim = draw(st.integers(1, 2))
    sizes = tuple(draw(st.lists(st.integers(1, 3), min_size=ndim, max_size=ndim)))
    names = tuple(f"{prefix}{i}" for i in range(ndim))
    mesh = _mesh(sizes, names)
    free = list(names)
    axes: list[Any] = []
    for _ in shape:
        take = draw(st.lists(st.sampled_from(free), unique=True, max_size=2)) if free else []
        for a in take:
            free.remove(a)
        axes.append(None if not take else (take[0] if len(take) == 1 else tuple(take)))
    return TensorSpec(shape, draw(st.sampled_from(["float32", "bfloat16", "int8"])), Layout(tuple(axes), mesh))


@st.composite
def _case(draw: Any) -> tuple[Any, ...]:
    shape = tuple(draw(st.lists(st.integers(0, 7), min_size=1, max_size=2)))
    src = draw(_spec(shape, "s"))
    dst = draw(_spec(shape, "t")).replace(dtype=src.dtype)
    nsrc, ndst = src.layout.mesh.size, dst.layout.mesh.size
    sranks = {f"CPU:{i}": draw(st.integers(0, 3)) for i in range(nsrc)}
    offset = draw(st.sampled_from([0, 2, 4]))  # 0 and 2: some ranks in both sets
    tranks = {f"CPU:{i}": offset + draw(st.integers(0, 3)) for i in range(ndst)}
    return src, dst, sranks, tranks


@settings(max_examples=40, deadline=None)
@given(_case())
def test_plan_matches_the_oracle(case: tuple[Any, ...]) -> None:
    src, dst, sranks, tranks = case
    _check_against_oracle({"w": src}, {"w": dst}, sranks, tranks)


@settings(max_examples=30, deadline=None)
@given(st.data())
def test_fused_forms_match_the_oracle(data: Any) -> None:
    rows = data.draw(st.lists(st.integers(0, 6), min_size=1, max_size=3))
    cols = data.draw(st.integers(1, 3))
    axis = data.draw(st.integers(0, 1))
    seg_shapes = [(r, cols) if axis == 0 else (cols, r) for r in rows]
    total = (sum(rows), cols) if axis == 0 else (cols, sum(rows))
    names = [f"s{i}" for i in range(len(rows))]
    srcs = {n: data.draw(_spec(s, "s")).replace(dtype="float32") for n, s in zip(names, seg_shapes, strict=True)}
    dst = data.draw(_spec(total, "t")).replace(dtype="float32")
    nsrc = max(s.layout.mesh.size for s in srcs.values())
    srcs = {n: TensorSpec(s.shape, s.dtype, s.layout) for n, s in srcs.items()}
    sranks = {f"CPU:{i}": data.draw(st.integers(0, 2)) for i in range(nsrc)}
    tranks = {f"CPU:{i}": data.draw(st.integers(1, 4)) for i in range(dst.layout.mesh.size)}
    mode = data.draw(st.sampled_from([(), ("per_segment",)]))
    _check_against_oracle(srcs, {"f": dst}, sranks, tranks, {"f": (axis, names, *mode)})
