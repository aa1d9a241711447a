"""The driver plug-in contract: what a driver declares and the hooks it implements.

A driver connects layoutcore's values to one framework. Write one in three steps:

1. Subclass :class:`layoutcore.Driver` (the public front-end, :mod:`layoutcore._frontend`, which
   inherits every hook documented here from :class:`DriverHooks`).
2. Declare the class attributes (:attr:`~DriverHooks.name`, :attr:`~DriverHooks.capabilities`,
   ...) and implement the **required** hooks; override an **optional** hook where the framework
   does better than the default.
3. Register the class under the ``layoutcore.drivers`` entry-point group::

       [project.entry-points."layoutcore.drivers"]
       mydriver = "my_package:MyDriver"

**The split.** Users call the front-end's public methods (``distribute_tensor``, ``pack``, ...,
reached through ``layoutcore.distribute_tensor(...)``). They are ``typing.final``: a driver cannot
override them (mypy says so, and so does ``Driver.__init_subclass__`` at class creation). They
validate every argument, bind abstract meshes to devices, refuse layouts outside
:attr:`~DriverHooks.capabilities` with :class:`~layoutcore.UnsupportedLayoutError`, check packed
components (count, shapes, dtypes, replica equality), and only then call a hook with arguments
known to be good. Afterwards they **record** the layout of every tensor a creating hook returns,
so that ``fetch_layout`` can give back the user's exact :class:`~layoutcore.Layout` (mesh name and
abstractness included, which a native sharding forgets), and they check the record against
:meth:`~DriverHooks.native_fetch_layout` on every read. So a hook never re-validates, never
records, and every driver reports bad input the same way.

**What hooks receive.** ``layout`` is a :class:`~layoutcore.driver.BoundLayout`: its mesh is set
(``layout.mesh`` is a :class:`Mesh`, never ``None``), and it fits the value's rank and the
driver's capabilities. ``devices`` holds the canonical names of the devices that mesh is bound to,
in row-major mesh order: ``devices[p]`` holds block ``layout.device_slices(shape)[p]``.

**What hooks must not do.** Import the framework at module level (import it lazily in
``__init__`` or inside the hooks, so ``layoutcore drivers`` can list a driver without its
framework; name the modules in :attr:`~DriverHooks.requires`); keep the caller's memory writable
through the result (docs/design.md#data-functions-made-precise "Whose memory": writes through a distributed value never reach the
caller's input); return a tensor laid out otherwise than asked (the conformance suite reads every
result's per-device data with the framework's own calls and compares it with the NumPy oracle).

Per-framework native calls are named in each hook's docstring as ``JAX:``, ``TF:`` (DTensor),
``torch:`` (DTensor) and ``NumPy:`` (the reference driver, :mod:`layoutcore._numpy_driver`).
"""

from __future__ import annotations

import abc
import contextlib
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, ClassVar, Literal

import numpy as np

from .._capabilities import Capability, Limitation
from .._dtypes import ALL_DTYPES
from .._errors import UnsupportedLayoutError
from .._layout import BoundLayout, Layout
from .._mesh import Mesh
from ._process_hooks import ProcessHooks
from ._stream_hooks import StreamHooks

if TYPE_CHECKING:
    from .._layout_map import LayoutMap
    from ._relayout_move import RelayoutMove

__all__ = ["DriverHooks", "VariableHandle"]

_ALL_DTYPES = frozenset(ALL_DTYPES)


def dtype_refusal(driver: DriverHooks, name: str) -> UnsupportedLayoutError:
    """The ``UnsupportedLayoutError`` (``feature=Limitation.DTYPE``) refusing dtype ``name`` on ``driver``,
    ending with its :meth:`~DriverHooks.unsupported_dtype_reason` (the front-end's one message)."""
    return UnsupportedLayoutError(
        f"The {driver.name} driver does not hold dtype {name}: {driver.unsupported_dtype_reason(name)}.",
        driver=driver.name,
        feature=Limitation.DTYPE,
        value=name,
    )


class VariableHandle:
    """The default variable state: a box holding the current native value.

    Used by the default :meth:`DriverHooks.variable_create`; drivers with native variables
    (TF's ``dtensor.DVariable``, a torch ``nn.Parameter``) return those instead.
    """

    __slots__ = ("value",)

    def __init__(self, value: Any) -> None:
        self.value = value


class DriverHooks(StreamHooks, ProcessHooks, abc.ABC):
    """The plug-in contract: class attributes, required hooks, optional hooks with defaults.

    Do not subclass this class directly; subclass :class:`layoutcore.Driver`, which adds the
    public front-end. Every hook below is called by the front-end only, after validation.
    """

    # ==========================================================================================
    # Class attributes
    # ==========================================================================================
    #: Registered name, e.g. ``"jax"``; the entry point's name should match it.
    name: ClassVar[str] = ""
    #: What the driver can express beyond even, one-mesh-axis-per-tensor-axis layouts. For a
    #: layout that needs a capability not listed here, the front-end raises
    #: ``UnsupportedLayoutError(feature=capability)`` before any hook runs, and the
    #: conformance suite checks exactly that.
    capabilities: ClassVar[frozenset[Capability]] = frozenset()
    #: Refusals beyond capabilities and dtypes that the driver makes on purpose, each a
    #: :class:`~layoutcore.driver.Limitation` whose member docstring says when (e.g. TF's
    #: ``NEGATIVE_ZERO``: a ``-0.0`` written into a variable with replicas). The conformance suite
    #: expects exactly these refusals, typed, and the data everywhere else.
    limitations: ClassVar[frozenset[Limitation]] = frozenset()
    #: Top-level modules that must be importable for the driver to work (checked with
    #: ``importlib.util.find_spec`` before the driver is created; nothing is imported).
    requires: ClassVar[tuple[str, ...]] = ()
    #: The command that installs what :attr:`requires` names, quoted in ``DriverUnavailableError``.
    install_hint: ClassVar[str] = ""
    #: Fully qualified names (``type.__module__ + "." + type.__qualname__``) of the driver's native
    #: distributed tensor types, e.g. ``("jaxlib._jax.ArrayImpl",)`` or
    #: ``("torch.distributed.tensor.DTensor",)``. The registry routes a value whose type (or a base
    #: class of it) has one of these names to this driver ("the value chooses the driver",
    #: docs/design.md#data-functions-made-precise) without importing any framework; :meth:`is_distributed` then has the last word.
    native_types: ClassVar[tuple[str, ...]] = ()
    #: What a caller's later writes to its NumPy input do to the result of ``distribute_tensor``
    #: (docs/design.md#data-functions-made-precise "Whose memory"; the conformance suite checks the claim, aligned arrays and
    #: ``np.memmap`` inputs included): ``"snapshot"`` (the default) - the result never changes;
    #: ``"shares"`` - every device's data is a view of the input, so the caller's writes show
    #: through on every device (the NumPy driver's read-only views). Writes *through* a distributed
    #: value never reach the caller's input under either rule.
    input_aliasing: ClassVar[Literal["snapshot", "shares"]] = "snapshot"

    # ==========================================================================================
    # Required hooks
    # ==========================================================================================
    @abc.abstractmethod
    def list_devices(self, device_type: str | None = None) -> list[str]:
        """Canonical names of the devices this driver can place data on.

        Args:
            device_type: only devices of this type (case-insensitive), e.g. ``"CPU"``; ``None``
                for all.

        Returns:
            Names such as ``"CPU:0"``, in the framework's order. Abstract meshes bind to the
            first ``mesh.size`` of them.

        JAX: ``jax.devices()``; TF: ``tf.config.list_logical_devices()``; torch: the process
        group's ranks (or the simulated ones); NumPy: ``LAYOUTCORE_CPU_DEVICES`` virtual CPUs.

        Raises:
            Nothing: a framework that cannot start raises ``DriverUnavailableError`` when the driver is made.
        """

    @abc.abstractmethod
    def is_distributed(self, value: Any) -> bool:
        """Whether ``value`` is this driver's concrete native distributed tensor.

        Must be cheap (it runs on every call) and must not raise for foreign values. A traced
        value (see :meth:`is_traced`) is not a concrete distributed tensor.

        JAX: a ``jax.Array`` on a ``NamedSharding``; TF: ``dtensor.is_dtensor``; torch:
        ``isinstance(value, DTensor)``; NumPy: ``isinstance(value, ShardedArray)``.

        Raises:
            Nothing, for any value (foreign ones included).
        """

    @abc.abstractmethod
    def native_distribute(self, value: Any, layout: BoundLayout, devices: tuple[str, ...]) -> Any:
        """Place a global value by ``layout``.

        Args:
            value: what :meth:`prepare_input` returned (a NumPy array or a framework tensor, not
                a distributed one), whose shape fits ``layout``; or, for a driver with
                :attr:`Capability.TRACED`, a traced value.
            layout: the validated layout (mesh bound to ``devices``).
            devices: the mesh's devices, row-major.

        Returns:
            A new native distributed tensor that shares no writable memory with ``value``.
            For a traced value: the value under the framework's sharding constraint.

        JAX: ``jax.device_put(x, NamedSharding)``; TF: ``dtensor.copy_to_mesh`` then
        ``dtensor.relayout`` (or ``dtensor.pack`` of the blocks); torch:
        ``distribute_tensor(src_data_rank=None)``; NumPy: read-only views of the blocks.
        Capabilities: every one the layout needs (checked before the call).

        Raises:
            UnsupportedLayoutError: what the framework cannot hold (``Limitation.DTYPE``, or a
                capability the driver declared but this value needs in another form).
        """

    @abc.abstractmethod
    def native_unpack(self, tensor: Any) -> list[Any]:
        """The local per-device components, in row-major mesh order.

        Args:
            tensor: a distributed tensor of this driver.

        Returns:
            One component per position of :meth:`local_positions` (all positions in a
            single-process run), replicas included.

        JAX: ``addressable_shards[i].data`` ordered by the mesh; TF: ``dtensor.unpack``; torch:
        ``to_local`` (per simulated rank); NumPy: ``ShardedArray.components``.

        Raises:
            Nothing for a tensor of this driver (the front-end checks that first).
        """

    @abc.abstractmethod
    def native_pack(
        self, components: list[Any], layout: BoundLayout, devices: tuple[str, ...], global_shape: tuple[int, ...]
    ) -> Any:
        """Build a distributed tensor from per-device components.

        Args:
            components: one per local position, already checked against ``layout``: count,
                shapes, one dtype, equal replicas.
            layout: their layout (validated for ``global_shape``).
            devices: the mesh's devices, row-major.
            global_shape: the global shape (given or inferred by the front-end).

        Returns:
            A new distributed tensor holding the components' data.

        JAX: ``jax.make_array_from_single_device_arrays``; TF: ``dtensor.pack``; torch:
        ``DTensor.from_local(run_check=False, shape=, stride=)``; NumPy: a ``ShardedArray``.

        Raises:
            UnsupportedLayoutError: what the framework cannot hold (``Limitation.DTYPE``).
        """

    # ------------------------------------------------------------------------------------------
    # Blocks the caller hands over (checkpoint loads, weight transfer): layoutcore.driver._fill
    # ------------------------------------------------------------------------------------------
    def native_pack_owned(
        self, blocks: list[np.ndarray], layout: BoundLayout, devices: tuple[str, ...], global_shape: tuple[int, ...]
    ) -> Any:
        """Build a distributed tensor from host blocks whose ownership passes to the driver.

        The ownership hand-off: the caller (the checkpoint loader, ``layoutcore.transfer``) made
        each block itself, keeps no reference it writes through, and checked the blocks already
        (count, shapes, dtype). Replicas are the **same** array object, listed once per device
        holding it, and equal by construction: nothing is compared. The driver may keep the arrays
        as its storage (no snapshot copy); where devices must not share storage (torch local
        tensors, which in-place ops write), it copies a block for each further device only.

        Args:
            blocks: one C-contiguous, writable NumPy array per local position (row-major).
            layout: their layout; devices, global_shape: as :meth:`native_pack`.

        Returns:
            A new distributed tensor holding the blocks' data.

        Default: :meth:`native_pack` (which copies as it does for any caller's data): right for
        every driver, only slower. JAX: no snapshot copy before ``device_put``; torch: ``from_numpy``
        without ``clone``; TF: no aligned-copy; NumPy: the blocks themselves, read-only.

        Raises:
            UnsupportedLayoutError: what the framework cannot hold (``Limitation.DTYPE``).
        """
        return self.native_pack(list(blocks), layout, devices, global_shape)

    def native_fill(self, tensor: Any, blocks: list[np.ndarray], layout: BoundLayout, devices: tuple[str, ...]) -> Any:
        """Write host blocks into an existing distributed tensor; return the tensor that holds them.

        Args:
            tensor: a distributed tensor of this driver (not traced), laid out by ``layout``.
            blocks: as :meth:`native_pack_owned` (handed over; replicas are one object).
            layout: ``tensor``'s layout; devices: its mesh's devices, row-major.

        Returns:
            ``tensor`` itself where the framework's tensors are mutable (its storage kept, every
            local component overwritten), else a new tensor with the same layout that replaces it.

        Default: :meth:`native_pack_owned` (a replacement, for frameworks whose arrays are
        immutable: JAX, TF tensors). torch: ``copy_`` into each local tensor; NumPy: each
        component's memory written; TF: ``DVariable.assign`` for variables.

        Raises:
            UnsupportedLayoutError: what the framework cannot write (``Limitation.DTYPE``).
        """
        return self.native_pack_owned(blocks, layout, devices, self.shape_of(tensor))

    @abc.abstractmethod
    def native_relayout(self, tensor: Any, layout: BoundLayout, devices: tuple[str, ...]) -> Any:
        """The same global value with another layout.

        Args:
            tensor: a distributed tensor of this driver.
            layout: the target layout, validated for the tensor's shape. Its mesh is the
                tensor's own unless the driver declares :attr:`Capability.RELAYOUT_ACROSS_MESHES`.
            devices: the target mesh's devices, row-major.

        Returns:
            A distributed tensor laid out by ``layout``. Return ``tensor`` itself only when it is
            already laid out by exactly ``layout``; where only the mesh's name or abstractness
            differs (which no native sharding sees), return a new object, or the front-end raises
            rather than let one object answer ``fetch_layout`` for two layouts.

        JAX: ``jax.device_put(a, NamedSharding)``; TF: ``dtensor.relayout`` (host copy across
        meshes); torch: ``DTensor.redistribute``; NumPy: distinct blocks built once.
        Capabilities: the target layout's, and ``relayout_across_meshes`` for another mesh.

        Raises:
            UnsupportedLayoutError: a move the framework cannot make (``Limitation.PARTIAL`` ...).
        """

    def native_relayout_planned(self, tensor: Any, move: RelayoutMove) -> Any:
        """:meth:`native_relayout` with what the front-end knows of the move.

        Args:
            tensor: a distributed tensor of this driver.
            move: the target (``move.layout`` as the caller gave it, validated; ``move.target`` on
                the concrete mesh ``move.devices``), and, computed by the core on first use and
                cached, the source layout on its concrete mesh (``move.source``), the plan
                (``move.plan``) and its schedule (``move.schedule(participants, rounds=...)``).

        Default: ``native_relayout(tensor, move.layout, move.devices)``, so a driver that hands
        relayouts to its framework implements only that. Override to run the core's schedule
        (JAX, torch): read the source, target and plan from ``move``, never again from the tensor.

        Raises:
            UnsupportedLayoutError: as :meth:`native_relayout`.
        """
        return self.native_relayout(tensor, move.layout, move.devices)

    @abc.abstractmethod
    def native_fetch_layout(self, tensor: Any) -> Layout:
        """The layout ``tensor`` has, read from the tensor itself (the native truth).

        Args:
            tensor: a distributed tensor of this driver (made by a hook or by a framework
                operation), or a traced value on a driver with :attr:`Capability.TRACED`.

        Returns:
            Its layout on a **concrete** mesh (devices set; any mesh name). The front-end checks
            the record against it on every ``fetch_layout``, ignoring the mesh's name and
            abstractness, and raises ``LayoutcoreError`` where they disagree; it maps a tensor
            without record back to the mesh the user bound to those devices.

        JAX: ``a.sharding`` (``NamedSharding`` -> Layout); TF: ``dtensor.fetch_layout``; torch:
        ``placements`` and ``device_mesh``; NumPy: ``ShardedArray.layout``.

        Raises:
            UnsupportedLayoutError: a native layout with no layoutcore form (``Limitation.PARTIAL``,
                ``Limitation.PLACEMENT``), or ``Capability.TRACED`` where the compiler has not fixed it yet.
        """

    @abc.abstractmethod
    def native_to_numpy(self, tensor: Any) -> np.ndarray:
        """The global value as a new NumPy array, for any layout.

        Args:
            tensor: a distributed tensor of this driver.

        Returns:
            A fresh, writable array (never a view of the tensor's memory).

        JAX: the addressable shards with ``replica_id == 0`` (``process_allgather`` across
        processes); TF: ``dtensor.unpack`` assembled (``.numpy()`` when replicated); torch:
        ``full_tensor()``; NumPy: each distinct block written once.

        Raises:
            Nothing for a tensor of this driver (the front-end refuses traced values first).
        """

    # ==========================================================================================
    # Optional hooks (the defaults shown are what a driver gets without overriding)
    # ==========================================================================================
    def supported_dtypes(self) -> frozenset[str]:
        """The dtypes this driver holds now, by canonical name (:data:`~layoutcore.driver.ALL_DTYPES`;
        default: all 18).

        A method, not a class attribute, because the answer may depend on the framework's
        configuration at call time (JAX without ``jax_enable_x64`` holds no 64-bit dtype). The
        front-end refuses a value of any other of the 18 dtypes with
        ``UnsupportedLayoutError(feature=Limitation.DTYPE)`` naming the dtype and the driver, before
        a hook runs: in ``distribute_tensor``, ``copy_to_mesh`` and ``relayout`` of a plain value,
        ``pack``, ``Variable`` and ``Variable.assign``, and on ``call_with_layout``'s result. The
        conformance suite takes its expected refusals from this set, never from trial. Dtypes
        outside the 18 (text, dates, records) are the driver's own business (:meth:`prepare_input`).
        A declared dtype must move bit for bit through every data function (a same-width integer
        view where the framework's kernels lack it: docs/dtypes.md).

        Raises:
            Nothing.
        """
        return _ALL_DTYPES

    def unsupported_dtype_reason(self, name: str) -> str:
        """Why this driver does not hold dtype ``name`` (one of the 18, outside :meth:`supported_dtypes`),
        and what to do instead: the end of the front-end's refusal message.

        Raises:
            Nothing.
        """
        held = ", ".join(d for d in ALL_DTYPES if d in self.supported_dtypes())
        return f"its framework has no {name} dtype; cast the value to one it holds first ({held})"

    def narrow_input(self, value: Any, name: str, what: str) -> Any:
        """``value``, of dtype ``name`` (one of the 18, outside :meth:`supported_dtypes`), as a value of a
        dtype this driver holds, with every element unchanged; or raise.

        Called by the front-end for plain inputs of ``distribute_tensor`` (so ``copy_to_mesh``,
        ``relayout`` of a plain value, ``Variable`` and ``Variable.assign``) and for each ``pack``
        component (so checkpoint loads); the result's dtype must be one this driver holds. Default:
        the refusal. JAX with ``jax_enable_x64`` off: a 64-bit value whose every element fits its
        32-bit dtype exactly (``layoutcore.driver.narrow_exactly``), with a one-time
        :class:`~layoutcore.DtypeNarrowingWarning`.

        Args:
            value: a value :meth:`prepare_input` returned, or a ``pack`` component.
            name: its canonical dtype name.
            what: how an error names the value (``"the value"``, ``"component 3"``).

        Raises:
            UnsupportedLayoutError: ``feature=Limitation.DTYPE``, naming ``name`` and the driver
                (and, where a value would change, the first element that would).
        """
        raise dtype_refusal(self, name)

    def is_traced(self, value: Any) -> bool:
        """Whether ``value`` lives inside the framework's compiler (default: never).

        For a traced value the front-end skips records, replica checks and host reads, lets
        ``distribute_tensor``/``relayout``/``fetch_layout`` through to the hooks, hands back a traced
        ``call_with_layout`` result after checking the layout ``native_fetch_layout`` reads from it
        (where that raises ``UnsupportedLayoutError(feature="traced")``, on the hook's constraint alone), and raises
        ``UnsupportedLayoutError(feature="traced")`` where the driver lacks
        :attr:`Capability.TRACED` (for distributed and plain traced values alike; ``unpack`` and
        ``to_numpy`` refuse traced values on every driver). Must be cheap and must not raise for
        foreign values.

        JAX: ``isinstance(value, jax.core.Tracer)``; TF: a symbolic graph tensor inside
        ``tf.function``; torch: a ``torch.compile`` fake tensor.

        Raises:
            Nothing, for any value (foreign ones included).
        """
        return False

    def native_mesh(self, tensor: Any) -> Mesh:
        """The concrete mesh ``tensor`` lives on, for ``relayout``'s same-mesh check of a tensor
        the front-end holds no record for (a framework operation's output).

        Default: ``native_fetch_layout(tensor).mesh``. Override where a tensor has a mesh but
        no :class:`Layout` (torch: pending sums, ``Partial``), so it can still be relaid out.
        Capability: consulted only without ``relayout_across_meshes``.

        Raises:
            UnsupportedLayoutError: as :meth:`native_fetch_layout`.
        """
        mesh = self.native_fetch_layout(tensor).mesh
        assert mesh is not None, "native_fetch_layout must return a layout on a mesh"
        return mesh

    def native_call_with_layout(
        self,
        fn: Callable[..., Any],
        layout: BoundLayout,
        devices: tuple[str, ...],
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
    ) -> Any:
        """Call ``fn(*args, **kwargs)`` so that its result is laid out by ``layout``.

        Default: ``fn``'s plain result. A plain (not distributed) result, from this default or an
        override's ``super()`` call, is distributed by the front-end through ``distribute_tensor``
        with all its checks (a driver that keeps the default never has it called: the front-end
        runs ``fn`` itself). Override where the framework creates each shard in place. The result's shape
        is only known once ``fn`` is traced or run, so an override must call the front-end's
        ``check_layout(layout, shape)`` with that shape *before* creating the shards; the front-end
        then checks the returned tensor's native layout and records it.

        JAX: ``jax.jit(fn, out_shardings=NamedSharding)``; TF: ``dtensor.call_with_layout``;
        torch: the DTensor factories (``torch.distributed.tensor.ones`` ...) for torch's own.

        Raises:
            LayoutError, UnsupportedLayoutError: from ``check_layout`` on the result's shape; whatever
                ``fn`` raises propagates.
        """
        return fn(*args, **kwargs)

    def shape_of(self, value: Any) -> tuple[int, ...]:
        """Global shape of a native value, distributed or not (default: ``tuple(value.shape)``).

        Raises:
            Nothing for a value :meth:`prepare_input` returned or a distributed tensor of this driver.
        """
        return tuple(int(s) for s in value.shape)

    def component_to_numpy(self, component: Any) -> np.ndarray:
        """A component as a NumPy array, for ``pack``'s replica check (default ``np.asarray``).

        May share memory with the component: the front-end only reads it.

        Raises:
            Nothing for a component of this driver's tensors.
        """
        return np.asarray(component)

    def prepare_input(self, value: Any) -> Any:
        """Turn a user's global value into something :meth:`native_distribute` takes.

        The default leaves arrays and tensors (anything with ``shape`` and ``dtype``) alone and
        converts the rest (nested lists, scalars) with ``np.asarray``; the front-end refuses
        what cannot become an array (a dict, ragged lists) before calling it.

        Raises:
            LayoutError: a value that cannot become an array of the framework (naming it).
        """
        if hasattr(value, "shape") and hasattr(value, "dtype"):
            return value
        return np.asarray(value)

    def local_positions(self, mesh: Mesh, devices: tuple[str, ...]) -> Sequence[int]:
        """Mesh positions whose devices belong to this process (default: all of them).

        Multi-process drivers override it; ``unpack`` and ``pack`` then hold these only.
        JAX: ``device.process_index``; torch: the process group's rank.

        Raises:
            Nothing.
        """
        return range(mesh.size)

    def variable_create(self, value: Any, layout: BoundLayout) -> Any:
        """A variable's state, made from a distributed value (default: a :class:`VariableHandle`).

        TF: ``dtensor.DVariable``; torch: a DTensor ``nn.Parameter``. A state that is itself a
        distributed tensor is recorded with ``layout``.

        Raises:
            UnsupportedLayoutError: a dtype the framework's variables cannot hold.
        """
        return VariableHandle(value)

    def variable_read(self, handle: Any) -> Any:
        """The variable's current distributed value (default: ``handle.value``); recorded with
        the variable's layout by the front-end.

        Raises:
            Nothing.
        """
        return handle.value

    def variable_assign(self, handle: Any, value: Any) -> None:
        """Store ``value``, already distributed with the variable's layout and cast to its dtype
        (default: ``handle.value = value``). TF: ``DVariable.assign``; torch: ``copy_`` in place.

        Raises:
            Nothing (the front-end checked the value's layout and dtype).
        """
        handle.value = value

    def enter_layout_map_scope(self, layout_map: LayoutMap) -> contextlib.AbstractContextManager[Any]:
        """A context the public ``layout_map_scope(layout_map)`` enters on this driver (default:
        nothing to do). TF: gives tf-keras variables created inside it their layouts.

        Raises:
            DriverUnavailableError: the framework's integration that the scope needs is missing.
        """
        return contextlib.nullcontext()
