"""LayoutMap patterns: what Python's ``re`` can run in bounded time, and which patterns a path almost matched.

Pattern-safety analysis (:func:`_compile` refuses the catastrophic-backtracking shapes when a
pattern is inserted) and near-miss scoring (:func:`near_misses`: a bigram screen, then a
``difflib`` ratio on the few best), kept apart from the map itself.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Collection, Mapping
from re import _parser as _sre_parser  # type: ignore[attr-defined]  # stdlib, left out of typeshed
from typing import Any

from ._errors import LayoutError

__all__ = ["NEAR_MISSES", "any_match", "near_miss_index", "near_misses", "required_literal"]

#: How many near misses ``explain`` and the unmatched-path messages name, and how similar they must be.
NEAR_MISSES = 3
_NEAR_MISS_CUTOFF = 0.6
#: Near misses are screened by shared character pairs; the best few of these get the difflib score.
_SCREEN_CUTOFF = 0.3
_SCREENED = 8
#: Longest pattern text quoted whole in an error message.
_QUOTE_LIMIT = 120
_REPEATS = frozenset(
    op
    for op in (
        getattr(_sre_parser, "MAX_REPEAT", None),
        getattr(_sre_parser, "MIN_REPEAT", None),
    )
    if op is not None
)
_UNBOUNDED = _sre_parser.MAXREPEAT


def _quote(pattern: str) -> str:
    """``repr(pattern)``, shortened for a message when the pattern is huge (a 20 000-character regex)."""
    if len(pattern) <= _QUOTE_LIMIT:
        return repr(pattern)
    return f"{pattern[:_QUOTE_LIMIT]!r}... ({len(pattern)} characters)"


def _items(node: Any) -> list[Any]:
    # A parsed SubPattern's list of (op, argument) pairs (iterating the SubPattern itself goes through a slow
    # Python __getitem__ per item: half the cost of inserting 100 000 patterns).
    data: list[Any] = getattr(node, "data", node)
    return data


def _ambiguous_branch(branches: list[Any]) -> bool:
    """Whether two alternatives of an alternation may match the same text: conservatively, unless each
    starts with a literal character and no two start with the same one (``query|key`` is fine,
    ``a|a``, ``a|ab`` and an empty alternative are not)."""
    firsts = []
    for branch in branches:
        items = _items(branch)
        if not items or items[0][0] is not _sre_parser.LITERAL:
            return True
        firsts.append(items[0][1])
    return len(set(firsts)) != len(firsts)


def _nested_unbounded_repeat(parsed: Any) -> bool:
    """Whether the pattern has a shape that makes Python's backtracking ``re`` take exponential time on a
    path that almost matches: an unbounded repeat (``*``, ``+``, ``{n,}``) inside another one, ``(a+)+``,
    or an alternation whose branches may match the same text inside one, ``(a|a)+``.

    Possessive repeats and atomic groups never backtrack and do not count. Walked with an explicit
    stack: a pattern that compiled may still nest too deep for recursion.
    """
    stack: list[tuple[Any, bool]] = [(parsed, False)]
    while stack:
        items, inside = stack.pop()
        for op, av in _items(items):
            if op in _REPEATS:
                _, high, body = av
                unbounded = high == _UNBOUNDED
                if unbounded and inside:
                    return True
                stack.append((body, inside or unbounded))
            elif op is _sre_parser.SUBPATTERN:
                stack.append((av[-1], inside))
            elif op is _sre_parser.BRANCH:
                if inside and _ambiguous_branch(av[1]):
                    return True
                stack.extend((branch, inside) for branch in av[1])
            elif op in (_sre_parser.ASSERT, _sre_parser.ASSERT_NOT):
                stack.append((av[1], inside))
            elif op is _sre_parser.GROUPREF_EXISTS:
                stack.extend((part, inside) for part in av[1:] if part is not None)
    return False


def _compile_parsed(parsed: Any, pattern: str) -> re.Pattern[str]:
    """``re.compile(pattern)`` from its parse tree (parsing is most of the cost, and the safety analysis
    needs the tree anyway); ``re.compile`` where this re has no such entry point."""
    compiler = getattr(re, "_compiler", None)
    if compiler is None or not hasattr(compiler, "compile"):
        return re.compile(pattern)
    compiled: re.Pattern[str] = compiler.compile(parsed)
    return compiled


def _compile(pattern: str) -> tuple[re.Pattern[str], Any]:
    """Compile a LayoutMap pattern, refusing what Python's ``re`` cannot run in bounded time.

    Raises:
        LayoutError: not a valid regex, too deep or too large for ``re`` (``RecursionError``,
            ``OverflowError``), or a nested unbounded repeat (the catastrophic-backtracking shape).
    """
    try:
        parsed = _sre_parser.parse(pattern)
        compiled = _compile_parsed(parsed, pattern)
        nested = _nested_unbounded_repeat(parsed)
    except re.error as exc:
        raise LayoutError(
            f"LayoutMap key {_quote(pattern)} is not a valid regular expression: {exc}", value=pattern
        ) from None
    except (RecursionError, OverflowError, MemoryError, ValueError) as exc:
        raise LayoutError(
            f"LayoutMap key {_quote(pattern)} is too deeply nested or too large for Python's re "
            f"({type(exc).__name__}: {exc}).",
            value=pattern,
        ) from None
    if nested:
        raise LayoutError(
            f"LayoutMap key {_quote(pattern)} nests an unbounded repeat inside another (as in '(a+)+'), or repeats "
            "an alternation whose branches may match the same text (as in '(a|a)+' or '(a|ab)*'): Python's re can "
            "take exponential time to reject a path that almost matches (seconds for 26 characters). Write it "
            "without the nesting (e.g. '[a-z0-9_/]*kernel'), give the branches distinct first characters, or make "
            "the repeat possessive ('(a|a)++') or atomic ('(?>a+)+'), which never backtrack.",
            value=pattern,
        )
    return compiled, parsed


#: At most this many literal spellings of one pattern are kept (alternations multiply them).
_MAX_SPELLINGS = 16


def _spellings(parsed: Any) -> tuple[str, ...]:
    """The literal text a pattern's matches must contain, once per choice of its alternations.

    ``"enc/.*/(query|key)/kernel"`` gives ``("enc//query/kernel", "enc//key/kernel")``: wildcards,
    classes, anchors and optional parts drop out, required repeats count once. Used only to say
    which patterns a path *almost* matched.
    """

    def walk(items: Any) -> list[str]:
        out = [""]
        for op, av in items:
            if op is _sre_parser.LITERAL:
                options = [chr(av)]
            elif op is _sre_parser.SUBPATTERN:
                options = walk(av[-1])
            elif op is _sre_parser.BRANCH:
                options = [s for branch in av[1] for s in walk(branch)]
            elif op in _REPEATS or op is getattr(_sre_parser, "POSSESSIVE_REPEAT", None):
                options = walk(av[2]) if av[0] >= 1 else [""]
            else:  # classes, wildcards, anchors, lookarounds: no fixed text
                options = [""]
            out = [a + b for a in out for b in options][:_MAX_SPELLINGS]
        return out

    try:
        return tuple(dict.fromkeys(walk(parsed)))
    except RecursionError:  # deeply nested but valid: near misses are a courtesy, not a promise
        return ()


def _bigrams(text: str) -> frozenset[str]:
    return frozenset(text[i : i + 2] for i in range(len(text) - 1))


def _similarity(literal: str, path: str, mode: str) -> float:
    """How alike a pattern's literal text and a path are, 0..1 (``difflib.SequenceMatcher`` ratio).

    The path is cut to the part the literal lines up with where the pattern need not cover the
    whole path (after the last matched character under ``"match"``, also before the first under
    ``"search"``), so ``"dense.*kernel"`` is close to ``"my_model/dense_1/kernl"``; the path's text
    between two literal pieces still counts, so a short pattern does not beat a long one that
    lines up with more of the path.
    """
    if not literal:
        return 0.0
    import difflib  # near misses are asked rarely: not at import

    matcher = difflib.SequenceMatcher(None, literal, path, autojunk=False)
    blocks = [b for b in matcher.get_matching_blocks() if b.size]
    if not blocks:
        return 0.0
    found = sum(b.size for b in blocks)
    start = blocks[0].b if mode == "search" else 0
    stop = blocks[-1].b + blocks[-1].size if mode != "fullmatch" else len(path)
    return 2.0 * found / (len(literal) + stop - start)


def near_misses(
    path: str,
    literals: Mapping[str, tuple[str, ...]],
    bigrams: Mapping[str, tuple[frozenset[str], ...]],
    mode: str,
    n: int = NEAR_MISSES,
) -> tuple[str, ...]:
    """The ``n`` patterns most similar to ``path``, best first (``difflib`` ratio over each pattern's literal text).

    ``literals`` maps each pattern to its :func:`_spellings`, ``bigrams`` to their :func:`_bigrams`.
    """
    # A cheap screen first (the share of a spelling's character pairs found in the path, set
    # operations in C), then difflib on the few best: explain stays under a millisecond.
    grams = _bigrams(path)
    screened = []
    for pattern, pairs in bigrams.items():
        share = max((len(g & grams) / len(g) for g in pairs if g), default=0.0)
        if share >= _SCREEN_CUTOFF:
            screened.append((share, pattern))
    import heapq  # near misses are asked rarely: not at import

    scored = []
    for _, pattern in heapq.nlargest(_SCREENED, screened):
        score = max((_similarity(s, path, mode) for s in literals[pattern]), default=0.0)
        if score >= _NEAR_MISS_CUTOFF:
            scored.append((-score, pattern))
    scored.sort()
    return tuple(p for _, p in scored[:n])


#: Pattern text that makes a combined alternation disagree with trying the patterns one by one:
#: numbered or named back-references and conditionals refer to groups, whose numbers shift once
#: patterns are joined. Conservative (an escaped backslash before a digit counts too).
_GROUP_REFERENCE = re.compile(r"\\[1-9]|\(\?P=|\(\?\(")
#: Longest combined pattern text compiled (beyond it, each pattern is tried as before).
_MAX_COMBINED_CHARS = 1 << 20


def any_match(patterns: Collection[str], mode: str) -> Callable[[str], Any] | None:
    """One compiled alternation of ``patterns`` whose ``mode`` (``search``/``match``/``fullmatch``) call
    is truthy exactly when some pattern's is, or ``None`` where no such alternation can be made.

    A path that matches nothing is ruled out by one pass of ``re``'s C engine instead of one call
    per pattern (``plan`` over a renamed model: half of its paths match nothing). ``None`` for an
    empty map, patterns that refer to groups (their numbers shift when joined), inline global
    flags (``(?i)`` is only valid at the start of a whole pattern), or a huge total.
    """
    if not patterns or sum(len(p) + 5 for p in patterns) > _MAX_COMBINED_CHARS:
        return None
    if any(_GROUP_REFERENCE.search(p) for p in patterns):
        return None
    try:
        combined = re.compile("|".join(f"(?:{p})" for p in patterns))
    except (re.error, RecursionError, OverflowError, MemoryError, ValueError):
        return None
    matcher: Callable[[str], Any] = getattr(combined, mode)
    return matcher


def required_literal(parsed: Any, flags: int) -> str:
    """The longest run of literal characters every match of the pattern contains ("" if none is sure).

    Top-level literals only: anything inside a group, a repeat or an alternation breaks the run, and a
    case-insensitive pattern has none. ``"decoder/layer_7/.*kernel"`` gives ``"decoder/layer_7/"``. A
    path without it cannot match, which a substring test (C speed) tells before the regex runs.
    """
    if flags & re.IGNORECASE:
        return ""
    best, run = "", []
    for op, av in _items(parsed):
        if op is _sre_parser.LITERAL:
            run.append(chr(av))
            continue
        if len(run) > len(best):
            best = "".join(run)
        run = []
    if len(run) > len(best):
        best = "".join(run)
    return best


def near_miss_index(
    patterns: Collection[str],
) -> tuple[dict[str, tuple[str, ...]], dict[str, tuple[frozenset[str], ...]]]:
    """``(spellings, their character pairs)`` of each pattern: what :func:`near_misses` screens and scores.

    Built when a near miss is first asked for, not at insert: a map of 100 000 patterns that is only
    looked up never pays for it (time, and a few KiB of sets per pattern).
    """
    literals = {p: _spellings(_sre_parser.parse(p)) for p in patterns}
    return literals, {p: tuple(_bigrams(s) for s in spellings) for p, spellings in literals.items()}
