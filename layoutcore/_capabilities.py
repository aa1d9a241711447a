"""What a driver can express (:class:`Capability`) and refusals that are no capability (:class:`Limitation`).

A leaf module (it imports nothing of layoutcore), so that :class:`~layoutcore.UnsupportedLayoutError`
can type its ``feature`` with both enums. Driver authors import them from :mod:`layoutcore.driver`.
"""

from __future__ import annotations

import enum

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
    #: constraint and ``fetch_layout`` reads it where the framework knows it (DESIGN §2a).
    TRACED = "traced"
    #: ``relayout`` of a distributed (not traced) value moves exactly ``relayout_plan``'s
    #: ``floor_bytes`` between devices, counted by the conformance suite (``test_relayout_floor``).
    RELAYOUT_AT_FLOOR = "relayout_at_floor"


class Limitation(enum.StrEnum):
    """A refusal that no capability declaration lifts: what ``UnsupportedLayoutError.feature`` holds
    when the missing thing is not a :class:`Capability`.

    Callers branch on it (``err.feature is Limitation.DTYPE``); ``docs/errors.md`` lists every member.
    """

    #: A dtype the framework (or its current configuration, e.g. JAX without ``jax_enable_x64``) lacks.
    DTYPE = "dtype"
    #: An operation the driver's SPMD engine or ``layoutcore.propagation`` does not implement.
    OPERATION = "operation"
    #: A framework backend (keras 3 ``KERAS_BACKEND``) that the bridge cannot carry a layout to.
    BACKEND = "backend"
    #: keras 3 objects on a driver whose integration serves another keras (tf-keras).
    KERAS3 = "keras3"
    #: A native layout that has no layoutcore form (a torch ``Partial`` placement, a custom placement).
    PLACEMENT = "placement"
    #: A native mesh whose devices are not in the row-major order layoutcore's mesh names.
    PERMUTED_DEVICES = "permuted_devices"
    #: A torch op on simulated distributed tensors outside ``layoutcore_torch.spmd``.
    OUTSIDE_SPMD = "outside_spmd"
    #: A model structure the module integration cannot lay out (a fused QKV projection, ...).
    MODEL_STRUCTURE = "model_structure"
    #: A multi-axis entry that a format's single-axis form cannot write (TF's ``sharding_specs``).
    MULTI_AXIS_FORM = "multi_axis_form"


#: What ``UnsupportedLayoutError.feature`` holds.
Feature = Capability | Limitation
