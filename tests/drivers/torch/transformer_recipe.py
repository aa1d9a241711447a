"""One training recipe for a ``TransformerEncoderLayer``, shared by the simulation test, the 2-process gloo
worker and the plain single-process reference (not a test module itself).

The layer is tensor-parallel over a 1-D mesh ``x`` of 2 devices: the feed-forward block column- then
row-parallel, attention's fused input projection sharded on its input features (axis 1) and its output
projection row-parallel; LayerNorms and the remaining biases replicated. ``distribute_module`` places the
input replicated and reduces the pending sums of ``linear2`` and of the whole layer into replicated outputs.
"""

from __future__ import annotations

from typing import Any

import torch

import layoutcore as lc

D_MODEL, HEADS, FEED_FORWARD, SEQ, BATCH, STEPS, LR = 8, 2, 16, 4, 3, 10, 0.05


def make_layer() -> torch.nn.TransformerEncoderLayer:
    torch.manual_seed(0)
    return torch.nn.TransformerEncoderLayer(D_MODEL, HEADS, FEED_FORWARD, dropout=0.0, batch_first=True)


def batches() -> list[tuple[torch.Tensor, torch.Tensor]]:
    g = torch.Generator().manual_seed(1)
    shape = (BATCH, SEQ, D_MODEL)
    return [(torch.randn(shape, generator=g), torch.randn(shape, generator=g)) for _ in range(STEPS)]


def loss_fn(out: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    """Mean squared error written out (torch 2.13's F.mse_loss has wrong DTensor gradients for a sharded batch)."""
    return ((out - target) ** 2).mean()


def layout_map(mesh: lc.Mesh) -> lc.LayoutMap:
    lm = lc.LayoutMap(mesh)
    lm["self_attn.in_proj_weight"] = (None, "x")
    lm["self_attn.out_proj.weight"] = (None, "x")
    lm["linear1.weight"] = ("x", None)
    lm["linear1.bias"] = ("x",)
    lm["linear2.weight"] = (None, "x")
    return lm


def io_layouts(mesh: lc.Mesh) -> dict[str, Any]:
    replicated = lc.Layout((None, None, None), mesh)
    return {
        "input_layouts": {"": replicated},
        "output_layouts": {"": replicated, "linear2": replicated},
        "activations": "dtensor",
    }


def train_reference() -> dict[str, Any]:
    """Plain torch, one process: the parameters after STEPS SGD steps."""
    layer = make_layer()
    opt = torch.optim.SGD(layer.parameters(), lr=LR, momentum=0.9)
    for x, y in batches():
        opt.zero_grad()
        loss_fn(layer(x), y).backward()
        opt.step()
    return {n: p.detach().numpy() for n, p in layer.named_parameters()}


def train_distributed(mesh: lc.Mesh, driver: Any = None) -> tuple[dict[str, Any], dict[str, str], list[float]]:
    """distribute_module + STEPS SGD steps (under ``spmd`` in the simulation): the global parameters, each
    parameter's layout as a string, and the losses."""
    from layoutcore_torch import distribute_module, spmd

    layer = distribute_module(make_layer(), layout_map(mesh), driver=driver, **io_layouts(mesh))
    opt = torch.optim.SGD(layer.parameters(), lr=LR, momentum=0.9)
    losses = []
    for x, y in batches():
        with spmd(mesh):
            opt.zero_grad()
            out = layer(x)
            loss = loss_fn(out, lc.distribute_tensor(y, lc.fetch_layout(out, driver=driver), driver=driver))
            loss.backward()
            opt.step()
        losses.append(float(lc.to_numpy(loss, driver=driver)))
    params = {n: lc.to_numpy(p, driver=driver) for n, p in layer.named_parameters()}
    layouts = {n: str(lc.fetch_layout(p, driver=driver)) for n, p in layer.named_parameters()}
    return params, layouts, losses
