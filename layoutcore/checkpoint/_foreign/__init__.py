"""Other frameworks' checkpoints: torch DCP, Orbax and Hugging Face safetensors, and safetensors export.

``detect(path)`` names the format by the files present; ``open_foreign(path)`` opens it as a
:class:`ForeignCheckpoint` and :class:`ForeignSource` makes it a ``checkpoint.Source`` (no framework import: DCP's pickles go through a restricted
unpickler, Orbax's arrays through TensorStore). ``inspect`` / ``read_plan`` / ``load`` take the
same ``target`` forms as the layoutcore format's, and read, per process, only the byte ranges
(safetensors, DCP) or stored chunks (Orbax) the local devices' blocks meet.
"""

from __future__ import annotations

from pathlib import Path

from ._errors import CheckpointError, checkpoint_error
from ._export import export_safetensors
from ._load import ForeignInfo, ForeignReadPlan, ForeignSource, inspect, load, read_plan, saved_spec
from ._model import ForeignCheckpoint, ForeignTensor, RefusedValue

__all__ = [
    "FORMATS",
    "CheckpointError",
    "ForeignCheckpoint",
    "ForeignInfo",
    "ForeignReadPlan",
    "ForeignSource",
    "ForeignTensor",
    "RefusedValue",
    "detect",
    "export_safetensors",
    "inspect",
    "load",
    "open_foreign",
    "read_plan",
    "saved_spec",
]

#: The foreign formats, as :func:`detect` names them.
FORMATS = ("torch-dcp", "orbax", "safetensors")


def detect(path: str | Path) -> str | None:
    """The foreign format at ``path`` by the files present, or ``None``.

    ``torch-dcp``: a directory with ``.metadata``; ``orbax``: a directory with ``_METADATA``
    (or an Orbax ``CheckpointManager`` step directory with exactly one item);
    ``safetensors``: a ``.safetensors`` file, a ``*.safetensors.index.json`` file, or a
    directory holding either (and neither of the other two marker files).
    """
    from ._dcp import is_dcp
    from ._orbax import is_orbax
    from ._safetensors import is_safetensors

    p = Path(path)
    if is_dcp(p):
        return "torch-dcp"
    if is_orbax(p):
        return "orbax"
    if is_safetensors(p):
        return "safetensors"
    return None


def open_foreign(path: str | Path) -> ForeignCheckpoint:
    """Open the foreign checkpoint at ``path`` (its metadata only; no tensor data is read).

    Raises:
        CheckpointError: no foreign format is recognised at ``path``, or its metadata is
            unreadable, malformed or unsafe (naming the file).
    """
    p = Path(path)
    fmt = detect(p)
    if fmt == "torch-dcp":
        from ._dcp import open_dcp

        return open_dcp(p)
    if fmt == "orbax":
        from ._orbax import open_orbax

        return open_orbax(p)
    if fmt == "safetensors":
        from ._safetensors import open_safetensors

        return open_safetensors(p)
    raise checkpoint_error(
        f"{p} is not a checkpoint layoutcore reads (no layoutcore metadata, DCP .metadata, Orbax _METADATA, "
        "or .safetensors file / index)",
        file=str(p),
    )
