"""One process of the 2-process checkpoint test (test_multiprocess.py); not collected by pytest.

Usage: python _mp_worker.py FRAMEWORK PROCESS_ID PORT ROOT

FRAMEWORK is ``jax`` (jax.distributed, 4 CPU devices per process), ``torch`` (a gloo group,
one device per rank) or ``tensorflow`` (two DTensor clients, 2 logical CPUs each; PORT is then
``PORT0,PORT1``, one per client). Both processes save ``ROOT/two`` together, then load it under another
mesh shape, and load ``ROOT/one`` (saved by one process beforehand), each time with the files
evicted from the page cache and the bytes this process read measured by the kernel
(``/proc/self/io``), next to what ``read_plan`` predicted for this process's devices.
Prints one line ``RESULT <json>``.
"""

from __future__ import annotations

import datetime
import json
import os
import sys
from pathlib import Path
from typing import Any

import numpy as np

framework, process_id, port, root = sys.argv[1], int(sys.argv[2]), sys.argv[3], Path(sys.argv[4])

if framework == "jax":
    import layoutcore_jax

    layoutcore_jax.initialize_distributed(f"127.0.0.1:{port}", 2, process_id, timeout_s=180, local_device_count=4)
elif framework == "tensorflow":
    import layoutcore_tensorflow

    jobs = [f"localhost:{p}" for p in port.split(",")]
    layoutcore_tensorflow.initialize_multi_client(process_id, jobs, num_cpu_devices=2, timeout=180)
else:
    import torch.distributed as dist

    dist.init_process_group(
        "gloo",
        init_method=f"tcp://127.0.0.1:{port}",
        rank=process_id,
        world_size=2,
        timeout=datetime.timedelta(seconds=180),
    )

import layoutcore as lc  # noqa: E402
from layoutcore import Layout, Mesh, checkpoint  # noqa: E402

sys.path.insert(0, str(Path(__file__).parent))
from _mp_common import oracle, targets  # noqa: E402

drv = lc.get_driver(framework)
n = len(drv.list_devices())


def io() -> dict[str, int]:
    with open("/proc/self/io") as f:
        return {k: int(v) for k, v in (line.split(": ") for line in f.read().splitlines())}


def evict(path: Path) -> None:
    for p in path.rglob("*"):
        if p.is_file():
            fd = os.open(p, os.O_RDONLY)
            os.fsync(fd)  # dirty pages (just saved) are not dropped: write them back first
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
            os.close(fd)


def measured_load(path: Path, target: dict[str, Any]) -> dict[str, Any]:
    mesh = next(iter(target.values())).mesh
    local = list(drv.local_positions(mesh, drv.bind_mesh(mesh)))
    plan = checkpoint.read_plan(path, target, driver=framework)  # this process's devices
    assert plan.read_bytes == checkpoint.read_plan(path, target, process_devices=local).read_bytes
    with lc.use_driver(framework):  # the default: this process's devices under the selected driver
        assert checkpoint.read_plan(path, target).reads == plan.reads
    evict(path)
    before = io()
    out = checkpoint.load(path, target, driver=framework)
    after = io()
    ok = {}
    for name, layout in target.items():
        value = oracle(name)
        comps = drv.unpack(out[name])
        slices = layout.device_slices(value.shape)
        ok[name] = bool(lc.fetch_layout(out[name]) == layout) and all(
            np.array_equal(drv.component_to_numpy(c), value[slices[p]]) for c, p in zip(comps, local, strict=True)
        )
    return {
        "local": local,
        "ok": ok,
        "rchar": after["rchar"] - before["rchar"],
        "read_bytes": after["read_bytes"] - before["read_bytes"],
        "plan_read": plan.read_bytes,
        "plan_floor": plan.floor_bytes,
        "plan_meta": plan.metadata_bytes,
    }


save_mesh = Mesh((n,), ("x",))
tree = {
    "w": lc.distribute_tensor(oracle("w"), Layout(("x", None), save_mesh), driver=framework),
    "u": lc.distribute_tensor(oracle("u"), Layout(("x", None), save_mesh), driver=framework),
    "r": lc.distribute_tensor(oracle("r"), Layout((None, None), save_mesh), driver=framework),
}
declared, undeclared = targets(n, multi_axis=framework != "tensorflow")
checkpoint.save(root / "two", tree, read_layouts={"w": declared["w"]})
# One load before measuring: the first one imports modules lazily and compiles JAX programs, and
# reading those files would count in rchar next to the checkpoint's bytes.
checkpoint.load(root / "one", declared, driver=framework)
result = {
    "process": process_id,
    "devices": n,
    "declared": measured_load(root / "two", declared),
    "undeclared": measured_load(root / "two", undeclared),
    "from_one": measured_load(root / "one", declared),
}
print("RESULT " + json.dumps(result), flush=True)
if framework == "jax":
    import jax
    from jax.experimental import multihost_utils

    # leave together: a process that shuts down while its peer still loads stops sending heartbeats,
    # and JAX's coordination service then aborts the peer (seen under load: rc -6, "tasks unhealthy")
    multihost_utils.sync_global_devices("worker:end")
    jax.distributed.shutdown()
elif framework == "tensorflow":
    # the first client hosts the cluster's coordination service: leave together
    group = drv.process_group()
    assert (group.rank, group.size) == (process_id, 2), group
    assert group.barrier is not None
    group.barrier("worker:end", 300.0)
else:
    dist.barrier()
    dist.destroy_process_group()
