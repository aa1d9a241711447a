"""The driver hooks a checkpoint save needs from the framework, a base of :class:`DriverHooks`:
the processes that run the program together, and bit-exact host copies of components.

The core names no framework: the save asks these hooks of the tree's driver instead.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ._processes import SINGLE_PROCESS, ProcessGroup

__all__ = ["ProcessHooks"]


class ProcessHooks:
    """Processes and host copies (both optional); see the module docstring."""

    def process_group(self) -> ProcessGroup:
        """The processes that run this program together: rank, size and a barrier
        (default: one process, :data:`~layoutcore.driver.SINGLE_PROCESS`).

        A save asks the driver of the tree's first distributed tensor: every process writes the
        blocks it owns, all meet at the barrier, one commits. A single-process simulation of
        several ranks is one process.

        JAX: ``jax.process_index``/``process_count``, ``multihost_utils.sync_global_devices``;
        torch: a real ``torch.distributed`` group's ``get_rank``/``get_world_size``/``barrier``;
        TF: ``dtensor.client_id``/``num_clients``, a DTensor all-gather bounded in time.

        Raises:
            Nothing (a framework that is not running in several processes is one process).
        """
        return SINGLE_PROCESS

    def component_to_host(self, component: Any) -> np.ndarray:
        """A component, or a plain (undistributed) tensor of this framework, in host memory, bit for bit.

        Returns:
            An array of the value's own shape and dtype (bfloat16 and float8 as ``ml_dtypes``
            arrays, moved through a same-width unsigned integer view, never through arithmetic),
            fetched from device memory where the value lives there. It may share memory with the
            value (the caller only reads it); it is not copied again when it is already on the host.
            Default: :meth:`component_to_numpy`.

        torch: ``detach().cpu()`` and ``numpy()`` of a same-width ``uint8``/``int16`` view;
        TF: ``numpy()``; JAX, NumPy: ``np.asarray``.
        A save skips it for a component the driver stages (``native_staged_save``: torch CUDA
        tensors), which it copies by rows into a reused staging ring (``native_read_rows``).

        Raises:
            Nothing for a component of this driver's tensors or a plain tensor of its framework.
        """
        return self.component_to_numpy(component)

    def component_to_numpy(self, component: Any) -> np.ndarray:
        """A component as a NumPy array: :meth:`DriverHooks.component_to_numpy` (which overrides this)."""
        raise NotImplementedError
