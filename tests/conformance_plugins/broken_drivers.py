"""Deliberately broken drivers for the conformance meta-test (a pytest plugin: ``-p broken_drivers``).

Loading this module registers three drivers with ``layoutcore.driver.register_driver``; select one with
``LAYOUTCORE_DRIVER``. Each is the NumPy reference driver with exactly one defect, and each uses
the NumPy adapter, which reads ``ShardedArray`` storage directly:

* ``broken-rotated``: every component is placed one device along (device ``i`` holds block
  ``i+1``); unpack and to_numpy see the same wrong storage.
* ``broken-uneven``: declares ``uneven`` but places the blocks of uneven layouts one device along.
* ``broken-hiding``: stores components rotated by one device, but ``unpack``, ``pack``,
  ``to_numpy`` and ``relayout`` undo the rotation, so every check through the driver's own API
  passes; only the suite's adapter-read oracle sees that the devices hold the wrong blocks.
* ``broken-double-send``: right data everywhere, but each relayout sends one block twice: only
  the byte count of test_relayout_floor sees it.
* ``broken-lying-fetch``: right data everywhere, but ``native_fetch_layout`` reports every tensor
  as replicated. The front-end answers ``fetch_layout`` from its records for tensors layoutcore made,
  so only the suite's checks of the hook itself, and of a framework operation's output, see it.

The framework drivers' mutants live beside this module (``broken_jax``, ``broken_tensorflow``,
``broken_torch``); each is run by tests/test_conformance_meta.py in its framework's tox environment.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
from _mutation import replicated_like

import layoutcore as lc
from layoutcore import Layout
from layoutcore.driver import Capability
from layoutcore.numpy import NumpyDriver, ShardedArray


def _rotate(components: Sequence[np.ndarray], by: int) -> tuple[np.ndarray, ...]:
    items = tuple(components)
    if not items:
        return items
    by %= len(items)
    return items[by:] + items[:by]


def _with_components(tensor: ShardedArray, components: tuple[np.ndarray, ...]) -> ShardedArray:
    return ShardedArray(components, tensor.layout, tensor.shape, tensor.dtype, tensor.devices)


class RotatedDriver(NumpyDriver):
    """Places component ``i + 1`` on device ``i``."""

    name = "broken-rotated"

    def native_distribute(self, value: Any, layout: Layout, devices: tuple[str, ...]) -> ShardedArray:
        tensor = super().native_distribute(value, layout, devices)
        return _with_components(tensor, _rotate(tensor.components, 1))


class UnevenLiarDriver(NumpyDriver):
    """Claims uneven support, then places uneven layouts' blocks on the wrong devices.

    (The older defect, declaring no uneven capability and skipping the refusal by overriding
    ``check_layout``, can no longer be written: the front-end's methods are final.)
    """

    name = "broken-uneven"

    def native_distribute(self, value: Any, layout: Layout, devices: tuple[str, ...]) -> ShardedArray:
        tensor = super().native_distribute(value, layout, devices)
        if Capability.UNEVEN in lc.driver.required_capabilities(layout, tensor.shape):  # the defect
            return _with_components(tensor, _rotate(tensor.components, 1))
        return tensor


class HidingDriver(NumpyDriver):
    """Wrong placement that its own API hides: storage rotated, every accessor un-rotates."""

    name = "broken-hiding"

    def native_distribute(self, value: Any, layout: Layout, devices: tuple[str, ...]) -> ShardedArray:
        tensor = super().native_distribute(value, layout, devices)
        return _with_components(tensor, _rotate(tensor.components, 1))

    def native_unpack(self, tensor: ShardedArray) -> list[Any]:
        return list(_rotate(tensor.components, -1))

    def native_pack(
        self, components: list[Any], layout: Layout, devices: tuple[str, ...], global_shape: tuple[int, ...]
    ) -> ShardedArray:
        tensor = super().native_pack(components, layout, devices, global_shape)
        return _with_components(tensor, _rotate(tensor.components, 1))

    def native_relayout(self, tensor: ShardedArray, layout: Layout, devices: tuple[str, ...]) -> ShardedArray:
        plain = _with_components(tensor, _rotate(tensor.components, -1))
        moved = super().native_relayout(plain, layout, devices)
        return _with_components(moved, _rotate(moved.components, 1))

    def native_to_numpy(self, tensor: ShardedArray) -> np.ndarray:
        return super().native_to_numpy(_with_components(tensor, _rotate(tensor.components, -1)))


class LyingFetchDriver(NumpyDriver):
    """Reads every tensor's layout as replicated on its mesh."""

    name = "broken-lying-fetch"

    def native_fetch_layout(self, tensor: ShardedArray) -> Layout:
        return replicated_like(super().native_fetch_layout(tensor), tensor.ndim)


class DoubleSendDriver(NumpyDriver):
    """Right data everywhere, but every relayout that moves anything sends its first moved block twice
    (through the reference driver's simulated wire), so it moves more than ``relayout_plan``'s floor."""

    name = "broken-double-send"

    def native_relayout(self, tensor: ShardedArray, layout: Layout, devices: tuple[str, ...]) -> ShardedArray:
        from layoutcore.numpy import _driver as wire

        sent: list[np.ndarray] = []
        real = wire._send

        def send(piece: np.ndarray) -> np.ndarray:
            sent.append(piece)
            return real(piece)

        wire._send = send
        try:
            moved = super().native_relayout(tensor, layout, devices)
        finally:
            wire._send = real
        if sent:
            real(sent[0])  # the defect: the first block goes over the wire a second time
        return moved


BROKEN_DRIVERS = (RotatedDriver, UnevenLiarDriver, HidingDriver, LyingFetchDriver, DoubleSendDriver)

for _cls in BROKEN_DRIVERS:
    lc.driver.register_driver(_cls.name, _cls, replace=True)
