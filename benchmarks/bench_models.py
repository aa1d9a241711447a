"""A transformers Llama forward under ``distribute_module(model, from_tp_plan(model.tp_plan, ...))`` against the
same model under torch's ``parallelize_module`` with torch's own styles, interleaved.

Run from the repository root, in an environment with torch and transformers::

    python benchmarks/bench_models.py            # median of interleaved repeats
    python benchmarks/bench_models.py --quick    # fewer repeats
    python benchmarks/bench_models.py --check    # exit 1 when the ratio target (<= 1.1) is missed

The model: ``LlamaForCausalLM`` from a config built in code (hidden 256, 4 layers, 8 query / 4 key-value
heads, MLP 512, vocabulary 2048), random weights, batch 4 x 128 tokens, ``torch.no_grad()``, in torch's
single-process simulation of 4 ranks (mesh ``tp``). layoutcore: the model's own ``tp_plan`` through
``from_tp_plan`` (embedding vocabulary-parallel, q/k/v/gate/up column-parallel, o/down row-parallel,
lm_head column-parallel with its output gathered). torch: ``parallelize_module`` with the same split,
written with torch's styles (``RowwiseParallel(input_layouts=Replicate())`` on the embedding,
``ColwiseParallel`` / ``RowwiseParallel`` on the projections, ``ColwiseParallel(output_layouts=Replicate())``
on lm_head). Both produce the unsharded model's logits (checked before timing). Clock: wall time.
Writes ``benchmarks/results/bench_models.json``.
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import platform
import statistics
import sys
import time
from pathlib import Path
from typing import Any

from _timing import quick_path  # benchmarks/ is sys.path[0] when a benchmark runs

os.environ.setdefault("LAYOUTCORE_CPU_DEVICES", "4")

RESULTS = Path(__file__).resolve().parent / "results"
TARGET = 1.1
RANKS = 4


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--check", action="store_true")
    args = parser.parse_args()

    import torch
    import transformers
    from layoutcore_torch import distribute_module, from_tp_plan, spmd, to_torch_mesh
    from torch.distributed.tensor import Replicate
    from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, parallelize_module

    import layoutcore as lc

    torch.manual_seed(0)
    config = transformers.LlamaConfig(
        vocab_size=2048,
        hidden_size=256,
        intermediate_size=512,
        num_hidden_layers=4,
        num_attention_heads=8,
        num_key_value_heads=4,
    )
    base = transformers.LlamaForCausalLM(config).eval()
    mesh = lc.Mesh((RANKS,), ("tp",))
    ids = torch.randint(0, config.vocab_size, (4, 128), generator=torch.Generator().manual_seed(1))

    ours = distribute_module(copy.deepcopy(base), from_tp_plan(base.tp_plan, mesh, axis="tp"))
    plan: dict[str, Any] = {
        "model.embed_tokens": RowwiseParallel(input_layouts=Replicate()),
        "lm_head": ColwiseParallel(output_layouts=Replicate()),
    }
    for i in range(config.num_hidden_layers):
        for name in ("self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj", "mlp.gate_proj", "mlp.up_proj"):
            plan[f"model.layers.{i}.{name}"] = ColwiseParallel()
        for name in ("self_attn.o_proj", "mlp.down_proj"):
            plan[f"model.layers.{i}.{name}"] = RowwiseParallel()
    with spmd(mesh):
        theirs = parallelize_module(copy.deepcopy(base), to_torch_mesh(mesh), plan)

    def run(model: Any) -> Any:
        with spmd(mesh), torch.no_grad():
            return model(input_ids=ids).logits

    with torch.no_grad():
        want = base(input_ids=ids).logits
    for model in (ours, theirs):
        got = run(model)
        for value in getattr(got, "_local_tensors", {0: got}).values():  # each simulated rank's logits
            assert torch.allclose(value, want, atol=1e-4), float((value - want).abs().max())

    repeats = 5 if args.quick else 15
    times: dict[str, list[float]] = {"layoutcore": [], "torch": []}
    contenders = [("layoutcore", ours), ("torch", theirs)]
    run(ours), run(theirs)  # warm-up
    for i in range(repeats):
        for name, model in contenders if i % 2 == 0 else contenders[::-1]:
            start = time.perf_counter()
            run(model)
            times[name].append(time.perf_counter() - start)
    med = {k: statistics.median(v) for k, v in times.items()}
    ratio = med["layoutcore"] / med["torch"]
    ok = ratio <= TARGET
    print(
        f"torch {torch.__version__}, transformers {transformers.__version__}, Llama hidden 256 x 4 layers, "
        f"batch 4 x 128, {RANKS} simulated ranks, wall clock, median of {repeats} interleaved repeats"
    )
    print(
        f"distribute_module {med['layoutcore'] * 1e3:.1f} ms, parallelize_module {med['torch'] * 1e3:.1f} ms, "
        f"ratio {ratio:.3f} (target <= {TARGET}){'' if ok else '  MISSED'}"
    )
    RESULTS.mkdir(exist_ok=True)
    out = quick_path(RESULTS / "bench_models.json", args.quick)
    row = {"layoutcore_ms": med["layoutcore"] * 1e3, "torch_ms": med["torch"] * 1e3, "ratio": ratio}
    row |= {"target": TARGET, "ok": ok, "repeats": repeats}
    meta = {"statistic": "median", "torch": torch.__version__, "transformers": transformers.__version__}
    meta |= {"python": platform.python_version(), "machine": platform.machine(), "clock": "wall", "quick": args.quick}
    out.write_text(json.dumps({**meta, "rows": [row]}, indent=2) + "\n")
    print(f"wrote {out}")
    return 1 if args.check and not ok else 0


if __name__ == "__main__":
    sys.exit(main())
