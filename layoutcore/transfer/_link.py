"""``transfer.Link``: a plan run between two groups of processes over ``torch.distributed`` (``docs/design.md#moving-weights-between-jobs``).

A sync, on every rank of the link:

1. **Metadata**, two all-gathers over the link's ranks: the senders' ``TensorSpec``s and
   device -> rank maps; then the receivers' target specs (completed from the senders' shapes and
   dtypes where only a layout was given), device -> rank maps, and resolved ``rename``/``fuse``.
   Any rank's error (a bad leaf, a callable ``rename`` that raised) is in the payload, so every
   rank raises the same :class:`~layoutcore.TransferError` before any tensor byte moves. First,
   one all-reduce of the link's last full exchange's fingerprint: when every rank's payloads are
   those of that exchange, the all-gathers are skipped and its outcome reused.
2. **Plan**: every rank calls :func:`~layoutcore.transfer.plan` on the same inputs, so every rank
   gets the same plan or the same error; equal inputs hit the plan cache.
3. **Data**: this rank's buckets (:mod:`._schedule`) in rounds of ``batch_isend_irecv``
   (:mod:`._wire`); pieces a rank holds itself are copied locally.
4. **Agreement**: a last all-reduce of every rank's failure flag (then, only when one is set, an
   all-gather of what failed), so that a rank whose peer died or whose checksum failed makes every
   surviving rank raise.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from .._errors import TransferError
from .._layout import Layout
from .._layout_map import LayoutMap
from .._tensor_spec import TensorSpec
from . import _schedule
from ._into import fresh_local, into_local
from ._local import Local, leaves, sender_local, target_forms
from ._plan import TransferPlan, plan
from ._routes import _fuse_entry

__all__ = ["Link", "TransferReport"]

DEFAULT_BUCKET_BYTES = 16 * 2**20


@dataclass(frozen=True, slots=True)
class TransferReport:
    """What one sync did on one rank.

    Attributes:
        rank: this rank (in the link's group). role: ``"sender"``, ``"receiver"`` or ``"both"``.
        floor_bytes: the plan's ``floor_bytes`` (all receiving ranks). floor_share: this rank's part of it.
        bytes_sent, bytes_received: tensor bytes this rank put on / took off the wire (CRCs not included).
        local_bytes: bytes this rank copied from its own sender components (not sent).
        metadata_bytes: bytes of the metadata collectives this rank received (specs, maps, outcome).
        checksum_bytes: CRC-32C bytes this rank sent and received (``verify=True``; 4 per sub-box).
        per_rank: rank -> (bytes sent, bytes received) over the wire, from the plan, for every rank.
        plan_reused: whether the plan came from the cache.
        seconds_planning, seconds_packing, seconds_wire, seconds_unpacking, seconds_total: wall seconds
            (metadata exchange counts as planning; local copies as unpacking).
    """

    rank: int
    role: str
    floor_bytes: int
    floor_share: int
    bytes_sent: int
    bytes_received: int
    local_bytes: int
    metadata_bytes: int
    checksum_bytes: int
    per_rank: dict[int, tuple[int, int]]
    plan_reused: bool
    seconds_planning: float
    seconds_packing: float
    seconds_wire: float
    seconds_unpacking: float
    seconds_total: float


def _ranks(ranks: Any, what: str) -> frozenset[int]:
    try:
        out = frozenset(int(r) for r in ranks)
    except (TypeError, ValueError) as exc:
        raise TransferError(f"transfer.Link: {what} must be an iterable of ranks. Received: {ranks!r}") from exc
    if not out:
        raise TransferError(f"transfer.Link: {what} is empty")
    return out


class Link:
    """A link between sender and receiver processes of one ``torch.distributed`` group.

    Made on every rank of ``senders | receivers`` (ranks of ``group``, default the world), which
    then all take part in each sync: sender-only ranks call :meth:`send`, receiver-only ranks
    :meth:`receive`, ranks in both sets :meth:`sync`.

    Args:
        senders, receivers: ranks of ``group`` (they may overlap).
        group: a ``torch.distributed`` process group (gloo on CPU, NCCL on GPU); ``None``: the default.
        timeout: seconds any wait may take: a peer that dies or hangs makes every surviving rank
            raise :class:`~layoutcore.TransferError` within ``timeout`` of the last completed round.
        bucket_bytes: the largest bucket per rank pair (bytes, default 16 MiB); memory in flight is at
            most ``4 * bucket_bytes`` per peer, and those bucket buffers are kept for the next sync.

    ``verify=True`` on any rank makes the whole sync check a CRC-32C per piece. A plan is computed
    on every rank from the exchanged specs and reused while they stay equal; a link whose peer died
    or hung cannot be used again (the process group may be broken: end the processes).

    Raises:
        TransferError: no initialised process group, or this rank is in neither set.
    """

    def __init__(
        self,
        *,
        senders: Any,
        receivers: Any,
        group: Any = None,
        timeout: float = 300.0,
        bucket_bytes: int = DEFAULT_BUCKET_BYTES,
    ) -> None:
        from ._wire import Wire  # imports torch

        self.senders, self.receivers = _ranks(senders, "senders"), _ranks(receivers, "receivers")
        if not (isinstance(bucket_bytes, int) and bucket_bytes > 0) or not timeout > 0:
            raise TransferError(f"transfer.Link: bucket_bytes and timeout must be positive ({bucket_bytes}, {timeout})")
        self.bucket_bytes, self.timeout = bucket_bytes, float(timeout)
        self._wire = Wire(group, tuple(sorted(self.senders | self.receivers)), self.timeout)
        self.rank = self._wire.rank
        self.last_report: TransferReport | None = None
        self._schedules: dict[Any, tuple[TransferPlan, _schedule.Schedule]] = {}
        self._specs: dict[str, TensorSpec] = {}  # JSON text -> spec, so a repeated sync parses nothing
        self._pool: dict[tuple[str, int, int], Any] = {}  # bucket buffers, kept between syncs
        self._known: _Known | None = None  # the last full metadata exchange (every member holds the same one)

    @property
    def role(self) -> str:
        s, r = self.rank in self.senders, self.rank in self.receivers
        return "both" if s and r else "sender" if s else "receiver"

    def _misuse(self) -> str:
        call = {"sender": "link.send", "receiver": "link.receive", "both": "link.sync"}[self.role]
        what = "both a sender and a receiver" if self.role == "both" else f"only a {self.role}"
        return f"rank {self.rank} is {what} of this link: call {call}"

    # -- public entry points -------------------------------------------------------------------
    def send(self, tree: Any, *, verify: bool = False) -> TransferReport:
        """Send ``tree`` (a tree of distributed tensors of any driver) from this sender-only rank's components.

        Raises:
            TransferError: on every rank of the link, for the reasons in :func:`~layoutcore.transfer.plan`,
                a peer that died or hung, or this rank being a receiver too (use :meth:`sync`).
        """
        misuse = None if self.role == "sender" else self._misuse()
        self._run(tree, None, None, None, None, None, verify, misuse)
        assert self.last_report is not None
        return self.last_report

    def receive(
        self,
        target: Any = None,
        *,
        into: Any = None,
        rename: Any = None,
        fuse: Any = None,
        driver: Any = None,
        verify: bool = False,
    ) -> Any:
        """Receive into new tensors of ``driver`` laid out by ``target``, or into the existing tensors ``into``.

        ``target``: a mapping receiver path -> ``Layout`` / ``TensorSpec``, a ``LayoutMap``, or a tree of
        them (a ``Layout`` takes the shape and dtype the senders send there). ``into``: a tree of
        distributed tensors, filled in place (torch keeps storage; NumPy writes its components; JAX
        returns new arrays with the same shardings). Returns the tree (the received paths only).

        Raises:
            TransferError: on every rank: both or neither of ``target`` and ``into``, this rank being a
                sender too, or any reason of :func:`~layoutcore.transfer.plan`; a peer that died or hung;
                a CRC mismatch with ``verify`` (naming path and box).
        """
        misuse = None if self.role == "receiver" else self._misuse()
        return self._run(None, target, into, rename, fuse, driver, verify, misuse)

    def sync(
        self,
        tree: Any,
        target: Any = None,
        *,
        into: Any = None,
        rename: Any = None,
        fuse: Any = None,
        driver: Any = None,
        verify: bool = False,
    ) -> Any:
        """Send ``tree`` and receive, on a rank in both sets; pieces held here are copied locally.

        Raises:
            TransferError: as :meth:`send` and :meth:`receive`; this rank not being in both sets.
        """
        misuse = None if self.role == "both" else self._misuse()
        return self._run(tree, target, into, rename, fuse, driver, verify, misuse)

    # -- one sync ------------------------------------------------------------------------------
    def _run(
        self,
        tree: Any,
        target: Any,
        into: Any,
        rename: Any,
        fuse: Any,
        driver: Any,
        verify: bool,
        misuse: str | None,
    ) -> Any:
        start = time.perf_counter()
        self._wire.metadata_bytes = 0
        ctx = _Sync(self, tree, target, into, rename, fuse, driver, verify, misuse)
        ctx.exchange()
        the_plan, reused = ctx.plan()
        sched = self._schedule(the_plan)
        clock = {"planning": time.perf_counter() - start, "packing": 0.0, "wire": 0.0, "unpacking": 0.0}
        failure = None
        try:
            moved = ctx.move(sched, clock)
        except TransferError as exc:
            failure, moved = exc, (0, 0, 0)
        if failure is not None and self._wire.broken:
            raise failure  # a peer died or hung: waiting for the others' outcomes could take another timeout
        try:  # one all-reduce of a flag; only when a rank failed, an all-gather of what failed
            outcomes: list[Any] = [None] * len(self._wire.members)
            if self._wire.all_max([int(failure is not None)], "agreeing")[0]:
                self._known = None
                outcomes = self._wire.all_gather(None if failure is None else (str(failure), failure.paths), "agreeing")
        except TransferError as exc:
            raise TransferError(f"{exc}{ctx.partly_written()}", paths=exc.paths, rank=self.rank) from exc
        if failure is not None:
            raise failure
        bad = [(r, o) for r, o in zip(self._wire.members, outcomes, strict=True) if o is not None]
        if bad:
            raise TransferError(
                f"transfer: rank(s) {[r for r, _ in bad]} failed during the data phase: {bad[0][1][0]}"
                + ctx.partly_written(),
                paths=tuple(bad[0][1][1]),
                rank=self.rank,
            )
        result = ctx.finish()
        sent, received, crc = moved
        self.last_report = TransferReport(
            rank=self.rank,
            role=self.role,
            floor_bytes=the_plan.floor_bytes,
            floor_share=the_plan.floor_per_rank.get(self.rank, 0),
            bytes_sent=sent,
            bytes_received=received,
            local_bytes=sum(item[4] for item in sched.local),
            metadata_bytes=self._wire.metadata_bytes,
            checksum_bytes=crc,
            per_rank=dict(the_plan.per_rank),
            plan_reused=reused,
            seconds_planning=clock["planning"],
            seconds_packing=clock["packing"],
            seconds_wire=clock["wire"],
            seconds_unpacking=clock["unpacking"],
            seconds_total=time.perf_counter() - start,
        )
        return result

    def _schedule(self, the_plan: TransferPlan) -> _schedule.Schedule:
        key = (id(the_plan), self.bucket_bytes)
        known = self._schedules.get(key)
        if known is None or known[0] is not the_plan:
            if len(self._schedules) >= 4:
                self._schedules.clear()
            known = self._schedules[key] = (the_plan, _schedule.schedule(the_plan, self.rank, self.bucket_bytes))
        return known[1]

    def spec(self, text: str) -> TensorSpec:
        """``TensorSpec.from_json(text)``, remembered (a repeated sync sends the same texts)."""
        spec = self._specs.get(text)
        if spec is None:
            if len(self._specs) > 100_000:
                self._specs.clear()
            spec = self._specs[text] = TensorSpec.from_json(text)
        return spec


def _error(exc: Exception) -> tuple[str, tuple[str, ...]]:
    return str(exc), tuple(getattr(exc, "paths", ()))


def _raise_any(members: tuple[int, ...], payloads: list[dict[str, Any]], rank: int) -> None:
    bad = [(r, p["error"]) for r, p in zip(members, payloads, strict=True) if p["error"] is not None]
    if bad:
        paths = tuple(dict.fromkeys(path for _, (_, ps) in bad for path in ps))
        detail = "; ".join(f"rank {r}: {msg}" for r, (msg, _) in bad[:5])
        raise TransferError(f"transfer: nothing was sent: {detail}", paths=paths, rank=rank)


def _merge(members: tuple[int, ...], payloads: list[dict[str, Any]], key: str) -> tuple[dict[str, Any], list[str]]:
    """The union of the members' ``key`` maps, and the entries two members disagree on."""
    out: dict[str, Any] = {}
    clashes = []
    for p in payloads:
        for k, v in p[key].items():
            if out.setdefault(k, v) != v:
                clashes.append(k)
    return out, clashes


def _disagreement(
    side: str, members: list[int], payloads: list[dict[str, Any]], specs: str, devices: str, clashes: list[str]
) -> tuple[str, tuple[str, ...]]:
    """Why ``side``'s ranks cannot be merged, and the paths concerned: specs they disagree on (``clashes``),
    or devices that more than one of them names as its own (processes whose meshes are each of their own
    devices, named alike: single-client TF, JAX without ``jax.distributed``, NumPy)."""
    owners: dict[str, list[int]] = {}
    for rank, payload in zip(members, payloads, strict=True):
        for device in payload[devices]:
            owners.setdefault(device, []).append(rank)
    shared = {d: rs for d, rs in owners.items() if len(rs) > 1}
    if not shared:
        return f"{side} ranks disagree on the specs of {clashes[:20]}", tuple(clashes)
    ranks = sorted({r for rs in shared.values() for r in rs})
    paths = tuple(dict.fromkeys(p for r, q in zip(members, payloads, strict=True) if r in ranks for p in q[specs]))
    return (
        f"{side} ranks {ranks} each hold device(s) {sorted(shared)[:8]} of the tensors {list(paths[:20])}: a device "
        "must belong to one process, and these processes name their own devices alike (each has a mesh of its own: "
        "single-client TF, JAX without jax.distributed, NumPy); use one such process per side, or one mesh over "
        "all of them (TF: layoutcore_tensorflow.initialize_multi_client)",
        paths or tuple(clashes),
    )


_NO_TARGETS: dict[str, Any] = {"error": None, "targets": {}, "tdev": {}, "rename": None, "fuse": None}


@dataclass(frozen=True, slots=True)
class _Known:
    """A link's last full metadata exchange: its fingerprint, this rank's two payloads, and the agreed state."""

    token: int
    first: dict[str, Any]
    second: dict[str, Any]
    state: tuple[Any, ...]


class _Sync:
    """The state of one sync on one rank (see the module docstring for the steps)."""

    def __init__(
        self,
        link: Link,
        tree: Any,
        target: Any,
        into: Any,
        rename: Any,
        fuse: Any,
        driver: Any,
        verify: bool,
        misuse: str | None,
    ) -> None:
        self.link, self.wire = link, link._wire
        self.tree, self.target, self.into, self.rename, self.fuse = tree, target, into, rename, fuse
        self.driver, self.verify, self.misuse = driver, verify, misuse
        self.senders: dict[str, Local] = {}
        self.receivers: dict[str, Local] = {}
        self.into_paths: list[str] = []
        self.written = False

    # -- metadata ------------------------------------------------------------------------------
    def exchange(self) -> None:
        """Agree on every rank's specs, device maps and ``rename``/``fuse``, or raise on every rank.

        When this rank's payloads equal those of the link's last full exchange, it offers that exchange's
        fingerprint in one all-reduce (two int64s); when every member offers the same one, nothing changed
        anywhere and the last exchange's outcome is reused. Otherwise two all-gathers exchange the payloads.
        """
        link, wire = self.link, self.wire
        first = self._sender_payload()
        known, token, second = link._known, 0, None
        if known is not None:  # every rank has one or none (they change together): receivers make targets once
            self._adopt(known)  # a receiver's payload is made from the senders' specs
            second = self._receiver_part()
            token = known.token if (first, second) == (known.first, known.second) else 0
        top, low = wire.all_max([token, -token], "exchanging metadata fingerprints")
        if known is not None and top == -low == known.token:  # every member offered the same fingerprint
            return
        link._known = None
        firsts = wire.all_gather(first)
        digest = wire.digest
        _raise_any(wire.members, firsts, link.rank)
        texts, clashes = _merge(wire.members, firsts, "sources")
        self.sdev, dev_clashes = _merge(wire.members, firsts, "sdev")
        self.sources = {path: link.spec(text) for path, text in texts.items()}
        self.verify = any(p["verify"] for p in firsts)
        if clashes or dev_clashes:  # every rank merged the same payloads: every rank raises the same error
            message, paths = _disagreement("sender", list(wire.members), firsts, "sources", "sdev", clashes)
            raise TransferError(f"transfer: {message}; nothing was sent", paths=paths, rank=link.rank)
        if known is None or self.sources != known.state[0]:  # the same decision on every rank
            second = self._receiver_part()
        assert second is not None
        self._agree(wire.all_gather(second))
        link._known = _Known((digest ^ wire.digest << 1) & (2**62 - 1) | 1, first, second, self._state())

    def _sender_payload(self) -> dict[str, Any]:
        """This rank's first payload: its error (misuse, a bad leaf), its senders' specs and devices, ``verify``."""
        link = self.link
        error: tuple[str, tuple[str, ...]] | None = None if self.misuse is None else (f"transfer: {self.misuse}", ())
        if error is None and self.link.role != "sender" and (self.target is None) == (self.into is None):
            error = (f"transfer: rank {link.rank}: receive needs exactly one of target= and into=", ())
        specs: dict[str, str] = {}
        sdev: dict[str, int] = {}
        if error is None and self.tree is not None:
            try:
                for path, leaf in leaves(self.tree):
                    local = sender_local(path, leaf)
                    self.senders[path] = local
                    specs[path] = local.spec.to_json()
                    devices = local.spec.mesh.devices or ()
                    sdev.update({devices[p]: link.rank for p in local.positions})
            except Exception as exc:  # a layoutcore or framework error about this rank's tree
                error = _error(exc)
        return {"error": error, "sources": specs, "sdev": sdev, "verify": self.verify}

    def _receiver_part(self) -> dict[str, Any]:
        """This rank's second payload (its targets, from ``self.sources``), with its error if making them failed."""
        second = dict(_NO_TARGETS)
        if self.link.rank in self.link.receivers:
            self.receivers, self.into_paths = {}, []
            try:
                second.update(self._receiver_payload())
            except Exception as exc:
                second["error"] = _error(exc)
        return second

    def _agree(self, payloads: list[dict[str, Any]]) -> None:
        link, wire = self.link, self.wire
        _raise_any(wire.members, payloads, link.rank)
        texts, clashes = _merge(wire.members, payloads, "targets")
        self.tdev, dev_clashes = _merge(wire.members, payloads, "tdev")
        agreed = {
            repr((p["rename"], p["fuse"])) for r, p in zip(wire.members, payloads, strict=True) if r in link.receivers
        }
        if clashes or dev_clashes or len(agreed) > 1:
            ranks = [r for r in wire.members if r in link.receivers]
            theirs = [p for r, p in zip(wire.members, payloads, strict=True) if r in link.receivers]
            message, paths = _disagreement("receiver", ranks, theirs, "targets", "tdev", clashes)
            if len(agreed) > 1:
                message = "receiver ranks disagree on rename/fuse" + (f"; {message}" if clashes or dev_clashes else "")
            raise TransferError(f"transfer: {message}; nothing was sent", paths=paths, rank=link.rank)
        chosen = next(p for r, p in zip(wire.members, payloads, strict=True) if r in link.receivers)
        self.targets = {path: link.spec(text) for path, text in texts.items()}
        self.resolved_rename, self.resolved_fuse = chosen["rename"], chosen["fuse"]

    def _state(self) -> tuple[Any, ...]:
        return (self.sources, self.sdev, self.verify, self.targets, self.tdev, self.resolved_rename, self.resolved_fuse)

    def _adopt(self, known: _Known) -> None:
        (self.sources, self.sdev, self.verify, self.targets, self.tdev, self.resolved_rename, self.resolved_fuse) = (
            known.state
        )

    def _receiver_payload(self) -> dict[str, Any]:
        rename = self._resolve_rename()
        fuse = {k: _fuse_entry(k, v) for k, v in (self.fuse or {}).items()} if self.fuse is not None else None
        if self.into is not None:
            for path, leaf in leaves(self.into):
                self.receivers[path] = into_local(path, leaf)
                self.into_paths.append(path)
        else:
            from ..driver._registry import get_driver

            drv = get_driver(self.driver)
            for path, spec in self._target_specs(rename, fuse or {}).items():
                self.receivers[path] = fresh_local(path, spec, drv)
        tdev: dict[str, int] = {}
        for local in self.receivers.values():
            devices = local.spec.mesh.devices or ()
            tdev.update({devices[p]: self.link.rank for p in local.positions})
        targets = {path: local.spec.to_json() for path, local in self.receivers.items()}
        return {"targets": targets, "tdev": tdev, "rename": rename, "fuse": fuse}

    def _resolve_rename(self) -> dict[str, str]:
        rename = self.rename
        if rename is None:
            return {s: s for s in self.sources}
        if isinstance(rename, Mapping):
            return {s: rename.get(s, s) for s in self.sources}
        if not callable(rename):
            raise TransferError(f"rename must be a mapping or a callable. Received: {rename!r}")
        fn: Callable[[str], Any] = rename
        return {s: fn(s) for s in self.sources}

    def _target_specs(self, rename: dict[str, str], fuse: dict[str, Any]) -> dict[str, TensorSpec]:
        """Receiver path -> full spec: a Layout takes the shape and dtype its sender(s) send."""
        if isinstance(self.target, LayoutMap):
            fused = {s for _, senders, _ in fuse.values() for s in senders}
            paths = [r for s, r in rename.items() if s not in fused] + list(fuse)
            forms: dict[str, Any] = {p: None for p in paths}
        else:
            forms = target_forms(self.target)
        out: dict[str, TensorSpec] = {}
        by_name = {r: s for s, r in rename.items()}
        missing = []
        for path, form in forms.items():
            if isinstance(form, TensorSpec):
                out[path] = form
                continue
            shape, dtype = self._source_shape(path, by_name, fuse)
            if shape is None:
                missing.append(path)
                continue
            layout = self.target.layout_for(path, shape) if isinstance(self.target, LayoutMap) else form
            assert isinstance(layout, Layout)
            out[path] = TensorSpec(shape, dtype, layout)
        if missing:
            raise TransferError(
                f"transfer: receiver path(s) {missing[:20]} have no sender path after rename/fuse "
                "(their target gives a layout, and no sender sends a tensor there)",
                paths=tuple(missing),
            )
        return out

    def _source_shape(self, path: str, by_name: dict[str, str], fuse: dict[str, Any]) -> tuple[Any, Any]:
        if path in fuse:
            axis, senders, _ = fuse[path]
            specs = [self.sources[s] for s in senders if s in self.sources]
            if len(specs) != len(senders) or not specs[0].shape:
                return None, None
            shape = list(specs[0].shape)
            shape[axis] = sum(s.shape[axis] if len(s.shape) == len(shape) else 0 for s in specs)
            return tuple(shape), specs[0].dtype
        source = self.sources.get(by_name.get(path, ""))
        return (None, None) if source is None else (source.shape, source.dtype)

    def plan(self) -> tuple[TransferPlan, bool]:
        from ._plan import _CACHE

        before = len(_CACHE), set(map(id, _CACHE.values()))
        try:
            result = plan(
                self.sources,
                self.targets,
                source_ranks=self.sdev,
                target_ranks=self.tdev,
                rename=self.resolved_rename,
                fuse=self.resolved_fuse,
            )
        except TransferError as exc:
            raise TransferError(f"{exc}; nothing was sent", paths=exc.paths, rank=self.link.rank) from exc
        return result, id(result) in before[1]

    # -- data ----------------------------------------------------------------------------------
    def move(self, sched: _schedule.Schedule, clock: dict[str, float]) -> tuple[int, int, int]:
        verify, senders, receivers = self.verify, self.senders, self.receivers
        start = time.perf_counter()
        self.written = bool(sched.local) or bool(sched.recvs)
        _schedule.copy_local(sched.local, senders, receivers)
        clock["unpacking"] += time.perf_counter() - start
        buffer = functools.partial(_schedule.pool_buffer, self.link._pool)
        rank = self.link.rank

        def unpack(k: int, landed: list[tuple[int, Any, Any]]) -> None:
            for p, buf, items in landed:
                if items is not None:
                    _schedule.unpack(items, buf, receivers, verify, p)

        self.wire.rounds(
            sched.rounds,
            lambda k: _schedule.outgoing(sched.sends, k, senders, verify, buffer, rank),
            lambda k: _schedule.incoming(sched.recvs, k, receivers, verify, buffer),
            unpack,
            clock,
        )
        return _schedule.schedule_bytes(sched, verify)

    def partly_written(self) -> str:
        if not self.into_paths:
            return ""
        if not self.written:
            return "; no tensor of into was written"
        return f"; tensors of into may be partly written: {self.into_paths[:20]}"

    def finish(self) -> Any:
        if self.link.rank not in self.link.receivers:
            return None
        values = {path: local.finish() for path, local in self.receivers.items()}
        if self.into is not None:
            from .._paths import map_leaves

            return map_leaves(self.into, lambda path, leaf: values.get(path, leaf), "/")
        if isinstance(self.target, LayoutMap) or (
            isinstance(self.target, Mapping) and all(isinstance(v, (Layout, TensorSpec)) for v in self.target.values())
        ):
            return values
        from .._paths import map_leaves

        return map_leaves(self.target, lambda path, leaf: values.get(path, leaf), "/")
