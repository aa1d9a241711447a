"""Checkpoints across frameworks, layouts and process counts (``docs/design.md#checkpoints``).

``save`` writes any tree of distributed tensors (any driver), Variables, arrays and numbers as
zarr v3 arrays (``sharding_indexed``, CRC-32C checksums) that TensorStore and zarr-python open
without layoutcore; ``load`` reads it into any driver under any layout, reading only the byte
ranges each process's devices need; ``read_plan`` says which ranges before reading any data.
Importing this module imports no framework.

``open(path) -> Source`` opens any format ``load`` reads (layoutcore, torch DCP, Orbax,
safetensors); every format goes through one planner (:mod:`._planner`), one threaded reader
(:mod:`._reader`, over the format-neutral read core :mod:`._read_plan`) and one hand-over of the
blocks to the driver (:mod:`layoutcore.driver._fill`): see ``docs/internals.md``.
"""

from __future__ import annotations

from .._errors import CheckpointError
from .._tensor_spec import TensorSpec
from ._api import CheckpointInfo, ReadPlan, Source, inspect, load, open, read_plan
from ._foreign import export_safetensors
from ._save import save

__all__ = [
    "CheckpointError",
    "CheckpointInfo",
    "ReadPlan",
    "Source",
    "TensorSpec",
    "export_safetensors",
    "inspect",
    "load",
    "open",
    "read_plan",
    "save",
]
