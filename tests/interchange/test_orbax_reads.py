"""How an Orbax checkpoint's chunks are read: concurrently through TensorStore, each chunk once, errors named.

The checkpoint is written here with TensorStore in Orbax's layout (``_METADATA``, ``_sharding``, one
zarr array per leaf, zstd chunks of one saved device block, no OCDBT): no JAX. Oracle: the array
written, sliced by the layouts' pure shard math; the bytes the kernel was asked for (``rchar``)
against the chunk files' sizes.
"""

from __future__ import annotations

import base64
import json
from pathlib import Path

import numpy as np
import pytest

import layoutcore as lc
from layoutcore import checkpoint

ts = pytest.importorskip("tensorstore")

MESH = lc.Mesh((2,), ("x",))


@pytest.fixture
def orbax_dir(tmp_path: Path) -> tuple[Path, np.ndarray]:
    value = np.random.default_rng(5).standard_normal((64, 40)).astype(np.float32)
    root = tmp_path / "ckpt"
    spec = {
        "driver": "zarr",
        "kvstore": {"driver": "file", "path": str(root / "w") + "/"},
        "metadata": {"shape": [64, 40], "chunks": [32, 40], "dtype": "<f4", "compressor": {"id": "zstd", "level": 1}},
    }
    ts.open(spec, create=True).result().write(value).result()  # rows over 2: one chunk per saved block
    entry = {"key_metadata": [{"key": "w", "key_type": 2}], "value_metadata": {"value_type": "jax.Array"}}
    (root / "_METADATA").write_text(json.dumps({"tree_metadata": {"('w',)": entry}, "use_ocdbt": False}))
    sharding = {
        "sharding_type": "NamedSharding",
        "shape": [2],
        "axis_names": ["x"],
        "partition_spec": ["x", None],
        "device_mesh": {"mesh": [{"id": 0}, {"id": 1}]},
    }
    (root / "_sharding").write_text(json.dumps({base64.b64encode(b"w").decode(): json.dumps(sharding)}))
    return root, value


def _rchar() -> int:
    with open("/proc/self/io") as f:
        return int(next(line for line in f if line.startswith("rchar:")).split()[1])


def _chunk_bytes(root: Path) -> int:
    return sum(p.stat().st_size for p in (root / "w").iterdir() if p.name[0].isdigit())


@pytest.mark.parametrize("how", ["new", "into"])
def test_columns_of_row_chunks_read_each_chunk_once(orbax_dir: tuple[Path, np.ndarray], how: str) -> None:
    root, value = orbax_dir
    columns = lc.Layout((None, "x"), MESH)  # each column block needs both row chunks
    into = {"w": lc.distribute_tensor(np.zeros_like(value), columns, driver="numpy")}
    with checkpoint.open(root) as src:
        probe = -_rchar()
        before = _rchar()
        probe += before  # what reading /proc/self/io adds itself
        out = src.load({"w": columns}, driver="numpy") if how == "new" else src.load(into=into)
        read = _rchar() - before - probe
    chunks = _chunk_bytes(root)
    assert read < 2 * chunks  # each compressed chunk once (its B-tree-free file read whole), not once per block
    for block, index in zip(lc.unpack(out["w"]), columns.device_slices(value.shape), strict=True):
        assert np.asarray(block).tobytes() == np.ascontiguousarray(value[index]).tobytes()


def test_a_corrupt_chunk_raises_checkpoint_error_naming_the_array(orbax_dir: tuple[Path, np.ndarray]) -> None:
    root, _ = orbax_dir
    chunk = root / "w" / "1.0"
    chunk.write_bytes(b"not zstd" + chunk.read_bytes()[8:])
    into = {"w": lc.distribute_tensor(np.zeros((64, 40), np.float32), lc.Layout((None, "x"), MESH), driver="numpy")}
    for load in (
        lambda: checkpoint.load(root, {"w": lc.Layout(("x", None), MESH)}),
        lambda: checkpoint.load(root, into=into),
    ):
        with pytest.raises(lc.CheckpointError, match="'w'") as err:
            load()
        assert str(root) in str(err.value)


def test_an_opened_orbax_checkpoint_whose_metadata_changed_is_refused(orbax_dir: tuple[Path, np.ndarray]) -> None:
    """A Source records ``_METADATA`` and ``_sharding`` at open; a new save over them is refused by name."""
    root, value = orbax_dir
    src = checkpoint.open(root)
    assert sorted(Path(f).name for f in src.checkpoint.metadata_files) == ["_METADATA", "_sharding"]
    np.testing.assert_array_equal(lc.to_numpy(src.load(driver="numpy")["w"]), value)
    (root / "_sharding").unlink()
    with pytest.raises(lc.CheckpointError, match=r"_sharding.* was removed since this Source was opened"):
        src.load(driver="numpy")
