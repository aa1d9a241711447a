"""Defects shared by the framework mutants (tests/conformance_plugins/broken_*.py): pure layoutcore values."""

from __future__ import annotations

from layoutcore import Layout


def swapped(layout: Layout) -> Layout:
    """``layout`` with its mesh axes swapped end for end (``x`` <-> ``y`` on a 2-D mesh): every tensor axis
    sharded over mesh axis ``i`` is sharded over axis ``n - 1 - i`` instead. A 1-D mesh has nothing to swap."""
    mesh = layout.mesh
    assert mesh is not None
    names = mesh.axis_names
    other = dict(zip(names, reversed(names), strict=True))
    axes = [
        entry if entry is None else (other[entry] if isinstance(entry, str) else tuple(other[n] for n in entry))
        for entry in layout.axes
    ]
    return Layout(axes, mesh)


def replicated_like(layout: Layout, rank: int) -> Layout:
    """What a lying ``native_fetch_layout`` reports: replicated, on the mesh the tensor really lives on."""
    assert layout.mesh is not None
    return Layout.replicated(layout.mesh, rank)
