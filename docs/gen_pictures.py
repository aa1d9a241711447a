"""Draw the pictures in ``docs/img/`` from layoutcore's own shard geometry.

Every number in the pictures comes from :mod:`layoutcore.geometry` and :class:`layoutcore.Layout`,
so a picture cannot show a rule the code does not follow. ``tests/test_docs.py`` regenerates them
into a temporary folder and fails when a committed file is stale; after changing the geometry or
this script, run::

    python docs/gen_pictures.py

The SVGs are rich's terminal renderings (``Console(record=True).export_svg()``), the library that
``jax.debug.visualize_array_sharding`` also draws with.
"""

from __future__ import annotations

import argparse
import io
from collections.abc import Callable
from pathlib import Path

from rich.console import Console, Group, RenderableType
from rich.measure import Measurement
from rich.table import Table
from rich.text import Text

from layoutcore import Layout, Mesh, geometry

IMG_DIR = Path(__file__).resolve().parent / "img"
#: Console width in cells; fixed so that the output does not depend on the terminal.
WIDTH = 100
#: One background per block or device (light enough for black text).
PALETTE = ("#8ecae6", "#ffb703", "#90be6d", "#f4a3a8", "#cdb4db", "#f9c74f", "#a8dadc", "#e9c46a")

#: (dimension size, number of blocks) cases of the chunk rule shown in ``chunk-rule.svg``.
CHUNK_CASES: tuple[tuple[int, int], ...] = ((5, 3), (4, 3), (2, 4), (6, 3))
#: The mesh of the multi-axis and 2-D pictures, as in the TF DTensor guide.
MESH = Mesh((3, 2), ("x", "y"))


def _style(index: int) -> str:
    return f"black on {PALETTE[index % len(PALETTE)]}"


def _device_label(mesh: Mesh, position: int) -> str:
    coordinate = geometry.mesh_coordinate(mesh.shape, position)
    where = ", ".join(f"{name}={c}" for name, c in zip(mesh.axis_names, coordinate, strict=True))
    return f"CPU:{position} ({where})"


def chunk_rule() -> RenderableType:
    """One strip per case: the elements of a dimension, grouped into the blocks of the chunk rule."""
    parts: list[RenderableType] = [
        Text("The chunk rule: d elements in n blocks of ceil(d / n) each;", "bold"),
        Text("the last non-empty block takes the remainder,", "bold"),
        Text("the blocks after it are empty.\n", "bold"),
    ]
    for size, blocks in CHUNK_CASES:
        sizes = geometry.chunk_sizes(size, blocks)
        per_block = -(-size // blocks)
        heading = (
            f"d = {size} over n = {blocks}:  ceil({size}/{blocks}) = {per_block}  ->  "
            f"block sizes {', '.join(str(s) for s in sizes)}"
        )
        table = Table(show_lines=True)
        cells_elements: list[Text] = []
        cells_slices: list[Text] = []
        for index in range(blocks):
            start, stop = geometry.chunk_bounds(size, blocks, index)
            table.add_column(f"block {index}", justify="center", min_width=12)
            if stop > start:
                elements = Text(" ".join(str(e) for e in range(start, stop)), _style(index))
            else:
                elements = Text("(empty)", "italic dim")
            cells_elements.append(elements)
            cells_slices.append(Text(f"[{start}:{stop}]"))
        table.add_row(*cells_elements)
        table.add_row(*cells_slices)
        parts.extend([Text(heading), table, Text("")])
    return Group(*parts)


def _multi_axis_section(entry: tuple[str, ...], size: int) -> RenderableType:
    layout = Layout([entry], MESH)
    mesh_axes = layout.dim_axes[0]
    blocks = layout.num_shards(0)
    major, minor = entry
    rule = f"block = {major} * {MESH.axis_size(minor)} + {minor}"
    title = f"Layout([{entry!r}], mesh x=3, y=2) on arange({size}):  {blocks} blocks, {rule}"

    holder: dict[int, int] = {}
    for position in range(MESH.size):
        coordinate = geometry.mesh_coordinate(MESH.shape, position)
        holder[geometry.block_index(MESH.shape, mesh_axes, coordinate)] = position
    strip = Table(show_lines=True)
    rows: list[list[Text]] = [[], []]
    for block in range(blocks):
        start, stop = geometry.chunk_bounds(size, blocks, block)
        position = holder[block]
        strip.add_column(f"block {block}", justify="center", min_width=13)
        rows[0].append(Text(" ".join(str(e) for e in range(start, stop)), _style(position)))
        rows[1].append(Text(_device_label(MESH, position).replace(" ", "\n", 1)))
    for row in rows:
        strip.add_row(*row)

    grid = Table(show_lines=True)
    grid.add_column("")
    for y in range(MESH.shape[1]):
        grid.add_column(f"y={y}", justify="center", min_width=16)
    slices = layout.device_slices((size,))
    blocks_of = layout.offset_to_shard()
    for x in range(MESH.shape[0]):
        cells: list[RenderableType] = [Text(f"x={x}")]
        for y in range(MESH.shape[1]):
            position = x * MESH.shape[1] + y
            piece = slices[position][0]
            cells.append(
                Text(
                    f"CPU:{position}\nblock {blocks_of[position][0]}\nelements {piece.start}:{piece.stop}",
                    _style(position),
                )
            )
        grid.add_row(*cells)
    return Group(
        Text(title, "bold"),
        Text("the tensor axis: which device holds each block"),
        strip,
        Text("the mesh: which block each device holds"),
        grid,
        Text(""),
    )


def multi_axis() -> RenderableType:
    """``("x", "y")`` vs ``("y", "x")`` on one tensor axis of a 3x2 mesh."""
    intro = Text(
        "Several mesh axes on one tensor axis: the axis is chunked once over the product of their sizes,\n"
        "and the device at mesh coordinate (x, y) takes the block whose row-major index over the named\n"
        "axes, major to minor in tuple order, is its coordinate (as PartitionSpec(('x', 'y'))).\n",
        "bold",
    )
    return Group(intro, _multi_axis_section(("x", "y"), 12), _multi_axis_section(("y", "x"), 12))


def _layout_grid(layout: Layout, shape: tuple[int, int], caption: str) -> RenderableType:
    # Explicit bounds on every axis (device_slices writes a one-block axis as slice(None), as JAX).
    slices = [
        tuple(slice(*s.indices(n)[:2]) for s, n in zip(sl, shape, strict=True)) for sl in layout.device_slices(shape)
    ]
    rows = sorted({(s[0].start, s[0].stop) for s in slices})
    cols = sorted({(s[1].start, s[1].stop) for s in slices})
    blocks = layout.offset_to_shard()
    table = Table(show_lines=True)
    table.add_column("")
    for start, stop in cols:
        table.add_column(f"cols {start}:{stop}", justify="center")
    for r_start, r_stop in rows:
        cells: list[RenderableType] = [Text(f"rows {r_start}:{r_stop}")]
        for c_start, c_stop in cols:
            holders = [
                p
                for p, s in enumerate(slices)
                if (s[0].start, s[0].stop, s[1].start, s[1].stop) == (r_start, r_stop, c_start, c_stop)
            ]
            block = blocks[holders[0]]
            index = layout.offset_tuple_to_global_index(block)
            names = "\n".join(f"CPU:{p}" for p in holders)
            if r_stop == r_start or c_stop == c_start:
                names += "\n(empty)"
            cells.append(Text(names, _style(index)))
        table.add_row(*cells)
    axes = ", ".join(repr(a) for a in layout.axes)
    return Group(Text(caption, "bold"), Text(f"Layout([{axes}], mesh)"), table)


def layouts_2d() -> RenderableType:
    """A (6, 4) tensor on the 3x2 mesh: replicated, sharded, hybrid, and transposed sharding."""
    shape = (6, 4)
    cases = (
        ("replicated", [None, None]),
        ("sharded", ["x", "y"]),
        ("hybrid", ["x", None]),
        ("sharded, axes swapped (4 columns over x=3: 2, 2, 0)", ["y", "x"]),
    )
    grids = [_layout_grid(Layout(axes, MESH), shape, caption) for caption, axes in cases]
    outer = Table.grid(padding=(0, 4))
    outer.add_column()
    outer.add_column()
    outer.add_row(grids[0], grids[1])
    outer.add_row(Text(""), Text(""))
    outer.add_row(grids[2], grids[3])
    intro = Text(
        f"A tensor of shape {shape} on mesh x=3, y=2 (devices CPU:0..CPU:5, row-major):\n"
        "each cell is one block of the tensor and lists every device that holds it.\n",
        "bold",
    )
    return Group(intro, outer)


def _spmd_matmul_table(title: str, spec_a: list[str | None], spec_b: list[str | None]) -> RenderableType:
    """Per device of the 3x2 mesh: its blocks of a and b, its local product, and the all-reduce."""
    import numpy as np

    from layoutcore import propagation

    a = np.array([[1, 2, 3], [4, 5, 6]])
    b = np.array([[6, 5], [4, 3], [2, 1]])
    la, lb = Layout(spec_a, MESH), Layout(spec_b, MESH)
    plan = propagation.plan_matmul(la, lb)
    entries = dict(plan.entries)
    sizes = {"m": 2, "k": 3, "n": 2}
    summed = [MESH.axis_index(name) for name in plan.summed]

    def block(label: str, coordinate: tuple[int, ...]) -> tuple[int, int]:
        entry = entries[label]
        names = () if entry is None else (entry,) if isinstance(entry, str) else entry
        axes = [MESH.axis_index(n) for n in names]
        index = 0
        for axis in axes:
            index = index * MESH.shape[axis] + coordinate[axis]
        count = 1
        for axis in axes:
            count *= MESH.shape[axis]
        return geometry.chunk_bounds(sizes[label], count, index)

    table = Table(show_lines=True)
    for column in ("device", "a: rows, k", "b: k, cols", "local a @ b", "sum with", "c"):
        table.add_column(Text(column), justify="center")
    for position in range(MESH.size):
        coordinate = geometry.mesh_coordinate(MESH.shape, position)
        (m0, m1), (k0, k1), (n0, n1) = (block(label, coordinate) for label in ("m", "k", "n"))
        local = a[m0:m1, k0:k1] @ b[k0:k1, n0:n1]
        group = [
            p
            for p in range(MESH.size)
            if all(
                c == d or i in summed
                for i, (c, d) in enumerate(zip(geometry.mesh_coordinate(MESH.shape, p), coordinate, strict=True))
            )
        ]
        result = a[m0:m1] @ b[:, n0:n1]
        # One colour per block of c: replicas of one block share it.
        style = _style(plan.layout.offset_tuple_to_global_index(plan.layout.offset_to_shard()[position]))
        table.add_row(
            Text(_device_label(MESH, position)),
            Text(f"[{m0}:{m1}, {k0}:{k1}]"),
            Text(f"[{k0}:{k1}, {n0}:{n1}]"),
            Text(str(local.tolist())),
            Text(", ".join(f"CPU:{p}" for p in group) if summed else "(nothing to sum)"),
            Text(str(result.tolist()), style),
        )
    caption = f"{title}: a {la.sharding_specs} @ b {lb.sharding_specs} -> c {plan.layout.sharding_specs}" + (
        f" (k summed over {', '.join(plan.summed)})" if plan.summed else ""
    )
    return Group(Text(caption, "bold"), table)


def spmd_matmul() -> RenderableType:
    """The DTensor guide's sharded matmuls, device by device (layoutcore.propagation's plan)."""
    intro = Text(
        "c = a @ b with a = [[1, 2, 3], [4, 5, 6]] and b = [[6, 5], [4, 3], [2, 1]] on mesh x=3, y=2.\n"
        "Each device multiplies the blocks it holds (slicing a replicated operand locally); the devices\n"
        "along the mesh axis that shards k sum their partial products, so c is replicated over it.\n",
        "bold",
    )
    return Group(
        intro,
        _spmd_matmul_table("The contracting axis sharded", [None, "x"], ["x", None]),
        Text(""),
        _spmd_matmul_table("Rows over y as well", ["y", "x"], ["x", None]),
    )


def spmd_rules() -> RenderableType:
    """propagation's answers for one example of each rule, on the 3x2 mesh."""
    from layoutcore import UnsupportedLayoutError, propagation

    def specs(layout: Layout) -> str:
        return "[" + ", ".join("unsharded" if e is None else str(e) for e in layout.axes) + "]"

    cases: list[tuple[str, str, Callable[[], object]]] = [
        (
            "elementwise",
            "[x, unsharded] + [unsharded, y]",
            lambda: propagation.plan_elementwise(L("x", None), L(None, "y")),
        ),
        ("broadcasting", "[x, unsharded] + [y]", lambda: propagation.plan_elementwise(L("x", None), L("y"))),
        ("matmul, rows", "[y, x] @ [x, unsharded]", lambda: propagation.plan_matmul(L("y", "x"), L("x", None))),
        (
            "matmul, k only",
            "[unsharded, x] @ [x, unsharded]",
            lambda: propagation.plan_matmul(L(None, "x"), L("x", None)),
        ),
        (
            "einsum",
            "ij,jk->ki: [y, x], [x, unsharded]",
            lambda: propagation.plan_einsum("ij,jk->ki", L("y", "x"), L("x", None)),
        ),
        ("sum over axis 0", "[x, y]", lambda: propagation.plan_reduce(L("x", "y"), 0)),
        ("sum, keepdims", "[x, y], axis 1", lambda: propagation.plan_reduce(L("x", "y"), 1, keepdims=True)),
        ("no rule", "[x, unsharded] @ [unsharded, x]", lambda: propagation.plan_matmul(L("x", None), L(None, "x"))),
        (
            "no rule",
            "[x, unsharded] + [y, unsharded]",
            lambda: propagation.plan_elementwise(L("x", None), L("y", None)),
        ),
    ]
    table = Table(show_lines=True)
    for column in ("operation", "operands", "result", "all-reduce over"):
        table.add_column(Text(column), justify="center")
    for index, (name, operands, plan) in enumerate(cases):
        try:
            contraction = plan()
        except UnsupportedLayoutError as exc:
            reason = str(exc).split(": ", 1)[1].split(";")[0]
            table.add_row(Text(name), Text(operands), Text("UnsupportedLayoutError", "bold"), Text(reason, "italic"))
            continue
        layout = contraction.layout  # type: ignore[attr-defined]
        summed = ", ".join(contraction.summed) or "-"  # type: ignore[attr-defined]
        table.add_row(Text(name), Text(operands), Text(specs(layout), _style(index)), Text(summed))
    intro = Text(
        "layoutcore.propagation on mesh x=3, y=2: a sharded axis that is summed away is all-reduced\n"
        "over its mesh axes (the result is replicated there); two different shardings of one axis,\n"
        "or one mesh axis on two axes, have no rule.\n",
        "bold",
    )
    return Group(intro, table)


def L(*axes: str | None) -> Layout:
    """A layout on :data:`MESH`."""
    return Layout(list(axes), MESH)


#: file name -> (title, drawing)
PICTURES: dict[str, tuple[str, Callable[[], RenderableType]]] = {
    "chunk-rule.svg": ("chunk rule", chunk_rule),
    "multi-axis.svg": ("multi-axis sharding", multi_axis),
    "layouts-2d.svg": ("2-D layouts", layouts_2d),
    "spmd-matmul.svg": ("SPMD matmul", spmd_matmul),
    "spmd-rules.svg": ("SPMD propagation rules", spmd_rules),
}


def render_svg(title: str, drawing: Callable[[], RenderableType]) -> str:
    """The SVG text of one picture (deterministic: bounded width, fixed colours and environment)."""
    console = Console(
        record=True,
        width=WIDTH,
        file=io.StringIO(),
        force_terminal=True,
        color_system="truecolor",
        legacy_windows=False,
        _environ={},
    )
    picture = drawing()
    # Crop the canvas to the drawing, so that the SVG carries no empty right margin.
    console.width = min(WIDTH, Measurement.get(console, console.options, picture).maximum)
    console.print(picture)
    return console.export_svg(title=title)


def generate(out_dir: Path = IMG_DIR) -> list[Path]:
    """Write every picture into ``out_dir`` and return their paths."""
    out_dir.mkdir(parents=True, exist_ok=True)
    written = []
    for file_name, (title, drawing) in PICTURES.items():
        path = out_dir / file_name
        path.write_text(render_svg(title, drawing), encoding="utf-8")
        written.append(path)
    return written


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--out", type=Path, default=IMG_DIR, help=f"output folder (default {IMG_DIR})")
    args = parser.parse_args(argv)
    for path in generate(args.out):
        print(path)


if __name__ == "__main__":
    main()
