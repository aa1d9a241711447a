"""DCP chunks written with the ``SAFETENSORS`` serialisation: found by name in each rank's blob."""

from __future__ import annotations

import io
import json
import math
import struct
from typing import Any

from ..._dtypes import itemsize
from ._errors import checkpoint_error
from ._model import Box
from ._safetensors import SAFETENSORS_DTYPES

__all__ = ["locate_safetensors_chunk"]


def locate_safetensors_chunk(
    f: io.BufferedReader,
    file: str,
    offset: int,
    fqn: str,
    box: Box,
    dtype: str,
    cache: dict[tuple[str, int], tuple[dict[str, Any], int]],
) -> tuple[int, int]:
    """A chunk written with DCP's ``SAFETENSORS`` serialisation: (absolute data offset, bytes read).

    Each rank's file holds, at the item's offset, one safetensors blob of its chunks keyed by
    fully qualified name, with DCP's ``saved_offsets`` in ``__metadata__``. torch 2.13 records the
    blob's start as every item's offset (its own reader then fails); the chunk is found by name
    in the blob and checked against the metadata's box, dtype and the file's size.
    """
    what = f"chunk {fqn!r} at {box[0]}"
    cached = cache.get((file, offset))
    read = 0
    if cached is None:
        f.seek(offset)
        head = f.read(8)
        size = f.seek(0, 2)
        n = struct.unpack("<Q", head)[0] if len(head) == 8 else -1
        if n < 2 or n > 100_000_000 or offset + 8 + n > size:
            raise checkpoint_error(
                f"{file}: {what} at byte {offset} is neither a torch.save archive nor safetensors", file=file
            )
        f.seek(offset + 8)
        try:
            header = json.loads(f.read(n))
            sharding = json.loads(header.get("__metadata__", {}).get("DCP_SHARDING_INFO", "{}"))
            assert isinstance(header, dict) and isinstance(sharding, dict)
        except (ValueError, AssertionError, AttributeError, TypeError):
            raise checkpoint_error(
                f"{file}: {what}: malformed safetensors header at byte {offset}", file=file
            ) from None
        header["__sharding__"] = sharding
        cached = cache[(file, offset)] = (header, offset + 8 + n)
        read = 8 + n
    header, data_start = cached
    entry: Any = header.get(fqn)
    info: Any = header["__sharding__"].get(fqn)
    saved = info.get("saved_offsets") if isinstance(info, dict) else None
    try:
        code, shape, (begin, end) = entry["dtype"], tuple(entry["shape"]), entry["data_offsets"]
        begin, end = int(begin), int(end)
    except (TypeError, KeyError, ValueError):
        raise checkpoint_error(
            f"{file}: the safetensors blob at byte {offset} has no entry for {what}", file=file
        ) from None
    nbytes = math.prod(box[1]) * itemsize(dtype)
    f.seek(0, 2)
    if (
        SAFETENSORS_DTYPES.get(code) != dtype
        or shape != box[1]
        or (saved is not None and (not isinstance(saved, list) or tuple(saved) != tuple(box[0])))
        or end - begin != nbytes
        or begin < 0
        or data_start + end > f.tell()
    ):
        raise checkpoint_error(
            f"{file}: {what}: the safetensors entry ({code} {list(shape)} at [{begin}, {end}), saved offsets "
            f"{saved}) does not match the metadata's {dtype} {box[1]} or lies past the file's end",
            file=file,
        )
    return data_start + begin, read
