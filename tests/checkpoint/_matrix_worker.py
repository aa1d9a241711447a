"""One side of the cross-driver checkpoint matrix, run in its own process per framework.

    python _matrix_worker.py save DRIVER PATH
    python _matrix_worker.py load DRIVER PATH [PATH ...]

``save`` writes the standard tree on DRIVER; ``load`` loads each PATH on DRIVER under the
target layouts, checks every leaf against the NumPy oracle bit for bit (globally and per device,
through the framework's own per-device data) and its layout, and prints one JSON line.
"""

from __future__ import annotations

import json
import sys
from typing import Any

import numpy as np

import layoutcore as lc
from layoutcore import Layout, Mesh, UnsupportedLayoutError, checkpoint
from layoutcore._dtypes import as_bits, numpy_dtype

MESH8 = Mesh((8,), ("x",))
MESH24 = Mesh((2, 4), ("a", "b"))
MESH22 = Mesh((2, 2), ("p", "q"))

# name: (shape, dtype, saved layout, target layout, fallback target where the driver refuses it)
LEAVES: dict[str, tuple[tuple[int, ...], str, Layout, Layout, Layout | None]] = {
    "rows_to_columns": ((32, 24), "float32", Layout(("x", None), MESH8), Layout((None, "x"), MESH8), None),
    "one_axis_to_two": (
        (32, 24),
        "float32",
        Layout(("x", None), MESH8),
        Layout((("a", "b"), None), MESH24),
        Layout(("a", "b"), MESH24),
    ),
    "eight_to_2x2": ((16, 8), "int32", Layout((None, "x"), MESH8), Layout(("p", "q"), MESH22), None),
    "even_to_uneven": ((32, 6), "float32", Layout(("x", None), MESH8), Layout(("a", "b"), MESH24), None),
    "bfloat16": ((16, 4), "bfloat16", Layout(("x", None), MESH8), Layout((None, "q"), MESH22), None),
    "replicated": ((6, 5), "float32", Layout((None, None), MESH8), Layout(("p", None), MESH22), None),
}


def oracle(name: str) -> np.ndarray:
    shape, dtype, *_ = LEAVES[name]
    rng = np.random.default_rng(sum(map(ord, name)))
    dt = numpy_dtype(dtype)
    if dtype == "bfloat16":  # finite values: every driver's bf16 path, no NaN payload question
        return rng.standard_normal(shape).astype(dt)
    return rng.integers(-1000, 1000, size=shape).astype(dt)


def save(driver: str, path: str) -> None:
    tree: dict[str, Any] = {"scalar": 2.5}
    for name, (_, _, src, _, _) in LEAVES.items():
        tree[name] = lc.distribute_tensor(oracle(name), src, driver=driver)
    checkpoint.save(path, tree)
    print(json.dumps({"saved": path, "driver": driver}))


def _bits(a: Any) -> bytes:
    return np.ascontiguousarray(as_bits(np.asarray(a))).tobytes()


def load(driver: str, paths: list[str]) -> None:
    drv = lc.get_driver(driver)
    results = []
    for path in paths:
        target: dict[str, Any] = {"scalar": Layout((), MESH22)}
        refused: dict[str, str] = {}
        for name, (_, _, _, dst, fallback) in LEAVES.items():
            try:  # what the driver can express (uneven, multi-axis), asked of the driver itself
                lc.distribute_tensor(np.zeros(LEAVES[name][0], numpy_dtype(LEAVES[name][1])), dst, driver=driver)
                target[name] = dst
            except UnsupportedLayoutError as exc:
                refused[name] = str(exc.feature)
                target[name] = fallback
        for name in [n for n in refused if target[n] is None]:
            # the load itself must refuse it with the same typed error, then we load the rest
            try:
                checkpoint.load(
                    path, {**{k: v for k, v in target.items() if v is not None}, name: LEAVES[name][3]}, driver=driver
                )
            except UnsupportedLayoutError:
                pass
            else:
                raise AssertionError(f"{driver} loaded {name} under a layout it refuses")
            target[name] = LEAVES[name][2].with_mesh(MESH8)  # the saved layout instead
        out = checkpoint.load(path, target, driver=driver)
        checked = []
        for name, layout in target.items():
            value = out[name]
            want = np.array(2.5) if name == "scalar" else oracle(name)
            got = lc.to_numpy(value)
            assert got.dtype == want.dtype, (name, got.dtype, want.dtype)
            assert _bits(got) == _bits(want), name
            assert lc.fetch_layout(value) == layout, (name, lc.fetch_layout(value), layout)
            shape = want.shape
            for comp, sl in zip(lc.unpack(value), layout.device_slices(shape), strict=True):
                assert _bits(drv.component_to_numpy(comp).astype(want.dtype)) == _bits(want[sl]), name
            checked.append(name)
        results.append({"path": path, "checked": checked, "refused": refused})
    print(json.dumps({"driver": driver, "results": results}))


if __name__ == "__main__":
    mode, drv_name, *rest = sys.argv[1:]
    if drv_name == "jax":  # the plain scalar is a Python float (float64): JAX holds it only with x64 on
        import jax

        jax.config.update("jax_enable_x64", True)
    if mode == "save":
        save(drv_name, rest[0])
    else:
        load(drv_name, rest)
