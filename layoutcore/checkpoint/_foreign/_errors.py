"""``CheckpointError`` for foreign checkpoints, always naming the offending file."""

from __future__ import annotations

from ..._errors import CheckpointError

__all__ = ["CheckpointError", "checkpoint_error"]


def checkpoint_error(message: str, *, file: str, path: str | None = None, tensor: str | None = None) -> CheckpointError:
    """A ``CheckpointError`` whose message names ``file`` (also on ``.file``; ``.path`` defaults to it)."""
    text = message if not file or file in message else f"{message} (file {file})"
    return CheckpointError(text, path=path if path is not None else file, file=file, tensor=tensor)
