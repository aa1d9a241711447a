"""Every truncated or mutated layout proto gives a Layout or a layoutcore error, never a raw ``ValueError``,
``IndexError`` or ``DecodeError`` (docs/errors.md, "One rule for bad input").

Three kinds of bad input: every prefix of a serialized ``LayoutProto``; every byte changed to a few other
values; and named field mutations (a deleted local device, global id or dimension, ids out of range or
repeated, lists of different lengths). A mutation that still describes a valid layout must come back as
that layout, computed here from the proto's own fields (TF's rule: the device listed for local id ``g``
sits at mesh position ``g``); an inconsistent one must be refused.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import layoutcore_tensorflow as lctf
import pytest
from layoutcore_tensorflow import TensorFlowDriver

import layoutcore as lc

LAYOUTS = [
    lc.Layout(("x", None), lc.Mesh((2, 2), ("x", "y"))),
    lc.Layout((), lc.Mesh((4,), ("d",), name="m1")),
    lc.Layout((None, "b", "a"), lc.Mesh((2, 1), ("a", "b"))),
]
FULL = "/job:localhost/replica:0/task:0/device:CPU:{}"


def _from_str_or_error(data: bytes) -> lc.Layout | None:
    """``from_str(data)``, or None when it raises a layoutcore error; anything else fails the test."""
    try:
        return lctf.from_str(data)
    except lc.LayoutcoreError as err:
        assert isinstance(err, lc.LayoutError), type(err)
        return None


def test_every_truncation_is_refused_or_the_same_layout(driver: TensorFlowDriver) -> None:
    for layout in LAYOUTS:
        data = lctf.serialized_string(layout)
        for end in range(len(data)):
            got = _from_str_or_error(data[:end])
            assert got is None or got == layout, (layout, end, got)


def test_every_changed_byte_gives_a_layout_or_a_layout_error(driver: TensorFlowDriver) -> None:
    data = lctf.serialized_string(LAYOUTS[0])
    refused = 0
    for i in range(len(data)):
        for byte in {0x00, 0xFF, data[i] ^ 0x01, data[i] ^ 0x80} - {data[i]}:
            got = _from_str_or_error(data[:i] + bytes([byte]) + data[i + 1 :])
            if got is None:
                refused += 1
            else:  # still a valid layout (e.g. a device renamed '/job:mocalhost/...'): a whole, checked Layout
                assert isinstance(got, lc.Layout) and lc.Layout.from_string(got.to_string()) == got
    assert refused > 2 * len(data)  # most changes break the proto: the loop reached the checks


def _proto() -> Any:
    proto = lctf.as_proto(LAYOUTS[0])
    mesh = proto.mesh_config
    assert list(mesh.local_device_ids) == [0, 1, 2, 3] and list(mesh.local_devices) == [
        FULL.format(i) for i in range(4)
    ]
    return proto


def _set(field: str, values: list[Any]) -> Callable[[Any], None]:
    def change(proto: Any) -> None:
        proto.mesh_config.ClearField(field)
        getattr(proto.mesh_config, field).extend(values)

    return change


REFUSED: dict[str, Callable[[Any], Any]] = {
    "delete the last local device": lambda p: p.mesh_config.local_devices.pop(),
    "delete every local device": lambda p: p.mesh_config.ClearField("local_devices"),
    "delete the last local id": lambda p: p.mesh_config.local_device_ids.pop(),
    "delete every local id and device": lambda p: (
        p.mesh_config.ClearField("local_device_ids"),
        p.mesh_config.ClearField("local_devices"),
    ),
    "delete the last global id": lambda p: p.mesh_config.global_device_ids.pop(),
    "delete every global id": lambda p: p.mesh_config.ClearField("global_device_ids"),
    "one global id too many": lambda p: p.mesh_config.global_device_ids.append(4),
    "global ids out of order": _set("global_device_ids", [1, 0, 2, 3]),
    "a repeated global id": _set("global_device_ids", [0, 0, 2, 3]),
    "a negative global id": _set("global_device_ids", [-1, 0, 1, 2]),
    "delete the last dimension": lambda p: p.mesh_config.mesh_dimensions.pop(),
    "delete every dimension": lambda p: p.mesh_config.ClearField("mesh_dimensions"),
    "a dimension of size 0": lambda p: setattr(p.mesh_config.mesh_dimensions[0], "size", 0),
    "a dimension of size -3": lambda p: setattr(p.mesh_config.mesh_dimensions[0], "size", -3),
    "a dimension of size 2**62": lambda p: setattr(p.mesh_config.mesh_dimensions[0], "size", 2**62),
    "two dimensions named x": lambda p: setattr(p.mesh_config.mesh_dimensions[1], "name", "x"),
    "a dimension named ''": lambda p: setattr(p.mesh_config.mesh_dimensions[1], "name", ""),
    "a dimension named 'a,b'": lambda p: setattr(p.mesh_config.mesh_dimensions[1], "name", "a,b"),
    "a local id out of range": _set("local_device_ids", [0, 1, 2, 7]),
    "a repeated local id": _set("local_device_ids", [0, 1, 1, 3]),
    "a negative local id": _set("local_device_ids", [0, 1, 2, -1]),
    "a repeated local device": lambda p: (
        p.mesh_config.local_devices.pop(),
        p.mesh_config.local_devices.append(FULL.format(0)),
    ),
    "a local device that is no device": lambda p: (
        p.mesh_config.local_devices.pop(),
        p.mesh_config.local_devices.append("bogus"),
    ),
    "one global device for 4 positions": _set("global_devices", [FULL.format(0)]),
    "a spec naming no dimension": lambda p: setattr(p.sharding_specs[0], "sharding_spec", "z"),
    "an empty spec": lambda p: setattr(p.sharding_specs[1], "sharding_spec", ""),
    "two specs over x": lambda p: setattr(p.sharding_specs[1], "sharding_spec", "x"),
    "TF's match token": lambda p: setattr(p.sharding_specs[0], "sharding_spec", "match"),
    "a mesh name with '|'": lambda p: setattr(p.mesh_config, "name", "a|b"),
    "use_xla_spmd": lambda p: setattr(p.mesh_config, "use_xla_spmd", True),
    "a single-device mesh": lambda p: setattr(p.mesh_config, "single_device", FULL.format(0)),
    "a parted layout": lambda p: setattr(p, "type", p.PARTED),
    "no layout type": lambda p: setattr(p, "type", 0),
    "no mesh": lambda p: p.ClearField("mesh_config"),
}


#: Mutations of the layout's own fields: its mesh_config stays a valid MeshProto.
LAYOUT_ONLY = {"a spec naming no dimension", "an empty spec", "two specs over x", "TF's match token"}
LAYOUT_ONLY |= {"a parted layout", "no layout type", "no mesh"}


@pytest.mark.parametrize("mutation", list(REFUSED))
def test_an_inconsistent_proto_is_refused_with_a_layout_error(driver: TensorFlowDriver, mutation: str) -> None:
    proto = _proto()
    REFUSED[mutation](proto)
    with pytest.raises(lc.LayoutError):
        lctf.from_str(proto.SerializeToString())
    if mutation not in LAYOUT_ONLY:  # the MeshProto alone is refused too
        with pytest.raises(lc.LayoutError):
            lctf.from_proto(proto.mesh_config)


def test_a_consistent_mutation_is_the_layout_its_fields_describe(driver: TensorFlowDriver) -> None:
    mesh = lc.Mesh((2, 2), ("x", "y"))
    proto = _proto()
    proto.sharding_specs.pop()  # rank 1
    assert lctf.from_str(proto.SerializeToString()) == lc.Layout(
        ("x",), mesh.with_devices([f"CPU:{i}" for i in range(4)])
    )
    proto = _proto()
    _set("local_device_ids", [1, 0, 2, 3])(proto)  # the device listed first has global id 1: position 1
    got = lctf.from_str(proto.SerializeToString())
    assert got.mesh is not None and got.mesh.devices == ("CPU:1", "CPU:0", "CPU:2", "CPU:3")
    proto = _proto()
    proto.mesh_config.global_devices.extend(FULL.format(i) for i in range(4))  # the optional full list, consistent
    assert lctf.from_str(proto.SerializeToString()) == LAYOUTS[0].with_mesh(
        mesh.with_devices([f"CPU:{i}" for i in range(4)])
    )


def test_a_native_mesh_whose_ids_and_devices_disagree_is_refused(driver: TensorFlowDriver) -> None:
    """TF's own MeshProto parser accepts 4 local ids with 3 local devices; converting that native mesh is
    refused (it was a raw ``ValueError: zip() argument 2 is shorter than argument 1``)."""
    from tensorflow.experimental import dtensor

    mesh = _proto().mesh_config
    mesh.local_devices.pop()
    native = dtensor.Mesh.from_proto(mesh)
    with pytest.raises(lc.LayoutError, match="4 local device ids for 3 local devices"):
        lctf.from_tensorflow_mesh(native)
