"""A safetensors file written by hand, not by layoutcore's writer (safetensors' format: an 8-byte
little-endian header length, the JSON header, then the data), holding an ``F32``, an ``F8_E8M0`` (MX
block scales) and an ``F4`` tensor; and indexes naming some of its tensors. Shared by the NumPy test
(tests/interchange/test_safetensors_unheld.py) and the per-framework worker (unheld_worker.py).
"""

from __future__ import annotations

import json
import struct
from pathlib import Path

#: "w": F32, shape (4, 2), these values row-major.
W = [0.5 * i - 1.0 for i in range(8)]
#: "scales": F8_E8M0, shape (8,): 2**(b - 127) for b < 255, NaN at 0xFF.
SCALES = bytes([0, 1, 126, 127, 128, 200, 254, 255])
#: "packed": F4 (two 4-bit elements per byte), shape (4, 4): 8 bytes layoutcore cannot hold.
PACKED = bytes(range(0x10, 0x18))
HELD_INDEX = "held.safetensors.index.json"  # w and scales
F32_INDEX = "f32.safetensors.index.json"  # w only


def write(directory: Path) -> Path:
    """``directory/model.safetensors`` and its two indexes; returns the file."""
    data = struct.pack("<8f", *W) + SCALES + PACKED
    header = {
        "__metadata__": {"format": "pt"},
        "w": {"dtype": "F32", "shape": [4, 2], "data_offsets": [0, 32]},
        "scales": {"dtype": "F8_E8M0", "shape": [8], "data_offsets": [32, 40]},
        "packed": {"dtype": "F4", "shape": [4, 4], "data_offsets": [40, 48]},
    }
    text = json.dumps(header).encode()
    text += b" " * (-len(text) % 8)
    file = directory / "model.safetensors"
    file.write_bytes(struct.pack("<Q", len(text)) + text + data)
    for name, keys in ((HELD_INDEX, ["w", "scales"]), (F32_INDEX, ["w"])):
        index = {"metadata": {"total_size": 48}, "weight_map": dict.fromkeys(keys, file.name)}
        (directory / name).write_text(json.dumps(index))
    return file
