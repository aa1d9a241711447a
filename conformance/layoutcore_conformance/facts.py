"""What the frameworks were measured to do (docs/framework-facts.md#shard-order), as data.

The conformance suite pins its oracle to these tables, and layoutcore's own unit tests pin
``Layout`` to them, so a wrong oracle cannot pass a wrong driver.
"""

from __future__ import annotations

__all__ = ["CHUNKS", "MEASURED_MULTI", "MEASURED_6x6", "bounds"]

# (dimension size, number of blocks) -> block sizes, as the contract words the chunk rule.
CHUNKS = {
    (5, 3): (2, 2, 1),
    (4, 3): (2, 2, 0),
    (2, 4): (1, 1, 0, 0),
    (2, 3): (1, 1, 0),
    (7, 4): (2, 2, 2, 1),
    (5, 4): (2, 2, 1, 0),
    (6, 3): (2, 2, 2),
    (0, 3): (0, 0, 0),
}


def bounds(slices: list[tuple[slice, ...]]) -> list[tuple[tuple[int, int], ...]]:
    """``(start, stop)`` pairs of per-device slices, for comparing with the tables."""
    return [tuple((s.start, s.stop) for s in sl) for sl in slices]


# docs/framework-facts.md#shard-order: G = arange(36).reshape(6, 6) on the 3x2 mesh (x, y); JAX, TF and torch all gave these.
MEASURED_6x6: dict[tuple[str | None, ...], list[tuple[tuple[int, int], ...]]] = {
    ("x", None): [
        ((0, 2), (0, 6)),
        ((0, 2), (0, 6)),
        ((2, 4), (0, 6)),
        ((2, 4), (0, 6)),
        ((4, 6), (0, 6)),
        ((4, 6), (0, 6)),
    ],
    (None, "y"): [
        ((0, 6), (0, 3)),
        ((0, 6), (3, 6)),
        ((0, 6), (0, 3)),
        ((0, 6), (3, 6)),
        ((0, 6), (0, 3)),
        ((0, 6), (3, 6)),
    ],
    ("y", "x"): [
        ((0, 3), (0, 2)),
        ((3, 6), (0, 2)),
        ((0, 3), (2, 4)),
        ((3, 6), (2, 4)),
        ((0, 3), (4, 6)),
        ((3, 6), (4, 6)),
    ],
    ("x", "y"): [
        ((0, 2), (0, 3)),
        ((0, 2), (3, 6)),
        ((2, 4), (0, 3)),
        ((2, 4), (3, 6)),
        ((4, 6), (0, 3)),
        ((4, 6), (3, 6)),
    ],
}
# docs/framework-facts.md#multi-axis: arange(12) over two mesh axes, major to minor in tuple order.
MEASURED_MULTI: dict[tuple[str, ...], list[tuple[tuple[int, int], ...]]] = {
    ("x", "y"): [((0, 2),), ((2, 4),), ((4, 6),), ((6, 8),), ((8, 10),), ((10, 12),)],
    ("y", "x"): [((0, 2),), ((6, 8),), ((2, 4),), ((8, 10),), ((4, 6),), ((10, 12),)],
}
