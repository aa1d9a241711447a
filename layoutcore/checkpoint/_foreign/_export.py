"""``export_safetensors``: any readable checkpoint as Hugging Face sharded safetensors, streamed."""

from __future__ import annotations

import contextlib
import json
import math
import os
import shutil
import tempfile
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np

from ..._dtypes import itemsize
from ._errors import checkpoint_error
from ._model import Box
from ._safetensors import INDEX_NAME, fsync_dir, header_bytes

__all__ = ["export_safetensors", "parse_size"]

#: Bytes read and written per step while streaming one tensor (whole rows at a time).
BLOCK_BYTES = 64 << 20


def parse_size(size: int | str) -> int:
    """Bytes in ``size``: an int, or ``"5GB"`` / ``"500MB"`` / ``"2GiB"`` (transformers' spelling)."""
    if isinstance(size, int):
        if size <= 0:
            raise ValueError(f"max_shard_size must be positive. Received: {size}")
        return size
    text = str(size).strip().upper()
    units = {"GIB": 1 << 30, "MIB": 1 << 20, "KIB": 1 << 10, "GB": 10**9, "MB": 10**6, "KB": 10**3, "B": 1}
    for unit, factor in units.items():
        if text.endswith(unit):
            return parse_size(int(float(text[: -len(unit)]) * factor))
    return parse_size(int(text))


#: Closers of the layoutcore-format readers opened by the export in progress.
_closers: list[Callable[[], None]] = []

#: A source tensor to export: (safetensors name, dtype, shape, read(box) -> ndarray).
Source = tuple[str, str, tuple[int, ...], Callable[[Box], np.ndarray[Any, Any]]]


def _row_boxes(shape: tuple[int, ...], item: int) -> Iterator[Box]:
    """Boxes of whole rows (axis 0) of at most ``BLOCK_BYTES`` (one row at least)."""
    if not shape or shape[0] == 0:
        yield ((0,) * len(shape), shape)
        return
    row = math.prod(shape[1:]) * item
    step = max(1, BLOCK_BYTES // max(1, row))
    for start in range(0, shape[0], step):
        n = min(step, shape[0] - start)
        yield ((start,) + (0,) * (len(shape) - 1), (n, *shape[1:]))


def _plan_shards(sources: list[Source], limit: int) -> list[list[Source]]:
    shards: list[list[Source]] = [[]]
    size = 0
    for src in sources:
        n = math.prod(src[2]) * itemsize(src[1])
        if shards[-1] and size + n > limit:  # a tensor above the limit gets a shard of its own
            shards.append([])
            size = 0
        shards[-1].append(src)
        size += n
    return [s for s in shards if s]


def _write_shard(file: Path, sources: list[Source], metadata: dict[str, str]) -> None:
    header, _ = header_bytes([(n, d, s) for n, d, s, _ in sources], metadata)
    with open(file, "wb") as f:
        f.write(header)
        for name, dtype, shape, read in sources:
            for box in _row_boxes(shape, itemsize(dtype)):
                block = read(box)
                if block.shape != box[1]:
                    raise checkpoint_error(f"reading {name!r} gave shape {block.shape} for {box[1]}", file=str(file))
                f.write(np.ascontiguousarray(block).view(np.uint8).reshape(-1).data)
        f.flush()
        os.fsync(f.fileno())


def export_safetensors(
    path: str | os.PathLike[str],
    out_dir: str | os.PathLike[str],
    *,
    max_shard_size: int | str = "5GB",
    overwrite: bool = False,
) -> Path:
    """Write every tensor of the checkpoint at ``path`` as Hugging Face sharded safetensors.

    The shards are ``model-00001-of-0000N.safetensors`` (or ``model.safetensors`` when one
    suffices) with ``model.safetensors.index.json`` (``metadata.total_size`` and
    ``weight_map``), as ``transformers`` writes them. Tensors are named by their tree path with
    ``/`` replaced by ``.`` (a DCP fully qualified name or safetensors name is kept as is), in
    the checkpoint's order; each tensor is streamed in blocks of whole rows of at most 64 MiB,
    so memory stays within one block, below one output shard. Non-tensor leaves (``step``) go
    into the index's ``metadata`` as JSON under ``"layoutcore_values"``. The directory is
    written beside ``out_dir`` and renamed into place last.

    Args:
        path: a layoutcore, torch DCP, Orbax or safetensors checkpoint.
        out_dir: the directory to create.
        max_shard_size: bytes per shard (int, or ``"5GB"``-style text); a larger tensor gets a
            shard of its own.
        overwrite: replace an existing ``out_dir``.

    Returns:
        The index file's path.

    Raises:
        CheckpointError: ``path`` is unreadable, ``out_dir`` exists (without ``overwrite``), two
            tensors map to one name, or a non-tensor leaf is not JSON data.
    """

    out = Path(out_dir)
    if out.exists() and not overwrite:
        raise checkpoint_error(f"{out} exists; pass overwrite=True to replace it", file=str(out))
    limit = parse_size(max_shard_size)
    sources, values, close = _sources(Path(path))
    try:
        names = [s[0] for s in sources]
        if len(set(names)) != len(names):
            dup = sorted({n for n in names if names.count(n) > 1})
            raise checkpoint_error(f"{path}: tensors {dup[:5]} map to the same safetensors name", file=str(path))
        try:
            values_json = json.dumps(values, sort_keys=True)
        except TypeError:
            raise checkpoint_error(
                f"{path}: non-tensor leaves {sorted(values)} are not JSON data", file=str(path)
            ) from None
        out.parent.mkdir(parents=True, exist_ok=True)
        tmp = out.parent / f".{out.name}.{uuid.uuid4().hex[:12]}"
        tmp.mkdir()  # mode 0777 less the umask, as any directory (tempfile.mkdtemp's would stay 0700)
        try:
            shards = _plan_shards(sources, limit)
            weight_map: dict[str, str] = {}
            for i, shard in enumerate(shards):
                name = (
                    "model.safetensors" if len(shards) == 1 else f"model-{i + 1:05d}-of-{len(shards):05d}.safetensors"
                )
                _write_shard(tmp / name, shard, {"format": "pt"})
                weight_map.update({s[0]: name for s in shard})
            total = sum(math.prod(s[2]) * itemsize(s[1]) for s in sources)
            meta: dict[str, Any] = {"total_size": total}
            if values:
                meta["layoutcore_values"] = values_json
            index = {"metadata": meta, "weight_map": dict(sorted(weight_map.items()))}
            (tmp / INDEX_NAME).write_text(json.dumps(index, indent=2) + "\n")
            if out.exists():
                old = Path(tempfile.mkdtemp(prefix=f".{out.name}.old.", dir=out.parent))
                os.replace(out, old / "x")
                os.replace(tmp, out)
                shutil.rmtree(old, ignore_errors=True)
            else:
                os.replace(tmp, out)
            fsync_dir(str(out.parent))
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
    finally:
        close()
    return out / INDEX_NAME


def _sources(path: Path) -> tuple[list[Source], dict[str, Any], Callable[[], None]]:
    """The tensors of any readable checkpoint as streaming sources, and a function closing them."""
    from . import detect, open_foreign

    fds: dict[str, int] = {}

    def close_fds() -> None:
        for fd in fds.values():
            with contextlib.suppress(OSError):
                os.close(fd)
        while _closers:
            _closers.pop()()

    if detect(path) is None:
        return (*_layoutcore_sources(path, fds), close_fds)
    ckpt = open_foreign(path)
    sources: list[Source] = []
    for tensor in ckpt.tensors.values():
        name = tensor.key if ckpt.format in ("safetensors", "torch-dcp") else tensor.path.replace("/", ".")

        def read(box: Box, tensor: Any = tensor) -> np.ndarray[Any, Any]:
            return ckpt.read(tensor, [box], fds)[0]

        sources.append((name, tensor.dtype, tensor.shape, read))

    def close() -> None:
        close_fds()
        ckpt.close()

    return sources, dict(ckpt.values), close


def _layoutcore_sources(path: Path, fds: dict[str, int]) -> tuple[list[Source], dict[str, Any]]:
    """A layoutcore-format checkpoint's tensors (``/`` in paths becomes ``.``), read box by box."""
    from ._layoutcore import layoutcore_box_readers

    readers, close = layoutcore_box_readers(path)
    _closers.append(close)
    return [(p.replace("/", "."), spec.dtype, spec.shape, read) for p, (spec, read) in readers.items()], {}
