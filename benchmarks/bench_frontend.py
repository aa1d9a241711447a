"""What the core's front-end costs per call at 1 KiB, on any driver ("the split costs nothing").

Run from the repository root with the driver's environment::

    LAYOUTCORE_DRIVER=jax python benchmarks/bench_frontend.py [--reps 3000]
    python benchmarks/bench_frontend.py --mesh-scale    # bind_mesh + check_layout at 8, 8 192, 65 536 devices

``--mesh-scale`` (NumPy driver, CPU medians of 10-call batches, sizes interleaved): before the mesh
hash was cached 3.8 / 102 / 921 us at 8 / 8 192 / 65 536 devices; after it 1.25 / 1.25 / 1.25 us
(target: 65 536 within 3x of 8), on the shared 2-core machine.

For ``distribute_tensor``, ``relayout`` and ``fetch_layout`` of a 16 x 16 float32 array on a 4 x 2
mesh (``("x", "y")`` -> ``("y", "x")``), it times the public call (``layoutcore.<op>``: registry,
validation, mesh binding, capability check, hook, layout record and its check) against the
driver's own hook alone (``native_*``), interleaved, and prints both medians (CPU clock) and their
difference: the front-end's cost. JAX results are waited for (``block_until_ready``) in both.

Measured on the shared 2-core development machine (CPU time, medians of 3000 interleaved pairs),
before the front-end split (commit 41afb62, where hooks recorded layouts themselves, so its hook
times include that) and after it (2d9dc63): NumPy ``distribute_tensor`` 3.1 -> 3.1 us,
``relayout`` 5.6 -> 5.4..11 us (the hook itself went from 84 to 198 us in between, and its noise
dominates); JAX ``distribute_tensor`` 8.4 -> 8.9 us, ``relayout`` 11.5 -> 9.6 us.
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable
from typing import Any

import numpy as np

import layoutcore as lc


def mesh_scale(reps: int, sizes: tuple[int, ...] = (8, 8192, 65536)) -> dict[int, float]:
    """Median CPU microseconds of ``bind_mesh`` + ``check_layout`` on a concrete mesh of each size.

    What the front-end pays per call for the mesh itself (hashing, binding, the capability check):
    O(1) in the number of devices is the target (65 536 devices within 3x of 8). The NumPy driver
    with exactly that many devices; sizes interleaved, so load affects all alike.
    """
    from layoutcore.numpy import NumpyDriver

    cases = []
    for n in sizes:
        drv = NumpyDriver(num_devices=n)
        mesh = lc.Mesh((n // 8, 8), ("x", "y"), devices=[f"CPU:{i}" for i in range(n)])
        layout, shape = lc.Layout(("x", None), mesh), (n, 16)
        drv.bind_mesh(mesh)
        drv.check_layout(layout, shape)
        cases.append((n, drv, mesh, layout, shape))
    clock = time.process_time
    times: dict[int, list[float]] = {n: [] for n in sizes}
    for _ in range(reps):
        for n, drv, mesh, layout, shape in cases:
            start = clock()
            for _ in range(10):
                drv.bind_mesh(mesh)
                drv.check_layout(layout, shape)
            times[n].append((clock() - start) / 10)
    return {n: statistics.median(t) * 1e6 for n, t in times.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=3000, help="interleaved pairs per operation")
    parser.add_argument(
        "--mesh-scale", action="store_true", help="only bind_mesh + check_layout at 8 .. 65 536 devices"
    )
    args = parser.parse_args()
    if args.mesh_scale:
        result = mesh_scale(max(args.reps // 10, 30))
        for n, us in result.items():
            print(
                f"bind_mesh + check_layout, {n:6} devices: {us:8.2f} us   ({us / result[min(result)]:.2f}x the smallest)"
            )
        return
    drv = lc.get_driver()
    mesh = lc.Mesh((4, 2), ("x", "y"))
    source, target = lc.Layout(("x", "y"), mesh), lc.Layout(("y", "x"), mesh)
    x: Any = np.random.default_rng(0).standard_normal((16, 16), dtype=np.float32)
    if drv.name == "torch":
        import torch

        x = torch.from_numpy(x)
    elif drv.name == "tensorflow":
        import tensorflow as tf

        x = tf.constant(x)
    a = lc.distribute_tensor(x, source)
    devices = drv.bind_mesh(mesh)

    def sync(result: Any) -> None:
        if hasattr(result, "block_until_ready"):
            result.block_until_ready()

    pairs: dict[str, tuple[Callable[[], Any], Callable[[], Any]]] = {
        "distribute_tensor": (
            lambda: lc.distribute_tensor(x, source),
            lambda: drv.native_distribute(x, source, devices),
        ),
        "relayout": (lambda: lc.relayout(a, target), lambda: drv.native_relayout(a, target, devices)),
        "fetch_layout": (lambda: lc.fetch_layout(a), lambda: drv.native_fetch_layout(a)),
    }
    clock = time.process_time
    print(f"driver {drv.name}, 1 KiB float32, mesh 4x2, {args.reps} interleaved pairs, CPU clock")
    for op, (ours, hook) in pairs.items():
        for _ in range(30):
            sync(ours())
            sync(hook())
        times: dict[str, list[float]] = {"ours": [], "hook": []}
        for i in range(args.reps):
            order = (("ours", ours), ("hook", hook)) if i % 2 else (("hook", hook), ("ours", ours))
            for key, fn in order:
                start = clock()
                sync(fn())
                times[key].append(clock() - start)
        ours_us, hook_us = (statistics.median(times[k]) * 1e6 for k in ("ours", "hook"))
        print(f"{op:18} layoutcore {ours_us:9.2f} us   hook {hook_us:9.2f} us   front-end {ours_us - hook_us:6.2f} us")


if __name__ == "__main__":
    main()
