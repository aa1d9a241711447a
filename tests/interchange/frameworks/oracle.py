"""The global values the cross-framework interchange tests save and check (NumPy only)."""

from __future__ import annotations

import ml_dtypes
import numpy as np


def _rng(seed: int) -> np.random.Generator:
    return np.random.default_rng(seed)


def dcp_arrays() -> dict[str, np.ndarray]:
    """What the torch workers save with ``torch.distributed.checkpoint.save``, by tree path."""
    r = _rng(1)
    return {
        "model/w_rows": r.standard_normal((8, 8)).astype(np.float32),
        "model/w_cols": r.standard_normal((4, 8)).astype(np.float32),
        "model/uneven": r.standard_normal((5, 4)).astype(np.float32),
        "model/emb": r.standard_normal((8, 4)).astype(ml_dtypes.bfloat16),
        "model/ids": np.arange(8 * 3, dtype=np.int64).reshape(8, 3),
        "rep": r.standard_normal((6,)).astype(np.float64),
    }


def orbax_arrays() -> dict[str, np.ndarray]:
    """What the JAX worker saves with Orbax's ``StandardCheckpointer``, by tree path."""
    r = _rng(2)
    return {
        "params/dense/kernel": r.standard_normal((8, 12)).astype(np.float32),
        "params/dense/bias": r.standard_normal((16,)).astype(ml_dtypes.bfloat16),
        "params/emb": r.standard_normal((8, 4)).astype(np.float32),
        "opt/count": np.arange(8, dtype=np.int32),
        "rep": r.standard_normal((3, 2)).astype(np.float32),
    }


def same_bits(a: np.ndarray, b: np.ndarray) -> bool:
    return a.dtype == b.dtype and a.shape == b.shape and a.tobytes() == b.tobytes()
