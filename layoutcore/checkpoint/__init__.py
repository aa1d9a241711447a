"""Checkpoints across frameworks, layouts and process counts (``docs/design.md#checkpoints``).

``save`` writes any tree of distributed tensors (any driver), Variables, arrays and numbers as
zarr v3 arrays (``sharding_indexed``, CRC-32C checksums) that TensorStore and zarr-python open
without layoutcore; ``load`` reads it into any driver under any layout, reading only the byte
ranges each process's devices need; ``read_plan`` says which ranges before reading any data.
Importing this module imports no framework.

``open(path) -> Source`` opens any format ``load`` reads (layoutcore, torch DCP, Orbax,
safetensors); every format goes through one planner (:mod:`._planner`), one threaded reader
(:mod:`._reader`, over the format-neutral read core :mod:`._read_plan`) and one hand-over of the
blocks to the driver (:mod:`layoutcore.driver._fill`): see ``docs/internals.md``. Box records
(torch DCP's chunks) and Orbax ``_sharding`` entries convert to and from layouts without any
framework: :func:`layout_from_boxes`, :func:`spec_from_boxes`, :func:`dcp_chunks`,
:func:`layout_from_orbax_sharding`, :func:`orbax_sharding_entry`.
"""

from __future__ import annotations

from .._crc import SlowChecksumWarning
from .._errors import CheckpointError
from .._tensor_spec import TensorSpec
from ._api import CheckpointInfo, ReadPlan, Source, inspect, load, open, read_plan
from ._foreign import export_safetensors
from ._foreign._boxes import dcp_chunks, layout_from_boxes, spec_from_boxes
from ._foreign._orbax import layout_from_orbax_sharding, orbax_sharding_entry
from ._save import save

__all__ = [
    "CheckpointError",
    "CheckpointInfo",
    "ReadPlan",
    "SlowChecksumWarning",
    "Source",
    "TensorSpec",
    "dcp_chunks",
    "export_safetensors",
    "inspect",
    "layout_from_boxes",
    "layout_from_orbax_sharding",
    "load",
    "open",
    "orbax_sharding_entry",
    "read_plan",
    "save",
    "spec_from_boxes",
]
