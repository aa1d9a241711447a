"""Which way each tensor of a load travels: straight into its memory, staged, or as host blocks.

:func:`stream_into` serves ``load(into=...)``; :func:`stream_new` serves loads of new tensors.
Per tensor, by what its driver offers (:mod:`._staging`):

* **direct** -- every local block has a writable C-contiguous host view (NumPy components,
  torch CPU local tensors): the reader fills those views; a replica with memory of its own gets
  a copy of its first holder's block. No host block, no extra copy, no fresh pages.
* **staged** -- the driver writes rows (``native_write_rows``: a GPU, strided host views):
  bands through the staging ring.
* **host blocks** -- otherwise (JAX and TF arrays, ``Variable``s; new tensors in host memory):
  the blocks are read into new host memory and handed over (``pack_owned`` / ``fill``).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from .._dtypes import numpy_dtype
from ..driver._fill import FillTarget, fill, pack_owned
from ..driver._frontend import HoldsValue
from ..driver._hooks import DriverHooks
from ._planner import TensorLoad
from ._reader import Readers
from ._staging import Sink, Stage, host_views, writes_rows

__all__ = ["IntoState", "stream_into", "stream_new"]


@dataclass(slots=True)
class IntoState:
    """What a ``load(into=...)`` has written so far (for its error message).

    Attributes:
        started: tensors whose memory the load began to write (direct reads, staged rows).
        writing: the tensor being handed over from host blocks, if any.
        sinks: the staged tensors' sinks (``written`` once a row went to the driver).
    """

    started: list[str] = field(default_factory=list)
    writing: str | None = None
    sinks: dict[str, Sink] = field(default_factory=dict)

    def partly(self, done: Mapping[str, Any]) -> list[str]:
        """Tensors that may hold a mix of old and new values."""
        out = [p for p in self.started if p not in done]
        out += [p for p, s in self.sinks.items() if s.written and p not in done and p not in out]
        if self.writing is not None and self.writing not in out:
            out.append(self.writing)
        return out


def _first_holders(tl: TensorLoad) -> list[int]:
    """Per distinct block, the first local position index holding it."""
    first: dict[int, int] = {}
    for index, b in enumerate(tl.geometry.box_of):
        first.setdefault(b, index)
    return [first[b] for b in range(len(tl.geometry.boxes))]


def stream_into(
    readers: Readers,
    plans: Sequence[TensorLoad],
    targets: Mapping[str, FillTarget],
    results: dict[str, Any],
    state: IntoState,
) -> None:
    """Fill every tensor of ``plans`` into its :class:`FillTarget`; ``results[path]`` as each completes.

    Raises:
        CheckpointError: as the reader or the staging raise it. Whatever a driver raises while
            writing host blocks propagates. ``state`` says what was partly written.
    """
    views: dict[str, list[np.ndarray]] = {}
    staged: list[TensorLoad] = []
    blocks: list[TensorLoad] = []
    for tl in plans:
        t = targets[tl.path]
        variable = isinstance(t.value, HoldsValue)  # assigned, as Variables are: host blocks
        v = None if variable else host_views(t.driver, t.tensor, t.layout, t.devices)
        if v is not None and len(v) == len(tl.geometry.box_of):
            views[tl.path] = v
            blocks.append(tl)
        elif not variable and writes_rows(t.driver):
            staged.append(tl)
        else:
            blocks.append(tl)

    def outs(tl: TensorLoad) -> list[np.ndarray] | None:
        v = views.get(tl.path)
        if v is None:
            return None
        state.started.append(tl.path)
        return [v[i] for i in _first_holders(tl)]

    for tl, got in readers.read(blocks, outs):
        v = views.get(tl.path)
        if v is None:
            state.writing = tl.path
            results[tl.path] = fill(targets[tl.path], got)
            state.writing = None
            continue
        for dst, src in zip(v, got, strict=True):
            if dst is not src and not np.shares_memory(dst, src):
                np.copyto(dst, src, casting="no")  # a replica with memory of its own
        results[tl.path] = targets[tl.path].value
    if staged:
        first = targets[staged[0].path]
        stage = Stage(readers, lambda n: first.driver.native_staging_buffer(n, first.tensor))
        work = []
        for tl in staged:
            t = targets[tl.path]
            sink = state.sinks[tl.path] = Sink(tl.path, t.driver, t.tensor, t.value)
            work.append((tl, sink))
        for tl, result in stage.run(work):
            results[tl.path] = result


def _makes_empty(driver: Any) -> bool:
    return getattr(type(driver), "native_empty", None) is not DriverHooks.native_empty and writes_rows(driver)


def stream_new(
    readers: Readers,
    plans: Sequence[TensorLoad],
    driver: Any,
    results: dict[str, Any],
    advance: Callable[[int], Any] = lambda n: None,
    pack: Callable[[Any, TensorLoad, list[np.ndarray]], Any] | None = None,
) -> None:
    """New tensors of ``driver`` for every tensor of ``plans``: ``results[path]``.

    Where the driver makes empty tensors in its own memory (``native_empty``: a GPU), they are
    filled through the staging ring; otherwise from host blocks (``pack(driver, tensor, blocks)``,
    default :func:`pack_owned`).
    """
    staged: list[tuple[TensorLoad, Sink]] = []
    plain = list(plans)
    if _makes_empty(driver):
        plain = []
        for tl in plans:
            bound = driver.check_layout(tl.layout, tl.saved.shape)
            devices = driver.bind_mesh(bound.mesh)
            empty = driver.native_empty(bound, devices, tl.saved.shape, numpy_dtype(tl.saved.dtype))
            if empty is None:
                plain.append(tl)
            else:
                staged.append((tl, Sink(tl.path, driver, empty, empty)))
    for tl, got in readers.read(plain):
        results[tl.path] = pack_owned(driver, got, tl.layout, tl.saved.shape) if pack is None else pack(driver, tl, got)
        advance(tl.geometry.read_bytes)
    if staged:
        stage = Stage(readers, lambda n: driver.native_staging_buffer(n, staged[0][1].tensor))
        for tl, result in stage.run(staged):
            results[tl.path] = driver._record(result, tl.layout)
            advance(tl.geometry.read_bytes)
