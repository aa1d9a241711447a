"""Box-by-box reads of a layoutcore-format checkpoint, for export and the torch DCP reader.

This is the one place that reaches into the layoutcore format's internals (``_api`` /
``_read_plan``): a stable ``read a box of tensor P`` entry point of the format would replace it.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable
from typing import Any

import numpy as np

from ..._dtypes import numpy_dtype
from ..._tensor_spec import TensorSpec
from ._model import Box

__all__ = ["BoxReader", "layoutcore_box_readers"]

#: Reads one box ``(offsets, sizes)`` of a tensor into a new C-order array.
BoxReader = Callable[[Box], np.ndarray[Any, Any]]


def layoutcore_box_readers(
    path: str | os.PathLike[str],
) -> tuple[dict[str, tuple[TensorSpec, BoxReader]], Callable[[], None]]:
    """Per tensor path of the layoutcore checkpoint at ``path``: its saved spec and a box reader.

    Each read goes through the format's read core (exact byte runs, checksums of whole chunks
    verified). Returns the readers and a function closing the files they opened.

    Raises:
        CheckpointError: no layoutcore checkpoint at ``path``, or an unreadable one.
    """
    from .._meta import _info_from_meta, _read_meta, _stored_geometry
    from .._read_plan import plan_tensor, read_boxes

    root = os.path.abspath(os.fspath(path))
    meta, _ = _read_meta(root)
    info = _info_from_meta(root, meta)
    fds: dict[str, int] = {}
    out: dict[str, tuple[TensorSpec, BoxReader]] = {}
    for p, spec in info.tensors.items():
        entry = meta["tensors"][p]
        stored = _stored_geometry(spec.shape, spec.dtype, tuple(entry["shard"]), tuple(entry["chunk"]))

        def read(
            box: Box, stored: Any = stored, spec: TensorSpec = spec, p: str = p, node: str = entry["node"]
        ) -> np.ndarray[Any, Any]:
            buf = np.empty(box[1], dtype=numpy_dtype(spec.dtype))
            reads = plan_tensor(stored, [box])
            read_boxes(root, reads, [buf], checkpoint=root, fds=fds, tensor_path=p, node=node)
            return buf

        out[p] = (spec, read)

    def close() -> None:
        for fd in fds.values():
            with contextlib.suppress(OSError):
                os.close(fd)
        fds.clear()

    return out, close
