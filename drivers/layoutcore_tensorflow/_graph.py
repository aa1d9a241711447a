"""DTensor inside ``tf.function``: which symbolic tensors have a layout known at trace time.

While TF traces a ``tf.function``, a tensor is symbolic and DTensor's eager-only calls
(``is_dtensor``, ``fetch_layout``) raise ``RuntimeError: ... must be called eagerly``. DTensor
decides most layouts later, when it compiles the traced graph, but three kinds of tensors carry
their layout in the graph already:

* the output of a ``Relayout`` op: what ``dtensor.relayout``, ``copy_to_mesh`` and
  ``call_with_layout`` (and so layoutcore's ``relayout``/``distribute_tensor``) add in a graph;
  its ``layout`` attribute is the layout string;
* a captured eager DTensor (a tensor or a ``DVariable``'s resource handle closed over by the
  function): its layout is read from the captured value, outside the graph;
* ``Identity`` and ``ReadVariableOp`` outputs of either, which keep their input's layout.
"""

from __future__ import annotations

from typing import Any

__all__ = ["graph_layout_string"]

#: Ops whose output has the layout of the input it passes on.
_SAME_LAYOUT = frozenset({"Identity", "ReadVariableOp", "IdentityN"})
#: How many ops to walk back before giving up (a chain of identities, nested function graphs).
_MAX_STEPS = 64


def graph_layout_string(tf: Any, dtensor: Any, tensor: Any) -> str | None:
    """The DTensor layout string of a symbolic ``tensor`` where tracing already fixes it, else ``None``."""
    for _ in range(_MAX_STEPS):
        op = tensor.op
        kind = op.type
        if kind == "Relayout":
            layout = op.get_attr("layout")
            return layout.decode() if isinstance(layout, bytes) else str(layout)
        if kind in _SAME_LAYOUT and op.inputs:
            tensor = op.inputs[tensor.value_index if kind == "IdentityN" else 0]  # output k is input k
            continue
        if kind == "Placeholder":
            external = _captured(tensor)
            if external is None:
                return None  # a function argument: its layout is only known when the function runs
            if tf.is_symbolic_tensor(external):
                tensor = external  # captured from an enclosing function graph: walk on there
                continue
            with tf.init_scope():  # out of the graph, where DTensor answers
                if not dtensor.is_dtensor(external):
                    return None
                return str(dtensor.fetch_layout(external).to_string())
        return None
    return None


def _captured(tensor: Any) -> Any:
    """The outer value a function graph's placeholder stands for, or ``None`` for an argument."""
    captures = getattr(tensor.graph, "captures", None)
    if not captures:
        return None
    for external, internal in captures:
        if internal is tensor:
            return external
    return None
