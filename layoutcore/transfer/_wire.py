"""The wire: ``torch.distributed`` collectives for metadata and point-to-point buckets for data.

Every wait is bounded: collectives and point-to-point works are started with ``async_op`` /
``batch_isend_irecv`` and waited on with ``Work.wait(timeout)``, so a peer that died (gloo: the
connection closes, the wait fails at once) or hangs (the wait times out) makes this rank raise
:class:`~layoutcore.TransferError` within ``timeout`` seconds of the last completed round. torch is
imported here, when a :class:`Wire` is made, never when ``layoutcore.transfer`` is imported.

Buckets are exchanged in rounds: round ``k`` moves the ``k``-th bucket of every rank pair at once,
as messages (:func:`._schedule.messages`): the round's receives in one ``batch_isend_irecv``, each
send as soon as it is packed. The next round's buckets are packed while a round is on the wire, and a
round's received buckets are unpacked while the next one is on the wire, so at most two buckets per
peer and direction are alive: memory is bounded by ``4 * bucket_bytes * peers``.
"""

from __future__ import annotations

import datetime
import hashlib
import pickle
import time
import warnings
from collections.abc import Callable
from typing import Any

import numpy as np

from .._errors import TransferError

__all__ = ["SLOT", "Wire"]

#: Bytes per member of a metadata all-gather's first round (a payload up to this size needs no second).
SLOT = 4096


class Wire:
    """Collectives over the link's members and rounds of point-to-point buckets.

    Args:
        group: the torch process group (``None``: the default group).
        members: the link's ranks in ``group`` (senders | receivers), ascending.
        timeout: seconds any one wait may take.
    """

    def __init__(self, group: Any, members: tuple[int, ...], timeout: float) -> None:
        import torch
        import torch.distributed as dist

        self.torch, self.dist, self.group = torch, dist, group
        if not dist.is_available() or not dist.is_initialized():
            raise TransferError(
                "transfer.Link needs an initialised torch.distributed process group "
                "(torch.distributed.init_process_group('gloo' or 'nccl', ...)) that holds both jobs' processes"
            )
        self.rank = dist.get_rank(group)
        self.size = dist.get_world_size(group)
        self.timeout = datetime.timedelta(seconds=timeout)
        self.members = members
        self.glob = {r: (r if group is None else dist.get_global_rank(group, r)) for r in members}
        if self.rank not in members:
            raise TransferError(f"transfer.Link: rank {self.rank} is neither a sender nor a receiver {list(members)}")
        if len(members) == self.size:
            self.collective = group
        else:  # only the members take part in metadata exchanges
            self.collective = dist.new_group(ranks=[self.glob[r] for r in members], use_local_synchronization=True)
        self.metadata_bytes = 0
        self.digest = 0  # of the last all_gather's payloads: equal on every member (they received the same bytes)
        self.broken = False  # a wait failed: the group may be unusable (a peer died or hung)

    def _wait(self, works: list[Any], what: str) -> None:
        for work in works:
            try:
                work.wait(timeout=self.timeout)
            except Exception as exc:  # torch's own error types (DistBackendError, RuntimeError, ...)
                self.broken = True
                raise TransferError(
                    f"transfer: rank {self.rank} failed while {what} (a peer died or hung, or torch failed; "
                    f"timeout {self.timeout.total_seconds():g} s): {type(exc).__name__}: {str(exc)[:400]}",
                    rank=self.rank,
                ) from exc

    def all_gather(self, obj: Any, what: str = "exchanging metadata") -> list[Any]:
        """Every member's ``obj`` (pickled), in member order; counts the bytes received in ``metadata_bytes``.

        One all-gather of a :data:`SLOT`-byte slot (length and payload) per member; only when a payload is
        longer, a second all-gather of the longest length.
        """
        torch = self.torch
        payload = pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL)
        n = len(self.members)
        slot = np.zeros(SLOT, dtype=np.uint8)
        slot[:8] = np.array([len(payload)], dtype="<i8").view(np.uint8)
        head = payload[: SLOT - 8]
        slot[8 : 8 + len(head)] = np.frombuffer(head, dtype=np.uint8)
        outs = self._gather(torch.from_numpy(slot), n, what)
        lengths = [int(o[:8].numpy().view("<i8")[0]) for o in outs]
        if max(lengths) <= SLOT - 8:
            raw = [o[8 : 8 + size].numpy().tobytes() for o, size in zip(outs, lengths, strict=True)]
        else:
            buf = torch.zeros(max(lengths), dtype=torch.uint8)
            buf[: len(payload)] = torch.frombuffer(bytearray(payload), dtype=torch.uint8)
            outs = self._gather(buf, n, what)
            raw = [o[:size].numpy().tobytes() for o, size in zip(outs, lengths, strict=True)]
        digest = hashlib.blake2b(digest_size=8)
        for data in raw:
            digest.update(len(data).to_bytes(8, "little"))
            digest.update(data)
        self.digest = int.from_bytes(digest.digest(), "little") >> 2 | 1  # in [1, 2**62): never 0
        return [pickle.loads(data) for data in raw]

    def all_max(self, values: list[int], what: str) -> list[int]:
        """The element-wise maximum of every member's ``values`` (int64); counts ``8 * len * (members - 1)`` bytes.

        An all-reduce of one or two numbers is gloo's cheapest collective (a fraction of a millisecond on
        8 processes, against several for an all-gather of :data:`SLOT` bytes per member).
        """
        tensor = self.torch.tensor(values, dtype=self.torch.int64)
        try:
            works = [self.dist.all_reduce(tensor, op=self.dist.ReduceOp.MAX, group=self.collective, async_op=True)]
        except Exception as exc:
            self.broken = True
            raise TransferError(f"transfer: rank {self.rank}: {what} failed: {exc}", rank=self.rank) from exc
        self._wait(works, what)
        self.metadata_bytes += 8 * len(values) * (len(self.members) - 1)
        return [int(v) for v in tensor.tolist()]

    def _gather(self, tensor: Any, n: int, what: str) -> list[Any]:
        outs = [self.torch.empty_like(tensor) for _ in range(n)]
        try:
            works = [self.dist.all_gather(outs, tensor, group=self.collective, async_op=True)]
        except Exception as exc:
            self.broken = True
            raise TransferError(f"transfer: rank {self.rank}: {what} failed: {exc}", rank=self.rank) from exc
        self._wait(works, what)
        self.metadata_bytes += (n - 1) * tensor.numel()
        return outs

    def rounds(
        self,
        count: int,
        senders: Callable[[int], list[tuple[int, Callable[[], np.ndarray]]]],
        receive_into: Callable[[int], list[tuple[int, np.ndarray, Any]]],
        unpack: Callable[[int, list[tuple[int, np.ndarray, Any]]], None],
        clock: dict[str, float],
    ) -> None:
        """Run ``count`` rounds of buckets.

        ``senders(k)``: ``(peer, pack)`` for each message this rank sends in round ``k``, ``pack()`` giving its
        bytes; ``receive_into(k)``: ``(peer, buffer, tag)`` for each message it receives (a pair's messages in
        the order its sender sends them); ``unpack(k, those)`` once they arrived. A round's receives are posted
        first and each send as soon as it is packed, and round
        ``k + 1`` is packed and posted while round ``k`` is on the wire (gloo matches a pair's operations in
        order). Adds seconds to ``clock['packing'|'wire'|'unpacking']``.
        """
        if count == 0:
            return
        now = time.perf_counter
        pending = self._post(0, senders, receive_into, clock)
        for k in range(count):
            nxt = self._post(k + 1, senders, receive_into, clock) if k + 1 < count else None
            began = now()
            self._wait(pending[0], f"moving bucket round {k} of {count}")
            clock["wire"] += now() - began
            began = now()
            unpack(k, pending[1])  # while round k + 1 is on the wire
            clock["unpacking"] += now() - began
            if nxt is not None:
                pending = nxt

    def _post(
        self,
        k: int,
        senders: Callable[[int], list[tuple[int, Callable[[], np.ndarray]]]],
        receive_into: Callable[[int], list[tuple[int, np.ndarray, Any]]],
        clock: dict[str, float],
    ) -> tuple[list[Any], list[tuple[int, np.ndarray, Any]]]:
        began = time.perf_counter()
        recvs = receive_into(k)
        works = self._start([], [(peer, buf) for peer, buf, _ in recvs])
        for peer, pack in senders(k):
            works += self._start([(peer, pack())], [])
        clock["packing"] += time.perf_counter() - began
        return works, recvs

    def _start(self, sends: list[tuple[int, np.ndarray]], recvs: list[tuple[int, np.ndarray]]) -> list[Any]:
        torch, dist = self.torch, self.dist
        ops = []
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", UserWarning)  # read-only send buffers: gloo only reads them
            for peer, buf in sends:
                ops.append(dist.P2POp(dist.isend, torch.from_numpy(buf), self.glob[peer], group=self.group))
            for peer, buf in recvs:
                ops.append(dist.P2POp(dist.irecv, torch.from_numpy(buf), self.glob[peer], group=self.group))
        if not ops:
            return []
        try:
            return list(dist.batch_isend_irecv(ops))
        except Exception as exc:
            raise TransferError(
                f"transfer: rank {self.rank}: starting point-to-point transfers failed: {type(exc).__name__}: {exc}",
                rank=self.rank,
            ) from exc
