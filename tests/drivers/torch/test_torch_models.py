"""Real models under their own rule sets, and a simulation that is exact or refuses (docs/design.md#real-models).

Oracles: the same torch model run without layoutcore in this process, torch's own ``parallelize_module``,
and plain arithmetic. transformers models are tiny configs built in code (no download).
"""

from __future__ import annotations

import copy
from typing import Any

import models_recipe
import numpy as np
import pytest
import torch
from layoutcore_torch import TorchDriver, distribute_module, from_tp_plan, spmd, to_torch_mesh
from torch.distributed.tensor import DTensor, Replicate, Shard

import layoutcore as lc
from layoutcore import Layout, LayoutMap, Mesh
from layoutcore.driver import Limitation

transformers = pytest.importorskip("transformers", reason="the models tests need transformers (tox -e torch)")

MESH = Mesh((4,), ("tp",))
STEPS, LR = 3, 0.1


def rank0(value: Any) -> torch.Tensor:
    """The value rank 0 holds (a simulated tensor's first copy; a DTensor's whole value). Call under spmd."""
    if isinstance(value, DTensor):
        value = value.full_tensor()
    per_rank = getattr(value, "_local_tensors", None)
    return (per_rank[0] if per_rank is not None else value).detach()


# ------------------------------------------------------------------------------------------------
# The simulation: a write into a plain (shared) tensor from per-rank values
# ------------------------------------------------------------------------------------------------


def test_in_place_update_of_a_plain_tensor_by_a_replicated_value_is_applied_once(driver: TorchDriver) -> None:
    p = torch.nn.Parameter(torch.zeros(3))
    ones = driver.distribute_tensor(torch.ones(3), Layout((None,), MESH))
    with spmd(MESH), torch.no_grad():
        p.add_(ones.to_local(), alpha=-0.1)  # was applied once per rank: -0.4 with 4 ranks
    np.testing.assert_allclose(p.detach().numpy(), [-0.1, -0.1, -0.1], rtol=1e-6)


def test_in_place_update_of_a_plain_tensor_by_per_rank_values_is_refused_naming_it(driver: TorchDriver) -> None:
    p = torch.nn.Parameter(torch.zeros(3))
    shards = driver.distribute_tensor(torch.arange(12.0), Layout(("tp",), MESH))
    with spmd(MESH), torch.no_grad(), pytest.raises(lc.UnsupportedLayoutError, match=r"shape \(3,\)") as err:
        p.add_(shards.to_local())
    assert err.value.feature is Limitation.PER_RANK_WRITE
    assert torch.equal(p.detach(), torch.zeros(3))  # nothing written


def test_gradients_of_a_plain_parameter_accumulate_per_rank_and_sgd_matches(driver: TorchDriver) -> None:
    w = torch.nn.Parameter(torch.ones(3))
    twos = driver.distribute_tensor(torch.full((3,), 2.0), Layout((None,), MESH))
    opt = torch.optim.SGD([w], lr=0.1)
    with spmd(MESH):
        for _ in range(2):  # two backward passes accumulate into .grad
            (w * twos.to_local()).sum().backward()
        opt.step()
        np.testing.assert_allclose(rank0(w.grad).numpy(), [4.0, 4.0, 4.0])
    np.testing.assert_allclose(w.detach().numpy(), [0.6, 0.6, 0.6], rtol=1e-6)


class Block(torch.nn.Module):
    """norm -> column-parallel -> relu -> row-parallel, as a transformer's feed-forward block."""

    def __init__(self) -> None:
        super().__init__()
        self.norm = torch.nn.LayerNorm(8)
        self.up = torch.nn.Linear(8, 16)
        self.down = torch.nn.Linear(16, 8)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down(torch.relu(self.up(self.norm(x))))


def sgd_reference(model: torch.nn.Module, x: torch.Tensor) -> dict[str, np.ndarray]:
    opt = torch.optim.SGD(model.parameters(), lr=LR)
    for _ in range(STEPS):
        opt.zero_grad()
        model(x).pow(2).sum().backward()
        opt.step()
    return {n: p.detach().numpy() for n, p in model.named_parameters()}


def test_torch_parallelize_module_with_sgd_under_spmd_matches_the_unsharded_model(driver: TorchDriver) -> None:
    from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, parallelize_module

    torch.manual_seed(0)
    reference, x = Block(), torch.randn(3, 8)
    model = copy.deepcopy(reference)
    want = sgd_reference(reference, x)
    with spmd(MESH):
        parallelize_module(model, to_torch_mesh(MESH), {"up": ColwiseParallel(), "down": RowwiseParallel()})
        opt = torch.optim.SGD(model.parameters(), lr=LR)
        for _ in range(STEPS):
            opt.zero_grad()
            model(x).pow(2).sum().backward()
            opt.step()  # the norm's plain parameters and RowwiseParallel's replicated bias: one update each
        got = {n: rank0(p).numpy() for n, p in model.named_parameters()}
    assert isinstance(model.down.bias, DTensor) and not isinstance(model.norm.weight, DTensor)
    for name in want:
        np.testing.assert_allclose(got[name], want[name], atol=1e-5, err_msg=name)


# ------------------------------------------------------------------------------------------------
# from_tp_plan
# ------------------------------------------------------------------------------------------------


def llama_config(**extra: Any) -> Any:
    kw = {"vocab_size": 64, "hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 2}
    kw |= {"num_attention_heads": 8, "num_key_value_heads": 4}
    return transformers.LlamaConfig(**(kw | extra))


def test_tp_plan_styles_become_parameter_layouts() -> None:
    plan = {
        "model.embed_tokens": "embedding_rowwise",
        "model.layers.*.self_attn.q_proj": "colwise",
        "model.layers.*.self_attn.o_proj": "rowwise",
        "lm_head": "colwise_gather_output",
        "model.layers.*.input_layernorm": "sequence_parallel",
        "model.layers.*.self_attn.q_norm": "replicated_with_grad_allreduce",
    }
    lm = from_tp_plan(plan, MESH, axis="tp")
    assert lm.layout_for("model.embed_tokens.weight", (64, 32)).axes == ("tp", None)
    assert lm.layout_for("model.layers.11.self_attn.q_proj.weight", (32, 32)).axes == ("tp", None)
    assert lm.layout_for("model.layers.11.self_attn.q_proj.bias", (32,)).axes == ("tp",)
    assert lm.layout_for("model.layers.0.self_attn.o_proj.weight", (32, 32)).axes == (None, "tp")
    assert lm.layout_for("model.layers.0.self_attn.o_proj.bias", (32,)).axes == (None,)
    assert lm.layout_for("lm_head.weight", (64, 32)).axes == ("tp", None)
    assert lm.get("model.layers.0.input_layernorm.weight") is None  # replicated: no entry
    assert lm.get("model.layers.x.self_attn.q_proj.weight") is None  # '*' is a layer number
    hints = {pattern.pattern: hint for pattern, hint in lm.module_hints}
    assert set(hints.values()) == {"gather_output", "sum_gradients"}
    # A relative plan (config.base_model_tp_plan) matches the full names at a name boundary only.
    relative = from_tp_plan({"layers.*.mlp.down_proj": "rowwise"}, MESH, axis="tp")
    assert relative.layout_for("model.layers.3.mlp.down_proj.weight", (32, 64)).axes == (None, "tp")
    assert relative.get("model.xlayers.3.mlp.down_proj.weight") is None
    # 4.x names: rowwise on an embedding shards its vocabulary, as torch's RowwiseParallel does.
    old = from_tp_plan({"model.embed_tokens": "rowwise", "wte": "colwise"}, MESH, axis="tp")
    assert old.layout_for("model.embed_tokens.weight", (64, 32)).axes == ("tp", None)
    assert old.layout_for("transformer.wte.weight", (64, 32)).axes == (None, "tp")


@pytest.mark.parametrize("style", ["packed_colwise", "packed_rowwise", "moe_tp_experts", "local_params", "bogus"])
def test_a_style_no_layout_expresses_is_refused_naming_style_and_pattern(style: str) -> None:
    with pytest.raises(lc.UnsupportedLayoutError, match=rf"{style}.*model\.layers\.\*\.mlp\.gate_up_proj") as err:
        from_tp_plan({"model.layers.*.mlp.gate_up_proj": style}, MESH, axis="tp")
    assert err.value.feature is Limitation.TP_PLAN_STYLE


def test_from_tp_plan_checks_its_arguments() -> None:
    with pytest.raises(lc.LayoutError, match="axis"):
        from_tp_plan({"a": "colwise"}, MESH, axis="model")
    with pytest.raises(lc.LayoutError, match="mapping"):
        from_tp_plan(["a"], MESH, axis="tp")  # type: ignore[arg-type]
    with pytest.raises(lc.LayoutError, match="Mesh"):
        from_tp_plan({"a": "colwise"}, "tp", axis="tp")  # type: ignore[arg-type]


def test_shipped_plans_of_llama_and_qwen2_are_carried_over() -> None:
    for model_class, config_class in [
        (transformers.LlamaForCausalLM, transformers.LlamaConfig),
        (transformers.Qwen2ForCausalLM, transformers.Qwen2Config),
    ]:
        model = model_class(config_class(**llama_config().to_dict()))
        full = from_tp_plan(model.tp_plan, MESH, axis="tp")
        relative = from_tp_plan(model.config.base_model_tp_plan, MESH, axis="tp")
        projections = [n for n, _ in model.named_parameters() if n.endswith("_proj.weight")]
        assert len(projections) == 2 * 7  # q k v o gate up down, in each of 2 layers
        for name in projections:  # the base model's plan covers its layers, as the full plan does
            assert full.get(name) is not None and full.get(name) == relative.get(name), name


# ------------------------------------------------------------------------------------------------
# transformers models, laid out by their own plan, trained 3 SGD steps in the simulation
# ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("kind", ["llama", "qwen2"])
def test_transformers_model_trains_under_its_own_tp_plan(driver: TorchDriver, kind: str, capsys: Any) -> None:
    reference = models_recipe.make_model(kind)  # 1 layer: seconds per test
    model = distribute_module(copy.deepcopy(reference), from_tp_plan(reference.tp_plan, MESH, axis="tp"))
    ids = torch.randint(0, 64, (2, 7), generator=torch.Generator().manual_seed(1))
    opt, ref_opt = torch.optim.SGD(model.parameters(), lr=LR), torch.optim.SGD(reference.parameters(), lr=LR)
    losses = []
    for _ in range(STEPS):
        with spmd(MESH):
            out = model(input_ids=ids, labels=ids)
            opt.zero_grad()
            out.loss.backward()
            opt.step()
            losses.append(float(rank0(out.loss)))
        want = reference(input_ids=ids, labels=ids)
        ref_opt.zero_grad()
        want.loss.backward()
        ref_opt.step()
        assert isinstance(out, transformers.modeling_outputs.CausalLMOutputWithPast)
        assert abs(losses[-1] - want.loss.item()) <= 1e-4, (losses, want.loss.item())
    params = dict(model.named_parameters())
    worst = 0.0
    with spmd(MESH):
        for name, q in reference.named_parameters():
            worst = max(worst, float((rank0(params[name]) - q.detach()).abs().max()))
    with capsys.disabled():
        print(f"\n{kind}, 4 simulated ranks, {STEPS} SGD steps: losses {losses}, max |param - unsharded| {worst:.1e}")
    assert worst <= 1e-4
    # Sharded as the plan says: attention and MLP column/row-parallel, the embedding's vocabulary, lm_head.
    layer = "model.layers.0."
    expected = {
        "model.embed_tokens.weight": (Shard(0),),
        layer + "self_attn.q_proj.weight": (Shard(0),),
        layer + "self_attn.k_proj.weight": (Shard(0),),
        layer + "self_attn.v_proj.weight": (Shard(0),),
        layer + "self_attn.o_proj.weight": (Shard(1),),
        layer + "mlp.gate_proj.weight": (Shard(0),),
        layer + "mlp.up_proj.weight": (Shard(0),),
        layer + "mlp.down_proj.weight": (Shard(1),),
        "lm_head.weight": (Shard(0),),
        "model.norm.weight": (Replicate(),),
    }
    if kind == "qwen2":
        expected[layer + "self_attn.k_proj.bias"] = (Shard(0),)
    for name, placements in expected.items():
        assert tuple(params[name].placements) == placements, name


def test_splitting_key_value_heads_between_ranks_is_refused_at_distribute_module(driver: TorchDriver) -> None:
    """4 key/value heads (GQA) of 4 features over 8 ranks: each rank would hold half a head, and the model's
    reshape by head_dim would fail inside attention. Refused when laid out, naming parameter and counts."""
    eight = Mesh((8,), ("tp",))
    model = models_recipe.make_model("llama")
    head_dim = model.model.layers[0].self_attn.head_dim
    kv_heads = model.config.num_key_value_heads
    assert (head_dim, kv_heads, model.config.num_attention_heads) == (4, 4, 8)
    with pytest.raises(
        lc.LayoutError, match=r"'model\.layers\.0\.self_attn\.k_proj\.weight' holds 4 attention heads"
    ) as err:
        distribute_module(model, from_tp_plan(model.tp_plan, eight, axis="tp"))
    assert "over 8 ranks" in str(err.value) and f"of {head_dim} features" in str(err.value)
    assert err.value.value == Layout(("tp", None), eight)
    assert not any(isinstance(p, DTensor) for p in model.parameters())  # nothing replaced
    # The 8 query heads alone divide over 8 ranks: a plan sharding only q_proj and o_proj is accepted.
    plan = {"model.layers.*.self_attn.q_proj": "colwise", "model.layers.*.self_attn.o_proj": "rowwise"}
    distribute_module(model, from_tp_plan(plan, eight, axis="tp"))
    assert tuple(model.model.layers[0].self_attn.q_proj.weight.placements) == (Shard(0),)


# ------------------------------------------------------------------------------------------------
# Local activations: what a layout cannot tell
# ------------------------------------------------------------------------------------------------


class HeadNorm(torch.nn.Module):
    """A norm between a column- and a row-parallel layer: it sees only this rank's features."""

    def __init__(self) -> None:
        super().__init__()
        self.up = torch.nn.Linear(8, 16)
        self.mid = torch.nn.LayerNorm(4)
        self.down = torch.nn.Linear(16, 8)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.up(x)
        h = self.mid(h.view(*h.shape[:-1], -1, 4)).flatten(-2)  # per "head" of 4 features
        return self.down(h)


def test_a_replicated_parameter_seeing_per_rank_activations_is_refused_or_summed(driver: TorchDriver) -> None:
    torch.manual_seed(0)
    reference, x = HeadNorm(), torch.randn(3, 8)
    plan = {"up": "colwise", "down": "rowwise"}
    model = distribute_module(copy.deepcopy(reference), from_tp_plan(plan, MESH, axis="tp"))
    with spmd(MESH), pytest.raises(lc.UnsupportedLayoutError, match=r"'mid\.(weight|bias)'") as err:
        model(x).pow(2).sum().backward()
    assert err.value.feature is Limitation.PER_RANK_GRADIENTS
    plan["mid"] = "replicated_with_grad_allreduce"  # the plan says what a layout cannot: sum its gradients
    model = distribute_module(copy.deepcopy(reference), from_tp_plan(plan, MESH, axis="tp"))
    want = sgd_reference(reference, x)
    opt = torch.optim.SGD(model.parameters(), lr=LR)
    with spmd(MESH):
        for _ in range(STEPS):
            opt.zero_grad()
            model(x).pow(2).sum().backward()
            opt.step()
        got = {n: rank0(p).numpy() for n, p in model.named_parameters()}
    for name in want:
        np.testing.assert_allclose(got[name], want[name], atol=1e-5, err_msg=name)


def test_column_parallel_output_is_local_unless_the_plan_gathers_it(driver: TorchDriver) -> None:
    torch.manual_seed(0)
    reference, x = torch.nn.Sequential(torch.nn.Linear(8, 16)), torch.randn(3, 8)
    local = distribute_module(copy.deepcopy(reference), from_tp_plan({"0": "colwise"}, MESH, axis="tp"))
    gathered = distribute_module(copy.deepcopy(reference), from_tp_plan({"0": "colwise_rep"}, MESH, axis="tp"))
    want = reference(x).detach()
    with spmd(MESH):
        part = local(x)
        whole = gathered(x)
        for rank, block in part._local_tensors.items():  # rank r holds columns 4r .. 4r+3
            torch.testing.assert_close(block.detach(), want[:, 4 * rank : 4 * rank + 4])
        torch.testing.assert_close(rank0(whole), want)
    assert not isinstance(part, DTensor) and not isinstance(whole, DTensor)


def test_dtensor_activations_stay_available(driver: TorchDriver) -> None:
    torch.manual_seed(0)
    reference, x = Block(), torch.randn(3, 8)
    lm = LayoutMap(MESH)
    lm["up.weight"] = ("tp", None)
    lm["down.weight"] = (None, "tp")
    model = distribute_module(
        copy.deepcopy(reference),
        lm,
        input_layouts=Layout((None, None), MESH),
        output_layouts=Layout((None, None), MESH),
        activations="dtensor",
    )
    with spmd(MESH):
        out = model(x)
    assert isinstance(out, DTensor)
    np.testing.assert_allclose(lc.to_numpy(out, driver=driver), reference(x).detach().numpy(), atol=1e-6)


# ------------------------------------------------------------------------------------------------
# The same Llama on 2 gloo processes, tp over processes
# ------------------------------------------------------------------------------------------------


def test_llama_under_its_tp_plan_trains_on_two_gloo_processes(capsys: Any, tmp_path: Any) -> None:
    import json
    import os
    import subprocess
    import sys

    from conftest import HERE, REPO, clean_env, free_port

    want, want_losses = models_recipe.train_reference()
    port = free_port()
    inherited = [str((REPO / p).resolve()) for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    env = clean_env({"LAYOUTCORE_DRIVER": "torch", "PYTHONPATH": os.pathsep.join([str(HERE), *inherited])})
    worker = HERE / "mp_torch_models_worker.py"
    # Output to files, not pipes: a rank blocked on a full pipe never reaches its peer's last collective.
    logs = [(tmp_path / f"rank{r}.out", tmp_path / f"rank{r}.err") for r in range(2)]
    procs = []
    for rank, (out_path, err_path) in enumerate(logs):
        with out_path.open("w") as out_file, err_path.open("w") as err_file:
            args = [sys.executable, str(worker), str(rank), str(port), "150"]
            procs.append(subprocess.Popen(args, env=env, cwd=REPO, stdout=out_file, stderr=err_file))
    outs = []
    try:
        for rank, p in enumerate(procs):
            p.wait(timeout=240)
            out_path, err_path = logs[rank]
            assert p.returncode == 0, f"rank {rank} rc={p.returncode}\n{err_path.read_text()[-4000:]}"
            outs.append(json.loads(out_path.read_text().strip().splitlines()[-1]))
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
    for out in outs:
        worst = max(float(np.abs(np.asarray(out["params"][n]) - want[n]).max()) for n in want)
        with capsys.disabled():
            print(f"\nLlama, gloo rank {out['rank']} of 2: losses {out['losses']}, max |param - unsharded| {worst:.1e}")
        assert worst <= 1e-4
        assert max(abs(a - b) for a, b in zip(out["losses"], want_losses, strict=True)) <= 1e-4
        assert out["placements"]["model.embed_tokens.weight"] == str((Shard(0),))
        assert out["placements"]["model.layers.0.self_attn.o_proj.weight"] == str((Shard(1),))
    assert outs[0]["losses"] == outs[1]["losses"]
