"""How Mesh construction and its TF string round trip scale with the number of devices and axes.

Issue 9 asks for linear time: a Mesh of 1 million explicit devices built and round-tripped
through ``to_string`` / ``from_string`` in under 5 s, one of 100 000 in under 0.5 s, and a mesh
of 20 000 axes fast. Each figure is the best of ``--repeat`` runs (the machine is shared). Run::

    python benchmarks/bench_mesh_scale.py [--repeat 3]
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable
from typing import Any

from layoutcore import Mesh


def best_of(repeat: int, fn: Callable[[], Any]) -> float:
    """Fastest of ``repeat`` wall-clock runs of ``fn``, in seconds."""
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return min(times)


def devices_case(n: int, repeat: int) -> dict[str, float]:
    """Build, to_string and from_string for a 1-D mesh of ``n`` explicit CPU devices."""
    names = [f"CPU:{i}" for i in range(n)]
    mesh = Mesh((n,), ("x",), names)
    text = mesh.to_string()
    assert Mesh.from_string(text) == mesh
    build = best_of(repeat, lambda: Mesh((n,), ("x",), names))
    dump = best_of(repeat, mesh.to_string)
    load = best_of(repeat, lambda: Mesh.from_string(text))
    return {"build": build, "to_string": dump, "from_string": load, "total": build + dump + load}


def axes_case(n: int, repeat: int) -> dict[str, float]:
    """Build and round-trip an abstract mesh of ``n`` axes of size 1."""
    shape, names = (1,) * n, [f"a{i}" for i in range(n)]
    mesh = Mesh(shape, names)
    text = mesh.to_string()
    build = best_of(repeat, lambda: Mesh(shape, names))
    load = best_of(repeat, lambda: Mesh.from_string(text))
    return {"build": build, "to_string": best_of(repeat, mesh.to_string), "from_string": load, "total": 0.0}


def main() -> None:
    """Print one line per case."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    for label, case in (
        ("100 000 devices", lambda: devices_case(100_000, args.repeat)),
        ("1 000 000 devices", lambda: devices_case(1_000_000, args.repeat)),
        ("20 000 axes", lambda: axes_case(20_000, args.repeat)),
    ):
        r = case()
        r["total"] = r["build"] + r["to_string"] + r["from_string"]
        print(
            f"{label:>18}: build {r['build']:.3f} s, to_string {r['to_string']:.3f} s, "
            f"from_string {r['from_string']:.3f} s, total {r['total']:.3f} s"
        )


if __name__ == "__main__":
    main()
