"""How Mesh construction and its TF string round trip scale with the number of devices and axes.

The target is linear time: a Mesh of 1 million explicit devices built and round-tripped
through ``to_string`` / ``from_string`` in under 5 s, one of 100 000 in under 0.5 s, and a mesh
of 20 000 axes fast. Each figure is the minimum over ``--repeat`` runs. The default clock is the
process's CPU time (on a shared machine wall time mostly measures waiting for a core);
``--clock wall`` gives wall time. The numbers go to ``benchmarks/results/bench_mesh_scale[.wall].json``.
There is no native contender: TF's ``Mesh.from_string`` needs TF and is C++.

    python benchmarks/bench_mesh_scale.py [--repeat 3] [--clock cpu|wall] [--check]

``--check`` exits 1 when a target is missed.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from layoutcore import Mesh

RESULTS = Path(__file__).parent / "results"
#: (label, devices, axes) -> the target for build + to_string + from_string, in seconds.
CASES: list[tuple[str, int, int, float]] = [
    ("100 000 devices", 100_000, 1, 0.5),
    ("1 000 000 devices", 1_000_000, 1, 5.0),
    ("20 000 axes", 1, 20_000, 0.5),
]


def best_of(repeat: int, fn: Callable[[], Any], clock: Callable[[], float]) -> float:
    """Smallest of ``repeat`` timed runs of ``fn``, in seconds of ``clock``."""
    times = []
    for _ in range(repeat):
        start = clock()
        fn()
        times.append(clock() - start)
    return min(times)


def measure(devices: int, axes: int, repeat: int, clock: Callable[[], float]) -> dict[str, float]:
    """Build, to_string and from_string of a mesh of ``devices`` explicit CPU devices over ``axes`` axes."""
    shape = (devices,) + (1,) * (axes - 1)
    names = [f"a{i}" for i in range(axes)]
    device_names = [f"CPU:{i}" for i in range(devices)]
    mesh = Mesh(shape, names, device_names)
    text = mesh.to_string()
    assert Mesh.from_string(text) == mesh  # the round trip is exact
    build = best_of(repeat, lambda: Mesh(shape, names, device_names), clock)
    dump = best_of(repeat, mesh.to_string, clock)
    load = best_of(repeat, lambda: Mesh.from_string(text), clock)
    return {"build_s": build, "to_string_s": dump, "from_string_s": load, "total_s": build + dump + load}


def main() -> int:
    """Print one line per case, write the JSON, and with ``--check`` return 1 on a missed target."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--clock", choices=["cpu", "wall"], default="cpu")
    parser.add_argument("--check", action="store_true")
    args = parser.parse_args()
    clock = time.process_time if args.clock == "cpu" else time.perf_counter
    results: dict[str, Any] = {"statistic": "minimum", "clock": args.clock, "repeat": args.repeat, "cases": {}}
    missed = []
    for label, devices, axes, target in CASES:
        r = measure(devices, axes, args.repeat, clock)
        r["target_s"] = target
        results["cases"][label] = r
        verdict = "ok" if r["total_s"] < target else "MISSED"
        if verdict != "ok":
            missed.append(label)
        print(
            f"{label:>18}: build {r['build_s']:.3f} s, to_string {r['to_string_s']:.3f} s, "
            f"from_string {r['from_string_s']:.3f} s, total {r['total_s']:.3f} s (target < {target} s: {verdict})"
        )
    RESULTS.mkdir(exist_ok=True)
    suffix = "" if args.clock == "cpu" else ".wall"
    (RESULTS / f"bench_mesh_scale{suffix}.json").write_text(json.dumps(results, indent=2) + "\n")
    return 1 if args.check and missed else 0


if __name__ == "__main__":
    sys.exit(main())
