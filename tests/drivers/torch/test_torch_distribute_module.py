"""distribute_module (docs/design.md#trees-and-model-code): parameters, inputs and outputs of an nn.Module laid out by layoutcore.

The oracle is the same torch model run without layoutcore, in this process.
"""

from __future__ import annotations

import copy
import json
import subprocess
import sys
from typing import Any

import numpy as np
import pytest
import torch
import transformer_recipe as recipe
from conftest import HERE, REPO, clean_env, free_port
from layoutcore_torch import TorchDriver, distribute_module, spmd
from torch.distributed.tensor import DTensor

import layoutcore as lc
from layoutcore import Layout, LayoutMap, Mesh

MESH = Mesh((2,), ("x",))
WORKER = HERE / "mp_torch_module_worker.py"
CHILD_LIMIT_S = 150


def report(capsys: pytest.CaptureFixture[str], title: str, rows: dict[str, Any]) -> None:
    """Print to the test log whether or not the test passes."""
    with capsys.disabled():
        print(f"\n{title}")
        for name, value in rows.items():
            print(f"  {name:28} {value}")


def max_diffs(got: dict[str, Any], want: dict[str, Any]) -> dict[str, float]:
    assert set(got) == set(want)
    return {n: float(np.abs(np.asarray(got[n]) - want[n]).max()) for n in want}


def test_transformer_layer_trains_ten_steps_in_the_simulation(driver: TorchDriver, capsys: Any) -> None:
    want = recipe.train_reference()
    params, layouts, losses = recipe.train_distributed(MESH, driver=driver)
    diffs = max_diffs(params, want)
    report(
        capsys,
        "TransformerEncoderLayer, simulation (2 ranks): layout and max |distributed - plain torch|",
        {n: f"{layouts[n]:38} {diffs[n]:.2e}" for n in want},
    )
    assert layouts["linear1.weight"] == str(Layout(("x", None), MESH))
    assert max(diffs.values()) < 1e-5, diffs
    assert losses[-1] < losses[0]


def run_two_ranks() -> list[dict[str, Any]]:
    port = free_port()
    procs = [
        subprocess.Popen(
            [sys.executable, str(WORKER), str(rank), str(port), "60"],
            env=clean_env({"LAYOUTCORE_DRIVER": "torch", "PYTHONPATH": _pythonpath()}),
            cwd=REPO,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for rank in range(2)
    ]
    outs = []
    try:
        for rank, p in enumerate(procs):
            out, err = p.communicate(timeout=CHILD_LIMIT_S)
            assert p.returncode == 0, f"rank {rank} rc={p.returncode}\n{err[-4000:]}"
            outs.append(json.loads(out.strip().splitlines()[-1]))
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
    return outs


def _pythonpath() -> str:
    import os

    inherited = [str((REPO / p).resolve()) for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    return os.pathsep.join([str(HERE), *inherited])


def test_transformer_layer_trains_ten_steps_on_two_gloo_processes(capsys: Any) -> None:
    want = recipe.train_reference()
    ranks = run_two_ranks()
    for out in ranks:
        diffs = max_diffs(out["params"], want)
        report(
            capsys,
            f"TransformerEncoderLayer, gloo rank {out['rank']} of 2: layout and max |distributed - plain|",
            {n: f"{out['layouts'][n]:38} {diffs[n]:.2e}" for n in want},
        )
        assert max(diffs.values()) < 1e-5, diffs
    assert ranks[0]["losses"] == ranks[1]["losses"]


class Small(torch.nn.Module):
    """Embedding, LayerNorm and Linear layers, as a language model's ends."""

    def __init__(self) -> None:
        super().__init__()
        self.embed = torch.nn.Embedding(10, 8)
        self.norm = torch.nn.LayerNorm(8)
        self.up = torch.nn.Linear(8, 12)
        self.down = torch.nn.Linear(12, 8)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        return self.down(torch.relu(self.up(self.norm(self.embed(ids)))))


def small_map() -> LayoutMap:
    lm = LayoutMap(MESH)
    lm["embed.weight"] = (None, "x")
    lm["norm.*"] = ("x",)
    lm["up.weight"] = ("x", None)
    lm["up.bias"] = ("x",)
    lm["down.weight"] = (None, "x")
    return lm


@pytest.mark.parametrize("activations", ["dtensor", None], ids=["explicit", "inferred"])
def test_common_modules_need_no_special_cases(driver: TorchDriver, activations: str | None) -> None:
    """``inferred`` is last round's call form, distribute_module(module, layout_map, input_layouts=...,
    output_layouts=...) without ``activations``: layouts for activations mean DTensor activations."""
    torch.manual_seed(0)
    reference = Small()
    model = copy.deepcopy(reference)
    ids = torch.randint(0, 10, (3, 5))
    want = reference(ids)
    want.sum().backward()
    replicated = Layout((None, None), MESH)
    distribute_module(
        model,
        small_map(),
        input_layouts=replicated,
        output_layouts=Layout((None, None, None), MESH),
        **({} if activations is None else {"activations": activations}),
    )
    with spmd(MESH):
        out = model(ids)
        out.sum().backward()
    assert isinstance(out, DTensor) and lc.fetch_layout(out, driver=driver) == Layout((None, None, None), MESH)
    np.testing.assert_allclose(lc.to_numpy(out, driver=driver), want.detach().numpy(), atol=1e-6)
    for (name, p), q in zip(model.named_parameters(), reference.parameters(), strict=True):
        np.testing.assert_allclose(lc.to_numpy(p.grad, driver=driver), q.grad.numpy(), atol=1e-5, err_msg=name)


def test_hooks_place_inputs_and_reduce_pending_sums_of_named_submodules(driver: TorchDriver) -> None:
    torch.manual_seed(0)
    reference = Small()
    model = copy.deepcopy(reference)
    ids = torch.randint(0, 10, (4, 5))  # rows even over 2: DTensor's view needs them so
    seen: dict[str, Any] = {}
    sharded_rows = Layout(("x", None, None), MESH)
    distribute_module(
        model,
        small_map(),
        input_layouts={"": Layout((None, None), MESH), "up": sharded_rows},  # a submodule's input, relaid out
        output_layouts={"down": [Layout((None, None, "x"), MESH)]},
        activations="dtensor",
    )
    model.up.register_forward_pre_hook(lambda _m, args: seen.setdefault("up input", args[0]))  # runs after ours
    with spmd(MESH):
        out = model(ids)
    assert lc.fetch_layout(seen["up input"], driver=driver) == sharded_rows
    assert lc.fetch_layout(out, driver=driver) == Layout((None, None, "x"), MESH)
    np.testing.assert_allclose(lc.to_numpy(out, driver=driver), reference(ids).detach().numpy(), atol=1e-6)


def test_without_output_layouts_a_pending_sum_stays_and_relayout_reduces_it(driver: TorchDriver) -> None:
    torch.manual_seed(0)
    reference = torch.nn.Linear(6, 4)
    model = distribute_module(
        copy.deepcopy(reference),
        _map({"weight": (None, "x")}),
        input_layouts=Layout((None, "x"), MESH),
        activations="dtensor",
    )
    x = torch.randn(3, 6)
    with spmd(MESH):
        out = model(x)  # row-parallel: each rank holds a partial sum
    with pytest.raises(lc.UnsupportedLayoutError) as err:
        lc.fetch_layout(out, driver=driver)
    assert err.value.feature == "partial"
    reduced = lc.relayout(out, Layout(("x", None), MESH), driver=driver)
    np.testing.assert_allclose(lc.to_numpy(reduced, driver=driver), reference(x).detach().numpy(), atol=1e-6)
    v = lc.Variable(np.zeros((3, 4), np.float32), Layout((None, None), MESH), driver=driver)
    v.assign(out)  # Variable.assign reduces it too
    np.testing.assert_allclose(v.numpy(), reference(x).detach().numpy(), atol=1e-6)


def _map(entries: dict[str, tuple[str | None, ...]]) -> LayoutMap:
    lm = LayoutMap(MESH)
    for key, axes in entries.items():
        lm[key] = axes
    return lm


@pytest.mark.parametrize(
    ("entry", "feature"),
    [("self_attn.in_proj_weight", "fused_qkv_projection"), ("self_attn.in_proj_bias", "fused_qkv_projection")],
)
def test_what_torch_cannot_shard_is_refused_naming_the_parameter(driver: TorchDriver, entry: str, feature: str) -> None:
    layer = recipe.make_layer()
    axes = ("x", None) if entry.endswith("weight") else ("x",)
    with pytest.raises(lc.UnsupportedLayoutError, match=rf"parameter '{entry}'") as err:
        distribute_module(layer, _map({entry: axes}))
    assert err.value.feature == feature
    assert not any(isinstance(p, DTensor) for p in layer.parameters())  # nothing replaced, nothing replicated


def test_vocabulary_sharding_with_dtensor_activations_is_refused_in_the_simulation(driver: TorchDriver) -> None:
    with pytest.raises(lc.UnsupportedLayoutError, match=r"parameter 'embed\.weight'") as err:
        distribute_module(Small(), _map({"embed.weight": ("x", None)}), activations="dtensor")
    assert err.value.feature == "simulated_vocab_sharding"


def test_bad_arguments_name_the_value(driver: TorchDriver) -> None:
    layout = Layout((None, None), MESH)
    with pytest.raises(lc.LayoutError, match="'nope'"):
        distribute_module(Small(), small_map(), input_layouts={"nope": layout}, activations="dtensor")
    with pytest.raises(lc.LayoutError, match="must be a Layout"):
        distribute_module(Small(), small_map(), output_layouts={"up": ("x", None)}, activations="dtensor")  # type: ignore[dict-item]
    with pytest.raises(lc.LayoutError, match=r"torch\.nn\.Module"):
        distribute_module(object(), small_map())
    local = Small()
    with pytest.raises(lc.LayoutError, match="activations='local' was passed") as err:
        distribute_module(local, small_map(), input_layouts=layout, activations="local")  # contradictory: refused
    assert err.value.value == layout and "activations='dtensor'" in str(err.value)
    assert not any(isinstance(p, DTensor) for p in local.parameters())  # refused before any parameter moved
    with pytest.raises(lc.LayoutError, match="'local' or 'dtensor'"):
        distribute_module(Small(), small_map(), activations="mixed")  # type: ignore[arg-type]
    model = distribute_module(Small(), small_map(), input_layouts=[layout, layout], activations="dtensor")
    with pytest.raises(lc.LayoutError, match="2 positional inputs, but forward was called with 1"), spmd(MESH):
        model(torch.zeros(2, 3, dtype=torch.int64))
