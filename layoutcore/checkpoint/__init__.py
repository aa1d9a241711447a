"""Checkpoints across frameworks, layouts and process counts (``docs/design.md#checkpoints``).

``save`` writes any tree of distributed tensors (any driver), Variables, arrays and numbers as
zarr v3 arrays (``sharding_indexed``, CRC-32C checksums) that TensorStore and zarr-python open
without layoutcore; ``load`` reads it into any driver under any layout, reading only the byte
ranges each process's devices need; ``read_plan`` says which ranges before reading any data.
Importing this module imports no framework.

The format-neutral read core (:mod:`layoutcore.checkpoint._read_plan`: stored pieces in, byte
ranges out) serves foreign formats too (torch DCP, safetensors, Orbax).
"""

from __future__ import annotations

from .._errors import CheckpointError
from .._tensor_spec import TensorSpec
from . import _api, _foreign
from ._api import CheckpointInfo, ReadPlan, inspect, load, read_plan
from ._crc import SlowChecksumWarning
from ._foreign import export_safetensors
from ._save import save

_api.FOREIGN = _foreign  # the foreign readers build on _api; it reaches them through this plug

__all__ = [
    "CheckpointError",
    "CheckpointInfo",
    "ReadPlan",
    "SlowChecksumWarning",
    "TensorSpec",
    "export_safetensors",
    "inspect",
    "load",
    "read_plan",
    "save",
]
