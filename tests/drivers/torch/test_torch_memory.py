"""Whose memory, training steps, threads and bounded tables on the torch driver (docs/design.md#data-functions-made-precise).

Oracles: NumPy arithmetic and the same torch model trained without layoutcore.
"""

from __future__ import annotations

import copy
import threading
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest
import torch
from layoutcore_torch import TorchDriver, distribute_module_parameters, spmd
from layoutcore_torch._convert import MAX_MESHES

import layoutcore as lc
from layoutcore import Layout, LayoutMap, Mesh

MESH2 = Mesh((2,), ("x",))
MESH22 = Mesh((2, 2), ("x", "y"))


def sgd_step(param: torch.Tensor, lr: float, mesh: Mesh) -> None:
    """One optimizer step with grad = 1 everywhere (d sum(p) / dp)."""
    opt = torch.optim.SGD([param], lr=lr)
    with spmd(mesh):
        param.sum().backward()
        opt.step()


@pytest.mark.parametrize("axes", [(None,), ("x",)], ids=["replicated", "sharded"])
def test_sgd_step_moves_a_parameter_once(driver: TorchDriver, axes: tuple[str | None, ...]) -> None:
    bias = torch.nn.Parameter(lc.distribute_tensor(np.zeros(4, np.float32), Layout(axes, MESH2), driver=driver))
    sgd_step(bias, 0.1, MESH2)
    np.testing.assert_allclose(lc.to_numpy(bias, driver=driver), np.full(4, -0.1, np.float32))  # not -0.2 (2 ranks)


def test_variable_step_with_grad_one_and_lr_one_ends_at_minus_one(driver: TorchDriver) -> None:
    v = lc.Variable(np.zeros(3, np.float32), Layout((None,), MESH22), driver=driver)
    sgd_step(v.value, 1.0, MESH22)
    np.testing.assert_array_equal(v.numpy(), [-1.0, -1.0, -1.0])


@pytest.mark.parametrize("axes", [(None, None), ("x", None), (None, "y"), ("x", "y")])
def test_writes_through_the_result_never_reach_the_callers_array(
    driver: TorchDriver, axes: tuple[str | None, ...]
) -> None:
    source = np.arange(8, dtype=np.float32).reshape(4, 2)
    keep = source.copy()
    as_tensor = torch.from_numpy(source)  # shares memory with source
    layout = Layout(axes, MESH22)
    for value in (source, as_tensor):
        d = lc.distribute_tensor(value, layout, driver=driver)
        with spmd(MESH22), torch.no_grad():
            d.sub_(100.0)
        np.testing.assert_array_equal(source, keep)
        np.testing.assert_array_equal(lc.to_numpy(d, driver=driver), keep - 100.0)  # applied once per rank
    v = lc.Variable(source, layout, driver=driver)
    v.assign(np.full((4, 2), 7, np.float32))
    np.testing.assert_array_equal(source, keep)
    packed = lc.pack([torch.from_numpy(source[s]) for s in layout.device_slices(source.shape)], layout, driver=driver)
    with spmd(MESH22), torch.no_grad():
        packed.mul_(0)
    np.testing.assert_array_equal(source, keep)


def test_the_result_is_a_snapshot_of_the_callers_array(driver: TorchDriver) -> None:
    """docs/drivers/torch.md: later writes to the caller's array do not show through (a data loader may
    refill its buffer)."""
    buffer = np.arange(6, dtype=np.float32)
    placed = [lc.distribute_tensor(buffer, Layout(axes, MESH2), driver=driver) for axes in [(None,), ("x",)]]
    buffer[:] = -1
    for d in placed:
        np.testing.assert_array_equal(lc.to_numpy(d, driver=driver), np.arange(6, dtype=np.float32))


def test_two_variables_from_one_tensor_never_share_storage(driver: TorchDriver) -> None:
    source = lc.distribute_tensor(np.zeros(4, np.float32), Layout((None,), MESH2), driver=driver)
    a = lc.Variable(source, driver=driver)
    b = lc.Variable(source, driver=driver)
    a.assign(np.full(4, 9, np.float32))
    np.testing.assert_array_equal(b.numpy(), np.zeros(4))
    np.testing.assert_array_equal(lc.to_numpy(source, driver=driver), np.zeros(4))
    np.testing.assert_array_equal(a.numpy(), np.full(4, 9))


def test_replicated_ranks_own_their_storage(driver: TorchDriver) -> None:
    d = lc.distribute_tensor(np.zeros((2, 2), np.float32), Layout((None, None), MESH22), driver=driver)
    pointers = {c.untyped_storage().data_ptr() for c in lc.unpack(d, driver=driver)}
    assert len(pointers) == MESH22.size


class MLP(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc1 = torch.nn.Linear(6, 8)
        self.fc2 = torch.nn.Linear(8, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc2(torch.relu(self.fc1(x)))


def mse(out: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    """Mean squared error written out: torch 2.13's ``F.mse_loss`` on batch-sharded DTensors gives wrong gradients
    (its loss is ``Partial(avg)``; measured the same on 2 gloo processes, so it is torch's, not the simulation's)."""
    return ((out - target) ** 2).mean()


def test_mlp_trained_ten_steps_in_the_simulation_matches_plain_torch(driver: TorchDriver) -> None:
    torch.manual_seed(0)
    reference = MLP()
    model = copy.deepcopy(reference)
    xs = [torch.randn(8, 6) for _ in range(10)]
    ys = [torch.randn(8, 3) for _ in range(10)]

    ref_opt = torch.optim.SGD(reference.parameters(), lr=0.05, momentum=0.9)
    for x, y in zip(xs, ys, strict=True):
        ref_opt.zero_grad()
        mse(reference(x), y).backward()
        ref_opt.step()

    lm = LayoutMap(MESH22)
    lm["fc1.weight"] = ("x", None)  # column-parallel then row-parallel, biases replicated or sharded
    lm["fc1.bias"] = ("x",)
    lm["fc2.weight"] = (None, "x")
    layouts = distribute_module_parameters(model, lm, driver=driver)
    print("MLP layouts:", {k: str(v) for k, v in layouts.items()})
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    batch = Layout(("y", None), MESH22)
    for x, y in zip(xs, ys, strict=True):
        xd, yd = lc.distribute_tensor(x, batch, driver=driver), lc.distribute_tensor(y, batch, driver=driver)
        with spmd(MESH22):
            opt.zero_grad()
            mse(model(xd), yd).backward()
            opt.step()

    diffs = {
        name: float(
            np.abs(lc.to_numpy(p, driver=driver) - dict(reference.named_parameters())[name].detach().numpy()).max()
        )
        for name, p in model.named_parameters()
    }
    print("MLP 10 SGD steps, max |simulation - plain torch| per parameter:", diffs)
    assert max(diffs.values()) < 1e-5, diffs


def test_eight_threads_distribute_relayout_and_read_at_once(driver: TorchDriver) -> None:
    """Without the simulation lock this raised KeyError: 4 / "Unexpectedly not in LocalTensorMode"."""
    meshes = [Mesh((2,), ("x",)), Mesh((2, 2), ("x", "y")), Mesh((4, 2), ("x", "y")), Mesh((4,), ("x",))]
    start = threading.Barrier(8)

    def work(i: int) -> int:
        mesh = meshes[i % len(meshes)]
        rng = np.random.default_rng(i)
        start.wait(timeout=60)
        checked = 0
        for _ in range(6):
            x = rng.standard_normal((8, 4)).astype(np.float32)
            axes = [("x", None), (None, "x"), (None, None)][checked % 3]
            d = lc.distribute_tensor(x, Layout(axes, mesh), driver=driver)
            moved = lc.relayout(d, Layout((None, mesh.axis_names[-1]), mesh), driver=driver)
            np.testing.assert_array_equal(lc.to_numpy(moved, driver=driver), x)
            for c, s in zip(lc.unpack(d, driver=driver), Layout(axes, mesh).device_slices(x.shape), strict=True):
                np.testing.assert_array_equal(c.numpy(), x[s])
            checked += 1
        return checked

    with ThreadPoolExecutor(8) as pool:
        futures = [pool.submit(work, i) for i in range(8)]
        assert [f.result(timeout=300) for f in futures] == [6] * 8  # a deadlock fails here, not hangs CI


def test_distinct_meshes_keep_the_tables_bounded(driver: TorchDriver) -> None:
    """Meshes on one rank grid share its process groups; the Mesh -> DeviceMesh table is bounded."""
    from torch.distributed import distributed_c10d

    x = np.arange(4, dtype=np.float32)
    lc.distribute_tensor(x, Layout(("warm",), Mesh((2,), ("warm",))), driver=driver)
    groups_before = len(distributed_c10d._world.pg_map)
    for i in range(MAX_MESHES + 60):
        mesh = Mesh((2,), (f"a{i}",))
        d = lc.distribute_tensor(x, Layout((f"a{i}",), mesh), driver=driver)
        np.testing.assert_array_equal(lc.to_numpy(d, driver=driver), x)
    assert len(distributed_c10d._world.pg_map) == groups_before
    assert len(driver._meshes._meshes) <= MAX_MESHES


@pytest.mark.parametrize("view", ["rows_reversed", "both_reversed", "step_minus_two"])
def test_negative_stride_arrays_are_placed(driver: TorchDriver, view: str) -> None:
    """torch.from_numpy refuses negative strides; the driver copies such an array once."""
    base = np.arange(24, dtype=np.float32).reshape(4, 6)
    x = {"rows_reversed": base[::-1], "both_reversed": base[::-1, ::-1], "step_minus_two": base[:, ::-2]}[view]
    assert any(s < 0 for s in x.strides)
    layout = Layout(("x", "y"), MESH22)
    np.testing.assert_array_equal(lc.to_numpy(lc.distribute_tensor(x, layout, driver=driver), driver=driver), x)
    np.testing.assert_array_equal(lc.Variable(x, layout, driver=driver).numpy(), x)
    pieces = [x[s] for s in layout.device_slices(x.shape)]
    np.testing.assert_array_equal(lc.to_numpy(lc.pack(pieces, layout, driver=driver), driver=driver), x)


def test_pack_mixes_torch_and_numpy_components(driver: TorchDriver) -> None:
    x = np.arange(12, dtype=np.float32).reshape(4, 3)
    layout = Layout(("x", None), MESH2)
    packed = lc.pack([torch.from_numpy(x[:2].copy()), x[2:]], layout, driver=driver)
    np.testing.assert_array_equal(lc.to_numpy(packed, driver=driver), x)
    with pytest.raises(lc.LayoutError, match="one dtype"):
        lc.pack([torch.from_numpy(x[:2].copy()), x[2:].astype(np.float64)], layout, driver=driver)


def test_an_untested_torch_version_warns_once_and_keeps_working() -> None:
    import warnings

    from layoutcore_torch import _mode

    saved = _mode._PROCESS.pop("warned_version", None)
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            _mode.warn_if_untested("2.13.0+cpu")  # tested: silent
            _mode.warn_if_untested("2.99.0")
            _mode.warn_if_untested("2.99.0")
        messages = [str(w.message) for w in caught if issubclass(w.category, RuntimeWarning)]
        assert len(messages) == 1 and "tested on torch 2.13" in messages[0] and "2.99.0" in messages[0]
    finally:
        _mode._PROCESS.pop("warned_version", None)
        if saved is not None:
            _mode._PROCESS["warned_version"] = saved
