"""Value routing with no driver selected (``docs/design.md#data-functions-made-precise``: the value chooses the driver).

In a fresh process with ``LAYOUTCORE_DRIVER`` unset (so the default driver is NumPy), a distributed tensor of
every installed driver's framework must go to its own driver: ``to_numpy``, ``fetch_layout`` and ``unpack``
on it, called without ``driver=``, give its data and layout. Both a tensor made by ``distribute_tensor(...,
driver=NAME)`` and one made by the framework's own operation (``adapter.identity_op``, which layoutcore never
saw) are tried. The driver recognises its tensors by their type's name (``Driver.native_types``), so a
framework release that renames its array type (a jaxlib module move) breaks this path first; it runs in
every environment the suite runs in, the newest jax's included.
"""

from __future__ import annotations

import importlib.metadata
import json
import os
import subprocess
import sys

from layoutcore.driver import DRIVER_ENV, ENTRY_POINT_GROUP, Driver

#: Run in the child process: per installed driver, "ok" or what went wrong.
_CHILD = r"""
import json, traceback
import numpy as np
import layoutcore as lc
from layoutcore.driver import DRIVER_ENV, ENTRY_POINT_GROUP, Driver
from layoutcore_conformance.adapter import load_adapter

assert lc.active_driver_name() == "numpy", lc.active_driver_name()
report = {}
for name in lc.available_drivers():
    try:
        driver = lc.get_driver(name)
        try:
            adapter = load_adapter(driver)
        except LookupError as exc:
            report[name] = "no adapter: " + str(exc)
            continue
        layout = lc.Layout(("x", None), lc.Mesh((2,), ("x",)))
        x = np.arange(8, dtype=np.float32).reshape(4, 2)
        made = lc.distribute_tensor(x, layout, driver=name)
        for what, value in (("distribute_tensor", made), ("framework op", adapter.identity_op(made))):
            got = lc.to_numpy(value)
            assert got.dtype == x.dtype and np.array_equal(got, x), f"{what}: to_numpy gave {got!r}"
            fetched = lc.fetch_layout(value)
            assert fetched.axes == layout.axes and fetched.mesh.shape == (2,), f"{what}: fetch_layout {fetched!r}"
            parts = lc.unpack(value)
            assert len(parts) == 2, f"{what}: unpack gave {len(parts)} components"
            for part, want in zip(parts, (x[:2], x[2:])):
                got = driver.component_to_numpy(part)
                assert np.array_equal(got, want), f"{what}: component {got!r}, expected {want!r}"
        report[name] = "ok"
    except Exception:
        report[name] = traceback.format_exc(limit=6)
print("ROUTING " + json.dumps(report))
"""


def test_native_tensors_go_to_their_own_driver(driver: Driver) -> None:
    env = {k: v for k, v in os.environ.items() if k != DRIVER_ENV}
    proc = subprocess.run(
        [sys.executable, "-c", _CHILD], env=env, capture_output=True, text=True, timeout=600, check=False
    )
    lines = [line for line in proc.stdout.splitlines() if line.startswith("ROUTING ")]
    assert proc.returncode == 0 and lines, f"the routing child failed:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
    report: dict[str, str] = json.loads(lines[-1].removeprefix("ROUTING "))
    # The driver under test is among the installed ones, unless it is registered at run time (register_driver).
    installed = {ep.name for ep in importlib.metadata.entry_points(group=ENTRY_POINT_GROUP)}
    if driver.name in installed:
        assert driver.name in report, f"driver {driver.name!r} was not installed in the child: {sorted(report)}"
    assert "numpy" in report, report
    failed = {name: why for name, why in report.items() if why != "ok"}
    assert not failed, "with LAYOUTCORE_DRIVER unset, tensors did not reach their own driver:\n" + "\n".join(
        f"--- {name}:\n{why}" for name, why in failed.items()
    )
