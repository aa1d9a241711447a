"""Fuzzing the public entry points: every call succeeds with a correct result or raises a LayoutcoreError.

Targets: the TF string parsers (``Mesh.from_string``, ``Layout.from_string``), the constructors
(``Mesh``, ``create_mesh``, ``Layout`` and its class methods and methods), the ``geometry``
functions, and ``pack`` / ``distribute_tensor`` on the NumPy driver. Inputs mix well-formed
values with every kind of wrong one (negative, huge and unicode numbers, NUL bytes, arrays,
objects whose ``__index__`` raises, ...). A successful result is checked against an oracle that
does not share the code under test (NumPy's ``unravel_index``, the round trip through the
string form, the NumPy arrays the components came from).

CI runs each target with the active hypothesis profile (bounded); the ``fuzz`` profile
(``HYPOTHESIS_PROFILE=fuzz``, registered in ``tests/conftest.py``) runs 10 000 examples each::

    HYPOTHESIS_PROFILE=fuzz python -m pytest tests/test_fuzz.py
"""

from __future__ import annotations

import math
import pickle
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import layoutcore as lc
from layoutcore import Layout, LayoutcoreError, Mesh, geometry

# Every test here draws junk on purpose; hypothesis' filter-too-much check does not apply.
fuzz = settings(suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much, HealthCheck.data_too_large])


class IndexRaises:
    """An int-like object whose ``__index__`` raises."""

    def __index__(self) -> int:
        raise RuntimeError("no index")

    def __repr__(self) -> str:
        return "IndexRaises()"


class ReprRaises:
    """An object whose ``__repr__`` raises, so error messages must not rely on it."""

    def __repr__(self) -> str:
        raise RuntimeError("no repr")


def expect(call: Callable[[], Any]) -> tuple[bool, Any]:
    """``(True, result)`` when ``call`` succeeds, ``(False, error)`` when it raises a LayoutcoreError.

    Any other exception propagates, failing the test: that is the invariant being fuzzed.
    """
    try:
        return True, call()
    except LayoutcoreError as exc:
        assert str(exc), "a layoutcore error must say what is wrong"
        return False, exc


# -- strategies ---------------------------------------------------------------------------------------
NAMES = st.sampled_from(["x", "y", "z", "batch", "model", "", "x y", "x,y", "a|b", "a=b", "x\x00", "unsharded", "é"])
INTS = st.one_of(
    st.integers(-3, 9),
    st.sampled_from([0, 1, 2, 3, 2**31, 2**63 - 1, 2**63, 2**64, 10**12, 10**30, -(10**30)]),
    st.integers(-(2**70), 2**70),
)
INT_LIKE = st.one_of(
    INTS,
    INTS.filter(lambda i: -(2**63) <= i < 2**63).map(np.int64),
    st.integers(0, 100).map(np.int32),
    st.builds(IndexRaises),
    st.sampled_from([True, 1.0, 2.5, None, "2", b"2", float("nan"), np.float64(2.0), np.array(2), np.array([2])]),
)
JUNK = st.one_of(
    st.none(),
    INT_LIKE,
    st.text(max_size=8),
    st.binary(max_size=4),
    st.builds(ReprRaises),
    st.just(np.array(["x", "y"])),
    st.just({"x": 1}),
    st.just(object()),
)
DEVICE_NAMES = st.one_of(
    st.integers(0, 7).map("CPU:{}".format),
    st.integers(0, 7).map("cpu:{}".format),
    st.integers(0, 7).map("/job:localhost/replica:0/task:0/device:CPU:{}".format),
    st.integers(0, 3).map("/job:worker/replica:0/task:1/device:CPU:{}".format),
    st.integers(0, 3).map("TPU:{}".format),
    st.sampled_from(["CPU:-1", "CPU:\u0661", "CPU:" + "9" * 30, "GPU", "", "CPU:0\nCPU:1", "/device:CPU:1", " CPU:2 "]),
)
SHAPES = st.one_of(st.lists(INT_LIKE, max_size=4), st.lists(st.integers(1, 4), min_size=1, max_size=3), JUNK)
AXIS_LISTS = st.one_of(st.lists(NAMES, max_size=4), st.lists(JUNK, max_size=3), JUNK)
DEVICE_LISTS = st.one_of(st.none(), st.lists(DEVICE_NAMES, max_size=9), st.lists(JUNK, max_size=3), JUNK)


@st.composite
def meshes(draw: st.DrawFn) -> Mesh:
    """A valid mesh of at most 8 devices, abstract or concrete."""
    shape = tuple(draw(st.lists(st.integers(1, 4), min_size=1, max_size=3).filter(lambda s: math.prod(s) <= 8)))
    names = [f"a{i}" for i in range(len(shape))]
    if draw(st.booleans()):
        return Mesh(shape, names)
    return Mesh(shape, names, [f"CPU:{i}" for i in draw(st.permutations(range(math.prod(shape))))])


def mutate(text: str, data: st.DataObject) -> str:
    """``text`` with a few characters replaced, inserted or deleted (what a fuzzer does to a string)."""
    pieces = ["|", ",", "=", ":", "0", "9" * 25, "\x00", "\u00b2", "\u0662", "-", " ", "1e11", "*", "x", "CPU", ""]
    for _ in range(data.draw(st.integers(1, 4))):
        at = data.draw(st.integers(0, len(text)))
        cut = data.draw(st.integers(0, 3))
        text = text[:at] + data.draw(st.sampled_from(pieces)) + text[at + cut :]
    return text


# -- parsers ------------------------------------------------------------------------------------------
def check_parsed_mesh(mesh: Mesh) -> None:
    """A mesh that parsed is a valid value: its string form parses back to itself when it has devices."""
    assert isinstance(mesh, Mesh) and mesh.size == math.prod(mesh.shape)
    assert mesh.devices is None or len(mesh.devices) == mesh.size
    if mesh.devices is not None and mesh.size <= 4096:
        assert Mesh.from_string(mesh.to_string()) == mesh


@fuzz
@given(st.text(max_size=60))
def test_mesh_from_string_of_any_text(text: str) -> None:
    ok, mesh = expect(lambda: Mesh.from_string(text))
    if ok:
        check_parsed_mesh(mesh)


@fuzz
@given(meshes(), st.booleans(), st.data())
def test_mesh_from_string_of_a_mutated_mesh_string(mesh: Mesh, named: bool, data: st.DataObject) -> None:
    text = mutate((mesh if not named else Mesh(mesh.shape, mesh.axis_names, mesh.devices, name="m")).to_string(), data)
    ok, parsed = expect(lambda: Mesh.from_string(text))
    if ok:
        check_parsed_mesh(parsed)


@fuzz
@given(meshes(), st.data())
def test_layout_from_string_of_a_mutated_layout_string(mesh: Mesh, data: st.DataObject) -> None:
    specs = data.draw(st.lists(st.sampled_from([*mesh.axis_names, None]), max_size=3))
    ok, layout = expect(lambda: Layout(specs, mesh))
    text = layout.to_string() if ok else f"sharding_specs:{','.join(map(str, specs))}, mesh:{mesh.to_string()}"
    text = mutate(text, data) if data.draw(st.booleans()) else text
    ok, parsed = expect(lambda: Layout.from_string(text))
    if ok:
        assert Layout.from_string(parsed.to_string()) == parsed


@fuzz
@given(st.text(max_size=60))
def test_layout_from_string_of_any_text(text: str) -> None:
    ok, parsed = expect(lambda: Layout.from_string(text))
    if ok:
        assert Layout.from_string(parsed.to_string()) == parsed


# -- constructors -------------------------------------------------------------------------------------
@fuzz
@given(SHAPES, AXIS_LISTS, DEVICE_LISTS, st.one_of(st.just(""), NAMES, JUNK))
def test_mesh_constructor(shape: Any, axis_names: Any, devices: Any, name: Any) -> None:
    ok, mesh = expect(lambda: Mesh(shape, axis_names, devices, name=name))
    if ok:
        assert all(type(s) is int and s > 0 for s in mesh.shape) and len(mesh.axis_names) == len(mesh.shape)
        assert len(set(mesh.axis_names)) == len(mesh.axis_names)
        if mesh.devices is not None:
            assert len(mesh.devices) == mesh.size == len(set(mesh.devices))
            assert len({d.rsplit(":", 2)[-2] for d in mesh.devices}) == 1  # one device type
        assert pickle.loads(pickle.dumps(mesh)) == mesh
        for axis in mesh.axis_names:
            assert axis in mesh and mesh[axis] == (axis, mesh.axis_size(axis))
        if mesh.size <= 4096:
            assert Mesh.from_string(mesh.to_string()).shape == mesh.shape


@fuzz
@given(st.one_of(st.lists(st.tuples(st.one_of(NAMES, JUNK), INT_LIKE), max_size=3), JUNK), DEVICE_LISTS)
def test_create_mesh(mesh_dims: Any, devices: Any) -> None:
    ok, mesh = expect(lambda: lc.create_mesh(mesh_dims, devices))
    if ok:
        assert [(a, s) for a, s in zip(mesh.axis_names, mesh.shape, strict=True)] == [(a, int(s)) for a, s in mesh_dims]


@fuzz
@given(
    meshes(), st.one_of(st.lists(st.one_of(NAMES, st.sampled_from(["a0", "a1", "a2", None]), JUNK), max_size=4), JUNK)
)
def test_layout_constructor(mesh: Mesh, axes: Any) -> None:
    ok, layout = expect(lambda: Layout(axes, mesh))
    if ok:
        assert layout.rank == len(axes) and eval(repr(layout), {"Layout": Layout, "Mesh": Mesh}) == layout
        used = [n for d in range(layout.rank) for n in layout.mesh_axes(d)]
        assert len(used) == len(set(used)) and set(used) <= set(mesh.axis_names)


@fuzz
@given(meshes(), st.data(), st.one_of(INT_LIKE, st.lists(INT_LIKE, max_size=3), JUNK))
def test_layout_methods(mesh: Mesh, data: st.DataObject, arg: Any) -> None:
    specs = data.draw(st.lists(st.sampled_from([*mesh.axis_names, None]), max_size=3, unique=True))
    layout = Layout(specs, mesh)
    shape = data.draw(st.one_of(st.lists(st.integers(0, 9), min_size=layout.rank, max_size=layout.rank), SHAPES))
    ok, slices = expect(lambda: layout.device_slices(shape))
    if ok and all(int(n) <= 10_000 for n in shape) and math.prod(int(n) for n in shape) <= 10_000:
        x = np.zeros(tuple(shape))
        assert [x[s].shape for s in slices] == layout.local_shapes(shape)
        assert layout.shard_shape(shape) == tuple(max(d) for d in zip(*layout.local_shapes(shape), strict=True)) or (
            layout.rank == 0
        )
    for method in (layout.delete, layout.num_shards, layout.mesh_axes, layout.shard_shape, layout.is_even):
        expect(lambda m=method: m(arg))  # type: ignore[misc]
    expect(lambda: layout.offset_tuple_to_global_index(arg))
    expect(lambda: Layout.replicated(mesh, arg))
    expect(lambda: Layout.inner_sharded(mesh, "a0", arg))
    expect(lambda: Layout.batch_sharded(mesh, "a0", arg))
    expect(lambda: Layout.batch_sharded(mesh, "a0", 2, arg))


# -- geometry -----------------------------------------------------------------------------------------
@fuzz
@given(st.lists(INT_LIKE, max_size=3), INT_LIKE)
def test_geometry_mesh_coordinate(mesh_shape: list[Any], position: Any) -> None:
    ok, coordinate = expect(lambda: geometry.mesh_coordinate(mesh_shape, position))
    if ok:
        sizes = [int(s) for s in mesh_shape]
        assert math.prod(sizes) <= 2**63 - 1
        flat = sum(c * math.prod(sizes[i + 1 :]) for i, c in enumerate(coordinate))
        assert flat == int(position) and all(0 <= c < s for c, s in zip(coordinate, sizes, strict=True))


@fuzz
@given(INT_LIKE, INT_LIKE, INT_LIKE)
def test_geometry_chunks(dim_size: Any, num_chunks: Any, index: Any) -> None:
    ok, bounds = expect(lambda: geometry.chunk_bounds(dim_size, num_chunks, index))
    if ok:
        start, stop = bounds
        assert 0 <= start <= stop <= int(dim_size)
    if isinstance(num_chunks, int) and num_chunks > 10_000:
        return  # chunk_sizes lists every chunk; a huge count is valid but slow
    ok, sizes = expect(lambda: geometry.chunk_sizes(dim_size, num_chunks))
    if ok:
        assert sum(sizes) == int(dim_size) and len(sizes) == int(num_chunks)


@fuzz
@given(
    st.one_of(st.lists(st.integers(0, 6), max_size=3), SHAPES),
    st.one_of(st.lists(st.integers(1, 3), min_size=1, max_size=3), SHAPES),
    st.one_of(st.lists(st.lists(st.integers(-1, 3), max_size=2), max_size=3), JUNK),
    INT_LIKE,
)
def test_geometry_shards(global_shape: Any, mesh_shape: Any, dim_axes: Any, position: Any) -> None:
    ok, slices = expect(lambda: geometry.device_slices(global_shape, mesh_shape, dim_axes))
    if ok:
        x = np.arange(math.prod(global_shape)).reshape(global_shape)
        for p, sl in enumerate(slices):
            assert x[sl].shape == geometry.local_shape(global_shape, mesh_shape, dim_axes, p)
    ok, bounds = expect(lambda: geometry.shard_bounds(global_shape, mesh_shape, dim_axes, position))
    if ok:
        assert all(0 <= a <= b <= int(n) for (a, b), n in zip(bounds, global_shape, strict=True))
    expect(lambda: geometry.device_blocks(mesh_shape, dim_axes))
    expect(lambda: geometry.is_evenly_divisible(global_shape, mesh_shape, dim_axes))
    expect(lambda: geometry.num_blocks(mesh_shape, global_shape))
    expect(lambda: geometry.block_index(mesh_shape, global_shape, dim_axes))


# -- pack and distribute_tensor on the NumPy driver ---------------------------------------------------
ARRAYS = st.one_of(
    st.lists(st.integers(0, 3), max_size=3).map(lambda s: np.arange(math.prod(s), dtype=np.float32).reshape(s)),
    st.sampled_from([np.float64, np.int64, np.int8, np.bool_, np.complex64]).map(lambda t: np.ones((2, 2), t)),
    st.just(np.array(["a", "b"])),
    st.just(np.array([1, "a"], dtype=object)),
    st.just(np.ones((2, 2), dtype=">f8")),
    st.just(np.arange(6.0).reshape(2, 3)[:, ::-1]),
    st.just(np.array([np.nan, 1.0])),
)


@fuzz
@given(meshes(), st.data())
def test_pack(mesh: Mesh, data: st.DataObject) -> None:
    driver = lc.get_driver("numpy")
    specs = data.draw(st.lists(st.sampled_from([*mesh.axis_names, None]), max_size=2, unique=True))
    layout = Layout(specs, mesh)
    shape = tuple(data.draw(st.lists(st.integers(0, 5), min_size=layout.rank, max_size=layout.rank)))
    x = np.arange(math.prod(shape), dtype=np.float32).reshape(shape)
    components: Any = [x[s] for s in layout.device_slices(shape)]
    global_shape: Any = None
    how = data.draw(st.sampled_from(["valid", "junk", "mutate_one", "drop_one", "global_shape", "lists", "layout"]))
    if how == "junk":
        components = data.draw(st.one_of(JUNK, st.lists(st.one_of(JUNK, ARRAYS), max_size=9)))
    elif how == "mutate_one" and components:
        components[data.draw(st.integers(0, len(components) - 1))] = data.draw(st.one_of(ARRAYS, JUNK))
    elif how == "drop_one" and components:
        components.pop()
    elif how == "global_shape":
        global_shape = data.draw(st.one_of(SHAPES, st.just(shape)))
    elif how == "lists":
        components = [c.tolist() for c in components]
    elif how == "layout":
        layout = data.draw(st.one_of(JUNK, st.just(Layout(specs)), st.just(Layout([None] * (layout.rank + 1), mesh))))
    ok, packed = expect(lambda: lc.pack(components, layout, global_shape=global_shape, driver=driver))
    if ok:
        got = lc.to_numpy(packed, driver=driver)
        assert lc.fetch_layout(packed, driver=driver) == layout
        pieces = [np.asarray(c) for c in components]
        for piece, sl in zip(pieces, layout.device_slices(got.shape), strict=True):
            assert np.array_equal(got[sl], piece, equal_nan=got.dtype.kind in "fc")


@fuzz
@given(meshes(), st.data())
def test_distribute_tensor(mesh: Mesh, data: st.DataObject) -> None:
    driver = lc.get_driver("numpy")
    specs = data.draw(st.lists(st.sampled_from([*mesh.axis_names, None]), max_size=2, unique=True))
    layout = Layout(specs, mesh)
    value = data.draw(
        st.one_of(ARRAYS, JUNK, st.just([[1, 2], [3]]), st.just({"a": np.ones(2)}), st.lists(st.integers(), max_size=3))
    )
    ok, t = expect(lambda: lc.distribute_tensor(value, layout, driver=driver))
    if ok:
        assert np.array_equal(
            lc.to_numpy(t, driver=driver), np.asarray(value), equal_nan=np.asarray(value).dtype.kind in "fc"
        )


def test_the_fuzz_profile_runs_10000_examples_per_target() -> None:
    assert settings.get_profile("fuzz").max_examples == 10_000  # registered in conftest.py


# -- what the 10 000-example runs found, kept as fixed cases --------------------------------------------
@pytest.mark.parametrize(
    "call",
    [
        lambda layout: lc.pack(np.array(2), layout, driver="numpy"),  # a 0-d array has __len__, no iteration
        lambda layout: lc.pack([np.zeros(2)], layout, global_shape=ReprRaises(), driver="numpy"),
        lambda layout: lc.distribute_tensor(ReprRaises(), layout, driver="numpy"),
        lambda layout: layout.offset_tuple_to_global_index(IndexRaises()),
        lambda layout: Layout.replicated(layout.mesh, 2**31),  # would allocate a 2**31-entry list
        lambda layout: Layout(["x"], Mesh((10**12,), ("x",))).device_slices((4,)),  # 10**12 entries
    ],
)
def test_found_by_fuzzing(call: Callable[[Layout], Any]) -> None:
    with pytest.raises(LayoutcoreError):
        call(Layout([None], Mesh((1,), ("x",))))
