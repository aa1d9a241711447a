"""Terminal pictures of a layout: which device holds which block (``layoutcore show``, the tour).

Everything here is computed from :class:`~layoutcore.Layout` and :mod:`layoutcore.geometry`
alone; no driver is involved. This module imports ``rich`` at the top, so only the CLI imports
it, lazily, and ``import layoutcore`` stays free of it.

The picture follows ``jax.debug.visualize_array_sharding``: one table cell per block of the
global array, labelled with the devices that hold it, cells sized in proportion to the block's
extent. Unlike JAX it also draws rank 0, rank > 2 (one grid per block of the leading axes),
uneven layouts (empty chunk-rule blocks are drawn, marked ``empty``) and multi-axis layouts.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from dataclasses import dataclass

from rich import box
from rich.align import Align
from rich.console import Group, RenderableType
from rich.padding import Padding
from rich.table import Table
from rich.text import Text

from .. import geometry
from .._layout import Layout

__all__ = ["Block", "blocks_of", "device_names", "device_table", "format_bounds", "layout_summary", "render_layout"]

# tab20's pastel half (what visualize_array_sharding cycles through), readable with black text.
_PALETTE = (
    "#aec7e8",
    "#ffbb78",
    "#98df8a",
    "#ff9896",
    "#c5b0d5",
    "#c49c94",
    "#f7b6d2",
    "#c7c7c7",
    "#dbdb8d",
    "#9edae5",
)
# Cell extents (characters wide, lines tall) for the largest block on a grid axis, and the least.
_MAX_WIDTH = 24
_MIN_WIDTH = 8
_MAX_HEIGHT = 4
_MIN_HEIGHT = 2


@dataclass(frozen=True, slots=True)
class Block:
    """One block of the global array under a layout.

    Attributes:
        index: the block number on every tensor axis (TF's ``offset_to_shard`` entry).
        bounds: ``(start, stop)`` on every tensor axis (chunk rule; ``start == stop`` if empty).
        devices: the devices holding it (its replicas), in row-major mesh order.
    """

    index: tuple[int, ...]
    bounds: tuple[tuple[int, int], ...]
    devices: tuple[str, ...]

    @property
    def empty(self) -> bool:
        """True when the block holds no element (a trailing chunk-rule block)."""
        return any(start == stop for start, stop in self.bounds)


def device_names(layout: Layout, devices: Sequence[str] | None = None) -> tuple[str, ...]:
    """The names to draw for the layout's devices, row-major.

    The mesh's own devices win; else ``devices``; else ``CPU:0 .. CPU:n-1``, the devices an
    abstract mesh binds to on the NumPy driver (and the ones ``Mesh.to_string`` writes).
    """
    mesh = layout._require_mesh("device_names")
    if mesh.devices is not None:
        return mesh.devices
    if devices is not None:
        return tuple(devices)
    return tuple(f"CPU:{i}" for i in range(mesh.size))


def blocks_of(
    layout: Layout, global_shape: Sequence[int], devices: Sequence[str] | None = None
) -> dict[tuple[int, ...], Block]:
    """Every block of a ``global_shape`` array under ``layout``, keyed by its block index.

    Blocks are listed in row-major block order, one per point of the block grid
    ``(layout.num_shards(0), ..., layout.num_shards(rank-1))``; each names its holders.

    Raises:
        LayoutError: the layout has no mesh, or its rank differs from ``global_shape``'s.
    """
    shape = layout.check_shape(global_shape)
    names = device_names(layout, devices)
    holders: dict[tuple[int, ...], list[str]] = {}
    for name, index in zip(names, layout.offset_to_shard(), strict=True):
        holders.setdefault(index, []).append(name)
    counts = [layout.num_shards(d) for d in range(layout.rank)]
    return {
        index: Block(
            index,
            tuple(geometry.chunk_bounds(size, n, i) for size, n, i in zip(shape, counts, index, strict=True)),
            tuple(holders.get(index, ())),
        )
        for index in itertools.product(*(range(n) for n in counts))
    }


def format_bounds(bounds: Sequence[tuple[int, int]]) -> str:
    """NumPy slice notation for a block: ``[0:2, 0:4]`` (``[]`` for a scalar)."""
    return "[" + ", ".join(f"{a}:{b}" for a, b in bounds) + "]"


def layout_summary(layout: Layout, global_shape: Sequence[int]) -> str:
    """One line: the layout, the mesh, the shape, the block grid and the replication factor."""
    shape = layout.check_shape(global_shape)
    mesh = layout._require_mesh("layout_summary")
    counts = [layout.num_shards(d) for d in range(layout.rank)]
    replicas = mesh.size // math.prod(counts)
    grid = " x ".join(str(n) for n in counts) or "1"
    uneven = [
        f"axis {d}: {'/'.join(str(s) for s in geometry.chunk_sizes(size, n))}"
        for d, (size, n) in enumerate(zip(shape, counts, strict=True))
        if size % n
    ]
    text = (
        f"{layout} | global shape {shape} | {grid} blocks | {replicas} device(s) per block"
        f" | shard shape {layout.shard_shape(shape)}"
    )
    if uneven:
        text += " | uneven (chunk rule) " + "; ".join(uneven)
    return text


def _extent(length: int, longest: int, largest: int, smallest: int) -> int:
    if longest <= 0:
        return smallest
    return max(smallest, round(largest * length / longest))


def _label(block: Block) -> Text:
    label = Text(", ".join(block.devices) if block.devices else "(no device)")
    label.append("\n" + format_bounds(block.bounds), style="italic")
    if block.empty:
        label.append("\nempty", style="bold")
    return label


def _cell(block: Block, color: str, height: int) -> RenderableType:
    label = _label(block)
    style = "dim" if block.empty else f"black on {color}"
    # Lines above and below centre the label vertically in a cell as tall as the block is long.
    spare = max(0, height - label.plain.count("\n") - 1)
    top = spare // 2
    return Padding(Align.center(label), (top, 1, spare - top, 1), style=style, expand=True)


def _grid(
    blocks: dict[tuple[int, ...], Block],
    counts: Sequence[int],
    prefix: tuple[int, ...],
    title: str | None,
    width: int,
) -> Table:
    """One table over the last (up to) two tensor axes, the leading block indices fixed to ``prefix``.

    Tensor axis ``rank-2`` runs down, ``rank-1`` across. A rank-1 row of blocks that would not fit
    in ``width`` is drawn as a column instead; a wider grid wraps its labels rather than cropping.
    """
    rank = len(counts)
    grid: list[list[Block]]
    if rank == 0:
        grid, row_axis, col_axis = [[blocks[()]]], None, None
    elif rank == 1:
        grid, row_axis, col_axis = [[blocks[(c,)] for c in range(counts[0])]], None, 0
    else:
        grid = [[blocks[(*prefix, r, c)] for c in range(counts[-1])] for r in range(counts[-2])]
        row_axis, col_axis = rank - 2, rank - 1

    def needed(column: Sequence[Block]) -> int:  # label width plus the cell's side padding
        return max(len(line) for b in column for line in _label(b).plain.split("\n")) + 2

    if rank == 1 and sum(needed([b]) + 1 for b in grid[0]) + 1 > width:
        grid, row_axis, col_axis = [[b] for b in grid[0]], 0, None

    def length(b: Block, axis: int | None) -> int:
        if axis is None:
            return 1
        start, stop = b.bounds[axis]
        return stop - start

    cols = list(zip(*grid, strict=True))
    col_len = [length(column[0], col_axis) for column in cols]
    row_len = [length(row[0], row_axis) for row in grid]
    table = Table(show_header=False, show_lines=True, box=box.SQUARE, padding=0, title=title, pad_edge=False)
    fits = sum(needed(column) + 1 for column in cols) + 1 <= width
    # Never ask for more than the console has: rich crops a table whose minimum widths overflow.
    widest = max(_MIN_WIDTH, min(_MAX_WIDTH, (width - 1) // len(cols) - 1))
    for column, extent in zip(cols, col_len, strict=True):
        proportional = _extent(extent, max(col_len), widest, _MIN_WIDTH)
        table.add_column(
            min_width=max(proportional, needed(column)) if fits else None, justify="center", overflow="fold"
        )
    tallest = _MAX_HEIGHT if len(grid) <= 4 else _MIN_HEIGHT  # long columns of blocks stay on one screen
    for row, extent in zip(grid, row_len, strict=True):
        height = _extent(extent, max(row_len), tallest, _MIN_HEIGHT)
        cells = []
        for b in row:
            flat = sum(i * math.prod(counts[k + 1 :]) for k, i in enumerate(b.index))
            cells.append(_cell(b, _PALETTE[flat % len(_PALETTE)], height))
        table.add_row(*cells)
    return table


def render_layout(
    layout: Layout, global_shape: Sequence[int], devices: Sequence[str] | None = None, *, width: int = 80
) -> RenderableType:
    """The block picture of ``global_shape`` under ``layout``, as a rich renderable.

    Rank 0 is one cell; rank 1 one row of blocks; rank 2 a grid (tensor axis 0 down, axis 1
    across); rank > 2 one such grid over the last two axes per block of the leading axes, each
    titled with the leading index ranges (e.g. ``tensor[0:2, :, :]``). Cells are sized in
    proportion to their blocks, within ``width`` characters.

    Raises:
        LayoutError: the layout has no mesh, or its rank differs from ``global_shape``'s.
    """
    blocks = blocks_of(layout, global_shape, devices)
    counts = [layout.num_shards(d) for d in range(layout.rank)]
    if layout.rank <= 2:
        return _grid(blocks, counts, (), None, width)
    grids: list[RenderableType] = []
    lead = layout.rank - 2
    for prefix in itertools.product(*(range(n) for n in counts[:lead])):
        sample = blocks[(*prefix, *([0] * 2))]
        ranges = [f"{a}:{b}" for a, b in sample.bounds[:lead]] + [":", ":"]
        grids.append(_grid(blocks, counts, prefix, f"tensor[{', '.join(ranges)}]", width))
    return Group(*grids)


def device_table(layout: Layout, global_shape: Sequence[int], devices: Sequence[str] | None = None) -> Table:
    """Per device, row-major: its mesh coordinate, block index, slice and local shape."""
    shape = layout.check_shape(global_shape)
    mesh = layout._require_mesh("device_table")
    names = device_names(layout, devices)
    table = Table("device", "mesh coordinate", "block", "slice", "local shape", box=box.SIMPLE_HEAD)
    for position, (name, index) in enumerate(zip(names, layout.offset_to_shard(), strict=True)):
        coordinate = geometry.mesh_coordinate(mesh.shape, position)
        bounds = geometry.shard_bounds(shape, mesh.shape, layout.dim_axes, position)
        where = ", ".join(f"{a}={c}" for a, c in zip(mesh.axis_names, coordinate, strict=True))
        table.add_row(name, where, str(index), format_bounds(bounds), str(tuple(b - a for a, b in bounds)))
    return table
