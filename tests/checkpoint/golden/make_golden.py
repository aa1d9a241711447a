"""Write the golden layoutcore checkpoint (format version 1) beside this script: ``v1/``.

Run from the repository root: ``python tests/checkpoint/golden/make_golden.py``. It is committed, and
``tests/checkpoint/test_golden.py`` loads it, and checks that today's ``save`` of the same tree writes
the same bytes: a change of the format cannot pass unnoticed. Rewrite it only with a new format
version (and keep the old directory: old checkpoints must still load).

``python tests/checkpoint/golden/make_golden.py float8_e8m0fnu`` writes ``v1_float8_e8m0fnu/``, the
fixture of the 18th dtype (added after ``v1/`` was frozen): still format version 1, two tensors of it
(uneven on two mesh axes; two mesh axes on one tensor axis) and the ``step`` leaf.

The tree: every dtype of docs/design.md#dtypes but ``float8_e8m0fnu`` (its own fixture, above), each a small tensor of uneven shape on a 2x2 mesh under one of three
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

DTYPES = tuple(d for d in lc.driver.ALL_DTYPES if d != "float8_e8m0fnu")  # the 17 of v1/
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


def e8m0_tree() -> dict[str, object]:
    """The ``v1_float8_e8m0fnu`` fixture's tree: the first two of :data:`CASES` in ``float8_e8m0fnu``."""
    params = {
        f"e8m0_{k}": lc.distribute_tensor(value("float8_e8m0fnu", shape), Layout(axes, GRID), driver="numpy")
        for k, (shape, axes) in enumerate(CASES[:2])
    }
    return {"params": params, "step": np.array(7, dtype=np.int32)}


def main() -> None:
    e8m0 = sys.argv[1:] == ["float8_e8m0fnu"]
    out = Path(__file__).with_name("v1_float8_e8m0fnu" if e8m0 else "v1")
    if out.exists():
        sys.exit(f"{out} exists: the golden checkpoint is frozen (write a new version beside it)")
    data, read_layouts = (e8m0_tree(), None) if e8m0 else tree()
    checkpoint.save(out, data, read_layouts=read_layouts)
    total = sum(p.stat().st_size for p in out.rglob("*") if p.is_file())
    print(f"wrote {out}: {total} bytes")


if __name__ == "__main__":
    main()
