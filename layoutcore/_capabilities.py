"""What a driver can express (:class:`Capability`) and refusals that are no capability (:class:`Limitation`).

A leaf module (it imports nothing of layoutcore), so that :class:`~layoutcore.UnsupportedLayoutError`
can type its ``feature`` with both enums. Driver authors import them from :mod:`layoutcore.driver`.
"""

from __future__ import annotations

import enum
from typing import TypeAlias

__all__ = ["Capability", "Feature", "Limitation"]


class Capability(enum.StrEnum):
    """What a driver can express beyond even, one-mesh-axis-per-tensor-axis layouts.

    A driver declares the set it supports (``Driver.capabilities``); for anything else the
    inherited checks raise :class:`UnsupportedLayoutError` before the framework is called,
    and the conformance suite asserts exactly that.
    """

    #: A tensor axis over one mesh axis whose size does not divide evenly (chunk rule).
    UNEVEN = "uneven"
    #: A tensor axis split over several mesh axes, named in mesh order (``("x", "y")`` on mesh x, y).
    MULTI_AXIS = "multi_axis"
    #: A tensor axis split over several mesh axes in another order (``("y", "x")`` on mesh x, y).
    MULTI_AXIS_ANY_ORDER = "multi_axis_any_order"
    #: An uneven tensor axis split over several mesh axes (flat chunk over the product).
    UNEVEN_MULTI_AXIS = "uneven_multi_axis"
    #: ``relayout`` onto a layout whose mesh differs from the source's.
    RELAYOUT_ACROSS_MESHES = "relayout_across_meshes"
    #: Values inside the framework's compiler (``jax.jit`` tracers, ``tf.function`` graph tensors,
    #: ``torch.compile`` fakes): ``distribute_tensor``/``relayout`` apply the layout as a sharding
    #: constraint and ``fetch_layout`` reads it where the framework knows it (docs/design.md#data-functions-made-precise).
    TRACED = "traced"
    #: ``relayout`` of a distributed (not traced) value moves exactly ``relayout_plan``'s
    #: ``floor_bytes`` between devices, counted by the conformance suite (``test_relayout_floor``).
    RELAYOUT_AT_FLOOR = "relayout_at_floor"


class Limitation(enum.StrEnum):
    """A refusal that no capability declaration lifts: what ``UnsupportedLayoutError.feature`` holds
    when the missing thing is not a :class:`Capability`.

    Callers branch on it (``err.feature is Limitation.DTYPE``); the message names the offending
    value (the dtype, the operation, the placement). ``docs/errors.md`` lists every member.
    """

    #: A dtype the framework (or its current configuration, e.g. JAX without ``jax_enable_x64``) lacks.
    DTYPE = "dtype"
    #: An operation that ``layoutcore.propagation`` or the NumPy driver's SPMD engine does not implement
    #: (the message names it: ``np.sort``, ``einsum`` with a repeated label, ...).
    OPERATION = "operation"
    #: A keras 3 backend (``KERAS_BACKEND``) that layoutcore.keras cannot carry a layout to.
    BACKEND = "backend"
    #: keras 3 objects on a driver whose keras integration serves tf-keras.
    KERAS3 = "keras3"
    #: A torch ``Partial`` placement (a pending reduction): no layout says where its sum lives.
    PARTIAL = "partial"
    #: A framework placement that has no layoutcore form (a custom torch ``Placement`` subclass).
    PLACEMENT = "placement"
    #: A native mesh whose devices are not in the row-major order of any layoutcore mesh.
    PERMUTED_DEVICES = "permuted_devices"
    #: A torch op on simulated distributed tensors outside ``layoutcore_torch.spmd`` (it would run as rank 0).
    OUTSIDE_SPMD = "outside_spmd"
    #: A write that would reach only one rank of a tensor shared by every simulated rank.
    PER_RANK_WRITE = "per_rank_write"
    #: A replicated parameter whose gradients differ per rank (they would be averaged silently).
    PER_RANK_GRADIENTS = "per_rank_gradients"
    #: A fused query/key/value projection, whose column blocks a tensor-parallel split would mix.
    FUSED_QKV_PROJECTION = "fused_qkv_projection"
    #: A vocabulary-sharded embedding under the torch simulation with DTensor activations (torch's backward fails).
    SIMULATED_VOCAB_SHARDING = "simulated_vocab_sharding"
    #: A Hugging Face tensor-parallel plan style that no parameter layout expresses (``packed_colwise``, MoE styles).
    TP_PLAN_STYLE = "tp_plan_style"
    #: A keras ``LayoutMap`` entry or match rule that a layoutcore ``LayoutMap`` cannot carry over.
    KERAS_LAYOUT_MAP = "keras_layout_map"
    #: A negative zero (``-0.0``) that the framework would store as ``+0.0``: TF 2.21's fully
    #: replicated float32 ``DVariable`` written with a value whose every element is ``-0.0``.
    NEGATIVE_ZERO = "negative_zero"


#: What ``UnsupportedLayoutError.feature`` holds.
Feature: TypeAlias = Capability | Limitation
