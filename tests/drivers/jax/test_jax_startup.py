"""Lazy import and LAYOUTCORE_CPU_DEVICES -> jax_num_cpu_devices, each in a fresh interpreter."""

from __future__ import annotations

import json

from _jax_helpers import run_python


def _json_tail(stdout: str) -> object:
    return json.loads(stdout.strip().splitlines()[-1])


def test_importing_the_package_and_listing_drivers_does_not_import_jax() -> None:
    code = (
        "import sys, json, layoutcore, layoutcore_jax\n"
        "infos = {i.name: sorted(c.value for c in i.capabilities) for i in layoutcore.driver.driver_infos()}\n"
        "print(json.dumps(['jax' in sys.modules, infos['jax']]))\n"
    )
    proc = run_python(code)
    assert proc.returncode == 0, proc.stderr
    assert _json_tail(proc.stdout) == [
        False,
        ["multi_axis", "multi_axis_any_order", "relayout_across_meshes", "relayout_at_floor", "traced"],
    ]


def test_cpu_device_count_is_applied_before_jax_starts() -> None:
    code = (
        "import json, layoutcore\n"
        "d = layoutcore.get_driver('jax')\n"
        "import jax\n"
        "print(json.dumps([d.list_devices(), jax.config.jax_num_cpu_devices]))\n"
    )
    proc = run_python(code, env={"LAYOUTCORE_CPU_DEVICES": "3"})
    assert proc.returncode == 0, proc.stderr
    assert _json_tail(proc.stdout) == [["CPU:0", "CPU:1", "CPU:2"], 3]
    assert "Warning" not in proc.stderr


def test_default_is_eight_devices() -> None:
    proc = run_python("import json, layoutcore\nprint(json.dumps(len(layoutcore.list_devices(driver='jax'))))")
    assert proc.returncode == 0, proc.stderr
    assert _json_tail(proc.stdout) == 8


def test_jax_started_first_keeps_its_devices_and_warns_once() -> None:
    code = (
        "import json, warnings, jax\n"
        "jax.devices()  # JAX starts with its own default: one CPU device\n"
        "import layoutcore\n"
        "from layoutcore_jax import JaxDriver\n"
        "with warnings.catch_warnings(record=True) as caught:\n"
        "    warnings.simplefilter('always')\n"
        "    first = layoutcore.list_devices(driver='jax')\n"
        "    JaxDriver(); JaxDriver()\n"
        "print(json.dumps([first, [str(w.message) for w in caught]]))\n"
    )
    proc = run_python(code, env={"LAYOUTCORE_CPU_DEVICES": "4"})
    assert proc.returncode == 0, proc.stderr
    devices, warnings = _json_tail(proc.stdout)  # type: ignore[misc]
    assert devices == ["CPU:0"]
    assert len(warnings) == 1
    assert "already started with 1 CPU device" in warnings[0] and "LAYOUTCORE_CPU_DEVICES=4" in warnings[0]


def test_an_explicit_jax_setting_wins() -> None:
    code = (
        "import json, jax\n"
        "jax.config.update('jax_num_cpu_devices', 2)\n"
        "import layoutcore\n"
        "print(json.dumps(layoutcore.list_devices(driver='jax')))\n"
    )
    proc = run_python(code)
    assert proc.returncode == 0, proc.stderr
    assert _json_tail(proc.stdout) == ["CPU:0", "CPU:1"]


def test_a_bad_count_is_a_configuration_error() -> None:
    code = (
        "import layoutcore\n"
        "try:\n"
        "    layoutcore.get_driver('jax')\n"
        "except layoutcore.ConfigurationError as e:\n"
        "    print('ConfigurationError', e)\n"
    )
    proc = run_python(code, env={"LAYOUTCORE_CPU_DEVICES": "many"})
    assert proc.returncode == 0, proc.stderr
    assert "ConfigurationError" in proc.stdout and "'many'" in proc.stdout


def test_initialize_distributed_after_jax_started_is_refused() -> None:
    code = (
        "import jax, layoutcore, layoutcore_jax\n"
        "jax.devices()\n"
        "try:\n"
        "    layoutcore_jax.initialize_distributed('127.0.0.1:1', 2, 0, timeout_s=1)\n"
        "except layoutcore_jax.DistributedInitError as e:\n"
        "    print('DistributedInitError', e)\n"
        "for bad in [dict(num_processes=0), dict(process_id=2), dict(coordinator_address='nohost')]:\n"
        "    args = dict(coordinator_address='127.0.0.1:1', num_processes=2, process_id=0) | bad\n"
        "    try:\n"
        "        layoutcore_jax.initialize_distributed(**args)\n"
        "    except layoutcore.ConfigurationError as e:\n"
        "        print(type(e).__name__, e)\n"
    )
    proc = run_python(code)
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[0].startswith("DistributedInitError") and "before any JAX operation" in lines[0]
    assert lines[1].startswith("ConfigurationError") and "num_processes=0" in lines[1]
    assert lines[2].startswith("ConfigurationError") and "process_id must be in 0..1" in lines[2]
    assert lines[3].startswith("ConfigurationError") and "'nohost'" in lines[3]
