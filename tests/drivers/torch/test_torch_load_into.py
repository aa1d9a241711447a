"""Loading checkpoints into laid-out torch models (docs/checkpoints.md, "Into a laid-out transformers model").

Oracle: the same tiny transformers model (models_recipe, config built in code) in plain torch, which
wrote the Hugging Face safetensors checkpoint with ``save_pretrained``.
"""

from __future__ import annotations

from pathlib import Path

import models_recipe
import numpy as np
import pytest
import torch
from layoutcore_torch import LayoutcoreStorageReader, TorchDriver, distribute_module, from_tp_plan, spmd

import layoutcore as lc
from layoutcore import CheckpointError, checkpoint

transformers = pytest.importorskip("transformers", reason="the models tests need transformers (tox -e torch)")

MESH = lc.Mesh((4,), ("tp",))


def test_a_meta_initialised_laid_out_model_loads_into_its_dtensors(driver: TorchDriver, tmp_path: Path) -> None:
    reference = models_recipe.make_model("llama")
    reference.save_pretrained(tmp_path / "hf")  # model.safetensors, as a Hugging Face checkpoint is
    # the recipe: no full copy of the weights is ever materialised on one device
    with torch.device("meta"):
        model = transformers.LlamaForCausalLM(reference.config)
    distribute_module(model, from_tp_plan(model.tp_plan, MESH, axis="tp"))
    with spmd(MESH):
        model.to_empty(device="cpu")  # each rank's own (uninitialised) block
    params = dict(model.named_parameters())
    pointers = {n: [c.data_ptr() for c in lc.unpack(p)] for n, p in params.items()}
    out = checkpoint.load(tmp_path / "hf", into=params)
    # non-persistent buffers are in no checkpoint: rebuild the rotary embedding's inv_freq on the host
    model.model.rotary_emb = type(model.model.rotary_emb)(model.config)
    assert set(out) == set(params) and all(out[n] is params[n] for n in params)
    assert {n: [c.data_ptr() for c in lc.unpack(p)] for n, p in params.items()} == pointers  # storage kept
    want = dict(reference.named_parameters())
    for name, p in params.items():
        np.testing.assert_array_equal(lc.to_numpy(p), want[name].detach().numpy(), err_msg=name)
    ids = models_recipe.batch()
    with spmd(MESH):
        got = models_recipe._first(model(input_ids=ids).logits)
    np.testing.assert_allclose(got.numpy(), reference(input_ids=ids).logits.detach().numpy(), rtol=1e-5, atol=1e-5)


def test_the_dcp_reader_in_the_simulation_says_it_needs_a_process_group(driver: TorchDriver, tmp_path: Path) -> None:
    lc.distribute_tensor(np.zeros(4, np.float32), lc.Layout(("tp",), MESH))  # the simulation runs
    checkpoint.save(tmp_path / "c", {"w": np.arange(4, dtype=np.float32)})
    with pytest.raises(CheckpointError, match=r"needs a real torch.distributed process group.*into="):
        LayoutcoreStorageReader(tmp_path / "c")
