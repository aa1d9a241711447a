"""Checkpoint loads into JAX with jax_enable_x64 off (docs/design.md#dtypes): a saved int64 ``np.arange`` and Python
int come back as int32 with equal values (the driver's pack narrows them); a saved value that int32 would
change is refused naming the tensor; a ``TensorSpec`` target asking for int64 is refused, not narrowed."""

from __future__ import annotations

import warnings
from pathlib import Path

import jax
import numpy as np
import pytest

import layoutcore as lc
from layoutcore import checkpoint


@pytest.fixture(autouse=True)
def _x64_off() -> None:
    assert not jax.config.jax_enable_x64


def test_saved_int64_and_python_int_load_as_int32(tmp_path: Path) -> None:
    path = tmp_path / "ckpt"
    checkpoint.save(path, {"arange": np.arange(8), "count": 5, "floats": np.arange(4.0) / 4})
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", lc.DtypeNarrowingWarning)
        out = checkpoint.load(path, driver="jax")
    assert isinstance(out["arange"], jax.Array) and out["arange"].dtype == np.int32
    assert np.asarray(out["arange"]).tolist() == list(range(8))
    assert out["count"].dtype == np.int32 and int(out["count"]) == 5
    assert out["floats"].dtype == np.float32 and np.asarray(out["floats"]).tolist() == [0, 0.25, 0.5, 0.75]
    mesh = lc.Mesh((4,), ("x",))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", lc.DtypeNarrowingWarning)
        laid = checkpoint.load(path, {"arange": lc.Layout(("x",), mesh)}, driver="jax")
    assert lc.fetch_layout(laid["arange"]) == lc.Layout(("x",), mesh) and laid["arange"].dtype == np.int32
    assert lc.to_numpy(laid["arange"]).tolist() == list(range(8))


def test_a_saved_value_int32_would_change_is_refused_naming_the_tensor(tmp_path: Path) -> None:
    path = tmp_path / "ckpt"
    checkpoint.save(path, {"small": np.arange(4), "big": np.arange(4) + 2**40})
    with pytest.raises(lc.UnsupportedLayoutError, match=r"tensor 'big'.*int64.*1099511627776") as info:
        checkpoint.load(path, driver="jax")
    assert info.value.feature == "dtype" and info.value.driver == "jax"


def test_a_tensorspec_asking_for_int64_is_refused_not_narrowed(tmp_path: Path) -> None:
    path = tmp_path / "ckpt"
    checkpoint.save(path, {"arange": np.arange(8)})
    spec = lc.TensorSpec((8,), "int64", lc.Layout((None,), lc.Mesh((2,), ("x",))))
    with pytest.raises(lc.UnsupportedLayoutError, match=r"'arange'.*int64.*jax_enable_x64") as info:
        checkpoint.load(path, {"arange": spec}, driver="jax")
    assert info.value.feature == "dtype"
    # the same spec on a driver that holds int64 loads it unchanged
    held = checkpoint.load(path, {"arange": spec}, driver="numpy")
    assert lc.to_numpy(held["arange"]).dtype == np.int64
