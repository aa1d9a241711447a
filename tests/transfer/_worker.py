"""One process of the multi-process ``transfer.Link`` tests (test_transfer_link.py); not collected by pytest.

Usage: python _worker.py SCENARIO RANK WORLD PORT

Every ``torch.distributed`` point-to-point call (``send``/``recv``/``isend``/``irecv``/
``batch_isend_irecv``) and collective (``all_gather``, ``all_reduce``) of this process is wrapped before the link
exists, and the wrappers count payload bytes: that count, not the library's report, is what the
test compares with the plan's floor. Prints one line ``RESULT <json>``.
"""

from __future__ import annotations

import datetime
import json
import os
import sys
import time
from typing import Any

import numpy as np

scenario, rank, world, port = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
JAX_RANK = scenario == "jax" and rank == 2
if JAX_RANK:  # the JAX process: 4 CPU devices of its own, and torch CPU for the wire
    os.environ["JAX_PLATFORMS"] = "cpu"
    os.environ["LAYOUTCORE_CPU_DEVICES"] = "4"
    import jax

    jax.config.update("jax_num_cpu_devices", 4)
TF_RANK = (scenario == "tf" and rank == 2) or (scenario == "tf_mc" and rank >= 2) or (scenario == "tf_twice" and rank)
if TF_RANK:  # a TF process: logical CPUs of its own (tf_mc: initialize_multi_client sets them), torch for the wire
    os.environ["LAYOUTCORE_CPU_DEVICES"] = "4"

import torch.distributed as dist  # noqa: E402
import torch.distributed.distributed_c10d as c10d  # noqa: E402

# -- the independent byte counter ----------------------------------------------------------------
COUNT = {"sent": 0, "received": 0, "metadata": 0, "in_batch": False}


def _nbytes(t: Any) -> int:
    return int(t.numel() * t.element_size())


def _wrap_p2p(name: str, key: str) -> None:
    original = getattr(dist, name)

    def wrapper(tensor: Any, *args: Any, **kwargs: Any) -> Any:
        if not COUNT["in_batch"]:
            COUNT[key] += _nbytes(tensor)
        return original(tensor, *args, **kwargs)

    setattr(dist, name, wrapper)
    setattr(c10d, name, wrapper)


for _name, _key in (("send", "sent"), ("isend", "sent"), ("recv", "received"), ("irecv", "received")):
    _wrap_p2p(_name, _key)
_batch = dist.batch_isend_irecv


def _batch_wrapper(ops: list[Any]) -> Any:
    for op in ops:
        COUNT["sent" if op.op in (dist.isend, dist.send) else "received"] += _nbytes(op.tensor)
    COUNT["in_batch"] = True
    try:
        return _batch(ops)
    finally:
        COUNT["in_batch"] = False


dist.batch_isend_irecv = _batch_wrapper
c10d.batch_isend_irecv = _batch_wrapper
_all_gather = dist.all_gather


def _all_gather_wrapper(outputs: list[Any], tensor: Any, *args: Any, **kwargs: Any) -> Any:
    COUNT["metadata"] += sum(_nbytes(o) for o in outputs) - _nbytes(tensor)
    return _all_gather(outputs, tensor, *args, **kwargs)


dist.all_gather = _all_gather_wrapper
c10d.all_gather = _all_gather_wrapper
_all_reduce = dist.all_reduce


def _all_reduce_wrapper(tensor: Any, *args: Any, **kwargs: Any) -> Any:
    # what a member learns from the others: their tensors (the link's fingerprint and outcome flags)
    COUNT["metadata"] += _nbytes(tensor) * (dist.get_world_size(kwargs.get("group")) - 1)
    return _all_reduce(tensor, *args, **kwargs)


dist.all_reduce = _all_reduce_wrapper
c10d.all_reduce = _all_reduce_wrapper

dist.init_process_group(
    "gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world, timeout=datetime.timedelta(seconds=120)
)

import layoutcore as lc  # noqa: E402
from layoutcore import Layout, Mesh, TransferError  # noqa: E402

RESULT: dict[str, Any] = {"rank": rank}


def oracle(name: str, shape: tuple[int, ...], dtype: str) -> np.ndarray:
    from layoutcore.driver import numpy_dtype

    rng = np.random.default_rng(sum(map(ord, name)))
    if dtype == "int32":
        return rng.integers(-(2**31), 2**31 - 1, size=shape, dtype=np.int32)
    return rng.standard_normal(shape).astype(np.float32).astype(numpy_dtype(dtype))


def torch_mesh(ranks: list[int], names: tuple[str, ...] = ("x",)) -> Mesh:
    return Mesh((len(ranks),), names, [f"CPU:{r}" for r in ranks])


def torch_groups(*rank_sets: list[int]) -> None:
    """torch's DeviceMesh over a subset of the world makes a process group, which every rank must
    create, in the same order: members through the driver, the others with ``dist.new_group``."""
    for ranks in rank_sets:
        if rank in ranks and not JAX_RANK and not TF_RANK and not (scenario == "numpy" and rank == 0):
            lc.get_driver("torch").device_mesh(torch_mesh(ranks))
        else:
            dist.new_group(ranks)


def counted(fn: Any) -> dict[str, Any]:
    """Run ``fn``; the bytes this process moved meanwhile (by the wrappers), its error and seconds."""
    before = dict(COUNT)
    start = time.monotonic()
    error = None
    try:
        out = fn()
    except TransferError as exc:
        out, error = None, {"message": str(exc)[:3000], "paths": list(exc.paths)}
    return {
        "out": out,
        "error": error,
        "seconds": time.monotonic() - start,
        "sent": COUNT["sent"] - before["sent"],
        "received": COUNT["received"] - before["received"],
        "metadata": COUNT["metadata"] - before["metadata"],
    }


def report(link: Any) -> dict[str, Any]:
    r = link.last_report
    return {
        "floor_share": r.floor_share,
        "floor_bytes": r.floor_bytes,
        "bytes_sent": r.bytes_sent,
        "bytes_received": r.bytes_received,
        "metadata_bytes": r.metadata_bytes,
        "local_bytes": r.local_bytes,
        "plan_reused": r.plan_reused,
        "per_rank": {str(k): list(v) for k, v in r.per_rank.items()},
    }


def shards_ok(tensor: Any, value: np.ndarray, layout: Layout, driver: str) -> bool:
    """Every local shard equals the oracle's block, bit for bit, and the tensor carries ``layout``."""
    drv = lc.get_driver(driver)
    mesh = layout.require_mesh()
    positions = list(drv.local_positions(mesh, drv.bind_mesh(mesh)))
    slices = layout.device_slices(value.shape)
    comps = drv.unpack(tensor)
    same = all(
        np.array_equal(
            np.asarray(drv.component_to_numpy(c)).view(np.uint8), np.ascontiguousarray(value[slices[p]]).view(np.uint8)
        )
        for c, p in zip(comps, positions, strict=True)
    )
    return bool(same and lc.fetch_layout(tensor) == layout and len(comps) == len(positions))


def run_scenario() -> None:
    if scenario == "torch4":
        import _cases_torch4 as cases
    elif scenario == "jax":
        import _cases_jax as cases
    elif scenario == "numpy":
        import _cases_numpy as cases
    elif scenario == "tf":
        import _cases_tf as cases
    elif scenario == "tf_mc":
        import _cases_tf_mc as cases
    elif scenario == "tf_twice":
        import _cases_tf_twice as cases
    else:  # "die", "hang"
        import _cases_die as cases
    cases.run(sys.modules[__name__])


sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
run_scenario()
print("RESULT " + json.dumps(RESULT), flush=True)
dist.barrier()
dist.destroy_process_group()
# Skip the interpreter's teardown: in one fresh-clone CI run the torch-only rank 0 of "tf_twice" aborted at
# exit ("terminate called without an active exception", SIGABRT: a C++ thread of the framework destroyed
# while joinable) after it had printed its correct RESULT and left the group; not reproduced in 6 reruns.
# What is tested has finished here, and a library cannot mend a framework's teardown.
sys.stdout.flush()
sys.stderr.flush()
os._exit(0)
