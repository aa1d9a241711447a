"""Relayout at the physical floor on JAX: the bytes the executed programs' collectives carry equal
``relayout_plan``'s ``floor_bytes``, and every device's shard equals NumPy's slice of the value.

Bytes are counted by ``CollectiveBytes`` from JAX's compiled HLO (every program executed while it
counts, and ``device_put``'s reshard program), never from the driver's plan.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import ml_dtypes
import numpy as np
import pytest
from layoutcore_jax import JaxDriver
from layoutcore_jax import _relayout as relayout_module
from layoutcore_jax import _relayout_choice as relayout_choice
from layoutcore_jax._relayout import CollectiveBytes

import layoutcore as lc
from layoutcore import Layout, Mesh
from layoutcore.driver import RelayoutMove

DEVICES = [f"CPU:{i}" for i in range(8)]
LINE = Mesh((8,), ("x",), devices=DEVICES)
GRID = Mesh((4, 2), ("x", "y"), devices=DEVICES)
FLAT = Mesh((8,), ("z",), devices=DEVICES)
HALF = Mesh((2, 2), ("a", "b"), devices=DEVICES[4:])
PAIR = Mesh((2,), ("c",), devices=["CPU:1", "CPU:6"])

#: name -> (source, target, shape, JAX's own move already at the floor)
CASES: dict[str, tuple[Layout, Layout, tuple[int, ...], bool]] = {
    "x -> None": (Layout(["x", None], LINE), Layout([None, None], LINE), (16, 8), True),
    "None -> x": (Layout([None, None], LINE), Layout(["x", None], LINE), (16, 8), True),
    "S0 -> S1": (Layout(["x", None], LINE), Layout([None, "x"], LINE), (16, 16), True),
    "(x,y) -> (y,x)": (Layout(["x", "y"], GRID), Layout(["y", "x"], GRID), (16, 16), False),
    "rows -> (None,y)": (Layout(["x", None], GRID), Layout([None, "y"], GRID), (8, 8), False),
    "((x,y),None) -> (None,(x,y))": (
        Layout([("x", "y"), None], GRID),
        Layout([None, ("x", "y")], GRID),
        (16, 16),
        True,
    ),
    "(x,y) -> (None,(x,y))": (Layout(["x", "y"], GRID), Layout([None, ("x", "y")], GRID), (16, 16), False),
    "cross-mesh 4x2 -> 8": (Layout(["x", None], GRID), Layout([None, "z"], FLAT), (16, 16), False),
    "superset 2x2 -> 4x2": (Layout(["a", "b"], HALF), Layout(["y", "x"], GRID), (8, 8), False),
    "subset 4x2 -> 2 devices": (Layout(["x", "y"], GRID), Layout([None, "c"], PAIR), (8, 6), False),
    "rank 3, any order": (Layout(["x", None, "y"], GRID), Layout([None, ("y", "x"), None], GRID), (4, 8, 2), False),
    "scalar onto other devices": (Layout([], HALF), Layout([], PAIR), (), False),
}


def values(shape: tuple[int, ...], dtype: str) -> np.ndarray:
    n = int(np.prod(shape))
    if dtype == "bool":
        return (np.arange(n) % 3 == 1).reshape(shape)
    if dtype == "bfloat16":
        return (np.arange(n, dtype=np.float32) * 1.0078125 + 0.5).astype(ml_dtypes.bfloat16).reshape(shape)
    return np.arange(1, n + 1, dtype=dtype).reshape(shape)


def check_shards(out: jax.Array, x: np.ndarray, target: Layout) -> None:
    """Every device of ``target``'s mesh holds NumPy's slice of ``x`` (its bits), read from the shards."""
    by_device = {shard.device: np.asarray(shard.data) for shard in out.addressable_shards}
    mesh_devices = list(out.sharding.mesh.devices.flat)  # type: ignore[attr-defined]
    assert len(mesh_devices) == target.mesh.size  # type: ignore[union-attr]
    for device, index in zip(mesh_devices, target.device_slices(x.shape), strict=True):
        got, want = by_device[device], x[index]
        assert got.dtype == want.dtype
        np.testing.assert_array_equal(
            got.reshape(-1).view(np.uint8), np.ascontiguousarray(want).reshape(-1).view(np.uint8)
        )


@pytest.mark.parametrize("case", list(CASES))
def test_relayout_moves_the_floor_and_the_data(driver: JaxDriver, case: str) -> None:
    source, target, shape, native_at_floor = CASES[case]
    x = values(shape, "float32")
    tensor = lc.distribute_tensor(x, source, driver=driver)
    with CollectiveBytes() as counted:
        out = lc.relayout(tensor, target, driver=driver)
    assert counted.moved == lc.relayout_plan(source, target, shape, "float32").floor_bytes, counted.ops
    # JAX's own moves are candidates only where they are at the floor; the plan runs elsewhere
    # (collective-permutes, or host copies between CPU devices): test_jax_relayout_choice forces each.
    ran = relayout_choice.chosen(tensor, driver.named_sharding(target))
    assert ran in (relayout_choice.CANDIDATES if native_at_floor else ("collective", "host_copy")), ran
    assert lc.fetch_layout(out, driver=driver) == target
    check_shards(out, x, target)


@pytest.mark.parametrize("dtype", ["bfloat16", "int32", "bool"])
@pytest.mark.parametrize("case", ["(x,y) -> (y,x)", "cross-mesh 4x2 -> 8", "superset 2x2 -> 4x2"])
def test_dtypes_move_as_bits(driver: JaxDriver, case: str, dtype: str) -> None:
    source, target, shape, _ = CASES[case]
    x = values(shape, dtype)
    tensor = lc.distribute_tensor(jnp.asarray(x), source, driver=driver)
    with CollectiveBytes() as counted:
        out = lc.relayout(tensor, target, driver=driver)
    assert out.dtype == x.dtype
    assert counted.moved == lc.relayout_plan(source, target, shape, dtype).floor_bytes
    check_shards(out, x, target)


@pytest.mark.parametrize("dtype", ["bfloat16", "float16", "bool", "float32"])
@pytest.mark.parametrize("shape", [(0, 0), (8, 0), (0, 16)])
@pytest.mark.parametrize(
    "case", ["x -> None", "None -> x", "(x,y) -> (y,x)", "cross-mesh 4x2 -> 8", "superset 2x2 -> 4x2"]
)
def test_zero_size_arrays_take_the_target_layout(
    driver: JaxDriver, case: str, shape: tuple[int, ...], dtype: str
) -> None:
    """An empty array moves nothing, and still reads back with the target layout (XLA's bit views and
    shard_map hand an empty result back replicated; the model-based test found it)."""
    source, target, _, _ = CASES[case]
    np_dtype = ml_dtypes.bfloat16 if dtype == "bfloat16" else np.dtype(dtype)
    tensor = lc.distribute_tensor(np.zeros(shape, np_dtype), source, driver=driver)
    with CollectiveBytes() as counted:
        out = lc.relayout(tensor, target, driver=driver)
    assert counted.moved == 0
    assert (out.shape, out.dtype) == (shape, np_dtype)
    assert lc.fetch_layout(out, driver=driver) == target
    assert out.sharding.is_equivalent_to(driver.named_sharding(target), len(shape))


def test_jax_moves_more_than_the_floor_where_the_plan_runs(driver: JaxDriver) -> None:
    """The driver's choice reads JAX's compiled move: more than the floor for (x,y) -> (y,x), the floor for S0 -> S1."""
    for case, more in (("(x,y) -> (y,x)", True), ("(x,y) -> (None,(x,y))", True), ("S0 -> S1", False)):
        source, target, shape, _ = CASES[case]
        tensor = lc.distribute_tensor(values(shape, "float32"), source, driver=driver)
        native = relayout_module.native_moved_bytes(tensor, driver.named_sharding(target))
        floor = lc.relayout_plan(source, target, shape, "float32").floor_bytes
        assert native is not None and (native > floor) == more, (case, native, floor)


def test_inside_jit_the_native_constraint_applies(driver: JaxDriver) -> None:
    """Traced values get JAX's sharding constraint (XLA picks the collectives); the value is right."""
    source, target, shape, _ = CASES["(x,y) -> (y,x)"]
    x = values(shape, "float32")
    tensor = lc.distribute_tensor(x, source, driver=driver)
    out = jax.jit(lambda a: lc.relayout(a, target, driver=driver) * 1)(tensor)
    np.testing.assert_array_equal(np.asarray(out), x)
    assert out.sharding.is_equivalent_to(driver.named_sharding(target), 2)


def test_repeated_relayouts_reuse_the_program(driver: JaxDriver, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(relayout_choice.MODE_ENV, "collective")
    source, target, shape, _ = CASES["(x,y) -> (y,x)"]
    x = values(shape, "float32")
    tensor = lc.distribute_tensor(x, source, driver=driver)
    first = lc.relayout(tensor, target, driver=driver)
    programs = len(relayout_module._PROGRAMS)
    second = lc.relayout(tensor, target, driver=driver)
    assert len(relayout_module._PROGRAMS) == programs
    check_shards(second, x, target)
    back = lc.relayout(first, source, driver=driver)
    check_shards(back, x, source)


def test_an_even_relayout_runs_perfect_rounds_without_selects(
    driver: JaxDriver, monkeypatch: pytest.MonkeyPatch
) -> None:
    """(x,y) -> (y,x) on 4x2: each device keeps one rectangle and receives one, so 2 rounds, each a
    permutation of all 8 devices (its own rectangle as a pair (i, i)), and no piece-sized select."""
    monkeypatch.setenv(relayout_choice.MODE_ENV, "collective")
    source, target, shape = Layout(["x", "y"], GRID), Layout(["y", "x"], GRID), (64, 64)
    value = np.arange(64 * 64, dtype=np.float32).reshape(shape)
    tensor = lc.distribute_tensor(value, source, driver=driver)
    with CollectiveBytes() as counted:
        out = lc.relayout(tensor, target, driver=driver)
    assert counted.ops == ["collective-permute g=8"] * 2
    assert counted.moved == lc.relayout_plan(source, target, shape, "float32").floor_bytes
    check_shards(out, value, target)
    program = relayout_module._program(driver, RelayoutMove.between(source, target, shape, "float32"))
    hlo = program.run.lower(relayout_module._flat_input(program, tensor, False)).compile().as_text()
    pieces = [line for line in hlo.splitlines() if " select(" in line and "f32[" in line.split("=")[1].split(" ")[1]]
    assert pieces == []
