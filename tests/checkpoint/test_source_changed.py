"""An opened ``checkpoint.open`` Source refuses to read once its checkpoint changed on disk.

A Source's metadata says where each tensor's bytes lie. Read by those offsets after the files were
rewritten, a load returned another tensor's bytes (a safetensors file rewritten with a larger first
tensor: ``b`` came back holding ``a``'s values). Oracle: the arrays written, and ``os.stat``.
"""

from __future__ import annotations

import os
import pickle
from pathlib import Path

import numpy as np
import pytest
import safetensors.numpy as stn

import layoutcore as lc
from layoutcore import checkpoint

MESH = lc.Mesh((2,), ("x",))
ROWS = lc.Layout(("x", None), MESH)


def _first(a: int) -> dict[str, np.ndarray]:
    return {"a": np.arange(a * 4, dtype=np.float32).reshape(a, 4), "b": np.full((4, 4), 7.0, np.float32)}


def _bump_mtime(path: Path) -> None:
    """A later modification time, as a rewrite a moment after the open leaves (the clock's tick is coarse)."""
    st = os.stat(path)
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000_000))


def test_an_unchanged_source_loads_again_and_again(tmp_path: Path) -> None:
    """Reads, a ``chmod`` and a new hard link (a snapshot) change no byte: no refusal."""
    path = tmp_path / "m.safetensors"
    stn.save_file(_first(4), str(path))
    with checkpoint.open(path) as src:
        for i in range(3):
            out = src.load({"b": ROWS}, driver="numpy")
            np.testing.assert_array_equal(lc.to_numpy(out["b"]), 7.0)
            if i == 0:
                os.chmod(path, 0o444)
                os.link(path, tmp_path / "snapshot.safetensors")


def test_a_replaced_safetensors_file_is_refused_not_read_by_the_old_offsets(tmp_path: Path) -> None:
    path = tmp_path / "m.safetensors"
    stn.save_file(_first(4), str(path))
    src = checkpoint.open(path)
    new = _first(16)  # a larger "a": "b" now lies further into the file
    new["b"][:] = 9.0
    stn.save_file(new, str(path))
    with pytest.raises(lc.CheckpointError, match=r"m\.safetensors.*since this Source was opened") as err:
        src.load({"b": ROWS}, driver="numpy")
    assert err.value.file == str(path.resolve())
    with pytest.raises(lc.CheckpointError, match="since this Source was opened"):
        src.read_plan({"b": ROWS}, process_devices=[0, 1])
    again = pickle.loads(pickle.dumps(err.value))  # the error crosses process boundaries intact
    assert type(again) is lc.CheckpointError and again.file == err.value.file and str(again) == str(err.value)
    # opened again: the new version, by its own offsets
    out = checkpoint.open(path).load({"a": ROWS, "b": ROWS}, driver="numpy")
    np.testing.assert_array_equal(lc.to_numpy(out["a"]), new["a"])
    np.testing.assert_array_equal(lc.to_numpy(out["b"]), 9.0)


@pytest.mark.parametrize(
    ("change", "says"),
    [
        ("grow", r"changed size \(\d+ -> \d+ bytes\)"),
        ("rewrite", "was rewritten"),
        ("remove", "was removed"),
    ],
)
def test_each_kind_of_change_is_named(tmp_path: Path, change: str, says: str) -> None:
    path = tmp_path / "m.safetensors"
    stn.save_file(_first(4), str(path))
    src = checkpoint.open(path)
    ino = os.stat(path).st_ino
    if change == "grow":
        with open(path, "ab") as f:  # in place: the same inode, more bytes
            f.write(b"\0" * 64)
    elif change == "rewrite":
        with open(path, "r+b") as f:  # in place: the same inode and size, other bytes
            f.seek(os.stat(path).st_size - 4)
            f.write(b"\1\2\3\4")
        _bump_mtime(path)
    else:
        path.unlink()
    if change != "remove":
        assert os.stat(path).st_ino == ino
    with pytest.raises(lc.CheckpointError, match=says):
        src.load(driver="numpy")


def test_an_overwritten_layoutcore_checkpoint_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "ckpt"
    first = {"w": lc.distribute_tensor(np.arange(32, dtype=np.float32).reshape(8, 4), ROWS, driver="numpy")}
    checkpoint.save(path, first)
    src = checkpoint.open(path)
    np.testing.assert_array_equal(lc.to_numpy(src.load(driver="numpy")["w"]), np.arange(32).reshape(8, 4))
    second = {"w": lc.distribute_tensor(np.ones((16, 4), np.float32), ROWS, driver="numpy")}
    checkpoint.save(path, second, overwrite=True)
    with pytest.raises(lc.CheckpointError, match=r"layoutcore\.json.*since this Source was opened") as err:
        src.load(driver="numpy")
    assert err.value.file == os.path.join(str(path), "layoutcore.json")
    into = {"w": lc.distribute_tensor(np.zeros((8, 4), np.float32), ROWS, driver="numpy")}
    with pytest.raises(lc.CheckpointError, match="since this Source was opened"):
        src.load(into=into)
    np.testing.assert_array_equal(lc.to_numpy(into["w"]), 0.0)  # nothing was written
    np.testing.assert_array_equal(lc.to_numpy(checkpoint.load(path, driver="numpy")["w"]), 1.0)
