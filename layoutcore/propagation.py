"""Layout propagation: the layout an operation's result has, from its operands' layouts alone.

Pure functions on :class:`~layoutcore.Layout` values (no data, no driver, no framework), with
TF DTensor's SPMD rules:

* Every tensor axis gets a *label* (einsum's letters; matmul and broadcasting name theirs the
  same way). All the operand axes with one label must agree on their sharding, or be
  replicated: a replicated operand axis is sliced locally to the sharded one's blocks, which
  needs no communication. Two shardings that differ have no rule here (the driver would have to
  move data first) and raise :class:`~layoutcore.UnsupportedLayoutError` naming the operation.
* A mesh axis shards at most one label, so it shards at most one output axis.
* A label that is summed away (a contracting axis, a reduced axis) and is sharded leaves each
  device a partial sum: the devices along its mesh axes all-reduce, and the result is
  *replicated* over those mesh axes. ``[unsharded, x] @ [x, unsharded]`` gives
  ``[unsharded, unsharded]``, and ``[y, x] @ [x, unsharded]`` gives ``[y, unsharded]``, as TF
  DTensor prints in its guide.

Each function returns the output :class:`Layout` on the operands' mesh. Results are cached on
the (hashable) layouts, so a repeated call costs one dictionary lookup.

Example:
    >>> from layoutcore import Layout, Mesh, UNSHARDED
    >>> mesh = Mesh((3, 2), ("x", "y"))
    >>> matmul(Layout(["y", "x"], mesh), Layout(["x", UNSHARDED], mesh)).sharding_specs
    ['y', 'unsharded']
    >>> einsum("ij,jk->ik", Layout([UNSHARDED, "x"], mesh), Layout(["x", UNSHARDED], mesh)).sharding_specs
    ['unsharded', 'unsharded']
"""

from __future__ import annotations

import functools
import string
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from ._capabilities import Limitation
from ._errors import LayoutError, UnsupportedLayoutError
from ._layout import AxisSpec, Layout, _names
from ._mesh import Mesh

__all__ = [
    "Contraction",
    "einsum",
    "elementwise",
    "matmul",
    "plan_einsum",
    "plan_elementwise",
    "plan_matmul",
    "plan_reduce",
    "reduce",
    "transpose",
]

#: The ``driver`` an :class:`UnsupportedLayoutError` from this module names (no driver is involved).
_WHO = "layoutcore.propagation"
_CACHE = 4096


@dataclass(frozen=True, slots=True)
class Contraction:
    """How an operation runs as SPMD: what :mod:`layoutcore.propagation` decided, in full.

    Attributes:
        operation: the operation's name, e.g. ``"matmul"``.
        operands: per operand, one label per tensor axis.
        output: one label per output axis.
        entries: ``(label, entry)`` for every label: the mesh axes it is split over (``None``:
            replicated everywhere).
        summed: mesh axes the devices all-reduce over (those of summed-away sharded labels),
            in mesh order.
        layout: the output layout.
    """

    operation: str
    operands: tuple[tuple[str, ...], ...]
    output: tuple[str, ...]
    entries: tuple[tuple[str, AxisSpec], ...]
    summed: tuple[str, ...]
    layout: Layout

    def entry(self, label: str) -> AxisSpec:
        """The sharding of ``label``."""
        return dict(self.entries)[label]


def _unsupported(operation: str, message: str, value: Any) -> UnsupportedLayoutError:
    return UnsupportedLayoutError(f"{operation}: {message}", driver=_WHO, feature=Limitation.OPERATION, value=value)


def _check_layouts(operation: str, layouts: Sequence[Any]) -> tuple[Layout, ...]:
    for layout in layouts:
        if not isinstance(layout, Layout):
            raise LayoutError(f"{operation}: operands are layoutcore Layouts. Received: {layout!r}", value=layout)
    return tuple(layouts)


def _common_mesh(operation: str, layouts: Sequence[Layout]) -> Mesh | None:
    # Identity first: comparing (or hashing) a mesh of many devices costs O(devices).
    first = layouts[0].mesh if layouts else None
    for layout in layouts[1:]:
        if layout.mesh is not first and layout.mesh != first:
            raise _unsupported(
                operation,
                f"the operands are on different meshes ({first} and {layout.mesh}); relayout one first.",
                tuple(layouts),
            )
    return first


# The rules are cached on the layouts' entries and the mesh's axis names only, never on the mesh
# itself: hashing a Mesh hashes its device names (a 65 536-device mesh takes about 1 ms).
Axes = tuple[tuple[AxisSpec, ...], ...]
Names = tuple[str, ...] | None


def _axes(layouts: Sequence[Layout]) -> Axes:
    return tuple(layout.axes for layout in layouts)


def _names_of(mesh: Mesh | None) -> Names:
    return None if mesh is None else mesh.axis_names


def _on(axes: Sequence[AxisSpec], mesh: Mesh | None) -> Layout:
    """The output layout on ``mesh``. Its entries come from the operands' (valid) layouts on this
    mesh and the rule let each mesh axis shard one axis, so Layout's validation is skipped."""
    layout = object.__new__(Layout)
    object.__setattr__(layout, "axes", tuple(axes))
    object.__setattr__(layout, "mesh", mesh)
    object.__setattr__(layout, "_hash", None)  # as Layout.__init__ sets it: hashed when first asked
    return layout


def _bind(plan: Contraction, mesh: Mesh | None) -> Contraction:
    """A cached plan (its layout without a mesh) with its layout on ``mesh``."""
    return Contraction(
        plan.operation, plan.operands, plan.output, plan.entries, plan.summed, _on(plan.layout.axes, mesh)
    )


def _plan(
    operation: str,
    labels: tuple[tuple[str, ...], ...],
    operand_axes: Axes,
    output: tuple[str, ...],
    names: Names,
) -> Contraction:
    """The propagation rule every operation shares (module docstring); the layout has no mesh yet."""
    entries: dict[str, AxisSpec] = {}
    for index, (axis_labels, axes) in enumerate(zip(labels, operand_axes, strict=True)):
        for label, entry in zip(axis_labels, axes, strict=True):
            current = entries.get(label)
            if entry is None or current == entry:
                entries.setdefault(label, None)
                continue
            if current is not None:
                raise _unsupported(
                    operation,
                    f"operand {index} shards axis {label!r} over {entry!r}, another operand over {current!r}; "
                    "no rule combines two shardings of one axis (relayout an operand first).",
                    operand_axes,
                )
            entries[label] = entry
    owner: dict[str, str] = {}
    for label, entry in entries.items():
        for name in _names(entry):
            if name in owner:
                raise _unsupported(
                    operation,
                    f"mesh axis {name!r} would shard both axis {owner[name]!r} and axis {label!r}; a mesh axis "
                    "shards at most one axis (relayout an operand first).",
                    operand_axes,
                )
            owner[name] = label
    out_labels = set(output)
    summed_names = {name for label, entry in entries.items() if label not in out_labels for name in _names(entry)}
    order = names if names is not None else tuple(sorted(summed_names))
    summed = tuple(name for name in order if name in summed_names)
    layout = _on([entries[label] for label in output], None)
    return Contraction(operation, labels, output, tuple(entries.items()), summed, layout)


# -- elementwise -------------------------------------------------------------------------------
def _broadcast_labels(ranks: Sequence[int]) -> tuple[tuple[tuple[str, ...], ...], tuple[str, ...]]:
    """NumPy broadcasting as labels: axes aligned from the right share a label."""
    out_rank = max(ranks, default=0)
    output = tuple(f"d{i}" for i in range(out_rank))
    return tuple(output[out_rank - r :] for r in ranks), output


@functools.lru_cache(maxsize=_CACHE)
def _elementwise_rule(axes: Axes, names: Names) -> Contraction:
    labels, output = _broadcast_labels([len(a) for a in axes])
    return _plan("elementwise", labels, axes, output, names)


def _elementwise(layouts: tuple[Layout, ...]) -> Contraction:
    if not layouts:
        raise LayoutError("elementwise needs at least one layout.", value=layouts)
    mesh = _common_mesh("elementwise", layouts)
    return _bind(_elementwise_rule(_axes(layouts), _names_of(mesh)), mesh)


def elementwise(*layouts: Layout) -> Layout:
    """Layout of an elementwise operation (``a + b``, a ufunc) on operands laid out as ``layouts``.

    Ranks broadcast as NumPy's: axes are aligned from the right. On each output axis the sharded
    operands must agree; replicated operands follow them.

    Raises:
        UnsupportedLayoutError: two operands shard one axis differently, one mesh axis would shard
            two output axes, or the operands are on different meshes.
    """
    return _elementwise(_check_layouts("elementwise", layouts)).layout


# -- matmul ------------------------------------------------------------------------------------
def _matmul_labels(ra: int, rb: int) -> tuple[tuple[tuple[str, ...], ...], tuple[str, ...]]:
    batch = max(ra, rb) - 2
    batch_labels = tuple(f"b{i}" for i in range(max(batch, 0)))
    a = ("k",) if ra == 1 else (*batch_labels[len(batch_labels) - (ra - 2) :], "m", "k")
    b = ("k",) if rb == 1 else (*batch_labels[len(batch_labels) - (rb - 2) :], "k", "n")
    output = batch_labels + (("m",) if ra > 1 else ()) + (("n",) if rb > 1 else ())
    return (a, b), output


@functools.lru_cache(maxsize=_CACHE)
def _matmul_rule(axes: Axes, names: Names) -> Contraction:
    labels, output = _matmul_labels(len(axes[0]), len(axes[1]))
    return _plan("matmul", labels, axes, output, names)


def _matmul(a: Layout, b: Layout) -> Contraction:
    mesh = _common_mesh("matmul", (a, b))
    if a.rank < 1 or b.rank < 1:
        raise LayoutError(f"matmul needs operands of rank >= 1 (as np.matmul). Received: {a}, {b}", value=(a, b))
    return _bind(_matmul_rule((a.axes, b.axes), _names_of(mesh)), mesh)


def matmul(a: Layout, b: Layout) -> Layout:
    """Layout of ``a @ b`` (``np.matmul``: batch axes broadcast, rank-1 operands as vectors).

    The contracting axis (``a``'s last, ``b``'s second to last) is summed: if it is sharded, the
    result is replicated over its mesh axes.

    Raises:
        LayoutError: an operand of rank 0.
        UnsupportedLayoutError: the operands shard the contracting axis (or a batch axis)
            differently, or a mesh axis would shard two axes, e.g. ``[x, None] @ [None, x]``.
    """
    return _matmul(*_check_layouts("matmul", (a, b))).layout


# -- einsum ------------------------------------------------------------------------------------
def _parse_einsum(subscripts: str, ranks: Sequence[int]) -> tuple[tuple[tuple[str, ...], ...], tuple[str, ...]]:
    """``"ij,jk->ik"`` (ellipsis and implicit output included) as labels per operand and output."""
    if not isinstance(subscripts, str):
        raise LayoutError(
            f"einsum subscripts are a str such as 'ij,jk->ik'. Received: {subscripts!r}", value=subscripts
        )
    text = subscripts.replace(" ", "")
    inputs_text, arrow, output_text = text.partition("->")
    inputs = inputs_text.split(",")
    if len(inputs) != len(ranks):
        raise LayoutError(
            f"einsum subscripts {subscripts!r} name {len(inputs)} operand(s) for {len(ranks)} layout(s).",
            value=subscripts,
        )
    parsed = [_split_einsum_term(subscripts, term, rank) for term, rank in zip(inputs, ranks, strict=True)]
    ellipsis = max((width for _, width in parsed), default=0)
    dots = tuple(f"...{i}" for i in range(ellipsis))

    def expand(labels: list[str], width: int) -> tuple[str, ...]:
        # "..." covers the trailing `width` of the broadcast ellipsis axes (aligned from the right).
        it = iter(dots[ellipsis - width :])
        return tuple(next(it) if label == "..." else label for label in labels)

    operands = tuple(expand(labels, width) for labels, width in parsed)
    if arrow:
        inputs_dotted = any("..." in term for term in inputs)
        return operands, _explicit_einsum_output(subscripts, output_text, inputs_dotted, operands, dots)
    return operands, _implicit_einsum_output(operands, dots)


def _split_einsum_term(subscripts: str, term: str, rank: int | None) -> tuple[list[str], int]:
    """One einsum term's labels, each ellipsis axis as ``"..."``, and how many axes the ellipsis covers.

    ``rank`` is the operand's rank, or None for the output term (whose ellipsis stays one marker).

    Raises:
        LayoutError: a character other than a letter or ``...``, or a label count that does not
            fit ``rank``.
    """
    head, dots, tail = term.partition("...")
    if "." in head + tail or any(c not in _EINSUM_LETTERS for c in head + tail):
        raise LayoutError(f"einsum subscripts {subscripts!r}: bad term {term!r} (letters and '...').", value=term)
    if not dots:
        if rank is not None and len(term) != rank:
            raise LayoutError(
                f"einsum subscripts {subscripts!r}: term {term!r} has {len(term)} label(s) for a rank-{rank} layout.",
                value=subscripts,
            )
        return list(term), 0
    if rank is None:  # the output: one marker where the ellipsis axes go
        return [*head, "...", *tail], 0
    width = rank - len(head) - len(tail)
    if width < 0:
        raise LayoutError(
            f"einsum subscripts {subscripts!r}: term {term!r} has more labels than the rank-{rank} layout.",
            value=subscripts,
        )
    return [*head, *(["..."] * width), *tail], width


_EINSUM_LETTERS = frozenset(string.ascii_letters)


def _explicit_einsum_output(
    subscripts: str,
    output_text: str,
    inputs_dotted: bool,
    operands: tuple[tuple[str, ...], ...],
    dots: tuple[str, ...],
) -> tuple[str, ...]:
    """The output labels written after ``->`` (``output_text``), ``...`` expanded to ``dots``.

    ``inputs_dotted``: whether any input term has an ellipsis.

    Raises:
        LayoutError: a bad output term, an ellipsis in the output only, an output that drops the
            operands' ellipsis, names a label no operand has, or repeats a label.
    """
    out_terms, _ = _split_einsum_term(subscripts, output_text, None)
    if "..." in output_text and not inputs_dotted:
        raise LayoutError(f"einsum subscripts {subscripts!r}: '...' in the output only.", value=subscripts)
    output = tuple(label for term in out_terms for label in ((*dots,) if term == "..." else (term,)))
    if "..." not in output_text and dots:
        raise LayoutError(f"einsum subscripts {subscripts!r}: an explicit output must keep '...'.", value=subscripts)
    seen = [label for operand in operands for label in operand]
    for label in output:
        if label not in seen:
            raise LayoutError(
                f"einsum subscripts {subscripts!r}: output label {label!r} is in no operand.", value=subscripts
            )
    if len(set(output)) != len(output):
        raise LayoutError(f"einsum subscripts {subscripts!r}: an output label repeats.", value=subscripts)
    return output


def _implicit_einsum_output(operands: tuple[tuple[str, ...], ...], dots: tuple[str, ...]) -> tuple[str, ...]:
    """NumPy's implicit output: the ellipsis axes, then the labels used once, alphabetically."""
    counts: dict[str, int] = {}
    for operand in operands:
        for label in operand:
            counts[label] = counts.get(label, 0) + 1
    once = sorted(label for label, n in counts.items() if n == 1 and not label.startswith("..."))
    return (*dots, *once)


@functools.lru_cache(maxsize=_CACHE)
def _einsum_rule(subscripts: str, axes: Axes, names: Names) -> Contraction:
    labels, output = _parse_einsum(subscripts, [len(a) for a in axes])
    return _plan("einsum", labels, axes, output, names)


def _einsum(subscripts: str, layouts: tuple[Layout, ...]) -> Contraction:
    mesh = _common_mesh("einsum", layouts)
    return _bind(_einsum_rule(subscripts, _axes(layouts), _names_of(mesh)), mesh)


def einsum(subscripts: str, *layouts: Layout) -> Layout:
    """Layout of ``np.einsum(subscripts, *operands)`` (explicit or implicit output, ``...``).

    Labels summed away (in no output) that are sharded make the result replicated over their
    mesh axes; a label repeated within one operand (a diagonal) follows the same rule.

    Raises:
        LayoutError: subscripts that do not fit the layouts' ranks.
        UnsupportedLayoutError: two operands shard one label differently, or a mesh axis would
            shard two labels.
    """
    return _einsum(subscripts, _check_layouts("einsum", layouts)).layout


# -- reduce ------------------------------------------------------------------------------------
def _normalize_axes(operation: str, axes: Any, rank: int) -> tuple[int, ...]:
    if axes is None:
        return tuple(range(rank))
    wanted = [axes] if isinstance(axes, int) else list(axes) if isinstance(axes, Iterable) else [axes]
    out = []
    for axis in wanted:
        if isinstance(axis, bool) or not isinstance(axis, int) or not -rank <= axis < rank:
            raise LayoutError(f"{operation}: axis {axis!r} is out of range for rank {rank}.", value=axes)
        out.append(axis % rank)
    if len(set(out)) != len(out):
        raise LayoutError(f"{operation}: repeated axis in {axes!r}.", value=axes)
    return tuple(sorted(out))


@functools.lru_cache(maxsize=_CACHE)
def _reduce_rule(layout_axes: tuple[AxisSpec, ...], axes: tuple[int, ...], keepdims: bool, names: Names) -> Contraction:
    labels = tuple(f"d{i}" for i in range(len(layout_axes)))
    kept = tuple(label for i, label in enumerate(labels) if i not in axes)
    plan = _plan("reduce", (labels,), (layout_axes,), kept, names)
    if not keepdims:
        return plan
    # A kept, reduced axis has size 1 and is held whole by every device: replicated.
    entries = [None if i in axes else entry for i, entry in enumerate(layout_axes)]
    return Contraction(plan.operation, plan.operands, labels, plan.entries, plan.summed, _on(entries, None))


def _reduce(layout: Layout, axes: tuple[int, ...], keepdims: bool) -> Contraction:
    return _bind(_reduce_rule(layout.axes, axes, keepdims, _names_of(layout.mesh)), layout.mesh)


def reduce(layout: Layout, axes: int | Sequence[int] | None = None, keepdims: bool = False) -> Layout:
    """Layout of a reduction (``sum``, ``mean``) over tensor axes ``axes`` (``None``: all).

    The reduced axes disappear (``keepdims``: become replicated size-1 axes); where they were
    sharded, the devices all-reduce and the result is replicated over those mesh axes.

    Raises:
        LayoutError: an axis out of range or repeated.
    """
    _check_layouts("reduce", (layout,))
    return _reduce(layout, _normalize_axes("reduce", axes, layout.rank), bool(keepdims)).layout


def transpose(layout: Layout, axes: Sequence[int] | None = None) -> Layout:
    """Layout of ``np.transpose(t, axes)``: the entries permuted (``None``: reversed). No data moves.

    Raises:
        LayoutError: ``axes`` is not a permutation of ``0 .. rank-1``.
    """
    _check_layouts("transpose", (layout,))
    return _on(_transpose_rule(layout.axes, None if axes is None else tuple(axes)), layout.mesh)


@functools.lru_cache(maxsize=_CACHE)
def _transpose_rule(layout_axes: tuple[AxisSpec, ...], axes: tuple[int, ...] | None) -> tuple[AxisSpec, ...]:
    rank = len(layout_axes)
    order = tuple(reversed(range(rank))) if axes is None else axes
    if sorted(
        a % rank if isinstance(a, int) and not isinstance(a, bool) and -rank <= a < rank else -1 for a in order
    ) != list(range(rank)):
        raise LayoutError(f"transpose: axes {axes!r} are not a permutation of 0..{rank - 1}.", value=axes)
    return tuple(layout_axes[a % rank] for a in order)


def plan_elementwise(*layouts: Layout) -> Contraction:
    """The full :class:`Contraction` behind :func:`elementwise` (what a driver executes)."""
    return _elementwise(_check_layouts("elementwise", layouts))


def plan_matmul(a: Layout, b: Layout) -> Contraction:
    """The full :class:`Contraction` behind :func:`matmul`."""
    return _matmul(*_check_layouts("matmul", (a, b)))


def plan_einsum(subscripts: str, *layouts: Layout) -> Contraction:
    """The full :class:`Contraction` behind :func:`einsum`."""
    return _einsum(subscripts, _check_layouts("einsum", layouts))


def plan_reduce(layout: Layout, axes: int | Sequence[int] | None = None, keepdims: bool = False) -> Contraction:
    """The full :class:`Contraction` behind :func:`reduce`."""
    _check_layouts("reduce", (layout,))
    return _reduce(layout, _normalize_axes("reduce", axes, layout.rank), bool(keepdims))
