"""export_safetensors of a layoutcore-format checkpoint, and the public entry points on foreign paths."""

from __future__ import annotations

import json
from pathlib import Path

import ml_dtypes
import numpy as np
import safetensors

import layoutcore as lc
import layoutcore.checkpoint as ckpt
from layoutcore._dtypes import numpy_dtype
from layoutcore.checkpoint._foreign._safetensors import SAFETENSORS_DTYPES


def _read_all(directory: Path) -> dict[str, np.ndarray]:
    index = json.loads((directory / "model.safetensors.index.json").read_text())
    out = {}
    for shard in sorted(set(index["weight_map"].values())):
        for key, entry in safetensors.deserialize((directory / shard).read_bytes()):
            dtype = numpy_dtype(SAFETENSORS_DTYPES[entry["dtype"]])
            out[key] = np.frombuffer(bytes(entry["data"]), dtype=dtype).reshape(entry["shape"])
    return out


def test_layoutcore_checkpoint_exports_and_reloads(tmp_path: Path) -> None:
    mesh = lc.Mesh((2, 2), ("x", "y"))
    rng = np.random.default_rng(3)
    w = rng.standard_normal((6, 5)).astype(np.float32)
    e = rng.standard_normal((4, 8)).astype(ml_dtypes.bfloat16)
    tree = {
        "layer": {
            "w": lc.distribute_tensor(w, lc.Layout(("x", "y"), mesh), driver="numpy"),
            "e": lc.distribute_tensor(e, lc.Layout((None, ("y", "x")), mesh), driver="numpy"),
        }
    }
    ckpt.save(tmp_path / "lc", tree)
    index = ckpt.export_safetensors(tmp_path / "lc", tmp_path / "st", max_shard_size=64)
    got = _read_all(index.parent)
    assert set(got) == {"layer.w", "layer.e"}
    assert got["layer.w"].tobytes() == w.tobytes() and got["layer.e"].tobytes() == e.tobytes()
    assert len(list(index.parent.glob("*.safetensors"))) == 2
    # the export reads back through the public entry points, under a new layout
    info = ckpt.inspect(index.parent)
    assert info.tensors["layer.e"].shape == (4, 8) and info.tensors["layer.e"].dtype == "bfloat16"
    out = ckpt.load(index.parent, {"layer.e": lc.Layout(("x", "y"), mesh)}, driver="numpy")
    assert lc.to_numpy(out["layer.e"]).tobytes() == e.tobytes()
    plan = ckpt.read_plan(index.parent, {"layer.e": lc.Layout(("x", None), mesh)}, process_devices=[0])
    assert plan.tensors["layer.e"] == (2 * 8 * 2, 2 * 8 * 2)


def test_export_folder_follows_the_umask(tmp_path: Path) -> None:
    """Regression: the export folder was mode 0700 (tempfile.mkdtemp's) whatever the umask."""
    import os
    import stat

    ckpt.save(tmp_path / "lc", {"w": np.arange(6, dtype=np.int16)})
    for umask, mode in ((0o022, 0o755), (0o077, 0o700), (0o002, 0o775)):
        old = os.umask(umask)
        try:
            out = tmp_path / f"st-{umask:o}"
            ckpt.export_safetensors(tmp_path / "lc", out)
            ckpt.export_safetensors(tmp_path / "lc", out, overwrite=True)  # the replacing path too
        finally:
            os.umask(old)
        assert stat.S_IMODE(out.stat().st_mode) == mode, (oct(umask), oct(out.stat().st_mode))
