"""The conformance suite can fail: run it in a subprocess against deliberately broken drivers
(tests/conformance_plugins/broken_drivers.py, loaded as a pytest plugin) and check that it exits 1
with failures in the tests that should catch each defect. The control: the real NumPy driver
passes the whole suite (exit 0), run through ``python -m layoutcore_conformance``."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import xml.etree.ElementTree as ET
from dataclasses import dataclass
from pathlib import Path

import pytest

PLUGINS = Path(__file__).parent / "conformance_plugins"
TIMEOUT_S = 600

# Capability-gate cases of test_capabilities.py that need an uneven capability.
UNEVEN_CASES = ["uneven", "uneven_empty_block", "uneven_fewer_rows_than_devices", "uneven_multi_axis"]
GATE_OPS = ["distribute_tensor", "relayout", "pack", "call_with_layout", "Variable"]


@dataclass
class SuiteRun:
    """Outcome of one subprocess run of the suite."""

    returncode: int
    output: str
    failed: set[str]  # "module::test[id]" from the JUnit report (failures and errors)
    passed: set[str]
    counts: dict[str, int]  # from pytest's final summary line: {"failed": n, "passed": m, ...}

    def failed_functions(self) -> set[str]:
        return {name.split("[")[0] for name in self.failed}


def run_suite(tmp_path: Path, driver: str, *, plugin: bool, profile: str, via_module: bool = False) -> SuiteRun:
    env = dict(os.environ)
    env["LAYOUTCORE_DRIVER"] = driver
    env["HYPOTHESIS_PROFILE"] = profile
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(PLUGINS), env.get("PYTHONPATH", "")]))
    env.pop("PYTEST_ADDOPTS", None)
    junit = tmp_path / f"{driver}.xml"
    args = ["-q", "-p", "no:cacheprovider", "-p", "no:randomly", f"--junitxml={junit}"]
    if plugin:
        args += ["-p", "broken_drivers"]
    if via_module:
        cmd = [sys.executable, "-m", "layoutcore_conformance", "--driver", driver, *args]
    else:
        cmd = [sys.executable, "-m", "pytest", "--pyargs", "layoutcore_conformance", *args]
    proc = subprocess.run(cmd, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=TIMEOUT_S)
    output = proc.stdout + proc.stderr
    assert junit.exists(), f"no JUnit report; pytest said:\n{output[-4000:]}"
    failed: set[str] = set()
    passed: set[str] = set()
    for case in ET.parse(junit).getroot().iter("testcase"):
        module = case.get("classname", "").rsplit(".", 1)[-1]
        name = f"{module}::{case.get('name')}"
        outcome = {child.tag for child in case}
        if outcome & {"failure", "error"}:
            failed.add(name)
        elif not outcome & {"skipped"}:
            passed.add(name)
    summary = [line for line in output.splitlines() if re.search(r"\d+ (passed|failed)", line)]
    assert summary, f"no pytest summary line in:\n{output[-4000:]}"
    counts = {
        word: int(n) for n, word in re.findall(r"(\d+) (passed|failed|errors?|skipped|xfailed|xpassed)", summary[-1])
    }
    return SuiteRun(proc.returncode, output, failed, passed, counts)


def test_control_numpy_driver_passes(tmp_path: Path) -> None:
    run = run_suite(tmp_path, "numpy", plugin=False, profile="ci", via_module=True)
    assert run.returncode == 0, run.output[-6000:]
    assert run.failed == set()
    assert run.counts.get("passed", 0) > 150 and set(run.counts) == {"passed"}, run.counts
    assert "driver 'numpy'" in run.output  # the header names the driver under test


def test_rotated_components_fail(tmp_path: Path) -> None:
    run = run_suite(tmp_path, "broken-rotated", plugin=True, profile="smoke")
    assert run.returncode == 1, run.output[-6000:]
    assert run.counts["failed"] == len(run.failed) > 0
    must_fail = {
        "test_properties::test_device_data_matches_oracle",
        "test_properties::test_framework_input_matches_oracle",
        "test_properties::test_to_numpy_round_trip",
        "test_capabilities::test_capability_gate[even-distribute_tensor]",
        "test_seed_dtensor_guide::test_arange_on_3x2[fully_sharded-numpy_input-distribute_tensor]",
        "test_seed_dtensor_guide::test_arange_on_3x2[hybrid-numpy_input-distribute_tensor]",
        "test_seed_keras::test_layout_map_scope_places_variables[dense_1.kernel]",
    }
    assert must_fail <= run.failed, sorted(must_fail - run.failed)
    # Fully replicated data looks the same on every device, so rotation cannot show there.
    assert "test_seed_dtensor_guide::test_arange_on_3x2[fully_replicated-numpy_input-distribute_tensor]" in run.passed
    # Values tests do not touch the driver and must not fail because of it.
    assert not {n for n in run.failed if n.startswith(("test_oracle::", "test_seed_tf_layout::", "test_bad_inputs::"))}


def test_uneven_claimed_but_misplaced_fails(tmp_path: Path) -> None:
    # A driver can no longer skip the capability refusal (the front-end is final; see
    # tests/test_driver_base.py); this one claims `uneven` and gets its placement wrong.
    run = run_suite(tmp_path, "broken-uneven", plugin=True, profile="smoke")
    assert run.returncode == 1, run.output[-6000:]
    gates = {f"test_capabilities::test_capability_gate[{c}-distribute_tensor]" for c in UNEVEN_CASES}
    assert gates & run.failed, sorted(run.failed)
    # Everything that needs no uneven layout still passes: the failures point at the defect.
    for name in ("even", "multi_axis", "multi_axis_any_order"):
        for op in GATE_OPS:
            assert f"test_capabilities::test_capability_gate[{name}-{op}]" in run.passed
    assert run.failed_functions() <= {
        "test_capabilities::test_capability_gate",
        *(f"test_properties::{n}" for n in _property_tests()),
    }, sorted(run.failed_functions())
    assert "test_properties::test_device_data_matches_oracle" in run.failed


def test_placement_hidden_by_the_drivers_own_api_fails(tmp_path: Path) -> None:
    run = run_suite(tmp_path, "broken-hiding", plugin=True, profile="smoke")
    assert run.returncode == 1, run.output[-6000:]
    assert {
        "test_properties::test_device_data_matches_oracle",
        "test_capabilities::test_capability_gate[even-distribute_tensor]",
        "test_seed_dtensor_guide::test_arange_on_3x2[hybrid-numpy_input-dtensor_from_array]",
    } <= run.failed
    # The driver's own view (to_numpy, fetch_layout) is self-consistent: only the adapter-read
    # oracle catches this driver, which is why the suite never trusts unpack/to_numpy for data.
    assert "test_properties::test_to_numpy_round_trip" in run.passed
    assert "test_properties::test_fetch_layout_round_trip" in run.passed


def _property_tests() -> list[str]:
    import layoutcore_conformance.test_properties as props

    return [name for name in dir(props) if name.startswith("test_")]


@pytest.mark.parametrize("driver", ["broken-rotated", "broken-uneven", "broken-hiding"])
def test_broken_drivers_are_registered_by_the_plugin(driver: str) -> None:
    """The plugin registers each driver under the name the runs above select."""
    code = f"import broken_drivers, layoutcore; print(layoutcore.get_driver({driver!r}).name)"
    env = dict(os.environ, PYTHONPATH=str(PLUGINS))
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0 and out.stdout.strip() == driver, out.stderr
