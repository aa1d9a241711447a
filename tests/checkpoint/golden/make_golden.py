"""Write the golden layoutcore checkpoint (format version 1) beside this script: ``v1/``.

Run from the repository root: ``python tests/checkpoint/golden/make_golden.py``. It is committed, and
``tests/checkpoint/test_golden.py`` loads it, and checks that today's ``save`` of the same tree writes
the same bytes: a change of the format cannot pass unnoticed. Rewrite it only with a new format
version (and keep the old directory: old checkpoints must still load).

The tree: every dtype of docs/design.md#dtypes (``float8_e8m0fnu`` is not on main yet: add it with a new
fixture when it lands), each a small tensor of uneven shape on a 2x2 mesh under one of three
layouts, its bytes ``(37 * i + 11) % 256`` (every bit pattern kind: NaN payloads, -0.0, subnormals);
bool ``i % 3 == 0``. One tensor is saved with a ``read_layouts`` entry (inner chunks finer than its
shards); one leaf is a plain 0-d array.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

import layoutcore as lc
from layoutcore import Layout, Mesh, checkpoint

DTYPES = lc.driver.ALL_DTYPES  # the 17 at format version 1
GRID = Mesh((2, 2), ("x", "y"))
#: (shape, layout axes), cycled over the dtypes: uneven on both axes, two mesh axes on one, a replica axis
CASES = (((5, 3), ("x", "y")), ((7,), (("x", "y"),)), ((3, 5), (None, "x")))


def value(name: str, shape: tuple[int, ...]) -> np.ndarray:
    n = int(np.prod(shape))
    if name == "bool":
        return (np.arange(n) % 3 == 0).reshape(shape)
    dtype = lc.driver.numpy_dtype(name)
    raw = ((np.arange(n * dtype.itemsize) * 37 + 11) % 256).astype(np.uint8)
    return raw.view(dtype).reshape(shape)


def tree() -> tuple[dict[str, object], dict[str, Layout]]:
    params = {}
    for k, name in enumerate(DTYPES):
        shape, axes = CASES[k % len(CASES)]
        params[name] = lc.distribute_tensor(value(name, shape), Layout(axes, GRID), driver="numpy")
    read_layouts = {"params/float32": Layout(("x", None), Mesh((4,), ("x",)))}
    return {"params": params, "step": np.array(7, dtype=np.int32)}, read_layouts


def main() -> None:
    out = Path(__file__).with_name("v1")
    if out.exists():
        sys.exit(f"{out} exists: the golden checkpoint is frozen (write a new version beside it)")
    data, read_layouts = tree()
    checkpoint.save(out, data, read_layouts=read_layouts)
    total = sum(p.stat().st_size for p in out.rglob("*") if p.is_file())
    print(f"wrote {out}: {total} bytes")


if __name__ == "__main__":
    main()
