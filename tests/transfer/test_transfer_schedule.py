"""The data path of ``transfer.Link`` in one process: buckets cut into messages, packed, "sent", unpacked.

Every sender rank's messages (``_schedule.outgoing``) are delivered, in order per rank pair, into the
buffers each receiver rank posts (``_schedule.incoming``), round by round, as gloo matches a pair's
point-to-point operations in order; then the receivers unpack. The oracle is NumPy: every receiver
block equals the global array's slice given by ``Layout.device_slices`` (layoutcore.geometry's shard
math), and the bytes delivered per pair equal the plan's pieces.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any

import numpy as np
import pytest

from layoutcore import Layout, Mesh, TensorSpec, transfer
from layoutcore.transfer import _schedule
from layoutcore.transfer._local import Local

SENDERS, RECEIVERS = [0, 1], [2, 3]


def _locals(spec: TensorSpec, ranks: list[int], value: np.ndarray | None) -> dict[int, Local]:
    """rank -> Local of its one device: the global value's block (senders) or zeros (receivers)."""
    out = {}
    for position, (rank, box, sl) in enumerate(
        zip(ranks, spec.boxes(), spec.layout.device_slices(spec.shape), strict=True)
    ):
        block = np.ascontiguousarray(value[sl]) if value is not None else np.zeros(box[1], dtype=np.float32)
        out[rank] = Local(spec, [position], [box], [block])
    return out


def _run(bucket_bytes: int, verify: bool, receiver_axes: tuple[Any, ...]) -> tuple[Any, dict[Any, list[int]]]:
    smesh = Mesh((2,), ("x",), ["CPU:0", "CPU:1"])
    tmesh = Mesh((2,), ("x",), ["CPU:2", "CPU:3"])
    shapes = {"big": (40, 24), "small_a": (6, 4), "small_b": (2, 2)}
    rng = np.random.default_rng(0)
    values = {k: rng.standard_normal(s).astype(np.float32) for k, s in shapes.items()}
    src = {k: TensorSpec(s, "float32", Layout(("x", None), smesh)) for k, s in shapes.items()}
    dst = {k: TensorSpec(s, "float32", Layout(receiver_axes, tmesh)) for k, s in shapes.items()}
    ranks = {f"CPU:{r}": r for r in SENDERS + RECEIVERS}
    p = transfer.plan(
        src,
        dst,
        source_ranks={d: r for d, r in ranks.items() if r in SENDERS},
        target_ranks={d: r for d, r in ranks.items() if r in RECEIVERS},
    )
    senders = {k: _locals(src[k], SENDERS, values[k]) for k in shapes}
    receivers = {k: _locals(dst[k], RECEIVERS, None) for k in shapes}
    scheds = {r: _schedule.schedule(p, r, bucket_bytes) for r in SENDERS + RECEIVERS}
    pools: dict[int, dict[Any, Any]] = {r: {} for r in scheds}
    sizes: dict[Any, list[int]] = defaultdict(list)
    for k in range(max(s.rounds for s in scheds.values())):
        wire: dict[tuple[int, int], list[np.ndarray]] = defaultdict(list)
        for s in SENDERS:
            mine = {path: senders[path][s] for path in shapes}
            buffer = lambda *a, s=s: _schedule.pool_buffer(pools[s], *a)  # noqa: E731
            for peer, pack in _schedule.outgoing(scheds[s].sends, k, mine, verify, buffer, s):
                wire[(s, peer)].append(np.array(pack(), copy=True))  # the bytes as they leave
        for r in RECEIVERS:
            mine = {path: receivers[path][r] for path in shapes}
            buffer = lambda *a, r=r: _schedule.pool_buffer(pools[r], *a)  # noqa: E731
            landed = _schedule.incoming(scheds[r].recvs, k, mine, verify, buffer)
            for peer, buf, _ in landed:
                message = wire[(peer, r)].pop(0)
                assert message.nbytes == buf.nbytes
                buf[...] = message
                sizes[(peer, r)].append(buf.nbytes)
            for peer, buf, items in landed:
                if items is not None:
                    _schedule.unpack(items, buf, mine, verify, peer)
        assert not any(wire.values())  # every message sent was received
    for path, spec in dst.items():
        for position, (r, sl) in enumerate(zip(RECEIVERS, spec.layout.device_slices(spec.shape), strict=True)):
            np.testing.assert_array_equal(receivers[path][r].arrays[0], values[path][sl], err_msg=f"{path} {r}")
            assert receivers[path][r].positions == [position]
    return p, sizes


@pytest.mark.parametrize("receiver_axes", [(None, "x"), ("x", None)], ids=["rows->columns", "rows->rows"])
@pytest.mark.parametrize("verify", [False, True])
def test_messages_deliver_every_block_bit_exact(
    monkeypatch: pytest.MonkeyPatch, receiver_axes: tuple[Any, ...], verify: bool
) -> None:
    monkeypatch.setattr(_schedule, "MESSAGE_BYTES", 256)  # several messages per bucket, several rounds
    p, sizes = _run(1000, verify, receiver_axes)
    per_pair: dict[tuple[int, int], int] = defaultdict(int)
    for piece in p.pieces:
        per_pair[(piece.source_rank, piece.target_rank)] += p.nbytes(piece)
    for pair, want in per_pair.items():
        got = sizes[pair]
        if verify:  # one message per bucket: its data and 4 bytes of CRC per sub-box
            assert sum(got) > want and (sum(got) - want) % 4 == 0
        else:  # exactly the plan's bytes, in messages of at most MESSAGE_BYTES
            assert sum(got) == want and max(got) <= 256 and len(got) > 1


def test_sender_turns_rotate_so_receivers_are_not_all_served_first_by_one() -> None:
    p, _ = _run(1 << 20, False, (None, "x"))
    firsts = []
    for s in SENDERS:
        sched = _schedule.schedule(p, s, 1 << 20)
        out = _schedule.outgoing(sched.sends, 0, {}, False, lambda *a: None, s)
        firsts.append(out[0][0])
    assert sorted(firsts) == RECEIVERS
