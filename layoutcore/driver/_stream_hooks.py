"""The driver hooks of streaming loads and saves, a base of :class:`DriverHooks`.

A driver overrides them to let a checkpoint load read file bytes straight into its tensors'
memory, or stream them through a small reused staging ring into device memory
(:mod:`layoutcore.checkpoint._staging`); and to let a save stream device memory out through the
same kind of ring (:mod:`layoutcore.checkpoint._save_stream`). Defaults: none of it (the load
reads host blocks and hands them over with ``native_pack_owned`` / ``native_fill``; the save
copies each block to host whole with ``component_to_host``).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .._layout import BoundLayout

__all__ = ["StreamHooks"]


class StreamHooks:
    """Streaming load and save hooks (all optional); see the module docstring."""

    def native_host_views(self, tensor: Any, layout: BoundLayout, devices: tuple[str, ...]) -> list[Any] | None:
        """Per local position, a writable C-contiguous NumPy array over the block's own host memory.

        The loader reads file bytes straight into them. ``None`` (default), or for a position: not
        host memory it may write so (device memory, immutable arrays, strided views). NumPy:
        writable views of C-contiguous components; torch: ``Tensor.numpy()`` of CPU local tensors.

        Raises:
            Nothing.
        """
        return None

    def native_empty(
        self, layout: BoundLayout, devices: tuple[str, ...], global_shape: tuple[int, ...], dtype: Any
    ) -> Any:
        """A new distributed tensor of uninitialised device memory, for a load to fill with `native_write_rows`.

        ``None`` (default): new tensors are packed from host blocks. torch: ``torch.empty`` on the GPU.

        Raises:
            Nothing.
        """
        return None

    def native_staging_buffer(self, nbytes: int, tensor: Any) -> np.ndarray:
        """A reusable uint8 host buffer of ``nbytes`` that staged rows of ``tensor`` pass through.

        Loads and saves alike (a save passes the distributed tensor it saves). Default: ``np.empty``. torch on a GPU: pinned memory (``torch.empty(..., pin_memory=True)``).

        Raises:
            Nothing.
        """
        return np.empty(nbytes, dtype=np.uint8)

    def native_write_rows(self, tensor: Any, index: int, rows: tuple[int, int], staged: np.ndarray) -> Any:
        """Copy ``staged`` (C-contiguous rows ``rows`` of local block ``index``, whole trailing axes) into it.

        Returns ``None`` when done on return, else a callable that waits for the copy (called
        before ``staged``'s memory is reused).

        Raises:
            NotImplementedError: the default (the driver writes no rows: host blocks and ``native_fill``).
        """
        raise NotImplementedError

    def native_write_done(self, tensor: Any) -> Any:
        """Called once every `native_write_rows` into ``tensor`` has completed; return the tensor.

        Raises:
            Nothing.
        """
        return tensor

    def native_staged_save(self, component: Any) -> bool:
        """Whether a save streams local ``component`` through staging buffers with `native_read_rows`.

        ``True`` for device memory a whole host copy (``component_to_host``) would cost fresh
        host pages for; the save then copies it band by band into a small reused ring. Default
        ``False`` (and for host memory, which ``component_to_host`` hands over without a copy).
        torch: a CUDA local tensor.

        Raises:
            Nothing.
        """
        return False

    def native_read_rows(self, component: Any, rows: tuple[int, int], staged: np.ndarray) -> Any:
        """Copy rows ``rows`` (first axis, whole trailing axes) of local ``component`` into ``staged``.

        ``staged`` is a C-contiguous host array of the component's dtype and shape
        ``(rows[1] - rows[0], *trailing)`` (rank 0: ``rows == (0, 1)`` and ``staged`` 0-d, the
        whole value), in a buffer from `native_staging_buffer`; the copy is bit for bit (no cast).
        Returns ``None`` when the bytes are in ``staged`` on return, else a callable that waits for
        the copy (called before ``staged`` is read; the buffer is reused only after that).

        Raises:
            NotImplementedError: the default (the driver reads no rows: ``component_to_host``).
        """
        raise NotImplementedError
