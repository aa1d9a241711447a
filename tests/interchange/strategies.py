"""Hypothesis strategies for the interchange tests: random TensorSpecs on meshes of <= 8 devices."""

from __future__ import annotations

import math

from hypothesis import strategies as st

from layoutcore import Layout, Mesh, TensorSpec

NAMES = ("a", "b", "c")


@st.composite
def specs(
    draw: st.DrawFn, *, dtypes: tuple[str, ...] = ("float32", "bfloat16", "int32"), max_devices: int = 8
) -> TensorSpec:
    """A TensorSpec: 1-3 mesh axes (<= ``max_devices`` devices, abstract), rank 0-3, multi-axis
    entries in any order, shapes even or uneven (sizes 0-12)."""
    ndim = draw(st.integers(1, 3))
    sizes: list[int] = []
    for _ in range(ndim):
        room = max_devices // max(1, math.prod(sizes))
        sizes.append(draw(st.integers(1, max(1, min(4, room)))))
    mesh = Mesh(tuple(sizes), NAMES[:ndim])
    rank = draw(st.integers(0, 3))
    free = list(draw(st.permutations(NAMES[:ndim])))
    axes: list[object] = []
    for _ in range(rank):
        take = draw(st.integers(0, min(2, len(free))))
        used, free = free[:take], free[take:]
        axes.append(None if not used else (used[0] if take == 1 else tuple(used)))
    layout = Layout(axes, mesh)
    shape = []
    for d in range(rank):
        n = layout.num_shards(d)
        shape.append(draw(st.one_of(st.integers(0, 12), st.integers(1, 3).map(lambda k, n=n: k * n))))
    return TensorSpec(tuple(shape), draw(st.sampled_from(dtypes)), layout)
