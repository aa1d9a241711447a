"""Streaming loads into torch tensors (the driver's staging hooks, docs/checkpoints.md#speed).

* host views: a CPU local tensor's own memory as a NumPy array (``Tensor.numpy()``, bfloat16 and
  float8 through a same-width integer view), so file bytes are read straight into it;
* on a GPU (``nccl``): new local tensors are ``torch.empty`` on the device, staging buffers are
  pinned host memory (``torch.empty(..., pin_memory=True)``), and each staged band is copied with
  ``copy_(non_blocking=True)``; a CUDA event recorded after the copy is what the loader waits on
  before it reuses the buffer.
* saves (the reverse): a CUDA local tensor is staged (``native_staged_save``), each band copied
  into a pinned buffer with ``copy_(non_blocking=True)`` and a CUDA event the save waits on before
  it checksums and writes the buffer; CPU tensors keep their zero-copy host copy.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from . import _convert


def host_view(local: Any) -> np.ndarray | None:
    """``local``'s own memory as a writable NumPy array, or None (not on the CPU, not contiguous)."""
    if local.device.type != "cpu" or not local.is_contiguous():
        return None
    try:
        view = _convert.to_numpy(local, copy=False)
    except (TypeError, RuntimeError):  # a dtype NumPy cannot view
        return None
    return view if view.flags.writeable and view.flags.c_contiguous else None


def staging_buffer(torch: Any, nbytes: int, on_gpu: bool) -> np.ndarray:
    """A uint8 host buffer: pinned where the destination is a GPU (the copy is then a DMA)."""
    if not on_gpu:
        return np.empty(nbytes, dtype=np.uint8)
    pinned = torch.empty(nbytes, dtype=torch.uint8, pin_memory=True)
    out: np.ndarray = pinned.numpy()  # the array keeps the pinned tensor (and its memory) alive
    return out


def write_rows(torch: Any, local: Any, rows: tuple[int, int], staged: np.ndarray) -> Callable[[], None] | None:
    """Copy ``staged`` into rows ``rows`` of ``local``; on a GPU asynchronously (returns the waiter)."""
    src = _convert.from_numpy(staged)
    dst = local[rows[0] : rows[1]] if local.dim() else local
    gpu = dst.device.type == "cuda"
    with torch.no_grad():
        dst.copy_(src, non_blocking=gpu)
    if not gpu:
        return None
    event = torch.cuda.Event()
    event.record()
    return event.synchronize  # type: ignore[no-any-return]


def read_rows(torch: Any, local: Any, rows: tuple[int, int], staged: np.ndarray) -> Callable[[], None] | None:
    """Copy rows ``rows`` of ``local`` into ``staged`` (its dtype and the rows' shape); from a GPU
    asynchronously (returns the waiter: a CUDA event recorded after the copy)."""
    src = local[rows[0] : rows[1]] if local.dim() else local
    dst = _convert.from_numpy(staged.reshape(-1))  # 1-d: a 0-d array would be copied, not shared
    gpu = src.device.type == "cuda"
    with torch.no_grad():
        dst.copy_(src.detach().reshape(-1), non_blocking=gpu)
    if not gpu:
        return None
    event = torch.cuda.Event()
    event.record()
    return event.synchronize  # type: ignore[no-any-return]


def empty_local(torch: Any, shape: tuple[int, ...], dtype: np.dtype, device: Any) -> Any:
    """An uninitialised local tensor of ``dtype`` on ``device``."""
    like = _convert.from_numpy(np.empty((0,), dtype=dtype))
    return torch.empty(shape, dtype=like.dtype, device=device)
