"""Oracle values, target layouts and the dying-peer report shared by the 2-process checkpoint test and its workers."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any, NoReturn

import numpy as np

from layoutcore import CheckpointError, Layout, Mesh, checkpoint

SHAPES = {"w": (1024, 2048), "u": (1024, 2048), "r": (64, 64)}


def oracle(name: str) -> np.ndarray:
    rng = np.random.default_rng(sum(map(ord, name)))
    return rng.standard_normal(SHAPES[name]).astype(np.float32)


def targets(n: int, *, multi_axis: bool = True) -> tuple[dict[str, Layout], dict[str, Layout]]:
    """Declared and undeclared targets on an ``n``-device mesh of another shape than ``(n,)``.

    Without ``multi_axis`` (TF DTensor shards a dimension over one mesh axis only) the columns
    go over ``b`` alone."""
    mesh = Mesh((2, n // 2), ("a", "b")) if n > 2 else Mesh((1, 2), ("a", "b"))
    cols = Layout((None, ("a", "b")), mesh) if multi_axis else Layout((None, "b"), mesh)
    declared = {"w": cols, "u": Layout(("a", "b"), mesh), "r": Layout(("b", None), mesh)}
    undeclared = {"w": Layout(("b", None), mesh), "u": cols, "r": Layout((None, "a"), mesh)}
    return declared, undeclared


def save_without_peer_and_report(root: Path, tensor: Any) -> NoReturn:
    """Save ``{"w": tensor}`` as ``root/dead`` while the peer is gone (dead or hung), print
    ``RESULT <json>`` with the error ``save`` raised (``None`` if none) and its seconds, and exit 0
    at once: the framework's group cannot shut down cleanly without its peer."""
    start = time.monotonic()
    try:
        checkpoint.save(root / "dead", {"w": tensor})
        error = None
    except CheckpointError as exc:
        error = {"type": type(exc).__name__, "message": str(exc)[:2000]}
    print("RESULT " + json.dumps({"error": error, "seconds": time.monotonic() - start}), flush=True)
    os._exit(0)
