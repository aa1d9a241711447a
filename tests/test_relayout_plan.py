"""relayout_plan: the exact minimum data movement, checked against NumPy masks over geometry's slices.

The oracle never uses ``layoutcore._plan``: per-device data comes from ``Layout.device_slices``
(the geometry) applied to a NumPy array, and the floor ``Σ_d |B_d \\ A_d|·itemsize`` from boolean
masks over those slices.
"""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import layoutcore as lc
from layoutcore import Layout, LayoutError, Mesh, Transfer, relayout_plan
from layoutcore.numpy import NumpyDriver
from layoutcore.numpy import _driver as numpy_driver

MESH4 = Mesh((4,), ("x",), devices=[f"CPU:{i}" for i in range(4)])
MESH42 = Mesh((4, 2), ("x", "y"), devices=[f"CPU:{i}" for i in range(8)])


def _mask(shape: tuple[int, ...], index: tuple[slice, ...] | None) -> np.ndarray:
    mask = np.zeros(shape, dtype=bool)
    if index is not None:
        mask[index] = True
    return mask


def _names(mesh: Mesh, other: Mesh) -> list[object]:
    return list(range(mesh.size)) if mesh.devices is None or other.devices is None else list(mesh.devices)


def oracle_floor(source: Layout, target: Layout, shape: tuple[int, ...], itemsize: int) -> list[int]:
    """Per target device, ``|B_d \\ A_d|·itemsize`` from boolean masks over the geometry's slices."""
    assert source.mesh is not None and target.mesh is not None
    src_names = _names(source.mesh, target.mesh)
    dst_names = _names(target.mesh, source.mesh)
    src_slices = source.device_slices(shape)
    out = []
    for name, b in zip(dst_names, target.device_slices(shape), strict=True):
        held = src_slices[src_names.index(name)] if name in src_names else None
        out.append(int((_mask(shape, b) & ~_mask(shape, held)).sum()) * itemsize)
    return out


def apply_and_check(source: Layout, target: Layout, shape: tuple[int, ...], dtype: str = "float32") -> lc.RelayoutPlan:
    """Apply the plan's transfers to the source's per-device data; every target device must end exact."""
    plan = relayout_plan(source, target, shape, dtype)
    itemsize = np.dtype(dtype).itemsize
    assert source.mesh is not None and target.mesh is not None
    x = np.arange(int(np.prod(shape)), dtype=dtype).reshape(shape)
    src_slices = source.device_slices(shape)
    dst_slices = target.device_slices(shape)
    src_names = _names(source.mesh, target.mesh)
    dst_names = _names(target.mesh, source.mesh)
    # Each device's data as a full-size array plus a mask of what it holds (global coordinates).
    have = {}
    for d, (name, b) in enumerate(zip(dst_names, dst_slices, strict=True)):
        value = np.full(shape, -1, dtype=dtype)
        holds = np.zeros(shape, dtype=np.int64)
        if name in src_names:
            a = src_slices[src_names.index(name)]
            keep = _mask(shape, a) & _mask(shape, b)
            value[keep] = x[keep]
            holds += keep
        have[d] = (value, holds)
    for t in plan.transfers:
        assert isinstance(t, Transfer)
        rect = _mask(shape, t.index)
        assert int(rect.sum()) * itemsize == t.nbytes > 0
        assert not (rect & ~_mask(shape, src_slices[t.src])).any(), f"{t} sends what src does not hold"
        assert not (rect & ~_mask(shape, dst_slices[t.dst])).any(), f"{t} sends what dst does not need"
        source_data = np.where(_mask(shape, src_slices[t.src]), x, -2)  # the sender's own data only
        value, holds = have[t.dst]
        value[rect] = source_data[rect]
        holds += rect
    for d, b in enumerate(dst_slices):
        value, holds = have[d]
        need = _mask(shape, b)
        assert (holds[need] == 1).all(), f"device {d}: an element arrived twice or never"
        assert (holds[~need] == 0).all()
        np.testing.assert_array_equal(value[need], x[need])
    floor = oracle_floor(source, target, shape, itemsize)
    assert list(plan.ingress_bytes) == floor
    assert plan.floor_bytes == sum(floor) == sum(t.nbytes for t in plan.transfers)
    egress = [0] * source.mesh.size
    for t in plan.transfers:
        egress[t.src] += t.nbytes
    assert list(plan.egress_bytes) == egress
    return plan


# -- pinned floors ---------------------------------------------------------------------------------
@pytest.mark.parametrize("n", [2, 4, 8])
def test_shard_to_replicated_moves_n_minus_1_over_n_per_device(n: int) -> None:
    mesh = Mesh((n,), ("x",))
    shape = (8 * n, 3)
    plan = apply_and_check(Layout(["x", None], mesh), Layout([None, None], mesh), shape)
    nbytes = 8 * n * 3 * 4
    assert plan.ingress_bytes == ((n - 1) * nbytes // n,) * n
    assert plan.floor_bytes == (n - 1) * nbytes
    assert len(plan.transfers) == n * (n - 1)


def test_replicated_to_shard_moves_nothing() -> None:
    plan = apply_and_check(Layout([None, None], MESH4), Layout(["x", None], MESH4), (8, 4))
    assert plan.floor_bytes == 0 and plan.transfers == () and plan.ingress_bytes == (0,) * 4


@pytest.mark.parametrize("n", [2, 4, 8])
def test_s0_to_s1_moves_n_minus_1_over_n_squared_per_device(n: int) -> None:
    mesh = Mesh((n,), ("x",))
    plan = apply_and_check(Layout(["x", None], mesh), Layout([None, "x"], mesh), (4 * n, 4 * n), "float64")
    nbytes = 16 * n * n * 8
    assert plan.ingress_bytes == ((n - 1) * nbytes // (n * n),) * n
    assert plan.egress_bytes == ((n - 1) * nbytes // (n * n),) * n


def test_xy_to_yx_on_4x2() -> None:
    # Device (i, j) holds rows [2i, 2i+2) x cols [4j, 4j+4) and needs rows [4j, 4j+4) x cols [2i, 2i+2);
    # the two overlap (4 elements) exactly when i // 2 == j, so those devices receive 4 elements, the others 8.
    plan = apply_and_check(Layout(["x", "y"], MESH42), Layout(["y", "x"], MESH42), (8, 8))
    keeps = [i // 2 == j for i, j in itertools.product(range(4), range(2))]
    assert plan.ingress_bytes == tuple(16 if k else 32 for k in keeps)
    assert plan.floor_bytes == 192 == 0.75 * plan.nbytes


def test_uneven_chunks() -> None:
    # 5 over 3 -> blocks 2, 2, 1: gathering gives devices 3, 3 and 4 elements.
    mesh = Mesh((3,), ("x",))
    plan = apply_and_check(Layout(["x"], mesh), Layout([None], mesh), (5,), "int32")
    assert plan.ingress_bytes == (12, 12, 16)
    # 4 over 3 -> 2, 2, 0 (an empty block) to 4 over 2 on the same 3 devices via a 1-D target mesh.
    plan = apply_and_check(Layout(["x", None], mesh), Layout([None, "x"], mesh), (4, 2), "int32")
    assert plan.floor_bytes == sum(oracle_floor(Layout(["x", None], mesh), Layout([None, "x"], mesh), (4, 2), 4))


def test_across_meshes_devices_match_by_name() -> None:
    # The target mesh reuses CPU:2 and CPU:3 (in another order) and adds CPU:8 and CPU:9.
    target_mesh = Mesh((2, 2), ("a", "b"), devices=["CPU:3", "CPU:8", "CPU:2", "CPU:9"])
    source = Layout(["x", None], MESH4)
    target = Layout(["a", None], target_mesh)
    plan = apply_and_check(source, target, (8, 2))
    # a-block 0 (rows 0..4) goes to CPU:3 (holds rows 6..8: nothing of it) and CPU:8; a-block 1 (rows 4..8)
    # to CPU:2 (holds rows 4..6) and CPU:9. Each row pair is 16 bytes.
    assert plan.ingress_bytes == (32, 32, 16, 32)


def test_abstract_meshes_match_by_position() -> None:
    source = Layout(["x", None], Mesh((4,), ("x",)))
    target = Layout([None, "y"], Mesh((2, 2), ("z", "y")))
    plan = apply_and_check(source, target, (4, 4))
    assert plan.floor_bytes == sum(oracle_floor(source, target, (4, 4), 4))


def test_replicas_share_the_egress() -> None:
    # Replicated on 4 devices, to 4 new devices: each new device's copy comes from a different holder.
    new = Mesh((4,), ("x",), devices=[f"CPU:{i}" for i in range(4, 8)])
    plan = apply_and_check(Layout([None], MESH4), Layout([None], new), (16,))
    assert plan.egress_bytes == (64,) * 4 and plan.floor_bytes == 4 * 64
    # Replicated over y on 4x2, gathered over x: the y-replicas split the sending.
    plan = apply_and_check(Layout(["x", None], MESH42), Layout([None, None], MESH42), (8, 4))
    assert max(plan.egress_bytes) == min(plan.egress_bytes)


def test_scalars_and_empty_tensors() -> None:
    new = Mesh((2,), ("x",), devices=["CPU:7", "CPU:0"])
    plan = apply_and_check(Layout([], MESH4), Layout([], new), ())
    assert plan.ingress_bytes == (4, 0)
    plan = apply_and_check(Layout(["x", None], MESH4), Layout([None, "x"], MESH4), (0, 4))
    assert plan.floor_bytes == 0


def test_bad_arguments_raise_naming_the_value() -> None:
    with pytest.raises(LayoutError, match="source must be a Layout bound to a mesh"):
        relayout_plan(Layout(["x"]), Layout(["x"], MESH4), (4,))
    with pytest.raises(LayoutError, match="rank"):
        relayout_plan(Layout(["x"], MESH4), Layout(["x", None], MESH4), (4,))
    with pytest.raises(LayoutError, match="not-a-dtype"):
        relayout_plan(Layout(["x"], MESH4), Layout([None], MESH4), (4,), "not-a-dtype")


def test_dtype_spellings() -> None:
    source, target = Layout(["x"], MESH4), Layout([None], MESH4)
    for dtype, itemsize in [("bfloat16", 2), (np.float64, 8), (np.dtype("int8"), 1), ("complex64", 8)]:
        plan = relayout_plan(source, target, (8,), dtype)
        assert plan.itemsize == itemsize and plan.floor_bytes == 6 * itemsize * 4


def test_to_dict_is_json_ready() -> None:
    import json

    plan = relayout_plan(Layout(["x", None], MESH4), Layout([None, "x"], MESH4), (8, 8))
    data = json.loads(json.dumps(plan.to_dict()))
    assert data["floor_bytes"] == 192 and data["transfer_count"] == 12 == len(data["transfers"])
    assert data["transfers"][0] == {"src": 1, "dst": 0, "index": [[2, 4], [0, 2]], "nbytes": 16}
    assert "transfers" not in plan.to_dict(transfers=False)
    assert "<12 transfers>" in repr(plan)


# -- property: any pair of layouts ------------------------------------------------------------------
@st.composite
def layouts(draw: st.DrawFn, mesh: Mesh, rank: int) -> Layout:
    axes = list(mesh.axis_names)
    entries: list[object] = []
    free = list(draw(st.permutations(axes)))
    for _ in range(rank):
        k = draw(st.integers(0, min(2, len(free))))
        taken, free = free[:k], free[k:]
        entries.append(None if k == 0 else taken[0] if k == 1 else tuple(taken))
    return Layout(entries, mesh)


MESH_SHAPES = st.lists(st.integers(1, 3), min_size=1, max_size=3)


@st.composite
def relayout_cases(draw: st.DrawFn) -> tuple[Layout, Layout, tuple[int, ...]]:
    rank = draw(st.integers(0, 3))
    shape = tuple(draw(st.lists(st.integers(0, 7), min_size=rank, max_size=rank)))
    mesh_shape = draw(MESH_SHAPES)
    size = int(np.prod(mesh_shape))
    names = [f"CPU:{i}" for i in range(size)]
    source_mesh = Mesh(mesh_shape, [f"a{i}" for i in range(len(mesh_shape))], devices=names)
    kind = draw(st.sampled_from(["same", "permuted", "other", "abstract"]))
    if kind == "same":
        target_mesh = source_mesh
    elif kind == "abstract":
        source_mesh = Mesh(mesh_shape, source_mesh.axis_names)
        target_shape = draw(MESH_SHAPES)
        target_mesh = Mesh(target_shape, [f"b{i}" for i in range(len(target_shape))])
    else:
        target_shape = draw(MESH_SHAPES)
        pool = names + [f"CPU:{i}" for i in range(size, size + 8)] if kind == "other" else names
        count = int(np.prod(target_shape))
        if count > len(pool):
            target_shape, count = mesh_shape, size
        devices = draw(st.permutations(pool))[:count]
        target_mesh = Mesh(target_shape, [f"b{i}" for i in range(len(target_shape))], devices=devices)
    return draw(layouts(source_mesh, rank)), draw(layouts(target_mesh, rank)), shape


# At least 150 examples (about 2 s); the "fuzz" profile (HYPOTHESIS_PROFILE=fuzz) runs 10 000.
@settings(deadline=None, max_examples=max(150, settings.default.max_examples))
@given(relayout_cases())
def test_transfers_rebuild_the_target_exactly(case: tuple[Layout, Layout, tuple[int, ...]]) -> None:
    source, target, shape = case
    apply_and_check(source, target, shape)


# -- the NumPy driver moves exactly the plan --------------------------------------------------------
LAYOUTS_42 = [
    Layout([None, None], MESH42),
    Layout(["x", None], MESH42),
    Layout([None, "x"], MESH42),
    Layout(["x", "y"], MESH42),
    Layout(["y", "x"], MESH42),
    Layout([("x", "y"), None], MESH42),
    Layout([None, ("y", "x")], MESH42),
]


@pytest.fixture
def sent(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Bytes each call of the NumPy driver's simulated wire carried."""
    log: list[int] = []
    real = numpy_driver._send

    def counting(piece: np.ndarray) -> np.ndarray:
        log.append(piece.nbytes)
        return real(piece)

    monkeypatch.setattr(numpy_driver, "_send", counting)
    return log


@pytest.mark.parametrize("shape", [(8, 4), (5, 7)], ids=["even", "uneven"])
def test_numpy_relayout_copies_exactly_the_floor(sent: list[int], shape: tuple[int, int]) -> None:
    x = np.arange(np.prod(shape), dtype=np.float32).reshape(shape)
    driver = NumpyDriver(8)
    for source, target in itertools.product(LAYOUTS_42, LAYOUTS_42):
        sent.clear()
        moved = lc.relayout(lc.distribute_tensor(x, source, driver=driver), target, driver=driver)
        expected = relayout_plan(source, target, shape).floor_bytes
        assert sum(sent) == expected, (source.axes, target.axes)
        for component, index in zip(lc.unpack(moved, driver=driver), target.device_slices(shape), strict=True):
            np.testing.assert_array_equal(component, x[index])


def test_numpy_relayout_across_meshes_copies_exactly_the_floor(sent: list[int]) -> None:
    driver = NumpyDriver(8)
    x = np.arange(48, dtype=np.int64).reshape(8, 6)
    source = Layout(["x", "y"], MESH42)
    target = Layout([None, "b"], Mesh((2, 2), ("a", "b"), devices=["CPU:6", "CPU:1", "CPU:4", "CPU:7"]))
    moved = lc.relayout(lc.distribute_tensor(x, source, driver=driver), target, driver=driver)
    assert sum(sent) == relayout_plan(source, target, (8, 6), "int64").floor_bytes > 0
    for component, index in zip(lc.unpack(moved, driver=driver), target.device_slices((8, 6)), strict=True):
        np.testing.assert_array_equal(component, x[index])
