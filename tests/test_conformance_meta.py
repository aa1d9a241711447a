"""The conformance suite can fail: run it in a subprocess against deliberately broken drivers and check
that it exits 1 with failures in the tests that should catch each defect, while the real driver passes.

* NumPy mutants (tests/conformance_plugins/broken_drivers.py, loaded as the pytest plugin
  ``broken_drivers``) run here in every environment; the control is the real NumPy driver passing the
  whole suite through ``python -m layoutcore_conformance``.
* Framework mutants (``broken_jax``, ``broken_tensorflow``, ``broken_torch``): devices reversed,
  placements swapped, a lying ``native_fetch_layout``, replicas sharing storage (torch) or sharing the
  caller's buffer (JAX, TF, whose arrays are immutable), one dtype narrowed or widened (JAX bfloat16 held as
  float32, TF float64 as float32, torch int64 as int32), and (torch) an in-place update through a Variable
  that reaches one replica only. They run in their framework's tox environment,
  picked by ``LAYOUTCORE_DRIVER`` (tox.ini runs ``pytest tests/test_conformance_meta.py -k framework``
  there), each on the focused part of the suite (``-k``) that its defect concerns, with the ``smoke``
  hypothesis profile. Their control is the same environment's first command: the real driver passing the
  whole suite with the ``ci`` profile, a superset of every focused part.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import xml.etree.ElementTree as ET
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

PLUGINS = Path(__file__).parent / "conformance_plugins"
TIMEOUT_S = 600

#: The framework whose tox environment this is (tox.ini sets LAYOUTCORE_DRIVER per environment; read at
#: import, since tests/conftest.py clears it for each test).
FRAMEWORK = os.environ.get("LAYOUTCORE_DRIVER", "numpy")

# Focused parts of the suite (pytest -k) for the mutants, and what each must fail.
PLACEMENT_SUBSET = (
    "test_device_data_matches_oracle or test_framework_op_output or "
    "(capability_gate and even-distribute_tensor and not uneven)"
)
LYING_SUBSET = (
    "test_native_fetch_layout_of_every_creating_path or test_framework_op_output or test_device_data_matches_oracle"
)
NATIVE = "test_native_layout::test_native_fetch_layout_of_every_creating_path"
LYING_MUST_FAIL = frozenset(
    {f"{NATIVE}[distribute_tensor]", f"{NATIVE}[pack]", "test_native_layout::test_framework_op_output"}
)
PLACEMENT_MUST_FAIL = frozenset(
    {"test_capabilities::test_capability_gate[even-distribute_tensor]", "test_native_layout::test_framework_op_output"}
)
ALIASING = "test_memory::test_caller_writes_follow_the_declared_rule"


@dataclass(frozen=True)
class Mutant:
    """A framework driver with one defect (tests/conformance_plugins/broken_<framework>.py)."""

    framework: str
    driver: str
    subset: str
    must_fail: frozenset[str]
    must_pass: frozenset[str] = frozenset()


def _mutants(framework: str, sharing: str, subset: str, fails: set[str], passes: set[str]) -> list[Mutant]:
    return [
        Mutant(framework, f"{framework}-reversed-devices", PLACEMENT_SUBSET, PLACEMENT_MUST_FAIL),
        Mutant(framework, f"{framework}-swapped-placements", PLACEMENT_SUBSET, PLACEMENT_MUST_FAIL),
        Mutant(
            framework,
            f"{framework}-lying-fetch",
            LYING_SUBSET,
            LYING_MUST_FAIL,
            frozenset({"test_properties::test_device_data_matches_oracle"}),  # the data is right
        ),
        Mutant(framework, f"{framework}-{sharing}", subset, frozenset(fails), frozenset(passes)),
    ]


#: JAX and TF arrays are immutable: their fourth mutant shares the caller's aligned buffer while declaring a
#: snapshot. torch's shares one tensor between the replicas of a block, so in-place updates repeat.
FRAMEWORK_MUTANTS: dict[str, list[Mutant]] = {
    framework: _mutants(
        framework,
        "shared-input",
        "test_caller_writes_follow_the_declared_rule",
        {f"{ALIASING}[replicated-aligned64]", f"{ALIASING}[replicated-memmap]"},
        {f"{ALIASING}[fully_sharded-plain]"},
    )
    for framework in ("jax", "tensorflow")
}
FRAMEWORK_MUTANTS["torch"] = _mutants(
    "torch",
    "shared-replicas",
    "test_inplace_op_on_the_result or test_sgd_step",
    {
        "test_memory::test_inplace_op_on_the_result_keeps_the_input[replicated]",
        "test_memory::test_inplace_op_on_the_result_keeps_the_input[sharded]",
        "test_memory::test_sgd_step_matches_numpy[replicated]",
    },
    {"test_memory::test_sgd_step_matches_numpy[fully_sharded]"},  # no replicas there: nothing shared
)
#: Dtype mutants: each declares a dtype (the real driver's ``supported_dtypes``) and narrows or widens it. The
#: dtype axis fails them by name; the model-based test runs beside it (it draws every declared dtype).
DTYPE_SUBSET = "test_dtypes or test_stateful"
STATEFUL = "test_stateful::test_operation_sequences_match_numpy_model"
for _framework, _dtype, _defect in (
    ("jax", "bfloat16", "widened-bfloat16"),
    ("tensorflow", "float64", "narrowed-float64"),
    ("torch", "int64", "narrowed-int64"),
):
    FRAMEWORK_MUTANTS[_framework].append(
        Mutant(
            _framework,
            f"{_framework}-{_defect}",
            DTYPE_SUBSET,
            frozenset({f"test_dtypes::test_distribute[{_dtype}]", f"test_dtypes::test_variable[{_dtype}]"}),
            frozenset({"test_dtypes::test_distribute[float32]", "test_dtypes::test_distribute[int32]"}),
        )
    )
#: An in-place update through a Variable's value reaches one replica of each block: only a test that updates
#: in place and then reads every replica sees it, the model-based test.
FRAMEWORK_MUTANTS["torch"].append(Mutant("torch", "torch-one-replica-inplace", "test_stateful", frozenset({STATEFUL})))
_NOT_HERE = pytest.mark.skip(
    reason=f"framework mutants run in their framework's tox environment (LAYOUTCORE_DRIVER=jax|tensorflow|torch); "
    f"this one has LAYOUTCORE_DRIVER={FRAMEWORK}"
)


def _framework_params() -> list[Any]:
    mutants = FRAMEWORK_MUTANTS.get(FRAMEWORK)
    if mutants is None:
        return [pytest.param(None, marks=_NOT_HERE, id="not-a-framework-env")]
    return [pytest.param(m, id=m.driver) for m in mutants]


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
    skipped: set[str]
    counts: dict[str, int]  # from pytest's final summary line: {"failed": n, "passed": m, ...}

    def failed_functions(self) -> set[str]:
        return {name.split("[")[0] for name in self.failed}


def run_suite(
    tmp_path: Path,
    driver: str,
    *,
    plugin: bool | str,
    profile: str,
    via_module: bool = False,
    subset: str | None = None,
) -> SuiteRun:
    """Run the suite on ``driver`` in a subprocess; ``plugin`` is ``True`` (``broken_drivers``), a plugin
    module's name, or ``False``; ``subset`` a pytest ``-k`` expression."""
    env = dict(os.environ)
    env["LAYOUTCORE_DRIVER"] = driver
    env["HYPOTHESIS_PROFILE"] = profile
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(PLUGINS), env.get("PYTHONPATH", "")]))
    env.pop("PYTEST_ADDOPTS", None)
    junit = tmp_path / f"{driver}.xml"
    args = ["-q", "-p", "no:cacheprovider", "-p", "no:randomly", f"--junitxml={junit}"]
    if plugin:
        args += ["-p", "broken_drivers" if plugin is True else str(plugin)]
    if subset:
        args += ["-k", subset]
    if via_module:
        cmd = [sys.executable, "-m", "layoutcore_conformance", "--driver", driver, *args]
    else:
        cmd = [sys.executable, "-m", "pytest", "--pyargs", "layoutcore_conformance", *args]
    proc = subprocess.run(cmd, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=TIMEOUT_S)
    output = proc.stdout + proc.stderr
    assert junit.exists(), f"no JUnit report; pytest said:\n{output[-4000:]}"
    failed: set[str] = set()
    passed: set[str] = set()
    skipped: set[str] = set()
    for case in ET.parse(junit).getroot().iter("testcase"):
        module = case.get("classname", "").rsplit(".", 1)[-1]
        name = f"{module}::{case.get('name')}"
        outcome = {child.tag for child in case}
        if outcome & {"failure", "error"}:
            failed.add(name)
        elif outcome & {"skipped"}:
            skipped.add(name)
        else:
            passed.add(name)
    summary = [line for line in output.splitlines() if re.search(r"\d+ (passed|failed)", line)]
    assert summary, f"no pytest summary line in:\n{output[-4000:]}"
    counts = {
        word: int(n) for n, word in re.findall(r"(\d+) (passed|failed|errors?|skipped|xfailed|xpassed)", summary[-1])
    }
    return SuiteRun(proc.returncode, output, failed, passed, skipped, counts)


def test_control_numpy_driver_passes(tmp_path: Path) -> None:
    run = run_suite(tmp_path, "numpy", plugin=False, profile="ci", via_module=True)
    assert run.returncode == 0, run.output[-6000:]
    assert run.failed == set()
    assert run.counts.get("passed", 0) > 200 and set(run.counts) <= {"passed", "skipped"}, run.counts
    # Only the traced section skips: NumPy has no compiler (the skip says so).
    assert {name.split("::")[0] for name in run.skipped} <= {"test_traced"}, sorted(run.skipped)
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
    # Only tests that draw random (so also uneven) cases, and the uneven gates, may fail.
    random_cases = (
        "test_properties::",
        "test_native_layout::",
        "test_spmd::test_random",
        "test_stateful::",
        "test_relayout_floor::",
    )
    assert {f for f in run.failed_functions() if not f.startswith(random_cases)} <= {
        "test_capabilities::test_capability_gate"
    }, sorted(run.failed_functions())
    # The per-device data checks see it (NumPy input or framework input: which of the two draws an
    # uneven case first within the smoke budget depends on the draws).
    assert {
        "test_properties::test_device_data_matches_oracle",
        "test_properties::test_framework_input_matches_oracle",
    } & run.failed, sorted(run.failed)


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


def test_lying_native_fetch_layout_fails(tmp_path: Path) -> None:
    run = run_suite(tmp_path, "broken-lying-fetch", plugin=True, profile="smoke", subset=LYING_SUBSET)
    assert run.returncode == 1, run.output[-6000:]
    assert run.failed >= LYING_MUST_FAIL, sorted(LYING_MUST_FAIL - run.failed)
    # The data is right: only the checks of the hook itself, and of what it reads, see the lie.
    assert "test_properties::test_device_data_matches_oracle" in run.passed


def test_a_block_sent_twice_fails_the_floor(tmp_path: Path) -> None:
    run = run_suite(tmp_path, "broken-double-send", plugin=True, profile="smoke", subset="test_relayout_floor")
    assert run.returncode == 1, run.output[-6000:]
    assert "test_relayout_floor::test_random_relayouts_move_the_floor" in run.failed
    assert {
        "test_relayout_floor::test_benchmark_cases_move_the_floor[(x,y) -> (y,x) on 4x2]",
        "test_relayout_floor::test_benchmark_cases_move_the_floor[cross-mesh 4x2 (x,None) -> 8 (None,z)]",
    } <= run.failed
    # The data is right and a relayout that moves nothing sends nothing twice: only the count sees it.
    assert "test_relayout_floor::test_benchmark_cases_move_the_floor[None -> x]" in run.passed
    assert "test_relayout_floor::test_a_value_that_is_already_there_moves_nothing" in run.passed


@pytest.mark.parametrize(
    "driver", ["broken-rotated", "broken-uneven", "broken-hiding", "broken-lying-fetch", "broken-double-send"]
)
def test_broken_drivers_are_registered_by_the_plugin(driver: str) -> None:
    """The plugin registers each driver under the name the runs above select."""
    code = f"import broken_drivers, layoutcore; print(layoutcore.get_driver({driver!r}).name)"
    env = dict(os.environ, PYTHONPATH=str(PLUGINS))
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0 and out.stdout.strip() == driver, out.stderr


@pytest.mark.parametrize("mutant", _framework_params())
def test_framework_mutant_fails(tmp_path: Path, mutant: Mutant) -> None:
    run = run_suite(tmp_path, mutant.driver, plugin=f"broken_{mutant.framework}", profile="smoke", subset=mutant.subset)
    assert run.returncode == 1, run.output[-6000:]
    assert f"driver {mutant.driver!r}" in run.output  # the plugin registered it; the header names it
    assert mutant.must_fail <= run.failed, sorted(mutant.must_fail - run.failed)
    assert mutant.must_pass <= run.passed, sorted(mutant.must_pass - run.passed)


#: What an adapter must not call on the driver under test: its data, layout and device-name answers.
DRIVER_ANSWERS = frozenset(
    {
        "bind_mesh",
        "fetch_layout",
        "native_fetch_layout",
        "unpack",
        "native_unpack",
        "to_numpy",
        "native_to_numpy",
        "list_devices",
        "mesh_of",
        "recorded_layout",
        "component_to_numpy",
    }
)
ADAPTERS = sorted((Path(__file__).parents[1] / "drivers").glob("layoutcore_*/_conformance.py"))


@pytest.mark.parametrize("path", ADAPTERS, ids=lambda p: p.parent.name)
def test_adapters_read_the_framework_not_the_driver(path: Path) -> None:
    """A first-party adapter imports nothing of its driver's package and asks the driver for no data, layout
    or device name (so a driver bug cannot hide in the adapter's reading), read from its source with ast."""
    import ast

    tree = ast.parse(path.read_text(encoding="utf-8"))
    package = path.parent.name
    # relayout_bytes counts the bytes the framework's collectives move with the driver's own counter (the
    # framework has no public one); it reads no data, layout or device name, which every other member must
    # get from the framework alone. Its imports are the one exemption, and only of the counter.
    counters = [
        node
        for fn in ast.walk(tree)
        if isinstance(fn, ast.FunctionDef) and fn.name == "relayout_bytes"
        for node in ast.walk(fn)
        if isinstance(node, ast.ImportFrom) and [a.name for a in node.names] == ["CollectiveBytes"]
    ]
    for node in ast.walk(tree):
        if node in counters:
            continue
        if isinstance(node, ast.ImportFrom):
            assert node.level == 0 and not (node.module or "").startswith(package), (
                f"{path.name} imports {'.' * node.level}{node.module or ''}: an adapter uses framework calls only"
            )
        if isinstance(node, ast.Import):
            assert not any(alias.name.startswith(package) for alias in node.names), ast.unparse(node)
        if isinstance(node, ast.Attribute) and node.attr in DRIVER_ANSWERS:
            base = node.value
            on_driver = isinstance(base, ast.Attribute) and base.attr == "driver"
            assert not on_driver, f"{path.parent.name}/{path.name}:{node.lineno} asks the driver: {ast.unparse(node)}"
    assert len(ADAPTERS) == 3, ADAPTERS  # jax, tensorflow, torch
