"""Dtype checks shared by the drivers' ``test_<framework>_dtypes.py`` (every data function, bit for bit).

The oracle is NumPy: ``layout.device_slices`` of the global array, compared by bits
(``layoutcore.driver.as_bits``: NaN payloads and -0.0 count). Each driver's test passes
``read``, which reads one component with the framework's own calls, never with the driver's.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import layoutcore as lc
from layoutcore import Layout, Mesh
from layoutcore._dtypes import random_values
from layoutcore.driver import ALL_DTYPES, Capability, Limitation, as_bits

MESH = Mesh((4, 2), ("x", "y"))
FLAT = Mesh((8,), ("d",))
SHAPE = (8, 4)
#: Layouts every driver expresses on SHAPE: sharded both ways, one axis, and replicated.
LAYOUTS = (Layout(("x", "y"), MESH), Layout(("y", None), MESH), Layout((None, "x"), MESH), Layout.replicated(MESH, 2))


def seed_of(name: str) -> int:
    return ALL_DTYPES.index(name)


def assert_bits(got: np.ndarray, want: np.ndarray, what: str) -> None:
    assert got.dtype == want.dtype, f"{what}: dtype {got.dtype}, expected {want.dtype}"
    assert got.shape == want.shape, f"{what}: shape {got.shape}, expected {want.shape}"
    assert np.array_equal(as_bits(got), as_bits(want)), f"{what}: the bits differ"


def assert_placed(
    driver: str, tensor: Any, layout: Layout, want: np.ndarray, read: Callable[[Any], np.ndarray]
) -> None:
    """``tensor`` has ``layout``, each component (read with the framework's calls) holds its block, and
    ``to_numpy`` gives ``want`` back, all bit for bit."""
    assert lc.fetch_layout(tensor, driver=driver) == layout
    components = lc.unpack(tensor, driver=driver)
    slices = layout.device_slices(want.shape)
    assert len(components) == len(slices)
    for index, (component, where) in enumerate(zip(components, slices, strict=True)):
        assert_bits(read(component), want[where], f"component {index} under {layout}")
    assert_bits(lc.to_numpy(tensor, driver=driver), want, f"to_numpy under {layout}")


def check_every_data_function(driver: str, name: str, read: Callable[[Any], np.ndarray]) -> None:
    """distribute, unpack/pack (the replica check included), relayout on and across meshes,
    copy_to_mesh, relayout of a plain value, Variable + assign: every result bit for bit."""
    x = random_values(name, SHAPE, seed=seed_of(name))
    first, *others = LAYOUTS
    t = lc.distribute_tensor(x, first, driver=driver)
    assert_placed(driver, t, first, x, read)
    # pack of the driver's own components, and of NumPy blocks (replicas hold NaNs: equal by bits)
    assert_placed(driver, lc.pack(lc.unpack(t, driver=driver), first, driver=driver), first, x, read)
    for layout in others:
        blocks = [x[s] for s in layout.device_slices(SHAPE)]
        assert_placed(driver, lc.pack(blocks, layout, driver=driver), layout, x, read)
        assert_placed(driver, lc.relayout(t, layout, driver=driver), layout, x, read)
    if Capability.RELAYOUT_ACROSS_MESHES in lc.get_driver(driver).capabilities:
        across = Layout(("d", None), FLAT)
        assert_placed(driver, lc.relayout(t, across, driver=driver), across, x, read)
    replicated = LAYOUTS[-1]
    assert_placed(driver, lc.copy_to_mesh(x, replicated, driver=driver), replicated, x, read)
    assert_placed(driver, lc.relayout(x, first, driver=driver), first, x, read)
    variable = lc.Variable(x, first, driver=driver)
    assert_bits(variable.numpy(), x, "Variable")
    y = random_values(name, SHAPE, seed=seed_of(name) + 100)
    variable.assign(y)
    assert_placed(driver, variable.value, first, y, read)
    variable.assign(lc.distribute_tensor(x, first, driver=driver))
    assert_bits(variable.numpy(), x, "Variable.assign of a distributed value")


def check_replicas_compared_by_bits(driver: str, name: str) -> None:
    """pack refuses replicas whose bits differ (-0.0 against 0.0 where the dtype has a sign)."""
    layout = Layout(("x", None), MESH)  # y replicates every block twice
    x = random_values(name, SHAPE, seed=seed_of(name))
    blocks = [x[s].copy() for s in layout.device_slices(SHAPE)]
    flipped = as_bits(blocks[1]).copy()
    flipped.reshape(-1)[0] ^= 1  # one bit of one replica
    blocks[1] = flipped.view(x.dtype).reshape(blocks[1].shape)
    with pytest.raises(lc.LayoutError, match="Replicas"):
        lc.pack(blocks, layout, driver=driver)


def check_refused(driver: str, name: str) -> lc.UnsupportedLayoutError:
    """Every data function that takes a value refuses dtype ``name`` typed, naming it and the driver."""
    x = random_values(name, SHAPE, seed=seed_of(name))
    first = LAYOUTS[0]
    calls: list[Callable[[], Any]] = [
        lambda: lc.distribute_tensor(x, first, driver=driver),
        lambda: lc.copy_to_mesh(x, LAYOUTS[-1], driver=driver),
        lambda: lc.relayout(x, first, driver=driver),
        lambda: lc.pack([x[s] for s in first.device_slices(SHAPE)], first, driver=driver),
        lambda: lc.Variable(x, first, driver=driver),
    ]
    error = None
    for call in calls:
        with pytest.raises(lc.UnsupportedLayoutError) as info:
            call()
        error = info.value
        assert error.feature == Limitation.DTYPE and error.driver == driver
        assert name in str(error) and driver in str(error)
    assert error is not None
    return error


def check_mixed_pack_refused(driver: str) -> None:
    """Components of two dtypes (bfloat16 and float32) are refused, naming both."""
    layout = LAYOUTS[0]
    x = random_values("float32", SHAPE)
    blocks = [x[s] for s in layout.device_slices(SHAPE)]
    blocks[3] = blocks[3].astype(random_values("bfloat16", (1,)).dtype)
    with pytest.raises(lc.LayoutError, match=r"bfloat16.*float32"):
        lc.pack(blocks, layout, driver=driver)


def documented_dtypes(column: str) -> frozenset[str]:
    """The dtypes docs/dtypes.md's generated table marks as held in ``column`` (a driver's title)."""
    page = Path(__file__).resolve().parents[2] / "docs" / "dtypes.md"
    begin, end = "<!-- BEGIN dtype-table", "<!-- END dtype-table -->"
    rows = [line for line in page.read_text().split(begin)[1].split(end)[0].splitlines() if line.startswith("|")]
    titles = [cell.strip() for cell in rows[0].strip("|").split("|")]
    index = titles.index(column)
    held = frozenset(
        cells[0].strip("`")
        for cells in ([cell.strip() for cell in row.strip("|").split("|")] for row in rows[2:])
        if cells[index] == "✓"
    )
    assert len(rows) == 2 + len(ALL_DTYPES), "docs/dtypes.md: run python docs/gen_dtype_table.py"
    return held
