"""A tiny transformers Llama trained under its own tensor-parallel plan, shared by the simulation test, the
2-process gloo worker and the plain reference (not a test module itself)."""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

STEPS, LR = 3, 0.1


def make_model(kind: str = "llama", layers: int = 1) -> Any:
    """A random-init model (seeded) from a config built in code: 8 query heads, 4 key/value heads (GQA)."""
    import transformers

    torch.manual_seed(0)
    kw = {"vocab_size": 64, "hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": layers}
    kw |= {"num_attention_heads": 8, "num_key_value_heads": 4}
    if kind == "llama":
        return transformers.LlamaForCausalLM(transformers.LlamaConfig(**kw))
    return transformers.Qwen2ForCausalLM(transformers.Qwen2Config(**kw))  # q/k/v biases


def batch() -> torch.Tensor:
    return torch.randint(0, 64, (2, 7), generator=torch.Generator().manual_seed(1))


def train_reference(kind: str = "llama") -> tuple[dict[str, np.ndarray], list[float]]:
    """Plain torch, one process: the parameters and losses after STEPS SGD steps."""
    model, ids = make_model(kind), batch()
    opt = torch.optim.SGD(model.parameters(), lr=LR)
    losses = []
    for _ in range(STEPS):
        out = model(input_ids=ids, labels=ids)
        opt.zero_grad()
        out.loss.backward()
        opt.step()
        losses.append(out.loss.item())
    return {n: p.detach().numpy() for n, p in model.named_parameters()}, losses


def train_distributed(ranks: int, kind: str = "llama") -> tuple[dict[str, np.ndarray], dict[str, str], list[float]]:
    """The model laid out by ``from_tp_plan(model.tp_plan, mesh, axis="tp")`` with ``distribute_module`` and
    trained STEPS SGD steps under ``spmd``: global parameters, each parameter's placements, the losses."""
    from layoutcore_torch import distribute_module, from_tp_plan, spmd

    import layoutcore as lc

    mesh = lc.Mesh((ranks,), ("tp",))
    model = make_model(kind)
    distribute_module(model, from_tp_plan(model.tp_plan, mesh, axis="tp"))
    ids = batch()
    opt = torch.optim.SGD(model.parameters(), lr=LR)
    losses = []
    for _ in range(STEPS):
        with spmd(mesh):
            out = model(input_ids=ids, labels=ids)
            opt.zero_grad()
            out.loss.backward()
            opt.step()
            losses.append(float(_first(out.loss)))
    with spmd(mesh):
        params = {n: _first(p.full_tensor()).numpy() for n, p in model.named_parameters()}
    placements = {n: str(tuple(p.placements)) for n, p in model.named_parameters()}
    return params, placements, losses


def _first(value: Any) -> torch.Tensor:
    """Rank 0's copy of a simulated per-rank tensor; a plain tensor itself."""
    per_rank = getattr(value, "_local_tensors", None)
    return (per_rank[0] if per_rank is not None else value).detach()
