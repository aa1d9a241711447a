"""A missing google-crc32c C library warns once, naming the slow pure-Python path and the install
command. The missing library is simulated by swapping what ``_crc`` found
at import: no wheel at all, or a wheel whose ``implementation`` is ``"python"``."""

from __future__ import annotations

import types
import warnings

import numpy as np
import pytest

import layoutcore.checkpoint as ckpt
from layoutcore import _crc

CHECK = b"123456789"  # CRC-32C check value 0xE3069283 (RFC 3720, B.4)


def _pure_python_wheel() -> types.SimpleNamespace:
    """google-crc32c as it imports without its C extension: ``implementation == "python"``."""
    table = _crc._table()

    def extend(crc: int, data: bytes) -> int:
        crc ^= 0xFFFFFFFF
        for byte in bytes(data):
            crc = table[(crc ^ byte) & 0xFF] ^ (crc >> 8)
        return crc ^ 0xFFFFFFFF

    return types.SimpleNamespace(implementation="python", extend=extend, value=lambda data: extend(0, data))


@pytest.mark.parametrize("wheel", ["missing", "python"])
def test_slow_checksums_warn_once(wheel: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_crc, "_g", None if wheel == "missing" else _pure_python_wheel())
    monkeypatch.setattr(_crc, "_extend", None)
    monkeypatch.setattr(_crc, "_warned_slow", False)
    with pytest.warns(ckpt.SlowChecksumWarning) as record:
        assert _crc.crc32c(CHECK) == 0xE3069283
    (warning,) = record
    text = str(warning.message)
    assert "pip install --force-reinstall --only-binary=:all: google-crc32c" in text
    assert ("not installed" in text) if wheel == "missing" else ("implementation 'python'" in text)
    assert issubclass(ckpt.SlowChecksumWarning, RuntimeWarning)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a second warning would raise here
        assert _crc.crc32c(np.frombuffer(CHECK, np.uint8).copy()) == 0xE3069283


def test_the_c_library_does_not_warn(monkeypatch: pytest.MonkeyPatch) -> None:
    """With google-crc32c's C implementation (this environment's), no warning."""
    if getattr(_crc._g, "implementation", "") != "c":
        pytest.fail("this test environment must have google-crc32c's C library (constraints.txt pins the wheel)")
    monkeypatch.setattr(_crc, "_warned_slow", False)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert _crc.crc32c(CHECK) == 0xE3069283
        assert _crc.crc32c(np.frombuffer(CHECK, np.uint8).copy()) == 0xE3069283
    assert not _crc._warned_slow
