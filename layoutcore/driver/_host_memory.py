"""Host memory for blocks that a framework adopts as its own: aligned, and on huge pages when large.

One allocator serves every place that makes host blocks for a driver to take over without a copy:
a checkpoint load's new blocks (``layoutcore.checkpoint``), a transfer's receive blocks
(``layoutcore.transfer``) and the JAX driver's host copies between CPU devices.

* **Alignment.** Blocks start on a :data:`ALIGN`-byte boundary: JAX's CPU client takes such a NumPy
  block as its buffer (``jax.device_put`` of a 64-byte aligned array is zero-copy; measured, jax
  0.10.2), and TensorFlow (``EIGEN_MAX_ALIGN_BYTES``) adopts it without copying, where it copies any
  other (measured, TF 2.21).
* **Huge pages.** From :data:`HUGE_PAGE` bytes on, a block starts on a huge page boundary and its
  whole huge pages are offered to the kernel's transparent huge pages (``MADV_HUGEPAGE``): fresh
  memory then costs one page fault per 2 MiB instead of one per 4 KiB wherever its malloc'd range
  begins (``np.empty`` of 8 MiB, as ``np.fromfile`` allocates it, took 512 4-KiB faults a block at
  its unaligned edges: 65 000 faults and 0.24 CPU s per GiB read into new arrays against 370 faults
  and 0.16 s aligned, 1 thread; how many an unaligned array takes depends on the huge pages the
  kernel has free: 1 100 to 65 900 per GiB from run to run). The bytes past the last whole huge
  page keep 4 KiB pages (``MADV_NOHUGEPAGE`` beyond the array), so no huge page reaches past the
  array's end: the resident memory stays the array's own. The alignment slack is address space,
  never touched.
"""

from __future__ import annotations

import ctypes
import math
import mmap
from typing import Any

import numpy as np

__all__ = ["ALIGN", "HUGE_PAGE", "aligned_empty"]

#: Host blocks start at a multiple of this many bytes (see the module docstring).
ALIGN = 64
#: Host blocks of at least this many bytes start on a transparent huge page boundary (x86-64's 2 MiB).
HUGE_PAGE = 2 << 20


def aligned_empty(shape: tuple[int, ...], dtype: Any = np.uint8, *, phase: int = 0) -> np.ndarray[Any, Any]:
    """An uninitialised C-contiguous array of ``shape`` and ``dtype`` whose data starts :data:`ALIGN`-byte
    aligned, and huge-page aligned on transparent huge pages from :data:`HUGE_PAGE` bytes on.

    ``phase`` (``0 <= phase < ALIGN``, a multiple of the dtype's alignment) starts the data that
    many bytes past the boundary instead: a block that no framework adopts (NumPy's own, whose
    arrays need no alignment) read from a file offset at that phase then takes the kernel's fast
    copy (``layoutcore.checkpoint._slabs.COPY_ALIGN``).

    A block of no bytes is a plain ``np.empty`` (there is no data to align: NumPy's pointer of an
    empty view is arbitrary).

    Raises:
        ValueError: ``phase`` out of range or not a multiple of the dtype's alignment.
    """
    dtype = np.dtype(dtype)
    if not 0 <= phase < ALIGN or phase % dtype.alignment:
        raise ValueError(f"phase {phase} is not in [0, {ALIGN}) or not a multiple of {dtype}'s alignment")
    nbytes = math.prod(shape) * dtype.itemsize
    if not nbytes:
        return np.empty(shape, dtype)
    align = HUGE_PAGE if nbytes >= HUGE_PAGE else ALIGN
    raw = np.empty(nbytes + align + phase, dtype=np.uint8)
    skip = -raw.ctypes.data % align
    out = raw[skip + phase : skip + phase + nbytes]
    if align == HUGE_PAGE:
        _huge_pages(out.ctypes.data - phase, nbytes + phase, raw.ctypes.data + raw.nbytes)
    block: np.ndarray[Any, Any] = out.view(dtype).reshape(shape)
    return block


def _huge_pages(start: int, nbytes: int, limit: int) -> None:
    """Offer the whole huge pages of ``[start, start + nbytes)`` (``start`` huge-page aligned) to THP and
    keep ``[end of the array, limit)`` on small pages (a no-op where ``madvise`` is not available)."""
    if _madvise is None:  # pragma: no cover - not Linux
        return
    page = mmap.PAGESIZE
    whole = nbytes - nbytes % HUGE_PAGE
    _madvise(start, whole, _MADV_HUGEPAGE)
    tail = (start + nbytes + page - 1) // page * page  # the first page boundary at or past the end
    if nbytes % HUGE_PAGE and tail < limit - limit % page:
        _madvise(tail, limit - limit % page - tail, _MADV_NOHUGEPAGE)


_MADV_HUGEPAGE = getattr(mmap, "MADV_HUGEPAGE", 14)
_MADV_NOHUGEPAGE = getattr(mmap, "MADV_NOHUGEPAGE", 15)
_madvise: Any
try:
    _madvise = ctypes.CDLL(None, use_errno=True).madvise
    _madvise.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
    _madvise.restype = ctypes.c_int
except (OSError, AttributeError):  # pragma: no cover - a libc without madvise
    _madvise = None
if not hasattr(mmap, "MADV_HUGEPAGE"):  # pragma: no cover - not Linux: no transparent huge pages to ask for
    _madvise = None
