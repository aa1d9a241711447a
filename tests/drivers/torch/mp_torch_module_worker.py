"""One rank of the 2-process gloo run of distribute_module (test_torch_distribute_module.py); not a test module.

Usage: ``python mp_torch_module_worker.py RANK PORT TIMEOUT_S``. Joins a gloo group of 2 on 127.0.0.1, trains
the TransformerEncoderLayer of transformer_recipe.py laid out by distribute_module, and prints one JSON line:
the global parameters, their layouts and the losses. The parent compares them with a plain torch run.
"""

from __future__ import annotations

import json

import torch.distributed as dist
import transformer_recipe as recipe
from gloo_pair import join_gloo_pair

import layoutcore as lc


def main() -> None:
    rank = join_gloo_pair()
    params, layouts, losses = recipe.train_distributed(lc.Mesh((2,), ("x",)))
    out = {"rank": rank, "params": {n: p.tolist() for n, p in params.items()}, "layouts": layouts, "losses": losses}
    print(json.dumps(out), flush=True)
    # Both ranks past their last collective before either tears gloo down: a rank that destroys its
    # group while the peer's last transfer is in flight can abort the peer at exit (seen once in CI).
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
