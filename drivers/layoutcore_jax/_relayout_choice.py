"""Which move runs a JAX relayout: the cheapest at the floor, measured once per pair of shardings.

Four moves can run a relayout between devices of one process. Each is a *candidate* only where
it moves exactly ``relayout_plan``'s ``floor_bytes`` between devices:

* ``device_put``: ``jax.device_put(array, target_sharding)``, where JAX's own move is at the floor
  (counted from the collectives of the compiled ``jax.jit(lambda a: a, out_shardings=target)``,
  :func:`~layoutcore_jax._relayout.native_moved_bytes`);
* ``jit_reshard``: that compiled identity itself (what XLA runs for the move inside ``jax.jit``),
  where it is at the floor, dispatched under the in-flight bound (``_relayout.INFLIGHT``);
* ``collective``: the plan's transfers as ``ppermute`` rounds in one program (``_relayout``); always
  a candidate in one process;
* ``host_copy``: on CPU devices (fully addressable, one process) every device's memory is the host's:
  each target block is assembled in fresh, aligned host memory from zero-copy NumPy views of the
  source shards (what the device keeps, copied locally, and exactly the plan's transfers from the
  other devices), and handed to its device without a second copy (``jax.device_put`` of a 64-byte
  aligned NumPy array on a CPU device aliases it; measured, jax 0.10.2). Each target byte is written
  once; ``device_put`` of a fully addressable array instead gathers the whole array into host
  memory and scatters it again.

Which is fastest depends on the jax version, the host, the move and its size (jax 0.10.2 on 2 cores,
x -> None: ``device_put`` 6x faster than the compiled reshard at 16 MiB, ``host_copy`` 3.6x faster
than both at 64 MiB; jax 0.11.2 on 16 cores: the compiled reshard 19x faster than ``device_put`` at
16 MiB), so no fixed rule or model in the code can know it: the driver **measures**. The first
relayout of a pair of shardings (so of meshes, source and target layout), shape and dtype waits for
its input, then runs every candidate on fresh arrays over the input's buffers (``jax.Array`` caches
its host copy, which would favour the second ``device_put``): :data:`MEASURE_WARMUP_ROUNDS` untimed
rounds (compilation, fresh memory), then timed rounds in rotating order, each run waited for
(``block_until_ready``): at least :data:`MEASURE_ROUNDS`, and more (up to :data:`MEASURE_MAX_ROUNDS`)
while all runs so far took less than :data:`MEASURE_BUDGET_S`. It keeps the candidate with the least time (ties: the order above).
The winner is cached (LRU) per pair of shardings, dtype, rank and *size class* (the
bit length of the array's byte count: sizes within a factor of two share a class), so a model's many
tensors of one layout pair and similar size are measured once, not once per shape; a later array of
that class runs the winner (where it is a candidate for it; else it is measured). The relayout then
runs the chosen candidate, as every later call does. Every candidate returns the same bits, so the measurement never changes a result; it
runs each candidate 5 to 12 times, once per pair, and its moves are not counted by
``CollectiveBytes`` (only the relayout's own). On a busy host a near tie may go either way; the
minimum over several runs keeps a clear winner from losing to one disturbed run. Inside ``jax.jit`` nothing here runs (the driver
applies JAX's sharding constraint), and a relayout onto the sharding it already has is a
``device_put`` (JAX hands the input back) without a measurement.

:data:`MODE_ENV` (``LAYOUTCORE_JAX_RELAYOUT``) forces a candidate by name where it is one (elsewhere
``collective`` runs); unset, empty or ``measure`` chooses by measurement.
"""

from __future__ import annotations

import functools
import math
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from layoutcore import ConfigurationError, Layout
from layoutcore.driver import LRUCache, RelayoutMove, aligned_empty, environ_setting

from . import _relayout

if TYPE_CHECKING:
    import jax

__all__ = [
    "CANDIDATES",
    "MEASURE_BUDGET_S",
    "MEASURE_MAX_ROUNDS",
    "MEASURE_ROUNDS",
    "MEASURE_WARMUP_ROUNDS",
    "MODE_ENV",
    "chosen",
    "relayout_at_floor",
]

#: Environment variable: ``measure`` (default) or a candidate's name to force it where it is one.
MODE_ENV = "LAYOUTCORE_JAX_RELAYOUT"
#: The candidates, in the order that breaks a tie.
CANDIDATES = ("device_put", "jit_reshard", "collective", "host_copy")
#: Untimed rounds first: the first compiles; the second still ran 2-10x slower than later ones on a busy
#: 2-core host (fresh memory for every output: page faults until the allocator reuses freed blocks).
MEASURE_WARMUP_ROUNDS = 2
#: Timed rounds of the one-time measurement at least ...
MEASURE_ROUNDS = 3
#: ... and at most, while the runs so far took less than :data:`MEASURE_BUDGET_S` seconds: cheap moves
#: get more rounds, so that one disturbed run on a busy host does not decide.
MEASURE_MAX_ROUNDS = 10
MEASURE_BUDGET_S = 2.0

# (mode, source sharding, target sharding, shape, dtype) -> the chosen _Candidate, built for that shape
_CHOSEN: LRUCache[Any, _Candidate] = LRUCache(256)
# (mode, source sharding, target sharding, dtype, rank, size class) -> the measured winner's name
_WINNERS: LRUCache[Any, str] = LRUCache(1024)


@dataclass(frozen=True, slots=True)
class _Candidate:
    """One way to run a relayout: ``run(tensor)`` returns the relayout (never ``None``)."""

    name: str
    run: Callable[[Any], Any]


def _mode() -> str:
    """:data:`MODE_ENV` read now (it may change between relayouts), parsed and checked.

    Raises:
        ConfigurationError: it names no candidate.
    """
    return _parsed_mode(_setting())


def _setting() -> str | None:
    """``os.environ.get(MODE_ENV)``, read on every relayout (:func:`layoutcore.driver.environ_setting`)."""
    return environ_setting(MODE_ENV)


# Keyed by the setting's text (an immutable str or None), whose parse never changes; a refused setting raises
# and is not cached, so it is refused on every relayout. Bounded: a process cycling through settings recomputes.
@functools.lru_cache(maxsize=16)
def _parsed_mode(setting: str | None) -> str:
    mode = (setting or "").strip() or "measure"
    if mode != "measure" and mode not in CANDIDATES:
        raise ConfigurationError(f"{MODE_ENV}={mode!r} is not 'measure' or one of {', '.join(CANDIDATES)}")
    return mode


def relayout_at_floor(
    driver: _relayout.JaxDriver, tensor: jax.Array, move: RelayoutMove, sharding: Any, dtype: Any = None
) -> jax.Array | None:
    """``tensor`` laid out by ``move``'s target (``sharding``) by the cheapest move at the floor, or ``None``
    where that is ``device_put`` (the driver runs it). Across processes always ``None`` (``device_put``:
    its collectives span the processes). See the module docstring for the choice. ``dtype``: ``tensor.dtype``
    where the caller has read it (every relayout passes here).

    Raises:
        ConfigurationError: :data:`MODE_ENV` names no candidate.
    """
    if driver._multiprocess:
        return None
    mode = _parsed_mode(environ_setting(MODE_ENV))  # _mode(), one call fewer: every relayout passes here
    # The shardings decide everything (devices, blocks): one choice per pair, shape and dtype, so that
    # a repeated relayout pays a dictionary lookup, not a plan. A peek, not a get: no lock, and the
    # choice ages from when it was made (evicted, it is made again from the size class's winner).
    # move.shape: tensor.shape, already read
    key = (mode, tensor.sharding, sharding, move.shape, tensor.dtype if dtype is None else dtype)
    found = _CHOSEN.peek(key)
    if found is None:
        found = _CHOSEN.put(key, _choose_for(driver, tensor, move, sharding, mode))
    return None if found.name == "device_put" else found.run(tensor)


def chosen(tensor: jax.Array, sharding: Any) -> str | None:
    """The candidate chosen for relayouts of ``tensor``'s sharding, shape and dtype onto ``sharding`` under
    the current :data:`MODE_ENV`, or ``None`` where none was chosen yet (benchmarks and tests)."""
    found = _CHOSEN.peek((_mode(), tensor.sharding, sharding, tensor.shape, tensor.dtype))
    return None if found is None else found.name


def size_class(tensor: jax.Array) -> int:
    """The bit length of ``tensor``'s byte count: arrays within a factor of two of each other share it."""
    return int(math.prod(tensor.shape) * tensor.dtype.itemsize).bit_length()


def _choose_for(
    driver: _relayout.JaxDriver, tensor: jax.Array, move: RelayoutMove, sharding: Any, mode: str
) -> _Candidate:
    """The candidate for this shape: the size class's measured winner where it is a candidate here, else
    :func:`_choose` among all (a measurement, whose winner the class then keeps)."""
    candidates = _candidates(driver, tensor, move, sharding)
    if mode != "measure" or len(candidates) == 1:
        return _choose(candidates, tensor, mode)
    klass = (mode, tensor.sharding, sharding, tensor.dtype, tensor.ndim, size_class(tensor))
    name = _WINNERS.get(klass)
    known = next((c for c in candidates if c.name == name), None)
    if known is not None:
        return known
    found = _choose(candidates, tensor, mode)
    _WINNERS.put(klass, found.name)
    return found


def _candidates(driver: _relayout.JaxDriver, tensor: jax.Array, move: RelayoutMove, sharding: Any) -> list[_Candidate]:
    """The moves of ``tensor`` onto ``sharding`` that carry exactly the floor, in :data:`CANDIDATES` order."""
    import jax

    if tensor.sharding == sharding:  # JAX hands the input back: nothing can be cheaper
        return [_Candidate("device_put", lambda t: jax.device_put(t, sharding))]
    out = []
    native = _relayout.native_moved_bytes(tensor, sharding)
    if native is not None and native <= move.plan.floor_bytes:
        out.append(_Candidate("device_put", lambda t: jax.device_put(t, sharding)))
        out.append(_Candidate("jit_reshard", _jit_reshard(sharding)))
    out.append(_Candidate("collective", _collective(driver, tensor, move, sharding)))
    devices = tensor.sharding.device_set | sharding.device_set
    if tensor.is_fully_addressable and all(d.platform == "cpu" for d in devices):
        out.append(_Candidate("host_copy", _HostCopy.of(driver, move, sharding).run))
    return out


def _choose(candidates: list[_Candidate], tensor: jax.Array, mode: str) -> _Candidate:
    """The forced candidate (else ``collective``; onto the same sharding ``device_put``, the only one), the
    only one, or the fastest measured."""
    if mode != "measure":
        named = {c.name: c for c in candidates}
        return named.get(mode, named.get("collective", candidates[0]))
    if len(candidates) == 1:
        return candidates[0]
    import jax

    tensor.block_until_ready()  # what produced the input is not the first candidate's cost
    shards = [shard.data for shard in tensor.addressable_shards]
    best = dict.fromkeys((c.name for c in candidates), math.inf)
    spent, r, last = 0.0, 0, MEASURE_WARMUP_ROUNDS + MEASURE_MAX_ROUNDS
    with _relayout.uncounted():
        while r < MEASURE_WARMUP_ROUNDS + MEASURE_ROUNDS or (r < last and spent < MEASURE_BUDGET_S):
            for k in range(len(candidates)):
                candidate = candidates[(r + k) % len(candidates)]
                # a new Array over the same buffers per run: jax.Array caches its host copy
                fresh = jax.make_array_from_single_device_arrays(tensor.shape, tensor.sharding, shards)
                seconds = _seconds(candidate, fresh)
                spent += seconds
                if r >= MEASURE_WARMUP_ROUNDS:
                    best[candidate.name] = min(best[candidate.name], seconds)
            r += 1
    return min(candidates, key=lambda c: (best[c.name], CANDIDATES.index(c.name)))


def _seconds(candidate: _Candidate, tensor: jax.Array) -> float:
    """Wall seconds of one run of ``candidate`` on ``tensor``, waited for (a hook for tests)."""
    start = time.perf_counter()
    candidate.run(tensor).block_until_ready()
    return time.perf_counter() - start


def _jit_reshard(sharding: Any) -> Callable[[Any], Any]:
    """JAX's compiled identity onto ``sharding``, dispatched under the in-flight bound (its collectives
    count toward XLA's 32 per device as the plan's do), with a one-byte-per-device token."""
    import jax
    import jax.numpy as jnp
    from jax.sharding import NamedSharding, PartitionSpec

    mesh = sharding.mesh
    tokens = NamedSharding(mesh, PartitionSpec(tuple(mesh.axis_names)))
    compiled = jax.jit(lambda a: (a, jnp.zeros((mesh.size,), jnp.uint8)), out_shardings=(sharding, tokens))
    return lambda tensor: _relayout.INFLIGHT.dispatch(compiled, tensor)[0]


def _collective(
    driver: _relayout.JaxDriver, tensor: jax.Array, move: RelayoutMove, sharding: Any
) -> Callable[[Any], Any]:
    """The plan's transfers as ``ppermute`` rounds (``_relayout``'s program); a scalar is planned as ``(1,)``."""
    scalar = tensor.ndim == 0  # shard_map splits a leading axis
    if scalar:
        source, target = move.source, move.target
        move = RelayoutMove.between(Layout((None,), source.mesh), Layout((None,), target.mesh), (1,), move.dtype)
    program = _relayout._program(driver, move)
    return lambda t: _relayout.run_program(program, t, sharding, scalar)


@dataclass(frozen=True, slots=True)
class _HostCopy:
    """The plan as host copies between CPU devices' buffers (see the module docstring).

    ``sources``: (participant, jax device) of each device holding a source block; ``blocks``: per target
    device, (jax device, block shape, pieces ``(participant, source slices, target slices)``);
    ``moved``: bytes the pieces copy between different devices (the plan's floor).
    """

    sources: tuple[tuple[int, Any], ...]
    blocks: tuple[tuple[Any, tuple[int, ...], tuple[tuple[int, tuple[slice, ...], tuple[slice, ...]], ...]], ...]
    moved: int
    sharding: Any

    @staticmethod
    def of(driver: _relayout.JaxDriver, move: RelayoutMove, sharding: Any) -> _HostCopy:
        schedule = move.schedule()
        devices = [driver._by_name[d] for d in schedule.participants]
        incoming: dict[int, list[tuple[int, tuple[slice, ...], tuple[slice, ...]]]] = {}
        for piece in (*(k for k in schedule.keeps if k is not None), *schedule.pieces):
            incoming.setdefault(piece.receiver, []).append((piece.sender, piece.source_at, piece.target_at))
        blocks = tuple(
            (devices[i], schedule.target_shapes[q], tuple(incoming.get(i, ())))
            for i, q in enumerate(schedule.target_of)
            if q is not None
        )
        sources = tuple((i, devices[i]) for i, p in enumerate(schedule.source_of) if p is not None)
        return _HostCopy(sources, blocks, schedule.floor_bytes, sharding)

    def run(self, tensor: jax.Array) -> jax.Array:
        import jax

        by_device = {shard.device: shard.data for shard in tensor.addressable_shards}
        views = {i: np.asarray(by_device[device]) for i, device in self.sources}  # zero-copy, waits for the data
        blocks = []
        for _, shape, pieces in self.blocks:
            block = aligned_empty(shape, tensor.dtype)
            for sender, source_at, target_at in pieces:
                block[target_at] = views[sender][source_at]
            blocks.append(block)
        # one batched call (a device_put per block costs ~30 us of Python each); it aliases aligned blocks
        arrays = jax.device_put(blocks, [device for device, _, _ in self.blocks])
        _relayout.count_host_copy(self.moved)
        return jax.make_array_from_single_device_arrays(tensor.shape, self.sharding, arrays)
