"""Where each receiver tensor comes from: ``rename`` and ``fuse`` resolved and checked (``docs/design.md#moving-weights-between-jobs``).

A :class:`Route` says which sender tensors make one receiver tensor and how: one sender tensor
(renamed or not), or several concatenated along an axis, either whole (``"concat"``) or segment
by segment on every device (``"per_segment"``, vLLM's ``QKVParallelLinear``). :func:`routes`
resolves the user's ``rename``/``fuse`` for every receiver path and collects every problem
(missing source, shape or dtype difference, segments that do not add up) before raising one
:class:`~layoutcore.TransferError` that lists the paths. Pure Python; no framework.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any, NamedTuple

from .._errors import TransferError
from .._tensor_spec import TensorSpec

__all__ = ["Route", "routes"]

CONCAT, PER_SEGMENT = "concat", "per_segment"


class Route(NamedTuple):
    """How receiver tensor ``receiver`` is made: ``senders`` (sender paths as sent) joined along ``axis``.

    ``mode`` is ``"concat"`` (the concatenation of the whole sender tensors, laid out by the
    receiver's layout; a single sender is the one-segment case) or ``"per_segment"`` (each
    segment laid out by the receiver's layout on its own, a device's block the concatenation of
    its segment blocks).
    """

    receiver: str
    senders: tuple[str, ...]
    axis: int
    mode: str


def _fuse_entry(receiver: str, entry: Any) -> tuple[int, tuple[str, ...], str]:
    """``[paths]`` | ``(axis, [paths])`` | ``(axis, [paths], "per_segment")`` -> ``(axis, paths, mode)``."""
    axis, paths, mode = 0, entry, CONCAT
    if isinstance(entry, tuple) and entry and isinstance(entry[0], int) and not isinstance(entry[0], bool):
        if len(entry) not in (2, 3) or (len(entry) == 3 and entry[2] not in (CONCAT, PER_SEGMENT)):
            raise TransferError(
                f"fuse[{receiver!r}] must be [sender paths], (axis, [sender paths]) or "
                f"(axis, [sender paths], 'per_segment'). Received: {entry!r}",
                paths=(receiver,),
            )
        axis, paths = entry[0], entry[1]
        mode = entry[2] if len(entry) == 3 else CONCAT
    if isinstance(paths, str) or not isinstance(paths, Sequence) or not paths:
        raise TransferError(
            f"fuse[{receiver!r}] needs a non-empty list of sender paths. Received: {entry!r}", paths=(receiver,)
        )
    if not all(isinstance(p, str) for p in paths):
        raise TransferError(f"fuse[{receiver!r}]: sender paths must be strings. Received: {paths!r}", paths=(receiver,))
    return axis, tuple(paths), mode


def _renamed(sources: Mapping[str, TensorSpec], rename: Any) -> dict[str, list[str]]:
    """receiver path -> the sender paths ``rename`` sends there (more than one is an error if used)."""
    if rename is None:
        fn: Callable[[str], Any] = str
    elif isinstance(rename, Mapping):
        table = dict(rename)
        fn = lambda path: table.get(path, path)  # noqa: E731 - a one-line lookup
    elif callable(rename):
        fn = rename
    else:
        raise TransferError(f"rename must be a mapping or a callable. Received: {rename!r}")
    out: dict[str, list[str]] = {}
    for path in sources:
        new = fn(path)
        if not isinstance(new, str):
            raise TransferError(f"rename({path!r}) must return a str. Received: {new!r}", paths=(path,))
        out.setdefault(new, []).append(path)
    return out


def _check_fused(route: Route, target: TensorSpec, sources: Mapping[str, TensorSpec], problems: list[str]) -> None:
    rank = len(target.shape)
    if not -rank <= route.axis < rank:
        problems.append(f"{route.receiver!r}: fuse axis {route.axis} is out of range for shape {target.shape}")
        return
    specs = [sources[s] for s in route.senders]
    bad = [
        (s, spec.shape, spec.dtype)
        for s, spec in zip(route.senders, specs, strict=True)
        if spec.dtype != target.dtype
        or len(spec.shape) != rank
        or any(a != b for d, (a, b) in enumerate(zip(spec.shape, target.shape, strict=True)) if d != route.axis)
    ]
    total = sum(spec.shape[route.axis] for spec in specs if len(spec.shape) == rank)
    if bad:
        problems.append(
            f"{route.receiver!r} ({target.dtype}{list(target.shape)}): fused segments {bad} differ in dtype or in a "
            f"dimension other than axis {route.axis} (no casting)"
        )
    elif total != target.shape[route.axis]:
        sizes = [spec.shape[route.axis] for spec in specs]
        problems.append(
            f"{route.receiver!r}: fused segments {list(route.senders)} have sizes {sizes} along axis {route.axis}, "
            f"which add up to {total}, not {target.shape[route.axis]}"
        )


def _route(
    receiver: str,
    target: TensorSpec,
    sources: Mapping[str, TensorSpec],
    by_receiver: dict[str, list[str]],
    fused: tuple[int, tuple[str, ...], str] | None,
) -> Route | str:
    """The route of one receiver path, or the problem that stops it (a sentence naming the paths)."""
    if fused is not None:
        axis, senders, mode = fused
        missing = [s for s in senders if s not in sources]
        if missing:
            return f"{receiver!r}: fused sender path(s) {missing} are not sent"
        problems: list[str] = []
        _check_fused(Route(receiver, senders, axis, mode), target, sources, problems)
        return problems[0] if problems else Route(receiver, senders, axis % max(len(target.shape), 1), mode)
    named = by_receiver.get(receiver, [])
    if len(named) != 1:
        return (
            f"{receiver!r}: no sender path after rename/fuse"
            if not named
            else (f"{receiver!r}: sender paths {named} are all renamed to it")
        )
    spec = sources[named[0]]
    if spec.shape != target.shape or spec.dtype != target.dtype:
        return (
            f"{receiver!r}: the receiver holds {target.dtype}{list(target.shape)}, sender path "
            f"{named[0]!r} sends {spec.dtype}{list(spec.shape)} (no casting)"
        )
    return Route(receiver, (named[0],), 0, CONCAT)


def routes(
    sources: Mapping[str, TensorSpec], targets: Mapping[str, TensorSpec], rename: Any = None, fuse: Any = None
) -> tuple[Route, ...]:
    """One :class:`Route` per receiver path (in ``targets``' order), checked.

    Raises:
        TransferError: listing every receiver path with no source after ``rename``/``fuse``, two
            senders renamed onto one needed path, a shape or dtype difference, or fused segments
            that do not add up; or a malformed ``rename``/``fuse``.
    """
    by_receiver = _renamed(sources, rename)
    fused = {}
    if fuse is not None:
        if not isinstance(fuse, Mapping):
            raise TransferError(f"fuse must be a mapping receiver path -> sender paths. Received: {fuse!r}")
        fused = {receiver: _fuse_entry(receiver, entry) for receiver, entry in fuse.items()}
    out: list[Route] = []
    problems: list[str] = []
    bad_paths: list[str] = []
    for receiver, target in targets.items():
        found = _route(receiver, target, sources, by_receiver, fused.get(receiver))
        if isinstance(found, Route):
            out.append(found)
        else:
            problems.append(found)
            bad_paths.append(receiver)
    if problems:
        shown = "; ".join(problems[:20]) + (f"; and {len(problems) - 20} more" if len(problems) > 20 else "")
        raise TransferError(
            f"transfer plan: {len(problems)} receiver path(s) cannot be filled: {shown}", paths=tuple(bad_paths)
        )
    return tuple(out)
