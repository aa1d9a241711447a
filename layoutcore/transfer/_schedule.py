"""One rank's part of a plan as buckets per peer, and the packing and unpacking of those buckets.

A peer pair's pieces, in plan order on both sides, are cut into sub-boxes of at most
``min(bucket_bytes, MESSAGE_BYTES)`` (along their first axes) and packed greedily into buckets of
at most ``bucket_bytes``; a bucket goes as messages of at most :data:`MESSAGE_BYTES` (runs of whole
sub-boxes; one message with ``verify``). Both ranks of a pair compute the same buckets and messages
from the same plan, so a message is raw bytes without headers: the wire carries exactly the plan's
bytes (plus 4 bytes of CRC-32C per sub-box with ``verify``). A message of one sub-box that is
contiguous in memory on a side is sent from, or received into, the tensor's memory directly (no
packing copy); a sender packs message ``j + 1`` while message ``j`` is on the wire.
"""

from __future__ import annotations

import functools
import itertools
import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from .._errors import TransferError
from .._tensor_spec import Box
from ._local import Local
from ._plan import TransferPlan

__all__ = ["Schedule", "schedule"]

# One sub-box: (sender path, sender box, receiver path, receiver box, bytes).
Item = tuple[str, Box, str, Box, int]

#: The largest message (bytes). Smaller messages let packing the next overlap sending this one, but each
#: costs gloo a handshake and Python a call: on 2 shared cores, 4 MiB messages of 8 MiB pieces (4 -> 4,
#: rows -> columns) were slower than one message per bucket (min 76 against 68 ms, CPU +5 %), so the
#: default is the default bucket size.
MESSAGE_BYTES = 16 * 2**20


@dataclass(slots=True)
class Schedule:
    """This rank's buckets: ``sends[peer][k]`` / ``recvs[peer][k]`` are the items of round ``k``; ``local`` is copied here."""

    sends: dict[int, list[list[Item]]] = field(default_factory=dict)
    recvs: dict[int, list[list[Item]]] = field(default_factory=dict)
    local: list[Item] = field(default_factory=list)

    @property
    def rounds(self) -> int:
        return max((len(b) for b in (*self.sends.values(), *self.recvs.values())), default=0)


def _split(sbox: Box, rbox: Box, itemsize: int, limit: int) -> list[tuple[Box, Box]]:
    """Sub-boxes of at most ``limit`` bytes, cut along the first axis longer than 1 (recursively)."""
    sizes = sbox[1]
    nbytes = math.prod(sizes) * itemsize
    axis = next((a for a, s in enumerate(sizes) if s > 1), None)
    if nbytes <= limit or axis is None:
        return [(sbox, rbox)]
    row = nbytes // sizes[axis]
    step = max(1, limit // row)
    out = []
    for start in range(0, sizes[axis], step):
        n = min(step, sizes[axis] - start)

        def cut(box: Box, start: int = start, n: int = n) -> Box:
            offsets, sz = box
            return (
                (*offsets[:axis], offsets[axis] + start, *offsets[axis + 1 :]),
                (*sz[:axis], n, *sz[axis + 1 :]),
            )

        sub = (cut(sbox), cut(rbox))
        out.extend(_split(*sub, itemsize, limit) if row > limit else [sub])
    return out


def schedule(plan: TransferPlan, rank: int, bucket_bytes: int) -> Schedule:
    """This rank's buckets for ``plan`` (pure; both ranks of a pair get the same buckets)."""
    sched = Schedule()
    outgoing: dict[int, list[Item]] = {}
    incoming: dict[int, list[Item]] = {}
    for piece in plan.pieces_of(rank):
        itemsize = plan.itemsize[piece.receiver_path]
        subs = _split(piece.sender_box, piece.receiver_box, itemsize, min(bucket_bytes, MESSAGE_BYTES))
        items = [(piece.sender_path, s, piece.receiver_path, r, math.prod(s[1]) * itemsize) for s, r in subs]
        if piece.source_rank == piece.target_rank:
            sched.local.extend(items)
        elif piece.source_rank == rank:
            outgoing.setdefault(piece.target_rank, []).extend(items)
        else:
            incoming.setdefault(piece.source_rank, []).extend(items)
    sched.sends = {peer: _buckets(items, bucket_bytes) for peer, items in sorted(outgoing.items())}
    sched.recvs = {peer: _buckets(items, bucket_bytes) for peer, items in sorted(incoming.items())}
    return sched


def _buckets(items: list[Item], limit: int) -> list[list[Item]]:
    out: list[list[Item]] = []
    size = limit + 1
    for item in items:
        if size + item[4] > limit:
            out.append([])
            size = 0
        out[-1].append(item)
        size += item[4]
    return out


def messages(bucket: list[Item], verify: bool) -> list[tuple[int, list[Item]]]:
    """A bucket's messages as (byte offset in the bucket, items): runs of at most :data:`MESSAGE_BYTES`.

    With ``verify`` the whole bucket is one message (its CRCs follow its data)."""
    if verify:
        return [(0, bucket)]
    out: list[tuple[int, list[Item]]] = []
    offset = size = 0
    for item in bucket:
        if not out or size + item[4] > MESSAGE_BYTES:
            out.append((offset, []))
            size = 0
        out[-1][1].append(item)
        size += item[4]
        offset += item[4]
    return out


def _slice(get: Callable[[int], np.ndarray], total: int, offset: int) -> Callable[[int], np.ndarray]:
    return lambda size: get(total)[offset : offset + size]


def _bucket_size(bucket: list[Item], verify: bool) -> int:
    return sum(item[4] for item in bucket) + (4 * len(bucket) if verify else 0)


def outgoing(
    sends: dict[int, list[list[Item]]], k: int, senders: dict[str, Local], verify: bool, buffer: Any, rank: int
) -> list[tuple[int, Callable[[], np.ndarray]]]:
    """Round ``k``'s messages as (peer, pack): message ``j`` to every peer before message ``j + 1``.

    The peers start at this rank's turn (``rank`` modulo their number), so that the senders of an
    all-to-all do not all begin with the same receiver. ``buffer(kind, peer, k)`` gives a bucket's buffer getter.
    """
    peers = [p for p in sorted(sends) if k < len(sends[p])]
    if peers:
        turn = rank % len(peers)
        peers = peers[turn:] + peers[:turn]
    queues = []
    for p in peers:
        bucket, get = sends[p][k], buffer("send", p, k)
        total = _bucket_size(bucket, verify)
        queues.append(
            [
                (p, functools.partial(pack, msg, senders, verify, _slice(get, total, off)))
                for off, msg in messages(bucket, verify)
            ]
        )
    return [m for row in itertools.zip_longest(*queues) for m in row if m is not None]


def incoming(
    recvs: dict[int, list[list[Item]]], k: int, receivers: dict[str, Local], verify: bool, buffer: Any
) -> list[tuple[int, np.ndarray, list[Item] | None]]:
    """Round ``k``'s messages as (peer, where it lands, its items to unpack or ``None`` when it lands in place)."""
    out: list[tuple[int, np.ndarray, list[Item] | None]] = []
    for p, buckets in sorted(recvs.items()):
        if k < len(buckets):
            get = buffer("recv", p, k)
            total = _bucket_size(buckets[k], verify)
            for off, msg in messages(buckets[k], verify):
                buf, direct = receive_buffer(msg, receivers, verify, _slice(get, total, off))
                out.append((p, buf, None if direct else msg))
    return out


def region(local: Local, index: int, box: Box) -> np.ndarray:
    """The part of local device ``index``'s array that holds global ``box``."""
    offsets = local.boxes[index][0]
    return local.arrays[index][tuple(slice(o - b, o - b + s) for o, s, b in zip(box[0], box[1], offsets, strict=True))]


def _first_holder(local: Local, box: Box, path: str) -> int:
    holders = local.holding(box)
    if not holders:
        raise TransferError(
            f"transfer: no local device holds box {box} of {path!r} (plan and tensors disagree)", paths=(path,)
        )
    return holders[0]


def pack(items: list[Item], senders: dict[str, Local], verify: bool, pool: Any = None) -> np.ndarray:
    """The bytes of ``items`` in order (a view of the tensor when it is one contiguous sub-box and no CRC).

    ``pool(nbytes)`` gives the bucket's buffer (reused between rounds and syncs: a fresh one costs page faults)."""
    if len(items) == 1 and not verify:
        path, sbox = items[0][0], items[0][1]
        src = region(senders[path], _first_holder(senders[path], sbox, path), sbox)
        if src.flags.c_contiguous:
            return src.reshape(-1).view(np.uint8)
    total = sum(item[4] for item in items)
    size = total + (4 * len(items) if verify else 0)
    buf = np.empty(size, dtype=np.uint8) if pool is None else pool(size)
    offset = 0
    crcs = []
    for path, sbox, _, _, nbytes in items:
        local = senders[path]
        src = region(local, _first_holder(local, sbox, path), sbox)
        dst = buf[offset : offset + nbytes].view(src.dtype).reshape(src.shape)
        np.copyto(dst, src)
        if verify:
            crcs.append(_crc(buf[offset : offset + nbytes]))
        offset += nbytes
    if verify:
        buf[offset:] = np.array(crcs, dtype="<u4").view(np.uint8)
    return buf


def receive_buffer(
    items: list[Item], receivers: dict[str, Local], verify: bool, pool: Any = None
) -> tuple[np.ndarray, bool]:
    """Where a bucket lands: the tensor's own memory (``True``) when it can, else a new buffer (``False``)."""
    if len(items) == 1 and not verify:
        _, _, path, rbox, _ = items[0]
        holders = _distinct(receivers[path], receivers[path].holding(rbox))
        if len(holders) == 1:
            dst = region(receivers[path], holders[0], rbox)
            if dst.flags.c_contiguous and dst.flags.writeable:
                return dst.reshape(-1).view(np.uint8), True
    size = _bucket_size(items, verify)
    return (np.empty(size, dtype=np.uint8) if pool is None else pool(size)), False


def unpack(items: list[Item], buf: np.ndarray, receivers: dict[str, Local], verify: bool, peer: int) -> None:
    """Copy a received bucket's sub-boxes into every local device that holds them (checking CRCs with ``verify``)."""
    offset = 0
    crcs = buf[sum(item[4] for item in items) :].view("<u4") if verify else None
    for i, (_, _, path, rbox, nbytes) in enumerate(items):
        chunk = buf[offset : offset + nbytes]
        if crcs is not None and _crc(chunk) != int(crcs[i]):
            raise TransferError(
                f"transfer: CRC-32C mismatch in {path!r} box {rbox} (offsets, sizes) received from rank {peer}",
                paths=(path,),
            )
        local = receivers[path]
        for index in _distinct(local, local.holding(rbox)):
            dst = region(local, index, rbox)
            np.copyto(dst, chunk.view(dst.dtype).reshape(dst.shape))
        offset += nbytes


def copy_local(items: list[Item], senders: dict[str, Local], receivers: dict[str, Local]) -> None:
    """The pieces this rank holds as a sender and needs as a receiver: copied, never sent."""
    for spath, sbox, rpath, rbox, _ in items:
        src = region(senders[spath], _first_holder(senders[spath], sbox, spath), sbox)
        for index in _distinct(receivers[rpath], receivers[rpath].holding(rbox)):
            np.copyto(region(receivers[rpath], index, rbox), src)


def pool_buffer(pool: dict[Any, Any], kind: str, peer: int, k: int) -> Callable[[int], Any]:
    """A getter of a uint8 buffer of at least ``size`` bytes for round ``k`` with ``peer``, kept in ``pool``.

    Two buffers per peer and direction (``kind``): round k is unpacked while round k + 1 is on the wire.
    """

    def get(size: int) -> Any:
        key = (kind, peer, k % 2)
        buf = pool.get(key)
        if buf is None or buf.nbytes < size:
            buf = pool[key] = np.empty(size, dtype=np.uint8)
        return buf[:size]

    return get


def schedule_bytes(sched: Schedule, verify: bool) -> tuple[int, int, int]:
    """Payload bytes ``sched`` sends and receives, and its checksum bytes (4 per bucket when ``verify``)."""
    sent = sum(item[4] for b in sched.sends.values() for bucket in b for item in bucket)
    received = sum(item[4] for b in sched.recvs.values() for bucket in b for item in bucket)
    crc = 4 * sum(len(bucket) for b in (*sched.sends.values(), *sched.recvs.values()) for bucket in b) if verify else 0
    return sent, received, crc


def _distinct(local: Local, indices: list[int]) -> list[int]:
    """``indices`` without those whose array is one already listed (replicas handed over as one block)."""
    seen: set[int] = set()
    out = []
    for i in indices:
        if id(local.arrays[i]) not in seen:
            seen.add(id(local.arrays[i]))
            out.append(i)
    return out


def _crc(data: Any) -> int:
    from .._crc import crc32c  # loaded only with verify=True (google-crc32c is imported with it)

    return crc32c(np.ascontiguousarray(data))
