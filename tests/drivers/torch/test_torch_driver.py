"""The torch driver's own behaviour: placements, conversions, modes, pack/relayout/fetch_layout, Variable.

Expected values come from layoutcore.geometry, from torch's own DTensor calls made directly (an
independent oracle), or from the measured framework behaviour (docs/framework-facts.md); never from the driver's output.
"""

from __future__ import annotations

import json
import textwrap

import layoutcore_torch
import numpy as np
import pytest
import torch
from conftest import run_python
from layoutcore_torch import TorchDriver, _private
from torch.distributed.tensor import DTensor, Partial, Replicate, Shard, distribute_tensor

import layoutcore as lc
from layoutcore import Layout, Mesh, UnsupportedLayoutError
from layoutcore.driver import Capability


def per_device(d: DTensor) -> list[np.ndarray]:
    """Per simulated rank, the data torch holds (raw torch calls), rank order = row-major mesh order."""
    local = d.to_local()
    n = d.device_mesh.size()
    if _private.is_local_tensor(local):
        tensors = _private.local_tensors(local)
        return [tensors[r].numpy() for r in range(n)]
    return [local.numpy()] * n


def expected_pieces(x: np.ndarray, layout: Layout) -> list[np.ndarray]:
    return [x[s] for s in layout.device_slices(x.shape)]


# ---------------------------------------------------------------------------------------------
# Layout <-> placements, Mesh <-> DeviceMesh
# ---------------------------------------------------------------------------------------------
MESH_XYZ = Mesh((2, 2, 2), ("a", "b", "c"))

PLACEMENTS = [  # (layout axes, mesh, torch placements): the mapping rules, written out
    (("x", None), "32", (Shard(0), Replicate())),
    ((None, "y"), "32", (Replicate(), Shard(1))),
    (("y", "x"), "32", (Shard(1), Shard(0))),
    (("x", "y"), "32", (Shard(0), Shard(1))),
    ((("x", "y"), None), "32", (Shard(0), Shard(0))),
    ((None, None), "32", (Replicate(), Replicate())),
    ((), "32", (Replicate(), Replicate())),
    ((("a", "c"), "b"), "xyz", (Shard(0), Shard(1), Shard(0))),
    ((None, None, ("b", "c")), "xyz", (Replicate(), Shard(2), Shard(2))),
]


@pytest.mark.parametrize(("axes", "which", "placements"), PLACEMENTS)
def test_layout_to_placements_and_back(
    driver: TorchDriver, mesh32: Mesh, axes: tuple[object, ...], which: str, placements: tuple[object, ...]
) -> None:
    mesh = mesh32 if which == "32" else MESH_XYZ
    layout = Layout(axes, mesh)
    assert layoutcore_torch.to_torch_placements(layout) == placements
    device_mesh = layoutcore_torch.to_torch_mesh(mesh)
    assert layoutcore_torch.from_torch_placements(placements, device_mesh, len(axes)) == layout


def test_multi_axis_out_of_mesh_order_is_refused(mesh32: Mesh) -> None:
    with pytest.raises(UnsupportedLayoutError, match=r"out of the mesh's order") as err:
        layoutcore_torch.to_torch_placements(Layout([("y", "x")], mesh32))
    assert err.value.feature == Capability.MULTI_AXIS_ANY_ORDER.value
    assert err.value.driver == "torch"


def test_capabilities_are_what_torch_can_express_exactly() -> None:
    assert TorchDriver.capabilities == {
        Capability.UNEVEN,
        Capability.MULTI_AXIS,
        Capability.RELAYOUT_ACROSS_MESHES,
        Capability.RELAYOUT_AT_FLOOR,
    }


@pytest.mark.parametrize(
    "mesh",
    [
        Mesh((3, 2), ("x", "y")),
        Mesh((8,), ("batch",)),
        Mesh((2, 2, 2), ("a", "b", "c"), name="m3"),
        Mesh((2, 2), ("x", "y"), devices=["CPU:4", "CPU:5", "CPU:6", "CPU:7"]),
        Mesh((2, 3), ("x", "y"), devices=[f"CPU:{i}" for i in (5, 4, 3, 2, 1, 0)]),
    ],
)
def test_mesh_to_device_mesh_round_trip(driver: TorchDriver, mesh: Mesh) -> None:
    device_mesh = layoutcore_torch.to_torch_mesh(mesh)
    assert device_mesh.mesh_dim_names == mesh.axis_names
    assert tuple(device_mesh.mesh.shape) == mesh.shape
    # Simulated rank p is mesh position p (row-major), whatever the device labels.
    assert device_mesh.mesh.flatten().tolist() == list(range(mesh.size))
    assert layoutcore_torch.from_torch_mesh(device_mesh) == mesh
    assert layoutcore_torch.to_torch_mesh(mesh) is device_mesh  # cached on the Mesh value


def test_foreign_device_mesh(driver: TorchDriver) -> None:
    from torch.distributed.device_mesh import DeviceMesh

    lc.distribute_tensor(np.zeros(2), Layout([None], Mesh((2,), ("x",))), driver=driver)  # simulation is up
    with _private.local_tensor_mode(4):
        named = DeviceMesh("cpu", torch.arange(4).reshape(2, 2), mesh_dim_names=("p", "q"))
        unnamed = DeviceMesh("cpu", torch.arange(4))
    assert layoutcore_torch.from_torch_mesh(named) == Mesh((2, 2), ("p", "q"), [f"CPU:{i}" for i in range(4)])
    with pytest.raises(lc.LayoutError, match="mesh_dim_names"):
        layoutcore_torch.from_torch_mesh(unnamed)
    # A DTensor on a DeviceMesh the user built with torch reads back as a layoutcore Layout.
    with _private.local_tensor_mode(4):
        d = distribute_tensor(torch.arange(8.0).reshape(4, 2), named, [Shard(1), Shard(0)])
    assert lc.fetch_layout(d, driver=driver) == Layout(("q", "p"), layoutcore_torch.from_torch_mesh(named))


def test_from_placements_bad_values(driver: TorchDriver, mesh32: Mesh) -> None:
    dm = layoutcore_torch.to_torch_mesh(mesh32)
    with pytest.raises(lc.LayoutError, match="one per mesh axis"):
        layoutcore_torch.from_torch_placements([Shard(0)], dm, 2)
    with pytest.raises(lc.LayoutError, match="shards axis 2 of a rank-2"):
        layoutcore_torch.from_torch_placements([Shard(2), Replicate()], dm, 2)
    assert layoutcore_torch.from_torch_placements([Shard(-1), Replicate()], dm, 2) == Layout((None, "x"), mesh32)
    with pytest.raises(UnsupportedLayoutError, match="pending reduction") as err:
        layoutcore_torch.from_torch_placements([Partial(), Replicate()], dm, 2)
    assert err.value.feature == "partial"


# ---------------------------------------------------------------------------------------------
# Data: against geometry and against torch's own distribute_tensor
# ---------------------------------------------------------------------------------------------
LAYOUTS_32 = [("x", None), (None, "y"), ("y", "x"), ("x", "y"), (("x", "y"), None), (None, None)]


@pytest.mark.parametrize("axes", LAYOUTS_32)
def test_distribute_matches_geometry_and_torch(driver: TorchDriver, mesh32: Mesh, axes: tuple[object, ...]) -> None:
    x = np.arange(36, dtype=np.float32).reshape(6, 6)
    layout = Layout(axes, mesh32)
    d = lc.distribute_tensor(x, layout, driver=driver)
    assert isinstance(d, DTensor) and tuple(d.shape) == (6, 6)
    want = expected_pieces(x, layout)
    for got, w in zip(per_device(d), want, strict=True):
        np.testing.assert_array_equal(got, w)
    # torch itself, called directly as a torch user would in the simulation, places the same data.
    with _private.local_tensor_mode(6):
        native = distribute_tensor(torch.from_numpy(x), layoutcore_torch.to_torch_mesh(mesh32), d.placements)
    for got, w in zip(per_device(native), want, strict=True):
        np.testing.assert_array_equal(got, w)
    for got, w in zip(lc.unpack(d, driver=driver), want, strict=True):
        np.testing.assert_array_equal(got.numpy(), w)
    np.testing.assert_array_equal(lc.to_numpy(d, driver=driver), x)
    assert lc.fetch_layout(d, driver=driver) == layout


@pytest.mark.parametrize(
    ("shape", "axes", "sizes"),
    [  # chunk rule, written out (docs/framework-facts.md#uneven-dimensions, docs/design.md#layout): ceil-sized blocks, trailing ones may be empty
        ((5,), ("x",), [2, 2, 2, 2, 1, 1]),
        ((4,), ("x",), [2, 2, 2, 2, 0, 0]),
        ((2,), ("x",), [1, 1, 1, 1, 0, 0]),
        ((7,), ("y",), [4, 3, 4, 3, 4, 3]),
    ],
)
def test_uneven_one_axis_follows_chunk_rule(
    driver: TorchDriver, mesh32: Mesh, shape: tuple[int, ...], axes: tuple[str], sizes: list[int]
) -> None:
    x = np.arange(int(np.prod(shape)), dtype=np.int64).reshape(shape)
    layout = Layout(axes, mesh32)
    d = lc.distribute_tensor(x, layout, driver=driver)
    assert [p.shape[0] for p in per_device(d)] == sizes
    for got, w in zip(per_device(d), expected_pieces(x, layout), strict=True):
        np.testing.assert_array_equal(got, w)
    np.testing.assert_array_equal(lc.to_numpy(d, driver=driver), x)


def test_uneven_multi_axis_is_refused_because_torch_nests(driver: TorchDriver) -> None:
    mesh = Mesh((2, 2), ("x", "y"))
    layout = Layout([("x", "y")], mesh)
    with pytest.raises(UnsupportedLayoutError) as err:
        lc.distribute_tensor(np.arange(5.0), layout, driver=driver)
    assert err.value.feature == Capability.UNEVEN_MULTI_AXIS.value
    # Why: torch chunks level by level (2 | 1,1 | 1), the contract flat over the product (2,2,1,0).
    with _private.local_tensor_mode(4):
        native = distribute_tensor(torch.arange(5.0), layoutcore_torch.to_torch_mesh(mesh), [Shard(0), Shard(0)])
    torch_sizes = [p.shape[0] for p in per_device(native)]
    contract_sizes = [s[0] for s in layout.local_shapes((5,))]
    assert contract_sizes == [2, 2, 1, 0]
    assert torch_sizes != contract_sizes


def test_even_multi_axis_equals_flat_rule(driver: TorchDriver) -> None:
    mesh = Mesh((2, 2, 2), ("a", "b", "c"))
    x = np.arange(8 * 3 * 4, dtype=np.float32).reshape(8, 3, 4)
    layout = Layout([("a", "c"), None, "b"], mesh)
    d = lc.distribute_tensor(x, layout, driver=driver)
    for got, w in zip(per_device(d), expected_pieces(x, layout), strict=True):
        np.testing.assert_array_equal(got, w)


# ---------------------------------------------------------------------------------------------
# pack, relayout, fetch_layout, to_numpy
# ---------------------------------------------------------------------------------------------
def test_pack_uneven_gives_the_global_shape(driver: TorchDriver) -> None:
    mesh = Mesh((3,), ("x",))
    layout = Layout(("x", None), mesh)
    x = np.arange(10, dtype=np.float32).reshape(5, 2)
    pieces = [torch.from_numpy(x[s].copy()) for s in layout.device_slices(x.shape)]
    d = lc.pack(pieces, layout, driver=driver)
    assert tuple(d.shape) == (5, 2) and d.stride() == (2, 1)
    np.testing.assert_array_equal(lc.to_numpy(d, driver=driver), x)
    assert lc.fetch_layout(d, driver=driver) == layout


@pytest.mark.parametrize("axes", [("x", "y"), (None, "x"), (("x", "y"), None), (None, None)])
def test_simulated_dtensor_is_what_from_local_builds(
    driver: TorchDriver, mesh32: Mesh, axes: tuple[object, ...]
) -> None:
    """The driver's shortcut for simulated packs (``_private.simulated_dtensor``) against torch's own
    ``DTensor.from_local`` over the same per-rank tensors: same spec, same data, and torch ops on it agree."""
    x = np.arange(6 * 5, dtype=np.float32).reshape(6, 5)  # axis 1 uneven over x (3) and y (2)
    layout = Layout(axes, mesh32)
    blocks = [np.ascontiguousarray(b) for b in expected_pieces(x, layout)]
    ours = lc.pack(blocks, layout, global_shape=x.shape, driver=driver)
    device_mesh = layoutcore_torch.to_torch_mesh(mesh32)
    placements = layoutcore_torch.to_torch_placements(layout)
    with _private.local_tensor_mode(mesh32.size):
        local = _private.make_local_tensor({r: torch.from_numpy(b.copy()) for r, b in enumerate(blocks)})
        native = DTensor.from_local(
            local, device_mesh, placements, run_check=False, shape=torch.Size(x.shape), stride=(5, 1)
        )
        twice_ours, twice_native = (ours * 2).full_tensor(), (native * 2).full_tensor()
    assert ours._spec == native._spec and ours.requires_grad is native.requires_grad is False
    assert (ours.shape, ours.stride(), ours.dtype) == (native.shape, native.stride(), native.dtype)
    for a, b in zip(per_device(ours), per_device(native), strict=True):
        np.testing.assert_array_equal(a, b)
    ours_full = twice_ours._local_tensors[0] if _private.is_local_tensor(twice_ours) else twice_ours
    native_full = twice_native._local_tensors[0] if _private.is_local_tensor(twice_native) else twice_native
    np.testing.assert_array_equal(ours_full.numpy(), 2 * x)
    np.testing.assert_array_equal(native_full.numpy(), 2 * x)


def test_pack_refuses_differing_replicas_that_torch_silently_overwrites(driver: TorchDriver) -> None:
    mesh = Mesh((4, 2), ("x", "y"))  # all 8 ranks: torch's run_check gathers over the whole world
    layout = Layout(("x", None), mesh)
    pieces = [torch.full((2, 6), float(i)) for i in range(8)]  # y-replicas differ
    with pytest.raises(lc.LayoutError, match=r"CPU:1") as err:
        lc.pack(pieces, layout, driver=driver)
    assert "CPU:0" in str(err.value)
    # torch's own run_check accepts it and broadcasts the first rank of each group (docs/framework-facts.md#replicas-and-pack).
    with _private.local_tensor_mode(8):
        local = _private.make_local_tensor(dict(enumerate(pieces)))
        native = DTensor.from_local(
            local, layoutcore_torch.to_torch_mesh(mesh), [Shard(0), Replicate()], run_check=True
        )
    assert [float(p[0, 0]) for p in per_device(native)] == [0.0, 0.0, 2.0, 2.0, 4.0, 4.0, 6.0, 6.0]


def test_relayout_goes_through_redistribute(driver: TorchDriver, mesh32: Mesh) -> None:
    x = np.arange(30, dtype=np.float64).reshape(6, 5)  # axis 1 uneven over x (3) and y (2)
    a = lc.distribute_tensor(x, Layout(("x", "y"), mesh32), driver=driver)
    for axes in LAYOUTS_32:
        target = Layout(axes, mesh32)
        b = lc.relayout(a, target, driver=driver)
        assert lc.fetch_layout(b, driver=driver) == target
        for got, w in zip(per_device(b), expected_pieces(x, target), strict=True):
            np.testing.assert_array_equal(got, w)
    same = lc.relayout(a, Layout(("x", "y"), mesh32), driver=driver)
    assert same is a  # nothing to move


def test_relayout_across_meshes(driver: TorchDriver, mesh32: Mesh) -> None:
    """Planned transfers (tests/drivers/torch/test_torch_relayout_floor.py counts their bytes)."""
    x = np.arange(36.0).reshape(6, 6)
    a = lc.distribute_tensor(x, Layout(("x", None), mesh32), driver=driver)
    moved = lc.relayout(a, Layout((None, "x"), Mesh((6,), ("x",))), driver=driver)
    assert Capability.RELAYOUT_ACROSS_MESHES in driver.capabilities
    np.testing.assert_array_equal(lc.to_numpy(moved, driver=driver), x)


def test_fetch_layout_refuses_partial(driver: TorchDriver, mesh32: Mesh) -> None:
    per_rank = {r: torch.full((2,), float(r)) for r in range(6)}  # plain tensors: made outside the mode
    with _private.local_tensor_mode(6):
        local = _private.make_local_tensor(per_rank)
        d = DTensor.from_local(local, layoutcore_torch.to_torch_mesh(mesh32), [Partial(), Replicate()])
    with pytest.raises(UnsupportedLayoutError, match=r"Partial\(sum\).*pending reduction"):
        lc.fetch_layout(d, driver=driver)
    # The global value is still there: Partial(sum) over x sums ranks (0,2,4) / (1,3,5) per y column.
    np.testing.assert_array_equal(lc.to_numpy(d, driver=driver), [6.0, 6.0])


def test_fetch_layout_refuses_strided_shard(driver: TorchDriver, mesh32: Mesh) -> None:
    from torch.distributed.tensor.placement_types import _StridedShard

    dm = layoutcore_torch.to_torch_mesh(mesh32)
    with pytest.raises(UnsupportedLayoutError, match="_StridedShard"):
        layoutcore_torch.from_torch_placements([_StridedShard(0, split_factor=2), Shard(0)], dm, 1)


def test_fetch_layout_returns_the_mesh_given(driver: TorchDriver) -> None:
    abstract = Mesh((2,), ("x",))
    explicit = Mesh((2,), ("x",), devices=["CPU:0", "CPU:1"])
    a = lc.distribute_tensor(np.zeros(4), Layout(["x"], abstract), driver=driver)
    b = lc.distribute_tensor(np.zeros(4), Layout(["x"], explicit), driver=driver)
    assert lc.fetch_layout(a, driver=driver).mesh == abstract
    assert lc.fetch_layout(b, driver=driver).mesh == explicit


def test_to_numpy_of_replicated_is_a_copy(driver: TorchDriver, mesh32: Mesh) -> None:
    x = np.arange(6, dtype=np.float32)
    d = lc.distribute_tensor(x, Layout([None], mesh32), driver=driver)
    out = lc.to_numpy(d, driver=driver)
    out[:] = -1
    np.testing.assert_array_equal(lc.to_numpy(d, driver=driver), x)


def test_inputs_numpy_readonly_bigendian_lists_and_bad_dtype(driver: TorchDriver, mesh32: Mesh) -> None:
    layout = Layout(("x",), mesh32)
    ro = np.arange(6.0)
    ro.flags.writeable = False
    be = np.arange(6, dtype=">i4")
    for value in (ro, be, [0, 1, 2, 3, 4, 5]):
        d = lc.distribute_tensor(value, layout, driver=driver)
        np.testing.assert_array_equal(lc.to_numpy(d, driver=driver), np.arange(6))
    with pytest.raises(lc.LayoutError, match="dtype object"):
        lc.distribute_tensor(np.array([object()] * 6), layout, driver=driver)
    with pytest.raises(lc.NotDistributedError):
        lc.unpack(torch.zeros(3), driver=driver)


# ---------------------------------------------------------------------------------------------
# call_with_layout and Variable
# ---------------------------------------------------------------------------------------------
def test_call_with_layout_uses_dtensor_factories(
    driver: TorchDriver, mesh32: Mesh, monkeypatch: pytest.MonkeyPatch
) -> None:
    import torch.distributed.tensor as tdt

    calls: list[tuple[object, ...]] = []
    original = tdt.ones

    def spy(*args: object, **kwargs: object) -> object:
        calls.append(args)
        return original(*args, **kwargs)

    monkeypatch.setattr(tdt, "ones", spy)
    layout = Layout(("x", "y"), mesh32)
    d = lc.call_with_layout(torch.ones, layout, (7, 4), dtype=np.float32, driver=driver)
    assert calls == [((7, 4),)]  # shards made in place, never the (7, 4) value on one device
    assert d.dtype == torch.float32
    shapes = [p.shape for p in per_device(d)]
    assert shapes == layout.local_shapes((7, 4))
    assert all((p == 1).all() for p in per_device(d))


def test_call_with_layout_full_and_fallback(driver: TorchDriver, mesh32: Mesh) -> None:
    layout = Layout((None, "y"), mesh32)
    full = lc.call_with_layout(torch.full, layout, (3, 4), 2.5, driver=driver)
    np.testing.assert_array_equal(lc.to_numpy(full, driver=driver), np.full((3, 4), 2.5, np.float32))
    for factory, value in ((torch.zeros, 0), (torch.empty, None)):
        made = lc.call_with_layout(factory, Layout(("x", None), mesh32), size=(5, 3), dtype=torch.int32, driver=driver)
        assert [p.shape for p in per_device(made)] == Layout(("x", None), mesh32).local_shapes((5, 3))
        assert made.dtype == torch.int32 and (value is None or (lc.to_numpy(made, driver=driver) == value).all())
    # torch's DTensor rand has no RNG tracker on a CPU mesh; the general path still gives one global value.
    rand = lc.call_with_layout(torch.rand, Layout(("x", None), mesh32), (5, 3), driver=driver)
    values = lc.to_numpy(rand, driver=driver)
    for got, w in zip(per_device(rand), expected_pieces(values, Layout(("x", None), mesh32)), strict=True):
        np.testing.assert_array_equal(got, w)
    other = lc.call_with_layout(lambda n: torch.arange(n * 4).reshape(n, 4), layout, 3, driver=driver)
    for got, w in zip(per_device(other), expected_pieces(np.arange(12).reshape(3, 4), layout), strict=True):
        np.testing.assert_array_equal(got, w)


def test_variable_is_a_dtensor_parameter_with_a_fixed_layout(driver: TorchDriver, mesh32: Mesh) -> None:
    layout = Layout(("x", None), mesh32)
    x = np.arange(12, dtype=np.float32).reshape(6, 2)
    v = lc.Variable(x, layout, driver=driver)
    param = v.value
    assert isinstance(param, torch.nn.Parameter) and isinstance(param, DTensor) and param.requires_grad
    v.assign(x * 3)
    assert v.value is param  # assigned in place: an optimizer holding the Parameter sees it
    np.testing.assert_array_equal(v.numpy(), x * 3)
    with pytest.raises(lc.LayoutMismatchError):
        v.assign(lc.distribute_tensor(x, Layout((None, None), mesh32), driver=driver))
    ints = lc.Variable(np.arange(6), Layout(("x",), mesh32), driver=driver)
    assert not ints.value.requires_grad


# ---------------------------------------------------------------------------------------------
# Modes and start-up (fresh interpreters)
# ---------------------------------------------------------------------------------------------
def _json_tail(out: str) -> dict[str, object]:
    return json.loads(out.strip().splitlines()[-1])  # type: ignore[no-any-return]


def test_import_and_listing_do_not_start_torch() -> None:
    code = textwrap.dedent(
        """
        import json, sys
        import layoutcore, layoutcore_torch
        info = [i for i in layoutcore.driver.driver_infos() if i.name == "torch"][0]
        print(json.dumps({"torch": "torch" in sys.modules, "installed": info.installed,
                          "caps": sorted(str(c) for c in info.capabilities)}))
        """
    )
    proc = run_python(code)
    assert proc.returncode == 0, proc.stderr
    assert _json_tail(proc.stdout) == {
        "torch": False,
        "installed": True,
        "caps": ["multi_axis", "relayout_across_meshes", "relayout_at_floor", "uneven"],
    }


def test_simulation_starts_lazily_with_cpu_devices() -> None:
    code = textwrap.dedent(
        """
        import json
        import numpy as np, layoutcore as lc, torch.distributed as dist
        drv = lc.get_driver("torch")
        before = [drv.list_devices(), dist.is_initialized()]
        d = lc.distribute_tensor(np.arange(8.0), lc.Layout(["x"], lc.Mesh((4,), ("x",))), driver=drv)
        after = [dist.is_initialized(), dist.get_backend(), dist.get_world_size()]
        try:
            lc.distribute_tensor(np.arange(5.0), lc.Layout(["x"], lc.Mesh((5,), ("x",))), driver=drv)
            too_big = None
        except lc.LayoutError as e:
            too_big = str(e)
        print(json.dumps({"before": before, "after": after, "too_big": too_big}))
        """
    )
    proc = run_python(code, env={"LAYOUTCORE_CPU_DEVICES": "4"})
    assert proc.returncode == 0, proc.stderr
    out = _json_tail(proc.stdout)
    assert out["before"] == [["CPU:0", "CPU:1", "CPU:2", "CPU:3"], False]
    assert out["after"] == [True, "fake", 4]
    assert "LAYOUTCORE_CPU_DEVICES" in str(out["too_big"])


def test_real_group_started_after_the_driver_is_used(tmp_path: object) -> None:
    code = textwrap.dedent(
        """
        import json, datetime
        import numpy as np, layoutcore as lc, torch.distributed as dist
        from conftest import free_port
        drv = lc.get_driver("torch")
        drv.list_devices()  # looking does not start the simulation
        dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{free_port()}", rank=0, world_size=1,
                                timeout=datetime.timedelta(seconds=30))
        d = lc.distribute_tensor(np.arange(6.0), lc.Layout(["x"], lc.Mesh((1,), ("x",))), driver=drv)
        print(json.dumps({"devices": drv.list_devices(), "simulated": drv.world().simulated,
                          "backend": dist.get_backend(), "value": lc.to_numpy(d, driver=drv).tolist()}))
        dist.destroy_process_group()
        """
    )
    proc = run_python(code, env={"PYTHONPATH": str(_here())})
    assert proc.returncode == 0, proc.stderr
    out = _json_tail(proc.stdout)
    assert out == {"devices": ["CPU:0"], "simulated": False, "backend": "gloo", "value": [0, 1, 2, 3, 4, 5]}


def test_release_simulation_lets_a_real_group_start() -> None:
    code = textwrap.dedent(
        """
        import json, datetime
        import numpy as np, layoutcore as lc, layoutcore_torch, torch.distributed as dist
        from conftest import free_port
        drv = lc.get_driver("torch")
        lc.distribute_tensor(np.arange(4.0), lc.Layout(["x"], lc.Mesh((2,), ("x",))), driver=drv)
        first = dist.get_backend()
        released = [layoutcore_torch.release_simulation(), layoutcore_torch.release_simulation()]
        dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{free_port()}", rank=0, world_size=1,
                                timeout=datetime.timedelta(seconds=30))
        d = lc.distribute_tensor(np.arange(4.0), lc.Layout(["x"], lc.Mesh((1,), ("x",))), driver=drv)
        print(json.dumps({"first": first, "released": released, "then": dist.get_backend(),
                          "simulated": drv.world().simulated, "value": lc.to_numpy(d, driver=drv).tolist()}))
        dist.destroy_process_group()
        """
    )
    proc = run_python(code, env={"PYTHONPATH": str(_here())})
    assert proc.returncode == 0, proc.stderr
    assert _json_tail(proc.stdout) == {
        "first": "fake",
        "released": [True, False],
        "then": "gloo",
        "simulated": False,
        "value": [0, 1, 2, 3],
    }


def test_existing_group_devices_stand_and_the_driver_warns_once() -> None:
    code = textwrap.dedent(
        """
        import json, warnings
        import layoutcore as lc, torch.distributed as dist
        from layoutcore_torch import _private
        _private.init_fake_group(4)  # as a user who set up the simulation themselves
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            drv = lc.get_driver("torch")
            devices = [drv.list_devices(), drv.list_devices()]
        print(json.dumps({"devices": devices, "warnings": [str(w.message) for w in caught
                                                           if issubclass(w.category, RuntimeWarning)]}))
        """
    )
    proc = run_python(code, env={"LAYOUTCORE_CPU_DEVICES": "8"})
    assert proc.returncode == 0, proc.stderr
    out = _json_tail(proc.stdout)
    assert out["devices"] == [[f"CPU:{i}" for i in range(4)]] * 2
    warnings = out["warnings"]
    assert isinstance(warnings, list) and len(warnings) == 1
    assert "world size 4" in warnings[0] and "LAYOUTCORE_CPU_DEVICES=8 is ignored" in warnings[0]


def test_missing_private_api_raises_a_clear_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_private, "_cache", {})
    monkeypatch.setattr(_private, "_LOCAL_TENSOR_MODULE", "torch.distributed._no_such_module")
    with pytest.raises(lc.DriverUnavailableError, match=r"torch\.distributed\._no_such_module\.LocalTensorMode") as err:
        _private.require_simulation()
    assert "real" in str(err.value) and err.value.driver == "torch"


def _here() -> str:
    """PYTHONPATH for a child: this folder (conftest) plus the parent's entries, made absolute, so that the
    child imports the same layoutcore and layoutcore_torch as the tests (the source tree under tox's
    PYTHONPATH, not a stale installed copy)."""
    import os

    from conftest import HERE, REPO

    inherited = [str((REPO / p).resolve()) for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    return os.pathsep.join([str(HERE), *inherited])


def test_torchrun_environment_without_a_group_warns_before_simulating() -> None:
    code = textwrap.dedent(
        """
        import json, warnings
        import numpy as np, layoutcore as lc, torch.distributed as dist
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            lc.distribute_tensor(np.zeros(2), lc.Layout([None], lc.Mesh((2,), ("x",))), driver="torch")
        print(json.dumps({"backend": dist.get_backend(),
                          "warnings": [str(w.message) for w in caught if issubclass(w.category, RuntimeWarning)]}))
        """
    )
    proc = run_python(code, env={"RANK": "1", "WORLD_SIZE": "2"})
    assert proc.returncode == 0, proc.stderr
    out = _json_tail(proc.stdout)
    assert out["backend"] == "fake"
    [message] = out["warnings"]  # type: ignore[misc]
    assert "rank 1 of 2" in message and "init_process_group" in message


def test_relayout_that_moves_no_data_owns_its_storage() -> None:
    """Replicate -> Shard on a 1-device mesh is a view in torch: the result must not see the source's writes."""
    from layoutcore_torch import spmd

    mesh = lc.Mesh((1,), ("y",))
    source = lc.copy_to_mesh(np.array([127, 5], np.int8), lc.Layout([None], mesh), driver="torch")
    moved = lc.relayout(source, lc.Layout(["y"], mesh), driver="torch")
    with spmd(mesh):
        source.add_(1)
    assert lc.to_numpy(moved).tolist() == [127, 5]
    assert lc.to_numpy(source).tolist() == [-128, 6]
