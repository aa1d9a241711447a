"""The README's "Example" block, run unchanged in a fresh interpreter under one driver (the same
program on every driver). Used by tests/test_readme_example.py (NumPy) and each driver's
tests/drivers/<fw>/test_readme_example.py, each with its own tox env's Python (``sys.executable``).

The block is taken from README.md with tests/test_docs.py's own fence parser and runs whole, as a
user would paste it. Its uneven part (``np.arange(5)`` over 4) catches ``UnsupportedLayoutError``: a
driver without the ``uneven`` capability (JAX, TensorFlow: documented on their driver pages) must
refuse it with ``feature="uneven"`` naming itself (seen through a wrapper of ``distribute_tensor``),
and every other driver must run it without a refusal.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

TESTS = Path(__file__).resolve().parent
README = TESTS.parent / "README.md"
#: The README comment that starts the uneven part of the example (up to the next blank line).
UNEVEN_MARK = "# Uneven dimensions"

_PROGRAM = r"""
import sys
sys.path.insert(0, {tests!r})
from pathlib import Path
from test_docs import extract_blocks
import layoutcore as lc

text = Path({readme!r}).read_text(encoding="utf-8")
after = text[text.index("\n## Example\n"):]
code = next(b for b in extract_blocks(after) if b.runnable).code
assert {mark!r} in code and "np.arange(5)" in code, code
namespace = {{"__name__": "readme_example"}}
refused = []
real_distribute = lc.distribute_tensor

def distribute_tensor(value, layout, **kwargs):
    try:
        return real_distribute(value, layout, **kwargs)
    except lc.UnsupportedLayoutError as err:
        refused.append(err)
        raise

lc.distribute_tensor = distribute_tensor  # sees the refusal the example itself catches
exec(compile(code, "README.md", "exec"), namespace)
assert lc.active_driver_name() == {driver!r}, lc.active_driver_name()
if {refuses!r}:
    assert "z" not in namespace, "the uneven line was not refused"
    assert [(e.feature, e.driver) for e in refused] == [("uneven", {driver!r})], refused
    print("refused:", refused[0])
else:
    assert "z" in namespace and not refused, refused
print("ok")
"""


def run_readme_example(driver: str, *, refuses_uneven: bool) -> str:
    """Run the example under ``LAYOUTCORE_DRIVER=driver`` in this interpreter's environment; its output.

    Raises:
        AssertionError: the example failed (with its stderr), or the uneven line ran where it must be
            refused, or was refused where it must run.
    """
    program = _PROGRAM.format(
        tests=str(TESTS), readme=str(README), mark=UNEVEN_MARK, driver=driver, refuses=refuses_uneven
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith("LAYOUTCORE_DRIVER")}
    env["LAYOUTCORE_DRIVER"] = driver
    env.setdefault("LAYOUTCORE_CPU_DEVICES", "8")
    env.setdefault("JAX_PLATFORMS", "cpu")
    done = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True, timeout=300, env=env)
    assert done.returncode == 0 and done.stdout.strip().endswith("ok"), done.stdout + done.stderr[-4000:]
    return done.stdout
