"""torch.compile (docs/design.md#data-functions-made-precise): layoutcore's calls inside a compiled function raise a typed refusal.

The driver does not declare ``Capability.TRACED``; the conformance suite's traced section checks the same
with ``fullgraph=True``. Here: torch's default ``torch.compile`` (graph breaks allowed), which users write.
Compiling is slow on 2 cores, so one test covers both calls.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from layoutcore_torch import TorchDriver

import layoutcore as lc
from layoutcore import Layout, Mesh

MESH = Mesh((2, 2), ("x", "y"))


def test_relayout_and_distribute_inside_torch_compile_raise_a_typed_refusal(driver: TorchDriver) -> None:
    assert lc.driver.Capability.TRACED not in driver.capabilities
    x = np.arange(24, dtype=np.float32).reshape(4, 6)
    source = lc.distribute_tensor(x, Layout(("x", "y"), MESH), driver=driver)
    target = Layout((None, "y"), MESH)
    calls = {
        "relayout": (lambda t: lc.relayout(t, target, driver=driver), source),
        "distribute_tensor": (lambda t: lc.distribute_tensor(t, target, driver=driver), torch.from_numpy(x)),
    }
    for what, (fn, arg) in calls.items():
        with pytest.raises(lc.UnsupportedLayoutError) as err:
            torch.compile(fn, backend="eager")(arg)
        assert (err.value.feature, err.value.driver) == ("traced", "torch"), what
    # Outside the compiler the same calls work, on the same values.
    np.testing.assert_array_equal(lc.to_numpy(lc.relayout(source, target, driver=driver), driver=driver), x)
