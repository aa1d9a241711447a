"""The JAX relayout's choice among its moves at the floor (``layoutcore_jax._relayout_choice``).

Every candidate, forced with ``LAYOUTCORE_JAX_RELAYOUT``, returns NumPy's slices of the value bit for
bit (every dtype JAX holds without x64, random bits: NaN payloads count) and moves exactly the
floor (``CollectiveBytes``: compiled HLO and host copies, never the plan). The chooser is tested
with a stand-in timer (no timing assertions): it keeps the least measured, measures once per pair
of shardings, shape and dtype, and never counts its measurement.
"""

from __future__ import annotations

import os
import pickle
from typing import Any

import jax
import numpy as np
import pytest
from layoutcore_jax import JaxDriver
from layoutcore_jax import _relayout_choice as choice
from layoutcore_jax._relayout import CollectiveBytes
from test_jax_relayout_floor import CASES, FLAT, GRID, LINE, check_shards

import layoutcore as lc
from layoutcore import Layout
from layoutcore._dtypes import X64_DTYPES, random_values
from layoutcore.driver import ALL_DTYPES, LRUCache, aligned_empty

#: The cases the candidates run: JAX's move at the floor, planned, across meshes, subset, superset, scalar.
CHOICE_CASES = [
    "x -> None",
    "None -> x",
    "S0 -> S1",
    "(x,y) -> (y,x)",
    "cross-mesh 4x2 -> 8",
    "superset 2x2 -> 4x2",
    "subset 4x2 -> 2 devices",
    "rank 3, any order",
    "scalar onto other devices",
]
DTYPES = [n for n in ALL_DTYPES if n not in X64_DTYPES]


@pytest.fixture(autouse=True)
def fresh_choices(monkeypatch: pytest.MonkeyPatch) -> None:
    """Each test starts with no choice made (and measures with the real timer unless it says otherwise)."""
    monkeypatch.setattr(choice, "_CHOSEN", LRUCache(256))
    monkeypatch.setattr(choice, "_WINNERS", LRUCache(1024))
    monkeypatch.delenv(choice.MODE_ENV, raising=False)


def eligible(case: str) -> set[str]:
    """The candidates of a case: JAX's own moves only where they are at the floor (test_jax_relayout_floor)."""
    at_floor = CASES[case][3]
    return set(choice.CANDIDATES) if at_floor else {"collective", "host_copy"}


@pytest.mark.parametrize("candidate", choice.CANDIDATES)
def test_every_candidate_moves_the_floor(driver: JaxDriver, monkeypatch: pytest.MonkeyPatch, candidate: str) -> None:
    monkeypatch.setenv(choice.MODE_ENV, candidate)
    for case in CHOICE_CASES:
        source, target, shape, _ = CASES[case]
        x = random_values("float32", shape, seed=3)
        tensor = lc.distribute_tensor(x, source, driver=driver)
        with CollectiveBytes() as counted:
            out = lc.relayout(tensor, target, driver=driver)
        assert counted.moved == lc.relayout_plan(source, target, shape, "float32").floor_bytes, (case, counted.ops)
        ran = choice.chosen(tensor, driver.named_sharding(target))
        assert ran == (candidate if candidate in eligible(case) else "collective"), case
        kinds = {"device_put": {"device_put"}, "host_copy": {"host-copy"}}.get(ran)
        assert kinds is None or set(counted.ops) <= kinds, (case, counted.ops)
        assert lc.fetch_layout(out, driver=driver) == target
        check_shards(out, x, target)


@pytest.mark.parametrize("candidate", choice.CANDIDATES)
def test_every_candidate_moves_every_dtype_bit_for_bit(
    driver: JaxDriver, monkeypatch: pytest.MonkeyPatch, candidate: str
) -> None:
    """Random bits of every dtype (bfloat16 and float8 NaN payloads too), on and across meshes."""
    monkeypatch.setenv(choice.MODE_ENV, candidate)
    for case in ("S0 -> S1", "superset 2x2 -> 4x2"):  # every candidate on one mesh; plan ones across meshes
        source, target, shape, _ = CASES[case]
        for seed, name in enumerate(DTYPES):
            x = random_values(name, shape, seed=seed)
            out = lc.relayout(lc.distribute_tensor(x, source, driver=driver), target, driver=driver)
            assert out.dtype == x.dtype, (case, name)
            check_shards(out, x, target)


def test_a_bad_mode_is_refused_naming_it(driver: JaxDriver, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(choice.MODE_ENV, "fastest")
    source, target, shape, _ = CASES["(x,y) -> (y,x)"]
    tensor = lc.distribute_tensor(np.ones(shape, np.float32), source, driver=driver)
    with pytest.raises(lc.ConfigurationError, match="LAYOUTCORE_JAX_RELAYOUT='fastest'") as error:
        lc.relayout(tensor, target, driver=driver)
    assert str(pickle.loads(pickle.dumps(error.value))) == str(error.value)


class FakeTimer:
    """Stands in for ``_relayout_choice._seconds``: runs the candidate (its result is checked) and
    reports ``costs[name]`` seconds; records the names measured."""

    def __init__(self, costs: dict[str, float]) -> None:
        self.costs = costs
        self.measured: list[str] = []

    def __call__(self, candidate: Any, tensor: jax.Array) -> float:
        candidate.run(tensor).block_until_ready()
        self.measured.append(candidate.name)
        return self.costs[candidate.name]


def test_the_least_measured_candidate_runs(driver: JaxDriver, monkeypatch: pytest.MonkeyPatch) -> None:
    source, target, shape, _ = CASES["S0 -> S1"]
    x = random_values("float32", shape, seed=1)
    for costs, want in (
        ({"device_put": 3.0, "jit_reshard": 2.0, "collective": 4.0, "host_copy": 1.0}, "host_copy"),
        ({"device_put": 3.0, "jit_reshard": 2.0, "collective": 4.0, "host_copy": 5.0}, "jit_reshard"),
        ({"device_put": 1.0, "jit_reshard": 1.0, "collective": 1.0, "host_copy": 1.0}, "device_put"),  # a tie: order
    ):
        monkeypatch.setattr(choice, "_CHOSEN", LRUCache(256))
        monkeypatch.setattr(choice, "_WINNERS", LRUCache(1024))
        timer = FakeTimer(costs)
        monkeypatch.setattr(choice, "_seconds", timer)
        tensor = lc.distribute_tensor(x, source, driver=driver)
        with CollectiveBytes() as counted:  # the measurement is not counted: the relayout's own floor is
            out = lc.relayout(tensor, target, driver=driver)
        assert counted.moved == lc.relayout_plan(source, target, shape, "float32").floor_bytes, counted.ops
        assert choice.chosen(tensor, driver.named_sharding(target)) == want
        # untimed rounds, then MEASURE_ROUNDS timed ones (these runs are over the time budget), all in each
        rounds = choice.MEASURE_WARMUP_ROUNDS + choice.MEASURE_ROUNDS
        assert sorted(timer.measured) == sorted(list(choice.CANDIDATES) * rounds)
        check_shards(out, x, target)


def test_cheap_moves_are_measured_more_rounds(driver: JaxDriver, monkeypatch: pytest.MonkeyPatch) -> None:
    """Runs that together stay under the time budget get rounds up to MEASURE_MAX_ROUNDS; a clear winner
    disturbed in some of them (the slow runs here) still wins by its minimum."""
    source, target, shape, _ = CASES["(x,y) -> (y,x)"]
    calls: list[str] = []

    def disturbed(candidate: Any, tensor: jax.Array) -> float:
        candidate.run(tensor).block_until_ready()
        calls.append(candidate.name)
        runs = calls.count(candidate.name)
        if candidate.name == "collective":
            return 1e-4 if runs == 7 else 1e-2  # fastest once, in its 7th run (after the 3 timed rounds)
        return 2e-4

    monkeypatch.setattr(choice, "_seconds", disturbed)
    x = random_values("float32", shape, seed=5)
    tensor = lc.distribute_tensor(x, source, driver=driver)
    out = lc.relayout(tensor, target, driver=driver)
    assert len(calls) == 2 * (choice.MEASURE_WARMUP_ROUNDS + choice.MEASURE_MAX_ROUNDS)  # 2 candidates, every round
    assert choice.chosen(tensor, driver.named_sharding(target)) == "collective"
    check_shards(out, x, target)


def test_the_choice_is_cached_per_meshes_layouts_size_class_and_dtype(
    driver: JaxDriver, monkeypatch: pytest.MonkeyPatch
) -> None:
    timer = FakeTimer({"device_put": 2.0, "jit_reshard": 3.0, "collective": 4.0, "host_copy": 1.0})
    monkeypatch.setattr(choice, "_seconds", timer)

    def relayout(source: Layout, target: Layout, shape: tuple[int, ...], dtype: str) -> int:
        """Measurements this relayout made (0: a cached choice), after checking its data."""
        before = len(timer.measured)
        x = random_values(dtype, shape, seed=2)
        out = lc.relayout(lc.distribute_tensor(x, source, driver=driver), target, driver=driver)
        check_shards(out, x, target)
        return len(timer.measured) - before

    rows, cols = Layout(["x", None], LINE), Layout([None, "x"], LINE)
    assert relayout(rows, cols, (16, 16), "float32") > 0
    assert relayout(rows, cols, (16, 16), "float32") == 0  # the same pair, shape and dtype: cached
    assert relayout(rows, cols, (16, 16), "int32") > 0  # another dtype
    assert relayout(rows, cols, (8, 16), "float32") > 0  # another size class (half the bytes)
    assert relayout(rows, cols, (24, 16), "float32") == 0  # another shape in (16, 16)'s size class: its winner
    assert relayout(rows, cols, (32, 32), "float32") > 0  # four times the bytes: another size class
    assert relayout(rows, Layout([None, None], LINE), (16, 16), "float32") > 0  # another target layout
    assert relayout(Layout([None, None], LINE), cols, (16, 16), "float32") > 0  # another source layout
    flat_rows, flat_cols = Layout(["z", None], FLAT), Layout([None, "z"], FLAT)
    assert relayout(flat_rows, flat_cols, (16, 16), "float32") > 0  # another mesh over the same devices
    assert relayout(Layout(["x", None], GRID), Layout([None, "x"], GRID), (16, 16), "float32") > 0  # another mesh
    monkeypatch.setenv(choice.MODE_ENV, "collective")
    assert relayout(rows, cols, (16, 16), "float32") == 0  # a forced candidate is not measured
    tensor = lc.distribute_tensor(np.zeros((16, 16), np.float32), rows, driver=driver)
    assert choice.chosen(tensor, driver.named_sharding(cols)) == "collective"
    monkeypatch.setenv(choice.MODE_ENV, "measure")
    assert choice.chosen(tensor, driver.named_sharding(cols)) == "host_copy"  # the measured choice stands


def test_a_relayout_onto_its_own_sharding_is_not_measured(driver: JaxDriver, monkeypatch: pytest.MonkeyPatch) -> None:
    timer = FakeTimer({})
    monkeypatch.setattr(choice, "_seconds", timer)
    grid = Layout(["x", "y"], GRID)
    x = random_values("float32", (8, 8), seed=4)
    tensor = lc.distribute_tensor(x, grid, driver=driver)
    named = Layout(["x", "y"], lc.Mesh((4, 2), ("x", "y"), devices=GRID.devices, name="same"))  # one NamedSharding
    assert driver.named_sharding(named) == tensor.sharding
    out = lc.relayout(tensor, named, driver=driver)
    assert timer.measured == []
    assert out is not tensor and lc.fetch_layout(out, driver=driver) == named
    check_shards(out, x, named)
    monkeypatch.setenv(choice.MODE_ENV, "collective")  # forced: device_put is the only candidate there
    out = lc.relayout(tensor, named, driver=driver)
    assert choice.chosen(tensor, driver.named_sharding(named)) == "device_put"
    check_shards(out, x, named)


def test_host_copy_blocks_are_aligned_for_aliasing() -> None:
    """device_put onto a CPU device aliases a 64-byte aligned NumPy array (no second copy)."""
    for shape, dtype in (((3, 5), np.float32), ((7,), np.uint8), ((), np.int16), ((0, 4), np.float32)):
        block = aligned_empty(shape, dtype)
        assert block.shape == shape and block.dtype == dtype and block.flags.c_contiguous
        assert block.ctypes.data % 64 == 0 or block.size == 0
    block = aligned_empty((256, 256), np.float32)
    block[...] = 1.0
    put = jax.device_put(block, jax.devices("cpu")[1])
    assert put.unsafe_buffer_pointer() == block.ctypes.data  # aliased, as the module docstring says


# -- the per-call path's memos: each keyed by immutable values, none skips a check ----------------------
def test_the_mode_is_read_as_os_environ_reads_it(monkeypatch: pytest.MonkeyPatch) -> None:
    """``_setting`` reads the setting without os.environ.get's raised KeyError; os.environ.get is its oracle."""
    for value in (None, "collective", " host_copy ", "", "measure", "fastest"):
        if value is None:
            monkeypatch.delenv(choice.MODE_ENV, raising=False)
        else:
            monkeypatch.setenv(choice.MODE_ENV, value)
        assert choice._setting() == os.environ.get(choice.MODE_ENV)
    for _ in range(2):  # a refused setting is refused on every call: the parse cache keeps no refusal
        with pytest.raises(lc.ConfigurationError, match="'fastest'"):
            choice._mode()
    monkeypatch.setenv(choice.MODE_ENV, " host_copy ")
    assert choice._mode() == "host_copy"
    monkeypatch.delenv(choice.MODE_ENV)
    assert choice._mode() == "measure"


def test_a_made_choice_does_not_let_another_target_through(driver: JaxDriver) -> None:
    """After a relayout onto a target is chosen and its check remembered, the same target for other shapes is
    checked again: JAX lacks the uneven capability, and 12 rows do not split in 8 (12 % 8 == 4)."""
    source, target = Layout([None, None], LINE), Layout(["x", None], LINE)
    x = np.arange(16 * 4, dtype=np.float32).reshape(16, 4)
    for _ in range(2):
        out = lc.relayout(lc.distribute_tensor(x, source, driver=driver), target, driver=driver)
        check_shards(out, x, target)
    assert choice.chosen(lc.distribute_tensor(x, source, driver=driver), driver.named_sharding(target)) is not None
    uneven = lc.distribute_tensor(np.ones((12, 4), np.float32), source, driver=driver)
    rank3 = lc.distribute_tensor(np.ones((16, 4, 2), np.float32), Layout([None] * 3, LINE), driver=driver)
    for _ in range(2):
        with pytest.raises(lc.UnsupportedLayoutError) as info:
            lc.relayout(uneven, target, driver=driver)
        assert info.value.feature == "uneven"
        with pytest.raises(lc.LayoutError):
            lc.relayout(rank3, target, driver=driver)
        with pytest.raises(lc.LayoutError):
            lc.relayout(uneven, Layout(["x", None]), driver=driver)  # no mesh


def test_a_seen_array_type_still_needs_a_named_sharding_and_no_tracer(driver: JaxDriver) -> None:
    """is_distributed remembers the types of concrete arrays; an array of such a type on one device is still
    no distributed tensor, and a tracer never is (its shape read as JAX gives it)."""
    placed = lc.distribute_tensor(np.ones((8, 2), np.float32), Layout(["x", None], LINE), driver=driver)
    assert driver.is_distributed(placed) and driver.shape_of(placed) == (8, 2)
    single = jax.numpy.ones((3, 2))  # the same type, on one device
    assert type(single) is type(placed) and not driver.is_distributed(single)
    assert not driver.is_distributed(np.ones(3)) and not driver.is_distributed([1.0])
    seen: list[tuple[bool, tuple[int, ...]]] = []

    def inside(a: Any) -> Any:
        seen.append((driver.is_distributed(a), driver.shape_of(a)))
        return a

    jax.jit(inside)(placed)
    assert seen == [(False, (8, 2))]
    with pytest.raises(lc.NotDistributedError):
        lc.fetch_layout(single, driver=driver)
