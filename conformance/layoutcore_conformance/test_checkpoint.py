"""Checkpoint round trips on the driver under test (``docs/design.md#checkpoints``).

The driver's distributed tensors are saved with ``checkpoint.save`` into a temporary directory and
loaded back into the driver with ``checkpoint.load``: under the saved layout, another layout of the
same mesh, a 1-D mesh and replicated. Every device's data, read by the adapter (the framework's own
calls), must equal the bits of its oracle slice, and the layout must be the one asked for. A dtype
the driver does not declare is saved by the NumPy driver and its load must be refused with
``UnsupportedLayoutError`` naming it. Small and fixed (a ``(4, 6)`` value on a 2x2 mesh, five dtypes):
the checkpoint tests of layoutcore itself cover the format's corners.
"""

from __future__ import annotations

from pathlib import Path

import pytest

import layoutcore as lc
from layoutcore.checkpoint import load, save
from layoutcore.driver import Driver

from ._oracle import Case
from ._values import assert_device_bits, declared_dtypes, dtype_values
from .adapter import ConformanceAdapter

SHAPE = (4, 6)
SOURCE = Case((2, 2), ("x", "y"), ("x", None), SHAPE)
TARGETS = (
    SOURCE,
    SOURCE.with_spec((None, "y")),
    Case((4,), ("z",), ("z", None), SHAPE),
    SOURCE.with_spec((None, None)),
)
DTYPES = ("float32", "bfloat16", "int64", "complex64", "float8_e5m2")


@pytest.mark.parametrize("name", DTYPES)
def test_checkpoint_round_trip(driver: Driver, adapter: ConformanceAdapter, tmp_path: Path, name: str) -> None:
    x = dtype_values(SHAPE, name, seed=11)
    path = tmp_path / "ckpt"
    if name not in declared_dtypes(driver):
        save(path, {"w": lc.distribute_tensor(x, SOURCE.layout(), driver="numpy")})
        with pytest.raises(lc.UnsupportedLayoutError, match=name):
            load(path, {"w": SOURCE.layout()}, driver=driver)
        return
    saved = lc.distribute_tensor(x, SOURCE.layout(), driver=driver)
    info = save(path, {"w": saved, "inner": {"v": saved}})
    assert info.tensors["w"].dtype == name and info.tensors["w"].shape == SHAPE
    assert_device_bits(adapter, saved, x, SOURCE, "the saved tensor after save")
    as_saved = load(path, driver=driver)
    assert lc.fetch_layout(as_saved["w"]) == SOURCE.layout()
    assert_device_bits(adapter, as_saved["inner"]["v"], x, SOURCE, "load on the saved layout")
    for target in TARGETS[1:]:
        out = load(path, {"w": target.layout(), "inner/v": target.layout()}, driver=driver)
        assert lc.fetch_layout(out["w"]) == target.layout(), target
        assert_device_bits(adapter, out["w"], x, target, f"load under {target.spec} on {target.mesh_shape}")
