"""relayout_schedule: the core's arrangement of a plan between devices, checked against NumPy.

Every target block is rebuilt from the schedule alone (keeps and pieces cut out of NumPy's
source blocks, placed into empty target blocks) and compared with NumPy's slice of the value;
the rounds are checked as an edge colouring (König: as many per shape as the busiest device has
pieces of that shape, one send and one receive per device per round, every piece once).
"""

from __future__ import annotations

from collections import Counter

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from layoutcore import Layout, Mesh, relayout_plan
from layoutcore._relayout_schedule import matchings
from layoutcore.driver import Piece, RelayoutMove, relayout_schedule

DEVICES = [f"CPU:{i}" for i in range(8)]
GRID = Mesh((4, 2), ("x", "y"), devices=DEVICES)
FLAT = Mesh((8,), ("z",), devices=DEVICES)
HALF = Mesh((2, 2), ("a", "b"), devices=DEVICES[4:])
PAIR = Mesh((2,), ("c",), devices=["CPU:1", "CPU:6"])
CASES = {
    "(x,y) -> (y,x)": (Layout(["x", "y"], GRID), Layout(["y", "x"], GRID), (16, 16)),
    "rows -> (None,y)": (Layout(["x", None], GRID), Layout([None, "y"], GRID), (8, 8)),
    "cross-mesh 4x2 -> 8": (Layout(["x", None], GRID), Layout([None, "z"], FLAT), (16, 16)),
    "superset 2x2 -> 4x2": (Layout(["a", "b"], HALF), Layout(["y", "x"], GRID), (8, 8)),
    "subset 4x2 -> 2 devices": (Layout(["x", "y"], GRID), Layout([None, "c"], PAIR), (8, 6)),
    "uneven": (Layout(["x", None], GRID), Layout([None, ("x", "y")], GRID), (7, 10)),
    "abstract mesh": (
        Layout(["x", "y"], Mesh((4, 2), ("x", "y"))),
        Layout([None, "y"], Mesh((4, 2), ("x", "y"))),
        (8, 8),
    ),
}


@pytest.mark.parametrize("case", list(CASES))
@pytest.mark.parametrize("rounds", [False, True])
def test_the_schedule_rebuilds_every_target_block(case: str, rounds: bool) -> None:
    source, target, shape = CASES[case]
    value = np.arange(int(np.prod(shape)), dtype=np.int32).reshape(shape)
    plan = relayout_plan(source, target, shape, "int32")
    schedule = relayout_schedule(plan, rounds=rounds)
    held = {i: value[source.device_slices(shape)[p]] for i, p in enumerate(schedule.source_of) if p is not None}
    built = {i: np.full(schedule.target_shapes[q], -1) for i, q in enumerate(schedule.target_of) if q is not None}
    pieces = [*(k for k in schedule.keeps if k is not None), *schedule.pieces]
    for piece in pieces:
        built[piece.receiver][piece.target_at] = held[piece.sender][piece.source_at]
    for i, q in enumerate(schedule.target_of):
        if q is not None:
            np.testing.assert_array_equal(built[i], value[target.device_slices(shape)[q]])
    moved = sum(int(np.prod(p.shape)) * 4 for p in schedule.pieces)
    assert moved == plan.floor_bytes == schedule.floor_bytes
    assert all(p.sender != p.receiver for p in schedule.pieces)
    if rounds:
        assert sorted(map(id, (p for r in schedule.rounds for p in r))) == sorted(map(id, pieces))
        for members in schedule.rounds:
            assert len({p.shape for p in members}) == 1
            assert len({p.sender for p in members}) == len(members) == len({p.receiver for p in members})
    else:
        assert schedule.rounds == ()


def test_participants_are_ordered_as_given_and_checked() -> None:
    source, target, shape = CASES["subset 4x2 -> 2 devices"]
    plan = relayout_plan(source, target, shape)
    order = list(reversed(DEVICES))
    schedule = relayout_schedule(plan, order)
    assert schedule.participants == tuple(order)
    assert schedule.source_of == tuple(reversed(range(8)))
    assert schedule.target_of[order.index("CPU:6")] == 1
    with pytest.raises(ValueError, match="CPU:0"):
        relayout_schedule(plan, DEVICES[1:])


def test_a_move_computes_its_plan_and_schedule_once_and_reads_its_source_once() -> None:
    source, target, shape = CASES["(x,y) -> (y,x)"]
    reads: list[int] = []
    move = RelayoutMove(lambda: reads.append(1) or source, lambda: "float32", target, tuple(DEVICES), shape)
    assert reads == []  # nothing read until asked
    assert move.plan is move.plan and move.schedule() is move.schedule()
    assert reads == [1]
    assert move.plan.floor_bytes == relayout_plan(source, target, shape).floor_bytes
    back = move.reversed()
    assert (back.source, back.target) == (move.target, move.source)
    assert move.retyped("int32").plan.dtype == "int32"


@settings(max_examples=100, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 7), st.integers(0, 7)), max_size=40))
def test_rounds_are_the_fewest_with_one_send_and_one_receive_per_device(pairs: list[tuple[int, int]]) -> None:
    """König: a bipartite multigraph splits into max-degree matchings; every item lands in one round."""
    items = [Piece(src, dst, (slice(k, k + 1),), (slice(0, 1),)) for k, (src, dst) in enumerate(pairs)]
    rounds = matchings(items)
    degree = max([*Counter(s for s, _ in pairs).values(), *Counter(d for _, d in pairs).values()], default=0)
    assert len(rounds) == degree
    assert sorted(p.source_at[0].start for members in rounds for p in members) == list(range(len(pairs)))
    for members in rounds:
        assert len({p.sender for p in members}) == len(members) == len({p.receiver for p in members})
