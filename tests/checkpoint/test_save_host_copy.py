"""A save hands each block to the writers as the driver's host copy, never cast or copied again.

On the CPU the host copy of a NumPy, torch (bfloat16 and float8 through a same-width integer view)
or JAX component is its own memory: the block the shard writer receives shares memory with the
component, bit for bit. A driver whose host copy changes the dtype is refused, naming the tensor.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

import layoutcore as lc
from layoutcore import CheckpointError, Layout, Mesh, checkpoint
from layoutcore.checkpoint import _save

MESH = Mesh((2,), ("x",))
LAYOUT = Layout(("x", None), MESH)


def _written(monkeypatch: pytest.MonkeyPatch) -> list[np.ndarray[Any, Any]]:
    blocks: list[np.ndarray[Any, Any]] = []
    real = _save.write_shard

    def spy(root: str, storage: Any, index: Any, block: np.ndarray[Any, Any], scratch: Any = None) -> int:
        blocks.append(block)
        return real(root, storage, index, block, scratch)

    monkeypatch.setattr(_save, "write_shard", spy)
    return blocks


@pytest.mark.parametrize("driver", ["numpy", "torch", "jax"])
@pytest.mark.parametrize("dtype", ["float32", "bfloat16", "float8_e4m3fn"])
def test_blocks_reach_the_writer_without_a_copy(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, driver: str, dtype: str
) -> None:
    if driver != "numpy":  # the framework itself (a stand-in module of another test would not do)
        pytest.importorskip({"torch": "torch.distributed.tensor", "jax": "jax.sharding"}[driver])
    x = (np.arange(64, dtype=np.uint8) * 37 + 11).view(lc.driver.numpy_dtype(dtype)).reshape(4, -1)
    x = np.ascontiguousarray(x[:, :8])
    tensor = lc.distribute_tensor(x, LAYOUT, driver=driver)
    drv = lc.get_driver(driver)
    hosts = [np.asarray(drv.component_to_host(c)) for c in lc.unpack(tensor)]
    blocks = _written(monkeypatch)
    checkpoint.save(tmp_path / "c", {"w": tensor})
    assert len(blocks) == 2
    for block, host, sl in zip(blocks, hosts, LAYOUT.device_slices(x.shape), strict=True):
        assert block.dtype == x.dtype and block.tobytes() == x[sl].tobytes()
        assert np.shares_memory(block, host), f"{driver} {dtype}: the block was copied on its way to the writer"
    assert lc.to_numpy(checkpoint.load(tmp_path / "c")["w"]).tobytes() == x.tobytes()


def test_a_host_copy_of_another_dtype_is_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    tensor = lc.distribute_tensor(np.arange(8, dtype=np.int16).reshape(2, 4), LAYOUT, driver="numpy")
    drv = lc.get_driver("numpy")
    monkeypatch.setattr(type(drv), "component_to_host", lambda self, c: np.asarray(c).astype(np.float32))
    with pytest.raises(CheckpointError, match=r"'w' \(int16\) to host as float32"):
        checkpoint.save(tmp_path / "c", {"w": tensor})
    assert not (tmp_path / "c").exists()
    assert not list(tmp_path.glob(".c.tmp-*"))
