"""TF DTensor's ``Mesh`` members on layoutcore's Mesh give what TF's own Mesh gives for the same string.

The oracle is ``tf.experimental.dtensor.Mesh.from_string(mesh.to_string())``: TF's parser and
members, which share no code with layoutcore's.
"""

from __future__ import annotations

import pytest
from tensorflow.experimental import dtensor

import layoutcore as lc

FULL = "/job:localhost/replica:0/task:0/device:{}:{}".format
WORKER = "/job:worker/replica:0/task:{}/device:CPU:{}".format

MESHES = {
    "3x2 CPU": lc.Mesh((3, 2), ("x", "y"), [f"CPU:{i}" for i in range(6)]),
    "named 1-D": lc.create_mesh([("batch", 6)], [f"CPU:{i}" for i in range(6)], name="m"),
    "permuted": lc.Mesh((2, 2), ("x", "y"), ["CPU:3", "CPU:1", "CPU:0", "CPU:2"]),
    "GPU": lc.Mesh((2,), ("x",), ["GPU:0", "GPU:1"]),
    "TPU 2x2x2": lc.Mesh((2, 2, 2), ("a", "b", "c"), [f"TPU:{i}" for i in range(8)]),
    "other task": lc.Mesh((2,), ("x",), [WORKER(1, 0), WORKER(1, 1)]),
}


@pytest.mark.parametrize("name", list(MESHES))
def test_mesh_members_match_tf(name: str) -> None:
    ours = MESHES[name]
    tf_mesh = dtensor.Mesh.from_string(ours.to_string())
    for axis in [*ours.axis_names, "nope"]:
        assert (axis in ours) == (axis in tf_mesh) == ours.contains_dim(axis) == tf_mesh.contains_dim(axis)
    for axis in ours.axis_names:
        assert ours.dim_size(axis) == tf_mesh.dim_size(axis)
        assert tuple(ours[axis]) == tuple(tf_mesh[axis])
    assert ours.strides == list(tf_mesh.strides)
    assert ours.dim_names == list(tf_mesh.dim_names)
    assert ours.device_type() == tf_mesh.device_type()
    assert ours.local_devices() == list(tf_mesh.local_devices())
    assert ours.num_local_devices() == tf_mesh.num_local_devices()
    assert ours.size == tf_mesh.size and list(ours.shape) == list(tf_mesh.shape())


def test_unknown_axis_is_a_value_error_in_both() -> None:
    ours = MESHES["3x2 CPU"]
    tf_mesh = dtensor.Mesh.from_string(ours.to_string())
    with pytest.raises(ValueError):
        tf_mesh.dim_size("z")
    with pytest.raises(lc.LayoutError):  # also a ValueError, so TF's except clauses keep working
        ours.dim_size("z")


def test_mixed_device_types_are_rejected_by_both() -> None:
    text = f"|x=2|0,1|0,1|{FULL('CPU', 0)},{FULL('TPU', 0)}"
    with pytest.raises(ValueError, match="More than one device type"):
        dtensor.Mesh.from_string(text)
    with pytest.raises(lc.LayoutError, match="one type"):
        lc.Mesh.from_string(text)
    with pytest.raises(lc.LayoutError, match="one type"):
        lc.Mesh((2,), ("x",), ["CPU:0", "TPU:0"])


def test_tf_strings_parse_to_the_same_members() -> None:
    tf_mesh = dtensor.Mesh.from_string(f"|x=2|0,1|0,1|{FULL('GPU', 0)},{FULL('GPU', 1)}")
    ours = lc.Mesh.from_string(tf_mesh.to_string())
    assert ours.device_type() == tf_mesh.device_type() == "GPU"
    assert ours.local_devices() == list(tf_mesh.local_devices())
