"""Filling existing distributed tensors in place: the one step ``Link.receive(into=...)`` needs.

:func:`into_local` is the single place that knows, per driver, how to write into an existing
tensor's local components (DESIGN §12's rules, which ``checkpoint.load(into=)`` follows too):

* **torch**: each local tensor keeps its storage. The wire writes straight into a NumPy view of
  it when ``component_to_numpy`` gives one that shares its memory (CPU, contiguous); otherwise
  into a staging array that ``finish`` copies in with ``Tensor.copy_`` (GPU tensors).
* **NumPy driver**: the components' own memory is written (the one exception to §2a's
  read-only views), and the same ``ShardedArray`` is returned.
* **JAX** (immutable) and anything else: staging arrays, and ``finish`` returns new arrays made
  by ``pack`` with the same layout (hence the same sharding); use the returned tree.

When the core gains a shared "fill into existing tensors" step (the checkpoint pipeline's), this
function should become a thin call to it.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .._dtypes import dtype_name, numpy_dtype
from .._errors import TransferError
from .._tensor_spec import TensorSpec
from ._local import Local, _bound, distributed, receiver_local

__all__ = ["fresh_local", "into_local"]


def into_local(path: str, value: Any) -> Local:
    """Writable NumPy arrays over ``value``'s local components, and ``finish`` giving the filled tensor.

    Raises:
        TransferError: ``value`` is not a distributed tensor of an installed driver.
    """
    value, drv = distributed(path, value, "into")
    user = drv.fetch_layout(value)
    layout, positions = _bound(drv, user)
    spec = TensorSpec(drv.shape_of(value), dtype_name(value.dtype), layout)
    boxes = [spec.boxes()[p] for p in positions]
    components = drv.unpack(value)
    dtype = numpy_dtype(spec.dtype)
    if drv.name == "torch":
        arrays, finish = _torch_views(components, drv, dtype, value)
    elif drv.name == "numpy":
        arrays, finish = _numpy_views(components, value)
    else:
        arrays = [np.empty(b[1], dtype=dtype) for b in boxes]

        def finish() -> Any:
            return drv.pack(arrays, user, global_shape=spec.shape)

    return Local(spec, positions, boxes, arrays, drv, finish)


def _torch_views(components: list[Any], drv: Any, dtype: Any, value: Any) -> tuple[list[np.ndarray], Any]:
    arrays: list[np.ndarray] = []
    staged: list[tuple[Any, np.ndarray]] = []
    for c in components:
        view = np.asarray(drv.component_to_numpy(c))
        if view.dtype != dtype and view.dtype.itemsize == dtype.itemsize:
            view = view.view(dtype)
        shares = c.device.type == "cpu" and c.is_contiguous() and view.ctypes.data == c.data_ptr()
        if shares and view.flags.writeable:
            arrays.append(view)
        else:
            stage = np.empty(tuple(c.shape), dtype=dtype)
            arrays.append(stage)
            staged.append((c, stage))

    def finish() -> Any:
        import torch  # a torch tensor was given: torch is imported already

        for c, stage in staged:
            raw = torch.from_numpy(stage.reshape(-1).view(np.uint8))
            c.copy_(raw.view(c.dtype).reshape(c.shape))
        return value

    return arrays, finish


def _numpy_views(components: list[Any], value: Any) -> tuple[list[np.ndarray], Any]:
    arrays = []
    for c in components:
        try:
            c.flags.writeable = True
        except ValueError:  # a view of memory it does not own: cannot be written in place
            raise TransferError(
                "transfer: receive(into=...) on the NumPy driver writes into the components' memory, but a "
                "component is a read-only view of another array's memory; pass a tensor made by distribute_tensor"
            ) from None
        arrays.append(c)

    def finish() -> Any:
        for c in arrays:
            c.flags.writeable = False
        return value

    return arrays, finish


def fresh_local(path: str, spec: Any, drv: Any) -> Local:
    """Buffers for a new tensor of ``spec`` under ``drv`` (``receive(target=...)``).

    On torch, the tensor is made first with ``call_with_layout(torch.empty, ...)`` (each shard
    allocated in place) and filled like ``into``: no copy after the wire. Elsewhere, and where
    torch's factory cannot make the layout, NumPy buffers that ``pack`` turns into the tensor.
    """
    if drv.name == "torch":
        import torch  # the link runs on torch.distributed: torch is imported already

        dtype = getattr(torch, spec.dtype, None)
        if isinstance(dtype, torch.dtype):
            try:
                tensor = drv.call_with_layout(torch.empty, spec.layout, tuple(spec.shape), dtype=dtype)
            except Exception:  # a layout torch's factories cannot make: the general path below
                tensor = None
            if tensor is not None:
                local = into_local(path, tensor)
                local.finish = lambda: tensor
                return local
    return receiver_local(path, spec, drv)
