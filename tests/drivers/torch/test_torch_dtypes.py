"""Every dtype on the torch driver, bit for bit: ml_dtypes' bfloat16/float8 arrays in, torch's native
bfloat16/float8 tensors in, and ml_dtypes arrays out of to_numpy (never a widened float32)."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest
import torch
from conftest import HERE, REPO, clean_env, free_port
from layoutcore_torch import TorchDriver

import layoutcore as lc
from layoutcore.driver import ALL_DTYPES, numpy_dtype

# Loaded from its file, not by putting tests/drivers on sys.path: there, the folder tests/drivers/tensorflow
# would pass for the `tensorflow` package (keras then imports it, half there, on the JAX backend).
_spec = importlib.util.spec_from_file_location(
    "_dtype_checks", Path(__file__).resolve().parents[1] / "_dtype_checks.py"
)
assert _spec is not None and _spec.loader is not None
checks = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(checks)

#: The same-width integer torch dtype that torch's own .numpy() converts, for dtypes NumPy lacks.
_VIEWS = {
    "bfloat16": torch.int16,
    "float8_e4m3fn": torch.uint8,
    "float8_e5m2": torch.uint8,
    "float8_e8m0fnu": torch.uint8,
}


def read(component: torch.Tensor) -> np.ndarray:
    """torch's own host copy of one component; bfloat16/float8 through torch's integer view."""
    component = component.detach()
    name = str(component.dtype).removeprefix("torch.")
    if name in _VIEWS:
        return component.view(_VIEWS[name]).numpy().view(numpy_dtype(name))
    return component.numpy()


@pytest.fixture
def torch_driver() -> TorchDriver:
    lc.set_driver("torch")
    d = lc.get_driver()
    assert isinstance(d, TorchDriver)
    return d


def test_every_dtype_is_declared(torch_driver: TorchDriver) -> None:
    assert torch_driver.supported_dtypes() == frozenset(ALL_DTYPES)
    assert checks.documented_dtypes("torch") == torch_driver.supported_dtypes(), "run python docs/gen_dtype_table.py"


@pytest.mark.parametrize("name", ALL_DTYPES)
def test_every_data_function_moves_every_bit(torch_driver: TorchDriver, name: str) -> None:
    checks.check_every_data_function("torch", name, read)


def test_float8_e8m0fnu_is_torchs_own_dtype_bit_for_bit(torch_driver: TorchDriver) -> None:
    """MX block scales: every one of the 256 bit patterns (powers of two, NaN 0xFF) as torch.float8_e8m0fnu."""
    bits = torch.arange(256, dtype=torch.int32).to(torch.uint8).reshape(32, 8)
    native = bits.view(torch.float8_e8m0fnu)
    layout = lc.Layout(("x", None), lc.Mesh((4, 2), ("x", "y")))
    t = lc.distribute_tensor(native, layout)
    assert t.dtype == torch.float8_e8m0fnu
    out = lc.to_numpy(t)
    assert out.dtype == numpy_dtype("float8_e8m0fnu")
    assert out.view(np.uint8).tolist() == bits.numpy().tolist()
    moved = lc.relayout(t, lc.Layout(("y", "x"), lc.Mesh((4, 2), ("x", "y"))))
    assert lc.to_numpy(moved).view(np.uint8).tolist() == bits.numpy().tolist()


@pytest.mark.parametrize("name", ["bfloat16", "float8_e4m3fn", "float8_e5m2", "float32"])
def test_replicas_are_compared_by_bits(torch_driver: TorchDriver, name: str) -> None:
    checks.check_replicas_compared_by_bits("torch", name)


@pytest.mark.parametrize("name", ["bfloat16", "float8_e4m3fn", "float8_e5m2", "float16", "uint64"])
def test_native_tensors_round_trip_in_their_dtype(torch_driver: TorchDriver, name: str) -> None:
    native = torch.arange(32, dtype=torch.float32).reshape(checks.SHAPE).to(getattr(torch, name))
    t = lc.distribute_tensor(native, checks.LAYOUTS[0])
    out = lc.to_numpy(t)
    assert out.dtype == np.dtype(getattr(ml_dtypes, name, name))  # bfloat16 stays bfloat16, not float32
    checks.assert_bits(out, read(native), "native round trip")
    checks.assert_placed("torch", lc.relayout(t, checks.LAYOUTS[1]), checks.LAYOUTS[1], out, read)


@pytest.mark.parametrize("dtype", [torch.bfloat16, ml_dtypes.bfloat16, "bfloat16", torch.float8_e5m2])
def test_call_with_layout_keeps_the_dtype(torch_driver: TorchDriver, dtype: object) -> None:
    made = lc.call_with_layout(torch.ones, checks.LAYOUTS[1], checks.SHAPE, dtype=dtype)
    name = lc.driver.dtype_name(dtype)
    checks.assert_placed("torch", made, checks.LAYOUTS[1], np.ones(checks.SHAPE, numpy_dtype(name)), read)


def test_mixed_dtypes_in_pack_are_refused(torch_driver: TorchDriver) -> None:
    checks.check_mixed_pack_refused("torch")


def test_every_dtype_on_a_real_gloo_group() -> None:
    """gloo has no collectives for int16, uint16/32/64 or float8 ("Invalid scalar type"): the driver moves a
    same-width view. Two real processes; every result bit for bit."""
    port = free_port()
    worker = str(HERE / "mp_torch_dtypes_worker.py")
    env = clean_env({"LAYOUTCORE_DRIVER": "torch"})
    procs = [
        subprocess.Popen(
            [sys.executable, worker, str(rank), str(port), "60"],
            env=env,
            cwd=REPO,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for rank in (0, 1)
    ]
    outputs = []
    try:
        for p in procs:
            out, err = p.communicate(timeout=150)
            assert p.returncode == 0, err[-3000:]
            outputs.append(json.loads(out.strip().splitlines()[-1]))
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
    for result in outputs:
        assert result["dtypes"] == dict.fromkeys(ALL_DTYPES, True), result
