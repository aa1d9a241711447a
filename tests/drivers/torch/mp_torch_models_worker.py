"""One rank of the 2-process gloo run of a transformers Llama under its own tp_plan (test_torch_models.py);
not a test module.

Usage: ``python mp_torch_models_worker.py RANK PORT TIMEOUT_S``. Joins a gloo group of 2 on 127.0.0.1, lays the
tiny Llama of ``models_recipe.py`` out by ``from_tp_plan(model.tp_plan, mesh, axis="tp")`` with
``distribute_module``, trains it for ``STEPS`` SGD steps called with ``input_ids=`` and ``labels=``, and prints
one JSON line: the global parameters, their placements and the losses. The parent compares them with a plain
torch run.
"""

from __future__ import annotations

import json

import models_recipe as recipe
import torch.distributed as dist
from gloo_pair import join_gloo_pair


def main() -> None:
    rank = join_gloo_pair()
    params, placements, losses = recipe.train_distributed(ranks=2)
    out = {"rank": rank, "params": {n: p.tolist() for n, p in params.items()}, "placements": placements}
    out["losses"] = losses
    print(json.dumps(out), flush=True)
    dist.barrier()  # both ranks past their last collective before either tears gloo down
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
