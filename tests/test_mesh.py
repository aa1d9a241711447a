"""Mesh: construction, validation, canonical devices, and TF DTensor's mesh strings (docs/framework-facts.md#tf-mesh-strings)."""

from __future__ import annotations

import dataclasses
import pickle
import types

import numpy as np
import pytest
from _support import DEVICES6, FULL
from hypothesis import given
from hypothesis import strategies as st

import layoutcore
from layoutcore import DeviceMesh, Layout, LayoutcoreError, LayoutError, Mesh, create_mesh

FULL6 = ",".join(FULL(i) for i in range(6))


# -- TF strings, byte for byte ------------------------------------------------------------------
def test_to_string_matches_tf_create_mesh_3x2() -> None:
    mesh = create_mesh([("x", 3), ("y", 2)], devices=DEVICES6)
    assert mesh.to_string() == f"|x=3,y=2|0,1,2,3,4,5|0,1,2,3,4,5|{FULL6}"


def test_to_string_matches_tf_create_mesh_x6() -> None:
    assert create_mesh([("x", 6)], devices=DEVICES6).to_string() == f"|x=6|0,1,2,3,4,5|0,1,2,3,4,5|{FULL6}"


def test_to_string_names_the_mesh() -> None:
    mesh = create_mesh([("x", 3), ("y", 2)], devices=DEVICES6, mesh_name="my_mesh")
    assert mesh.name == "my_mesh"
    assert mesh.to_string() == f"my_mesh|x=3,y=2|0,1,2,3,4,5|0,1,2,3,4,5|{FULL6}"


@pytest.mark.parametrize("devices", [["CPU:0"], None])
def test_one_device_mesh_string(devices: list[str] | None) -> None:
    # TF: create_mesh([('x', 1)]) -> '|x=1|0|0|/job:localhost/replica:0/task:0/device:CPU:0'
    assert create_mesh([("x", 1)], devices=devices).to_string() == f"|x=1|0|0|{FULL(0)}"


def test_to_string_keeps_device_order() -> None:
    # TF create_mesh(devices=[CPU:5, CPU:3, ...]) keeps ids 0..5 and lists the devices as given.
    order = [5, 3, 1, 0, 2, 4]
    mesh = Mesh((3, 2), ("x", "y"), [f"CPU:{i}" for i in order])
    assert mesh.to_string() == "|x=3,y=2|0,1,2,3,4,5|0,1,2,3,4,5|" + ",".join(FULL(i) for i in order)


# -- from_string: what TF prints ------------------------------------------------------------------
def test_from_string_round_trip_is_equal_and_identical(mesh: Mesh) -> None:
    text = mesh.to_string()
    back = Mesh.from_string(text)
    assert back == mesh
    assert back.to_string() == text


def test_from_string_reads_name_prefix() -> None:
    back = Mesh.from_string(f"my_mesh|x=3,y=2|0,1,2,3,4,5|0,1,2,3,4,5|{FULL6}")
    assert (back.name, back.shape, back.axis_names, back.devices) == ("my_mesh", (3, 2), ("x", "y"), tuple(DEVICES6))


def test_from_string_ignores_use_xla_spmd_suffix(mesh: Mesh) -> None:
    assert Mesh.from_string(mesh.to_string() + "|use_xla_spmd") == mesh


def test_from_string_places_devices_by_local_id() -> None:
    # docs/framework-facts.md#permuted-meshes: local_device_ids [5,3,1,0,2,4] on CPU:0..5; with ['x', U] TF's unpack gave
    # CPU:0 -> rows 4:6, CPU:1 -> 2:4, CPU:2 -> 0:2, CPU:3 -> 0:2, CPU:4 -> 2:4, CPU:5 -> 4:6.
    mesh = Mesh.from_string(f"|x=3,y=2|0,1,2,3,4,5|5,3,1,0,2,4|{FULL6}")
    slices = Layout(["x", None], mesh).device_slices((6, 6))
    rows = {device: (s[0].start, s[0].stop) for device, s in zip(mesh.devices or (), slices, strict=True)}
    assert rows == {
        "CPU:0": (4, 6),
        "CPU:1": (2, 4),
        "CPU:2": (0, 2),
        "CPU:3": (0, 2),
        "CPU:4": (2, 4),
        "CPU:5": (4, 6),
    }


def test_from_string_accepts_permuted_global_ids() -> None:
    # docs/framework-facts.md#permuted-meshes: '|x=2|1,0|1,0|CPU:1,CPU:0' is accepted by TF and CPU:1 holds [2, 3] of arange(4).
    mesh = Mesh.from_string(f"|x=2|1,0|1,0|{FULL(1)},{FULL(0)}")
    slices = Layout(["x"], mesh).device_slices((4,))
    held = {d: np.arange(4)[s].tolist() for d, s in zip(mesh.devices or (), slices, strict=True)}
    assert held == {"CPU:1": [2, 3], "CPU:0": [0, 1]}


def test_from_string_multi_client_partial_string_is_abstract() -> None:
    # docs/framework-facts.md#tf-mesh-strings: client 1's mesh string lists only its own two devices.
    worker = "/job:worker/replica:0/task:1/device:CPU:{}".format
    mesh = Mesh.from_string(f"|x=2,y=2|0,1,2,3|2,3|{worker(0)},{worker(1)}")
    assert mesh.is_abstract and mesh.shape == (2, 2) and mesh.axis_names == ("x", "y")


def test_from_string_global_device_suffix_gives_concrete_remote_devices() -> None:
    worker = "/job:worker/replica:0/task:{}/device:CPU:{}".format
    all4 = [worker(0, 0), worker(0, 1), worker(1, 0), worker(1, 1)]
    mesh = Mesh.from_string(f"|x=2,y=2|0,1,2,3|2,3|{all4[2]},{all4[3]}|{','.join(all4)}")
    assert mesh.devices == tuple(all4)  # non-local names stay full


@pytest.mark.parametrize("text", ["|x=3,y=2|*CPU", "|x=3,y=2|0,1,2,3,4,5||"])
def test_from_string_generator_and_remote_meshes_are_abstract(text: str) -> None:
    mesh = Mesh.from_string(text)
    assert mesh == Mesh((3, 2), ("x", "y"))
    assert mesh.devices is None


@pytest.mark.parametrize(
    "text",
    [
        "",
        "|x=3,y=2|",
        FULL(0),  # a single-device mesh has no axes
        f"|x=4|0,1,2|0,1,2|{FULL(0)},{FULL(1)},{FULL(2)}",  # size mismatch
        f"|x3|0,1,2|0,1,2|{FULL(0)},{FULL(1)},{FULL(2)}",  # not name=size
        f"|x=2|0,1|0|{FULL(0)},{FULL(1)}",  # ids and devices disagree
        f"|x=2|0,a|0,1|{FULL(0)},{FULL(1)}",
        f"|x=2,x=1|0,1|0,1|{FULL(0)},{FULL(1)}",  # TF accepts duplicate names; we cannot
    ],
)
def test_from_string_rejects_malformed_text_naming_it(text: str) -> None:
    with pytest.raises(LayoutError) as info:
        Mesh.from_string(text)
    assert repr(text) in str(info.value)


def test_from_string_rejects_non_str() -> None:
    with pytest.raises(LayoutError, match="42"):
        Mesh.from_string(42)  # type: ignore[arg-type]


# -- properties ---------------------------------------------------------------------------------
def test_properties(mesh: Mesh) -> None:
    assert mesh.shape == (3, 2)
    assert mesh.axis_names == ("x", "y")
    assert mesh.dim_names == ["x", "y"]
    assert (mesh.size, mesh.ndim) == (6, 2)
    assert (mesh.axis_size("x"), mesh.axis_size("y")) == (3, 2)
    assert mesh.devices == tuple(DEVICES6)
    assert mesh.name == ""
    assert not mesh.is_abstract


def test_abstract_mesh_has_no_devices() -> None:
    mesh = Mesh((2, 4), ("data", "model"))
    assert mesh.devices is None and mesh.is_abstract and mesh.size == 8


def test_axis_size_of_unknown_axis_names_it(mesh: Mesh) -> None:
    with pytest.raises(LayoutError, match="'z'"):
        mesh.axis_size("z")


def test_create_mesh_and_alias() -> None:
    assert DeviceMesh is Mesh
    assert create_mesh([("x", 3), ("y", 2)]) == Mesh((3, 2), ("x", "y"))
    assert create_mesh([("b", 2)], name="n").name == "n"


def test_numpy_integer_sizes_are_accepted_as_ints() -> None:
    mesh = Mesh(np.array([3, 2]), ("x", "y"))
    assert mesh == Mesh((3, 2), ("x", "y")) and all(type(s) is int for s in mesh.shape)
    assert create_mesh([("x", np.int64(4))]).shape == (4,)


def test_single_int_and_str_shorthand() -> None:
    assert Mesh(4, "x") == Mesh((4,), ("x",))  # type: ignore[arg-type]


def test_with_devices_makes_a_new_mesh(mesh: Mesh) -> None:
    abstract = mesh.with_devices(None)
    assert abstract.devices is None and mesh.devices == tuple(DEVICES6)


# -- validation ---------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("args", "kwargs", "named"),
    [
        (((), ()), {}, "()"),
        (((3, 0), ("x", "y")), {}, "(3, 0)"),
        (((3, -2), ("x", "y")), {}, "(3, -2)"),
        (((3, 2.0), ("x", "y")), {}, "2.0"),
        (((3, True), ("x", "y")), {}, "True"),
        (((3, 2), ("x",)), {}, "('x',)"),
        (((3, 2), ("x", "y", "z")), {}, "'z'"),
        (((3, 2), ("x", "x")), {}, "'x'"),
        (((3, 2), ("x", "")), {}, "''"),
        (((3, 2), ("x", None)), {}, "None"),
        (((2,), ("a,b",)), {}, "'a,b'"),
        (((2,), ("a|b",)), {}, "'a|b'"),
        (((2,), ("a=b",)), {}, "'a=b'"),
        (((2,), ("a b",)), {}, "'a b'"),
        (((2,), ("a\tb",)), {}, "'a\\tb'"),
        (((2,), ("unsharded",)), {}, "'unsharded'"),
        (((2,), ("match",)), {}, "'match'"),
        (((3, 2), ("x", "y"), DEVICES6[:5]), {}, "5"),
        (((2,), ("x",), ["CPU:0", "cpu:0"]), {}, "CPU:0"),
        (((2,), ("x",), ["CPU:0", FULL(0)]), {}, "CPU:0"),
        (((2,), ("x",), ["CPU:0", "GPU"]), {}, "'GPU'"),
        (((2,), ("x",)), {"name": "a|b"}, "'a|b'"),
        (((2,), ("x",)), {"name": "a b"}, "'a b'"),
    ],
)
def test_invalid_mesh_raises_layout_error_naming_the_value(args: tuple, kwargs: dict, named: str) -> None:
    with pytest.raises(LayoutError) as info:
        Mesh(*args, **kwargs)
    assert isinstance(info.value, ValueError) and isinstance(info.value, LayoutcoreError)
    assert named in str(info.value)


def test_create_mesh_rejects_malformed_dims() -> None:
    with pytest.raises(LayoutError, match="mesh_dims"):
        create_mesh([("x", 3, 1)])  # type: ignore[list-item]


# -- canonical devices --------------------------------------------------------------------------
@pytest.mark.parametrize(
    "name", ["CPU:0", "cpu:0", "/device:CPU:0", FULL(0), "/job:localhost/replica:0/task:0/device:cpu:0"]
)
def test_device_name_forms_are_canonical(name: str) -> None:
    assert Mesh((1,), ("x",), [name]).devices == ("CPU:0",)


def test_remote_device_names_stay_full() -> None:
    remote = "/job:worker/replica:0/task:1/device:CPU:0"
    assert Mesh((1,), ("x",), [remote]).devices == (remote,)


def test_native_device_objects_by_duck_typing() -> None:
    jax_like = types.SimpleNamespace(platform="cpu", id=3)
    torch_like = types.SimpleNamespace(type="cpu", index=1)
    tf_like = types.SimpleNamespace(device_type="CPU", device_index=2)
    assert Mesh((3,), ("x",), [jax_like, torch_like, tf_like]).devices == ("CPU:3", "CPU:1", "CPU:2")


def test_unreadable_device_object_is_named() -> None:
    with pytest.raises(LayoutError, match="object"):
        Mesh((1,), ("x",), [object()])


def test_nested_device_array_is_flattened_in_c_order() -> None:
    grid = np.array(DEVICES6, dtype=object).reshape(3, 2)
    assert Mesh((3, 2), ("x", "y"), grid).devices == tuple(DEVICES6)


# -- value semantics ------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "value",
    [
        Mesh((3, 2), ("x", "y")),
        Mesh((3, 2), ("x", "y"), DEVICES6, name="m"),
        Mesh((1,), ("batch",), ["/job:worker/replica:0/task:1/device:CPU:0"]),
    ],
)
def test_repr_evaluates_back_and_pickles(value: Mesh) -> None:
    namespace = {name: getattr(layoutcore, name) for name in layoutcore.__all__}
    assert eval(repr(value), namespace) == value
    assert pickle.loads(pickle.dumps(value)) == value


def test_eq_and_hash(mesh: Mesh) -> None:
    same = Mesh([3, 2], ["x", "y"], [f"cpu:{i}" for i in range(6)])
    assert mesh == same and hash(mesh) == hash(same)
    assert len({mesh, same}) == 1
    assert mesh != Mesh((3, 2), ("x", "y"))  # abstract differs from concrete
    assert mesh != Mesh((3, 2), ("x", "y"), DEVICES6, name="other")  # as TF: the name counts
    assert mesh != Mesh((3, 2), ("x", "y"), DEVICES6[::-1])  # as TF: the device order counts
    assert mesh != Mesh((3, 2), ("a", "y"), DEVICES6)
    assert mesh != "not a mesh"


def test_is_immutable(mesh: Mesh) -> None:
    with pytest.raises(dataclasses.FrozenInstanceError):
        mesh.shape = (6,)  # type: ignore[misc]
    with pytest.raises(dataclasses.FrozenInstanceError):
        mesh.name = "n"  # type: ignore[misc]


def test_str_is_short(mesh: Mesh) -> None:
    assert str(mesh) == "Mesh(x=3, y=2)"


@st.composite
def meshes(draw: st.DrawFn) -> Mesh:
    shape = draw(st.lists(st.integers(1, 3), min_size=1, max_size=3))
    names = draw(
        st.lists(
            st.from_regex(r"[a-z][a-z0-9_]{0,5}", fullmatch=True), min_size=len(shape), max_size=len(shape), unique=True
        ).filter(lambda ns: not {"match", "unsharded"} & set(ns))
    )
    size = int(np.prod(shape))
    devices = draw(st.none() | st.permutations([f"CPU:{i}" for i in range(size)]))
    name = draw(st.sampled_from(["", "m", "my_mesh"]))
    return Mesh(shape, names, devices, name=name)


@given(meshes())
def test_string_round_trip_property(mesh: Mesh) -> None:
    back = Mesh.from_string(mesh.to_string())
    # An abstract mesh is written over CPU:0..n-1 and reads back concrete.
    assert back == (mesh if mesh.devices is not None else mesh.with_devices([f"CPU:{i}" for i in range(mesh.size)]))
    assert back.to_string() == mesh.to_string()
    assert eval(repr(mesh), {"Mesh": Mesh}) == mesh


# -- every bad input is a typed error, checked before anything is allocated ------------------
class _IndexRaises:
    """An int-like object whose ``__index__`` raises."""

    def __index__(self) -> int:
        raise RuntimeError("no index today")


@pytest.mark.parametrize(
    "text",
    [
        f"|x=\u00b2|0|0|{FULL(0)}",  # a unicode superscript digit: str.isdigit() says yes, int() says no
        f"|x=\u0662|0,1|0,1|{FULL(0)},{FULL(1)}",  # an Arabic-Indic 2: int() would read it
        f"|x={'9' * 4301}|0|0|{FULL(0)}",  # over int()'s 4 300-digit limit
        f"|x=999999999999999999999999999999,y=2|0|0|{FULL(0)}",  # over int64
        f"|x=4294967296,y=4294967296|0|0|{FULL(0)}",  # each fits, the product does not
        f"|x=1e11|0|0|{FULL(0)}",
        f"|x=2|0,1|0,1|{FULL(0)},{FULL(1)}|{FULL(1)},{FULL(0)}",  # local devices disagree with the global ones
        f"|x=2|0,1|0,5|{FULL(0)},{FULL(1)}",  # a local id outside the mesh
        f"|x=2|0,1|0,0|{FULL(0)},{FULL(1)}",  # a local id twice
        f"|x=2|0,1|0,1|{FULL(0)},{FULL(0)}",  # a local device twice
        f"|x=2,y=2|0,1,2,3|7|{FULL(0)}",  # a partial (multi-client) string with a bad local id
        f"|x=2|0,1|0,1|{FULL(0)},/job:localhost/replica:0/task:0/device:TPU:0",  # two device types
        f"|x=2|0,1|0,1|{FULL(0)},{FULL(1)}|{FULL(0)}",  # too few global devices
        f"|x=2|0,1|0,1|{FULL(0)},{FULL(1)}|{FULL(0)},{FULL(1)}|extra",  # a seventh field
        f"|x=2|0,0|0,1|{FULL(0)},{FULL(1)}",  # global ids not a permutation
        f"|x=2|0,1,2|0,1|{FULL(0)},{FULL(1)}",  # more global ids than devices
        f"|x\x00=2|0,1|0,1|{FULL(0)},{FULL(1)}",  # a NUL byte in an axis name
        f"|x=2|0,1|0,1|{FULL(0)},/job:localhost/replica:0/task:0/device:CPU:{'1' * 5000}",
    ],
)
def test_from_string_rejects_issue_9_inputs_with_a_layout_error(text: str) -> None:
    with pytest.raises(LayoutError) as info:
        Mesh.from_string(text)
    assert isinstance(info.value, LayoutcoreError) and info.value.value == text
    assert len(str(info.value)) < 2000  # the value is named, cut to a readable length


def test_from_string_checks_sizes_before_allocating() -> None:
    import tracemalloc

    text = f"|x=100000000000|0|0|{FULL(0)}"  # 10**11 devices claimed by a 70-byte string
    tracemalloc.start()
    try:
        with pytest.raises(LayoutError, match="100000000000"):
            Mesh.from_string(text)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 1_000_000, f"parsing a bad {len(text)}-byte mesh string allocated {peak} bytes"


def test_generator_mesh_string_of_any_size_is_abstract_and_cheap() -> None:
    mesh = Mesh.from_string("|x=100000000000|*CPU")
    assert mesh.is_abstract and mesh.size == 10**11


def test_to_string_of_a_huge_abstract_mesh_is_a_typed_error() -> None:
    from layoutcore._mesh import MAX_STRING_DEVICES

    mesh = Mesh((10**12,), ("x",))
    with pytest.raises(LayoutError, match="MAX_STRING_DEVICES"):
        mesh.to_string()
    assert MAX_STRING_DEVICES >= 1_000_000  # the documented bound leaves room for the scale target
    assert mesh.local_devices() == [] and mesh.num_local_devices() == 0


@pytest.mark.parametrize(
    ("args", "kwargs"),
    [
        (((_IndexRaises(),), ("x",)), {}),
        (((2**32, 2**32), ("x", "y")), {}),  # more devices than int64 ids
        (((10**5000,), ("x",)), {}),
        (((2,), ("x\x00",)), {}),  # TF cannot use a NUL byte in a name
        (((2,), ("x\x7f",)), {}),
        (((2,), ("x",)), {"name": "m\x00"}),
        (((2,), ("x",), ["CPU:0", "TPU:0"]), {}),  # mixed device types, as TF rejects
        (((2,), ("x",), ["CPU:0", "/job:worker/replica:0/task:1/device:GPU:0"]), {}),
        (((2,), ("x",), "CPU:0"), {}),  # a string is not a device list
        (((2,), ("x",), 5), {}),
        (((2,), ("x",), ["CPU:0", "CPU:\u0661"]), {}),  # unicode digits in a device index
        (((2,), ("x",), ["CPU:0", "CPU:" + "1" * 5000]), {}),
        ((None, ("x",)), {}),
        (((2,), None), {}),
        ((np.array([[2]]), ("x",)), {}),  # an array row is not an int
        (((2,), ("x",), range(10**12)), {}),  # counted before it is copied
        (((2,), ("x",), range(10**20)), {}),  # len() overflows
    ],
)
def test_constructor_rejects_issue_9_inputs_with_a_layout_error(args: tuple, kwargs: dict) -> None:
    with pytest.raises(LayoutError) as info:
        Mesh(*args, **kwargs)
    assert isinstance(info.value, LayoutcoreError)


def test_mixed_device_types_error_names_the_types() -> None:
    with pytest.raises(LayoutError, match=r"\['CPU', 'TPU'\]"):
        Mesh((2,), ("x",), ["CPU:0", "TPU:0"])


def test_create_mesh_rejects_bad_dims_typed() -> None:
    for dims in (None, 5, "xy", [("x",)], [("x", 2, 3)], [("x", _IndexRaises())]):
        with pytest.raises(LayoutError):
            create_mesh(dims)  # type: ignore[arg-type]


# -- scale: linear construction and parsing (timed in benchmarks/bench_mesh_scale.py) ------------------
def test_a_100k_device_mesh_round_trips() -> None:
    devices = [f"CPU:{i}" for i in range(100_000)]
    mesh = Mesh((1000, 100), ("x", "y"), devices)
    text = mesh.to_string()
    assert Mesh.from_string(text) == mesh
    assert text.count(",") == 3 * 99_999 + 1  # ids twice, devices once, one dims comma


def test_a_mesh_of_20000_axes_round_trips() -> None:
    names = [f"a{i}" for i in range(20_000)]
    mesh = Mesh((1,) * 20_000, names)
    assert Mesh.from_string(mesh.to_string()) == mesh.with_devices(["CPU:0"])
    with pytest.raises(LayoutError, match="unique"):
        Mesh((1,) * 20_001, [*names, "a7"])


def test_permuted_local_ids_of_many_devices_place_by_id() -> None:
    n = 1000
    ids = list(reversed(range(n)))
    text = f"|x={n}|{','.join(map(str, range(n)))}|{','.join(map(str, ids))}|{','.join(FULL(i) for i in range(n))}"
    mesh = Mesh.from_string(text)
    assert mesh.devices == tuple(f"CPU:{n - 1 - g}" for g in range(n))


# -- TF DTensor's Mesh members (values from docs/framework-facts.md#tf-mesh-strings; tests/drivers/tensorflow checks them against TF) --
def test_tf_mesh_members(mesh: Mesh) -> None:
    assert "x" in mesh and "y" in mesh and "z" not in mesh and 3 not in mesh
    assert mesh.contains_dim("y") and not mesh.contains_dim("q")
    assert mesh.dim_size("x") == 3 and mesh.dim_size("y") == 2
    assert mesh["x"] == layoutcore.MeshDimension(name="x", size=3) == ("x", 3)
    assert mesh.strides == [2, 1]
    assert Mesh((4, 3, 2), ("a", "b", "c")).strides == [6, 2, 1]
    assert mesh.device_type() == "CPU"
    assert mesh.local_devices() == [FULL(i) for i in range(6)]
    assert mesh.num_local_devices() == 6


def test_tf_mesh_members_refuse_unknown_axes_typed(mesh: Mesh) -> None:
    for bad in ("z", 3, None):
        with pytest.raises(LayoutError, match="not in the mesh"):
            mesh.dim_size(bad)  # type: ignore[arg-type]
        with pytest.raises(LayoutError, match="not in the mesh"):
            mesh[bad]  # type: ignore[index]


def test_mesh_is_not_iterable_through_getitem(mesh: Mesh) -> None:
    with pytest.raises(TypeError):
        iter(mesh)  # type: ignore[call-overload]


def test_strides_give_coordinates(mesh: Mesh) -> None:
    for position in range(mesh.size):
        coordinate = tuple((position // s) % n for s, n in zip(mesh.strides, mesh.shape, strict=True))
        assert coordinate == tuple(int(c) for c in np.unravel_index(position, mesh.shape))


def test_device_type_of_abstract_and_remote_meshes() -> None:
    assert Mesh((2,), ("x",)).device_type() is None
    worker = "/job:worker/replica:0/task:1/device:GPU:{}".format
    remote = Mesh((2,), ("x",), [worker(0), worker(1)])
    assert remote.device_type() == "GPU"
    assert remote.local_devices() == [worker(0), worker(1)]


def test_equality_compares_every_field_and_hash_agrees_with_it() -> None:
    devices = [f"CPU:{i}" for i in range(8)]
    base = Mesh((4, 2), ("x", "y"), devices, name="m")
    same = Mesh((4, 2), ("x", "y"), [d.lower() for d in devices], name="m")
    assert base == same and hash(base) == hash(same) and base is not same
    assert base == pickle.loads(pickle.dumps(base)) and hash(base) == hash(pickle.loads(pickle.dumps(base)))
    others = [
        Mesh((4, 2), ("x", "y"), devices[::-1], name="m"),  # only the device order differs
        Mesh((4, 2), ("x", "y"), devices, name="n"),
        Mesh((4, 2), ("x", "z"), devices, name="m"),
        Mesh((2, 4), ("x", "y"), devices, name="m"),
        Mesh((4, 2), ("x", "y"), name="m"),
    ]
    for other in others:
        assert base != other and other != base
    assert len({base, same, *others}) == 1 + len(others)
    # A mesh rebound to devices (the front-end's path) is equal to, and hashes as, one built with them.
    bound = Mesh((4, 2), ("x", "y"), name="m")._with_checked_devices(tuple(devices))
    assert bound == base and hash(bound) == hash(base)
    assert (base == "not a mesh") is False


@pytest.mark.parametrize("job", ["my-worker", "w.1", "1w", "_w", "a-b.c"])
def test_job_names_tf_cannot_parse_are_refused_typed(job: str) -> None:
    device = f"/job:{job}/replica:0/task:0/device:CPU:0"
    with pytest.raises(LayoutError, match="job name") as info:
        Mesh((1,), ("x",), [device])
    assert info.value.value == device and repr(job) in str(info.value)


@pytest.mark.parametrize("job", ["worker", "w_1", "W", "a1"])
def test_job_names_tf_parses_are_kept(job: str) -> None:
    device = f"/job:{job}/replica:0/task:0/device:CPU:0"
    mesh = Mesh((1,), ("x",), [device])
    assert mesh.devices == (device,) and Mesh.from_string(mesh.to_string()) == mesh
