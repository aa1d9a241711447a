"""The ``layoutcore`` command: ``tour``, ``show``, ``drivers`` and ``conformance``.

``rich`` (for the pictures and tables) and the conformance runner are imported inside the
commands, so importing this module, like ``import layoutcore``, loads neither.

Exit status: 0 on success, 1 when the tour finds a driver giving wrong data, 2 for bad
arguments (a one-line ``layoutcore <command>: error: ...`` on stderr, no traceback), 3 when
a command needs an optional package that is missing (the message gives the install command:
the tables and pictures need ``rich``, from ``pip install 'layoutcore[cli]'``), 141 when
stdout's reader went away (``layoutcore ... --json | head``, no traceback); the
``conformance`` command returns pytest's status. The tour itself is :mod:`layoutcore._tour`.
"""

from __future__ import annotations

import argparse
import importlib
import importlib.util
import os
import sys
import warnings
from collections.abc import Callable, Sequence
from typing import Any, NoReturn

import layoutcore as lc
import layoutcore.driver as lcd

from ._args import (
    REPLICATED_TOKENS,
    MissingDependencyError,
    UsageError,
    missing_rich,
    parse_layout,
    parse_mesh,
    parse_shape,
)
from ._args import console as _console
from ._tour import TOUR_DEVICES

__all__ = [
    "REPLICATED_TOKENS",
    "TOUR_DEVICES",
    "MissingDependencyError",
    "UsageError",
    "main",
    "parse_layout",
    "parse_mesh",
    "parse_shape",
]

#: The conformance suite's package and the command that installs it with pytest.
_CONFORMANCE_PACKAGE = "layoutcore_conformance"
_TEST_EXTRA = "pip install 'layoutcore[test]'"


# ==============================================================================================
# Commands
# ==============================================================================================
def _cmd_show(args: argparse.Namespace, extra: list[str]) -> int:
    from ._render import device_table, layout_summary, render_layout

    if args.layout.strip().startswith("sharding_specs:"):
        if args.mesh is not None:
            raise UsageError("--mesh: a TF layout string already names its mesh; drop --mesh")
        try:
            layout = lc.Layout.from_string(args.layout.strip())
        except lc.LayoutcoreError as exc:
            raise UsageError(f"--layout {args.layout!r}: {exc}") from None
        if args.devices is not None:
            layout = layout.with_mesh(parse_mesh(layout.require_mesh().to_string(), args.devices))
    else:
        if args.mesh is None:
            raise UsageError("--mesh is required (e.g. --mesh x=3,y=2) unless --layout is a TF layout string")
        mesh = parse_mesh(args.mesh, args.devices)
        try:
            layout = lc.Layout(parse_layout(args.layout), mesh)
        except lc.LayoutcoreError as exc:
            raise UsageError(f"--layout {args.layout!r}: {exc}") from None
    shape = parse_shape(args.shape)
    if len(shape) != layout.rank:
        raise UsageError(
            f"--shape {args.shape!r}: rank {len(shape)}, but --layout {args.layout!r} has {layout.rank} "
            "entries (one per tensor axis)"
        )
    console = _console()
    console.print(layout_summary(layout, shape), soft_wrap=True)
    console.print(render_layout(layout, shape, width=console.width))
    if args.per_device:
        console.print(device_table(layout, shape))
    return 0


def _cmd_drivers(args: argparse.Namespace, extra: list[str]) -> int:
    from rich import box
    from rich.table import Table

    table = Table(box=box.SIMPLE_HEAD, title="layoutcore drivers")
    table.add_column("driver", no_wrap=True)
    table.add_column("status", no_wrap=True)
    # Wide enough for the longest capability name, so that names wrap between, never inside.
    table.add_column("capabilities", min_width=max(len(str(c)) for c in lcd.Capability))
    table.add_column("install", min_width=len("'layoutcore[tensorflow]'"), overflow="fold")
    active = lc.active_driver_name()
    # A registered plug-in that fails to import is warned about by driver_infos; list it here instead.
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        infos = lcd.driver_infos()
    for info in infos:
        name = info.name + (" *" if info.name == active else "")
        status = "installed" if info.installed else "not installed"
        capabilities = "\n".join(sorted(str(c) for c in info.capabilities)) or "-"
        if not info.installed and not info.capabilities:
            capabilities = "(known once installed)"
        table.add_row(name, status, capabilities, info.install_hint if not info.installed else "")
    console = _console()
    console.print(table)
    for warning in caught:
        console.print(f"warning: {warning.message}", soft_wrap=True)
    console.print(
        f"* active driver: {active!r} (chosen by driver=, use_driver, set_driver, ${lcd.DRIVER_ENV}, else 'numpy'). "
        "Every driver supports even layouts with one mesh axis per tensor axis; the capabilities are what it "
        "supports beyond that.",
        soft_wrap=True,
    )
    return 0


def _cmd_conformance(args: argparse.Namespace, extra: list[str]) -> int:
    _check_driver_name(args.driver)  # a bad name is one line here, not one error per collected test
    # The suite runs under pytest: without it, say how to install it (no ModuleNotFoundError traceback).
    for needed in ("pytest", "hypothesis", _CONFORMANCE_PACKAGE):
        if importlib.util.find_spec(needed) is None:
            raise MissingDependencyError(
                f"the conformance suite needs {needed!r}, which is not installed; install the test extra: {_TEST_EXTRA}"
            )
    suite = importlib.import_module(_CONFORMANCE_PACKAGE)  # its public entry point, run()
    pytest_args = extra[1:] if extra[:1] == ["--"] else extra
    return int(suite.run(list(pytest_args), driver=args.driver))


def _load_driver(name: str) -> lcd.Driver:
    try:
        return lc.get_driver(name)
    except (lc.DriverNotFoundError, lc.DriverUnavailableError, lc.ConfigurationError) as exc:
        raise UsageError(f"--driver {name!r}: {exc}") from None


def _check_driver_name(name: str | None) -> None:
    """Refuse an unknown or uninstalled driver without creating it: the conformance suite
    configures the framework (device count) itself, before the driver's first use."""
    name = name or lc.active_driver_name()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # a broken plug-in is reported by its own info below
        infos = {info.name: info for info in lcd.driver_infos()}
    if name not in infos:
        raise UsageError(f"--driver {name!r}: no such driver; installed drivers: {sorted(infos)}")
    if not infos[name].installed:
        raise UsageError(f"--driver {name!r}: {infos[name].problem or 'not installed'} ({infos[name].install_hint})")


def _cmd_tour(args: argparse.Namespace, extra: list[str]) -> int:
    # Before the driver is first created, so that every framework starts with the guide's 6 devices.
    os.environ.setdefault(lcd.CPU_DEVICES_ENV, str(TOUR_DEVICES))
    name = args.driver or lc.active_driver_name()
    driver = _load_driver(name)
    available = driver.list_devices()
    if len(available) < TOUR_DEVICES:
        raise UsageError(
            f"the tour needs {TOUR_DEVICES} devices but the {driver.name!r} driver has {len(available)} "
            f"({available}); set {lcd.CPU_DEVICES_ENV}={TOUR_DEVICES} before the framework starts"
        )
    from ._tour import Tour

    with lc.use_driver(name):  # the registered name, which a plug-in's class may spell differently
        return Tour(_console(), driver, available).run()


# ==============================================================================================
# Entry point
# ==============================================================================================
_SHOW_EPILOG = """\
layout syntax (--layout), one comma-separated entry per tensor axis:
  x             shard the tensor axis over mesh axis x
  none, None, unsharded, -
                replicate it
  x+y or (x,y)  shard it over mesh axes x and y together, x major (PartitionSpec(("x", "y")));
                quote the (x,y) form in a shell: --layout '(x,y),none'
  sharding_specs:...
                a TF DTensor layout string (then --mesh is taken from it)
  (empty)       a rank-0 layout, with --shape ''

Uneven dimensions follow the chunk rule (blocks of ceil(d/n); trailing blocks may be empty,
drawn as 'empty'). Rank > 2 draws one grid over the last two axes per block of the others.
Computed from the Layout alone: no driver or framework is used.

examples:
  layoutcore show --mesh x=3,y=2 --layout x,unsharded --shape 6,4
  layoutcore show --mesh x=3,y=2 --layout x+y,none --shape 6,4 --per-device
  layoutcore show --mesh x=2,y=2 --layout none,x,y --shape 2,4,5
  layoutcore show --mesh x=4 --layout x --shape 5 --devices cpu:3,cpu:2,cpu:1,cpu:0
"""

_CONFORMANCE_EPILOG = """\
Everything after the options goes to pytest (use -- first for pytest options that collide
with these, e.g. `layoutcore conformance --driver jax -- --help`).

examples:
  layoutcore conformance                      # the active driver (default numpy)
  layoutcore conformance --driver mydriver -x -q
  tox -e jax                                   # first-party drivers, each in its own env
"""


class _Parser(argparse.ArgumentParser):
    """argparse with one-line errors, like the commands' own (usage is one ``--help`` away)."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


def _build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="layoutcore",
        description=(
            "layoutcore: one Mesh / Layout / LayoutMap vocabulary for distributed arrays on NumPy, JAX, "
            "TF DTensor and torch DTensor."
        ),
        epilog="Run `layoutcore COMMAND --help` for each command's options.",
        allow_abbrev=False,
    )
    parser.add_argument("--version", action="version", version=f"layoutcore {lc.__version__}")
    driver_help = f"driver to use (default: ${lcd.DRIVER_ENV}, else 'numpy'); see `layoutcore drivers`"
    parser.add_argument("--driver", metavar="NAME", help=driver_help)
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)

    def command(name: str, help_text: str, run: Callable[[argparse.Namespace, list[str]], int], **kw: Any) -> Any:
        sub = commands.add_parser(
            name,
            help=help_text,
            description=help_text,
            allow_abbrev=False,
            formatter_class=argparse.RawDescriptionHelpFormatter,
            **kw,
        )
        sub.set_defaults(run=run)
        return sub

    tour = command(
        "tour",
        "Walk through the TF DTensor guide's concepts (meshes, layouts, pack, relayout, call_with_layout, "
        f"Variable, LayoutMap, SPMD matmul) on the active driver with {TOUR_DEVICES} CPU devices, checking every result "
        "against the NumPy shard math.",
        _cmd_tour,
        epilog=f"Sets {lcd.CPU_DEVICES_ENV}={TOUR_DEVICES} unless it is already set. Exit status 1 if a check fails.",
    )
    # SUPPRESS: without it the subcommand's default None would overwrite `layoutcore --driver X tour`.
    tour.add_argument("--driver", metavar="NAME", default=argparse.SUPPRESS, help=driver_help)

    show = command(
        "show",
        "Draw which device holds which block of an array, like jax.debug.visualize_array_sharding.",
        _cmd_show,
        epilog=_SHOW_EPILOG,
    )
    show.add_argument(
        "--mesh", metavar="AXES", help="mesh axes as name=size, major first, e.g. x=3,y=2 (or a TF mesh string)"
    )
    show.add_argument("--layout", metavar="ENTRIES", required=True, help="one entry per tensor axis, e.g. x,unsharded")
    show.add_argument("--shape", metavar="DIMS", required=True, help="global shape, e.g. 6,4")
    show.add_argument(
        "--devices", metavar="NAMES", help="device names in row-major mesh order, e.g. CPU:0,CPU:1 (default CPU:0..N-1)"
    )
    show.add_argument("--per-device", action="store_true", help="also list each device's coordinate, block and slice")

    command(
        "drivers",
        "List the drivers: installed or not (with the install command), and declared capabilities.",
        _cmd_drivers,
    )

    conformance = command(
        "conformance",
        "Run the shared conformance suite (pytest) against one driver, e.g. a third-party driver registered "
        "under the 'layoutcore.drivers' entry point.",
        _cmd_conformance,
        epilog=_CONFORMANCE_EPILOG,
        usage="layoutcore conformance [-h] [--driver NAME] [PYTEST_ARGS ...]",
    )
    conformance.add_argument("--driver", metavar="NAME", default=argparse.SUPPRESS, help=driver_help)

    from ._render_plan import add_commands  # `plan` and `relayout-plan` (rendering lives there)

    add_commands(command)
    from ._checkpoint import add_commands as add_checkpoint_commands

    add_checkpoint_commands(command)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the ``layoutcore`` command with ``argv`` (default ``sys.argv[1:]``); return the exit status."""
    parser = _build_parser()
    args, extra = parser.parse_known_args(list(sys.argv[1:] if argv is None else argv))
    if extra and args.command != "conformance":
        parser.error(f"unrecognized arguments: {' '.join(extra)}")
    try:
        status = int(args.run(args, extra))
        sys.stdout.flush()  # here, not at exit: a reader that went away is answered below, not by a traceback
        return status
    except BrokenPipeError:
        return _reader_gone()
    except UsageError as exc:
        print(f"layoutcore {args.command}: error: {' '.join(str(exc).split())}", file=sys.stderr)
        return getattr(exc, "exit_status", 2)
    except ModuleNotFoundError as exc:  # a drawing module the command imports lazily (rich, with the cli extra)
        if (exc.name or "").split(".")[0] != "rich":
            raise
        print(f"layoutcore {args.command}: error: {missing_rich()}", file=sys.stderr)
        return MissingDependencyError.exit_status


#: Exit status when stdout's reader closed early (``layoutcore ... --json | head``): a process killed
#: by SIGPIPE reports 128 + 13 in a shell.
BROKEN_PIPE_STATUS = 141


def _reader_gone() -> int:
    """stdout's reader closed the pipe: stop quietly, as a process that SIGPIPE kills would.

    What is still buffered for stdout would raise again when the interpreter flushes it at exit, so
    stdout is pointed at the null device first (the recipe of Python's ``signal`` docs).
    """
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    except (OSError, ValueError, AttributeError):  # stdout is not a file (a test's capture): nothing to flush
        pass
    return BROKEN_PIPE_STATUS
