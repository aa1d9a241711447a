"""Hugging Face transformers tensor-parallel plans as layoutcore LayoutMaps (docs/design.md#real-models).

A plan (``model.tp_plan``: full module names; ``config.base_model_tp_plan``: names relative to the base
model) maps module name patterns, ``*`` standing for a layer number, to a style name. Each style becomes
parameter layouts over one mesh axis (or several, major to minor):

========================================================  ==========================  ==================
style (transformers 5.x, and the 4.x names)               ``weight`` (out, in)        ``bias``
========================================================  ==========================  ==================
``colwise``, ``local_colwise``                            ``(axis, None)``            ``(axis,)``
``colwise_rep``, ``colwise_gather_output``                ``(axis, None)``, output    ``(axis,)``
                                                          gathered
``rowwise``, ``local_rowwise``, ``rowwise_rep``,          ``(None, axis)``            ``(None,)``
``rowwise_split_input``
``embedding_rowwise`` (and ``rowwise`` on an embedding)   ``(axis, None)`` vocabulary
``embedding_colwise`` (and ``colwise`` on an embedding)   ``(None, axis)``
``replicate``, ``sequence_parallel``, ``gather``,         replicated (no entry)
``all_reduce``
``replicated_with_grad_allreduce``                        replicated; gradients summed
========================================================  ==========================  ==================

``sequence_parallel`` in transformers shards the norms' activations along the sequence; its parameters
are replicated, which is what a layout says, and :func:`~layoutcore_torch.distribute_module` computes
those norms replicated (the same numbers). Styles a layout cannot express are refused with
:class:`~layoutcore.UnsupportedLayoutError` naming the style and the pattern: ``packed_colwise`` /
``packed_rowwise`` (each rank holds a block of *each* fused half, torch's ``_StridedShard``, not one
contiguous block), the mixture-of-experts and MLA styles, ``local_params``, ``local``, ``isolated`` and
any name not listed.

Which modules are embeddings: a plan's ``rowwise`` on an ``nn.Embedding`` shards the vocabulary (torch's
``RowwiseParallel``), on an ``nn.Linear`` the input features. Without the model the name decides: a last
component containing ``embed`` or named ``wte`` is an embedding. The 5.x plans say ``embedding_rowwise``.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

from layoutcore import LayoutError, LayoutMap, Mesh, UnsupportedLayoutError
from layoutcore.driver import Limitation

__all__ = ["TpPlanLayoutMap", "from_tp_plan"]

_COLWISE = frozenset({"colwise", "local_colwise"})
_COLWISE_GATHERED = frozenset({"colwise_rep", "colwise_gather_output"})
_ROWWISE = frozenset({"rowwise", "local_rowwise", "rowwise_rep", "rowwise_split_input"})
_REPLICATED = frozenset({"replicate", "sequence_parallel", "gather", "all_reduce"})
_WHY_NOT = {
    "packed_colwise": "each rank holds a block of each fused half (torch's _StridedShard), not one contiguous block",
    "packed_rowwise": "each rank holds a block of each fused half (torch's _StridedShard), not one contiguous block",
    "local_packed_rowwise": "each rank holds a block of each fused half (torch's _StridedShard)",
    "moe_tp_experts": "its experts' partial outputs are summed by a hook a parameter layout cannot state",
    "moe_identity_expert": "it rescales its input by the group size, a forward change a layout cannot state",
    "mla_kv_a_proj": "it splits its output and sums part of its gradient, which a layout cannot state",
    "local_params": "its module runs on its parameters' local shards, which a layout cannot state",
    "local": "its module runs on local shards with no collective, which a layout cannot state",
    "isolated": "its module runs on a sub-group of its own",
}


class TpPlanLayoutMap(LayoutMap):
    """The :class:`~layoutcore.LayoutMap` :func:`from_tp_plan` returns: the plan's parameter layouts, plus
    what a plan says that parameter layouts cannot, for :func:`~layoutcore_torch.distribute_module`.

    Attributes:
        module_hints: ``(pattern, hint)`` over module names (``re.search``): ``"gather_output"`` (a
            ``colwise_rep`` / ``colwise_gather_output`` layer hands out its whole output) or
            ``"sum_gradients"`` (``replicated_with_grad_allreduce``).
        styles: the plan itself, ``{module pattern: style}``.
    """

    module_hints: tuple[tuple[re.Pattern[str], str], ...]
    styles: dict[str, str]


def from_tp_plan(tp_plan: Mapping[str, str], mesh: Mesh, *, axis: str | tuple[str, ...]) -> TpPlanLayoutMap:
    """A LayoutMap with the parameter layouts of a transformers tensor-parallel plan (module docstring).

    Each plan key ``k`` becomes ``re.search`` patterns anchored at a name boundary,
    ``(?:^|\\.)k\\.weight$`` and ``(?:^|\\.)k\\.bias$`` (``*`` matching a layer number), so the same map
    serves ``model.tp_plan`` (full names: ``model.layers.*.self_attn.q_proj``) and
    ``config.base_model_tp_plan`` (``layers.*.self_attn.q_proj``, matching ``model.layers.0.self_attn...``).
    A key that names a parameter itself (``...experts.gate_up_proj``) gets the ``weight`` entry too.
    Parameters no key matches are replicated by :func:`~layoutcore_torch.distribute_module`, and
    ``layoutcore.explain`` / ``plan`` list them.

    Args:
        tp_plan: ``{module pattern: style}``.
        mesh: the mesh the layouts are on.
        axis: the mesh axis (or axes, major to minor) the plan's tensor parallelism runs over.

    Returns:
        A :class:`TpPlanLayoutMap` (a ``LayoutMap``) on ``mesh``.

    Raises:
        LayoutError: ``tp_plan`` is not a mapping of strings, ``mesh`` is not a Mesh, ``axis`` is not an
            axis of ``mesh``.
        UnsupportedLayoutError: a style no layout expresses (naming the style and the module pattern).
    """
    if not isinstance(mesh, Mesh):
        raise LayoutError(f"from_tp_plan expects a layoutcore Mesh. Received: {mesh!r}", value=mesh)
    axes = (axis,) if isinstance(axis, str) else tuple(axis) if isinstance(axis, (tuple, list)) else None
    if not axes or any(not isinstance(a, str) or a not in mesh.axis_names for a in axes):
        raise LayoutError(f"axis must name axes of {mesh!r} (one of {mesh.axis_names}). Received: {axis!r}", value=axis)
    entry: str | tuple[str, ...] = axes[0] if len(axes) == 1 else axes
    if not isinstance(tp_plan, Mapping):
        raise LayoutError(f"tp_plan must be a mapping {{module pattern: style}}. Received: {tp_plan!r}", value=tp_plan)
    result = TpPlanLayoutMap(mesh)
    hints: list[tuple[re.Pattern[str], str]] = []
    result.styles = {}
    for key, style in tp_plan.items():
        if not isinstance(key, str) or not isinstance(style, str):
            raise LayoutError(f"tp_plan entries are strings. Received: {key!r}: {style!r}", value=(key, style))
        result.styles[key] = style
        name = _pattern(key)
        embedding = _looks_like_embedding(key)
        if style in _COLWISE or style in _COLWISE_GATHERED:
            if embedding:
                result[name + r"\.weight$"] = (None, entry)
            else:
                result[name + r"\.weight$"] = (entry, None)
                result[name + r"\.bias$"] = (entry,)
                result[name + "$"] = (entry, None)
            if style in _COLWISE_GATHERED:
                hints.append((re.compile(name + "$"), "gather_output"))
        elif style in _ROWWISE:
            if embedding:
                result[name + r"\.weight$"] = (entry, None)
            else:
                result[name + r"\.weight$"] = (None, entry)
                result[name + r"\.bias$"] = (None,)
                result[name + "$"] = (None, entry)
        elif style == "embedding_rowwise":
            result[name + r"\.weight$"] = (entry, None)
        elif style == "embedding_colwise":
            result[name + r"\.weight$"] = (None, entry)
        elif style == "replicated_with_grad_allreduce":
            hints.append((re.compile(name + "$"), "sum_gradients"))
        elif style in _REPLICATED:
            pass  # parameters replicated: what an unmatched parameter gets
        else:
            why = _WHY_NOT.get(style, "layoutcore does not know this style")
            raise UnsupportedLayoutError(
                f"tp_plan style {style!r} for module pattern {key!r} cannot be carried over as parameter layouts: "
                f"{why}. Drop that entry (its parameters are then replicated) or write the layouts by hand.",
                driver="torch",
                feature=Limitation.TP_PLAN_STYLE,
                value=key,
            )
    result.module_hints = tuple(hints)
    return result


def _pattern(key: str) -> str:
    """The regex (without the end anchor) for plan key ``key``: dots literal, ``*`` a layer number."""
    body = r"\d+".join(re.escape(part) for part in key.split("*"))
    return r"(?:^|\.)" + body


def _looks_like_embedding(key: str) -> bool:
    last = key.rsplit(".", 1)[-1].lower()
    return "embed" in last or last == "wte"
