"""distribute_module_parameters: an nn.Module's parameters laid out by a LayoutMap (embeddings included)."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from layoutcore_torch import TorchDriver, distribute_module_parameters, spmd
from torch.distributed.tensor import DTensor

import layoutcore as lc
from layoutcore import Layout, LayoutMap, Mesh

MESH = Mesh((2, 2), ("x", "y"))


class Tied(torch.nn.Module):
    """A small real model: embedding, a block, and an output head tied to the embedding."""

    def __init__(self) -> None:
        super().__init__()
        self.embed = torch.nn.Embedding(8, 4)
        self.block = torch.nn.Sequential(torch.nn.Linear(4, 6), torch.nn.ReLU(), torch.nn.Linear(6, 4))
        self.head = torch.nn.Linear(4, 8, bias=False)
        self.head.weight = self.embed.weight  # weight tying: one Parameter, two owners


def model_and_map() -> tuple[torch.nn.Module, LayoutMap]:
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(6, 4), torch.nn.ReLU(), torch.nn.Linear(4, 2))
    lm = LayoutMap(MESH)
    lm[r"0\.weight"] = ("x", "y")
    lm[r"2\.weight"] = (None, "x")
    lm[r"2\.bias"] = ("y",)
    return model, lm


def test_parameters_become_dtensor_parameters_with_the_maps_layouts(driver: TorchDriver) -> None:
    model, lm = model_and_map()
    before = {n: p.detach().numpy().copy() for n, p in model.named_parameters()}
    layouts = distribute_module_parameters(model, lm, driver=driver)
    expected = {  # the map's entries; "0.bias" matches nothing and is replicated
        "0.weight": Layout(("x", "y"), MESH),
        "0.bias": Layout((None,), MESH),
        "2.weight": Layout((None, "x"), MESH),
        "2.bias": Layout(("y",), MESH),
    }
    assert layouts == expected
    for name, param in model.named_parameters():
        assert isinstance(param, torch.nn.Parameter) and isinstance(param, DTensor), name
        assert param.requires_grad
        assert lc.fetch_layout(param, driver=driver) == expected[name]
        np.testing.assert_array_equal(lc.to_numpy(param, driver=driver), before[name])


def test_forward_and_backward_match_the_undistributed_model(driver: TorchDriver) -> None:
    model, lm = model_and_map()
    x = torch.randn(4, 6)
    want = model(x).detach().numpy()
    distribute_module_parameters(model, lm, driver=driver)
    xd = lc.distribute_tensor(x, Layout(("x", None), MESH), driver=driver)
    with spmd(MESH):
        y = model(xd)
        y.sum().backward()
    np.testing.assert_allclose(lc.to_numpy(y, driver=driver), want, rtol=1e-5, atol=1e-6)
    grad = model[0].weight.grad
    assert isinstance(grad, DTensor) and tuple(grad.shape) == (4, 6)


def test_shared_parameters_are_distributed_once(driver: TorchDriver) -> None:
    model = Tied()
    lm = LayoutMap(MESH)
    lm["embed.weight"] = (None, "y")
    layouts = distribute_module_parameters(model, lm, driver=driver)
    assert "head.weight" not in layouts  # the same Parameter, reported under its first name
    assert model.head.weight is model.embed.weight
    assert lc.fetch_layout(model.head.weight, driver=driver) == Layout((None, "y"), MESH)
    assert lc.fetch_layout(model.block[2].bias, driver=driver) == Layout((None,), MESH)


def test_rank_mismatch_names_the_parameter_and_changes_nothing(driver: TorchDriver) -> None:
    model, _ = model_and_map()
    lm = LayoutMap(MESH)
    lm[r"0\.weight"] = ("x", None)
    lm[r".*bias"] = ("x", None)  # biases have rank 1
    with pytest.raises(lc.LayoutError, match=r"parameter '0\.bias' \(shape \(4,\)\).*rank-2 layout") as err:
        distribute_module_parameters(model, lm, driver=driver)
    assert err.value.value == Layout(("x", None), MESH)
    assert not any(isinstance(p, DTensor) for p in model.parameters())


def test_ambiguous_match_and_missing_mesh(driver: TorchDriver) -> None:
    model, _ = model_and_map()
    lm = LayoutMap(MESH)
    lm["weight"] = (None, None)
    lm[r"0\..*"] = (None, None)
    with pytest.raises(lc.AmbiguousLayoutError):
        distribute_module_parameters(model, lm, driver=driver)
    no_mesh = LayoutMap()
    no_mesh[r"0\.weight"] = Layout(("x", None), MESH)
    with pytest.raises(lc.LayoutError, match=r"No LayoutMap entry matches parameter '0\.bias'"):
        distribute_module_parameters(model, no_mesh, driver=driver)


def test_bad_arguments(driver: TorchDriver) -> None:
    with pytest.raises(lc.LayoutError, match=r"torch\.nn\.Module"):
        distribute_module_parameters(object(), LayoutMap(MESH), driver=driver)
    with pytest.raises(lc.LayoutError, match="LayoutMap"):
        distribute_module_parameters(torch.nn.Linear(2, 2), {"weight": ("x", None)}, driver=driver)  # type: ignore[arg-type]
