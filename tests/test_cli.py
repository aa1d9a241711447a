"""The ``layoutcore`` command: each command in-process through ``main``, and the console script.

Expected pictures are derived by hand from the layout semantics (DTensor's row-major mesh, the
chunk rule), not from the renderer: the tests read the drawn grids back into cells and check
which devices and index ranges each cell names.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import os
import re
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest
from _support import FULL, plain_console, plain_console_env

import layoutcore
from layoutcore import Layout, Mesh
from layoutcore.cli._main import UsageError, main, parse_layout, parse_mesh, parse_shape
from layoutcore.driver import Capability
from layoutcore.numpy import NumpyDriver

Grid = tuple[str, list[list[str]]]


@pytest.fixture(autouse=True)
def _wide_console(monkeypatch: pytest.MonkeyPatch) -> None:
    """rich wraps at $COLUMNS when not on a terminal; wide enough that no cell or string wraps, and
    plain text whatever terminal (FORCE_COLOR, TTY_COMPATIBLE) runs the tests."""
    plain_console(monkeypatch, 240)


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def grids(text: str) -> list[Grid]:
    """The block grids ``show`` drew: ``(title, rows)``, each row a list of cell texts.

    A cell's wrapped lines are joined with spaces; its blank padding lines are dropped.
    """
    found: list[Grid] = []
    title = ""
    rows: list[list[str]] = []
    current: list[list[str]] = []
    for line in text.splitlines():
        stripped = line.strip()
        if stripped.startswith("┌"):
            rows, current = [], []
        elif stripped.startswith(("├", "└")):
            rows.append([" ".join(part for part in cell if part) for cell in current])
            current = []
            if stripped.startswith("└"):
                found.append((title, rows))
                title = ""
        elif stripped.startswith("│"):
            cells = [c.strip() for c in stripped.split("│")[1:-1]]
            if not current:
                current = [[] for _ in cells]
            for column, cell in zip(current, cells, strict=True):
                column.append(cell)
        elif stripped:
            title = stripped
    return found


def devices_in(cell: str) -> list[str]:
    return [word.rstrip(",") for word in cell.split() if word.startswith("CPU:")]


# ==============================================================================================
# Argument parsing
# ==============================================================================================
def test_parse_layout_entries() -> None:
    assert parse_layout("x,unsharded") == ["x", None]
    assert parse_layout("none, None ,-,UNSHARDED") == [None, None, None, None]
    assert parse_layout("x+y,none") == [("x", "y"), None]
    assert parse_layout("(x, y),z") == [("x", "y"), "z"]
    assert parse_layout("y+x") == [("y", "x")]
    assert parse_layout("(x)") == ["x"]
    assert parse_layout("") == []


@pytest.mark.parametrize("text", ["x,,y", "(x,y", "x)", "((x))", "x+", "()", "x+none", ","])
def test_parse_layout_rejects_malformed_text_naming_it(text: str) -> None:
    with pytest.raises(
        UsageError, match=r"--layout '" + text.replace("(", r"\(").replace(")", r"\)").replace("+", r"\+")
    ):
        parse_layout(text)


def test_parse_mesh_forms() -> None:
    assert parse_mesh("x=3,y=2") == Mesh((3, 2), ("x", "y"))
    assert parse_mesh("x=2", "cpu:1, CPU:0").devices == ("CPU:1", "CPU:0")
    concrete = Mesh((3, 2), ("x", "y"), [f"CPU:{i}" for i in range(6)])
    assert parse_mesh(concrete.to_string()) == concrete


@pytest.mark.parametrize(
    ("text", "devices", "named"),
    [
        ("x=3,y", None, "'y'"),
        ("x=a", None, "'x=a'"),
        ("x=0", None, "'x=0'"),
        ("x=3,x=2", None, "'x'"),
        ("x=3", "CPU:0,CPU:1", "--devices 'CPU:0,CPU:1'"),
        ("x=2", "CPU:0,CPU:0", "CPU:0"),
    ],
)
def test_parse_mesh_rejects_bad_values_naming_them(text: str, devices: str | None, named: str) -> None:
    with pytest.raises(UsageError) as info:
        parse_mesh(text, devices)
    assert named in str(info.value)


def test_parse_shape() -> None:
    assert parse_shape("6,4") == (6, 4)
    assert parse_shape(" 0 ") == (0,)
    assert parse_shape("") == ()
    for bad in ("6,a", "-1", "6,,4", "2.5"):
        with pytest.raises(UsageError, match="--shape"):
            parse_shape(bad)


# ==============================================================================================
# show
# ==============================================================================================
def test_show_hybrid_layout_names_each_row_block_and_its_two_replicas(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run(capsys, "show", "--mesh", "x=3,y=2", "--layout", "x,unsharded", "--shape", "6,4")
    assert (code, err) == (0, "")
    (_title, rows), *rest = grids(out)
    assert rest == []
    # Row r of blocks (rows 2r, 2r+1 of the array) lives on mesh row x=r: devices 2r and 2r+1.
    assert len(rows) == 3 and all(len(row) == 1 for row in rows)
    for r, (cell,) in enumerate(rows):
        assert devices_in(cell) == [f"CPU:{2 * r}", f"CPU:{2 * r + 1}"]
        assert f"[{2 * r}:{2 * r + 2}, 0:4]" in cell
    assert "Layout[x, unsharded] on Mesh(x=3, y=2)" in out
    assert "2 device(s) per block" in out


def test_show_fully_sharded_grid(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "show", "--mesh", "x=3,y=2", "--layout", "x,y", "--shape", "6,4")
    ((_, rows),) = grids(out)
    assert code == 0
    assert [[devices_in(cell) for cell in row] for row in rows] == [
        [["CPU:0"], ["CPU:1"]],
        [["CPU:2"], ["CPU:3"]],
        [["CPU:4"], ["CPU:5"]],
    ]
    assert "[4:6, 2:4]" in rows[2][1]


@pytest.mark.parametrize("spelling", ["x+y,none", "(x,y),-", "(x, y),unsharded"])
def test_show_multi_axis_entry_is_row_major_over_the_axes(capsys: pytest.CaptureFixture[str], spelling: str) -> None:
    code, out, _ = run(capsys, "show", "--mesh", "x=3,y=2", "--layout", spelling, "--shape", "6,4")
    ((_, rows),) = grids(out)
    assert code == 0
    # Over (x, y) the block number is 2*x + y, which is the device's own row-major position.
    assert [devices_in(row[0]) for row in rows] == [[f"CPU:{i}"] for i in range(6)]
    assert [f"[{i}:{i + 1}, 0:4]" in row[0] for i, row in enumerate(rows)] == [True] * 6
    assert "Layout[(x,y), unsharded]" in out


def test_show_multi_axis_minor_first_order(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "show", "--mesh", "x=3,y=2", "--layout", "y+x", "--shape", "6")
    ((_, rows),) = grids(out)
    assert code == 0
    # Rank 1 draws one row of blocks. Over (y, x) device (x, y) takes block 3*y + x.
    assert len(rows) == 1
    assert [devices_in(cell) for cell in rows[0]] == [["CPU:0"], ["CPU:2"], ["CPU:4"], ["CPU:1"], ["CPU:3"], ["CPU:5"]]


def test_show_rank3_draws_one_titled_grid_per_leading_block(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "show", "--mesh", "x=2,y=2", "--layout", "x,none,y", "--shape", "4,2,3")
    assert code == 0
    drawn = grids(out)
    assert [title for title, _ in drawn] == ["tensor[0:2, :, :]", "tensor[2:4, :, :]"]
    for g, (_, rows) in enumerate(drawn):
        # Axis 1 is replicated (one row); axis 2 (size 3) over y=2 is chunked 2, 1.
        assert len(rows) == 1
        assert [devices_in(cell) for cell in rows[0]] == [[f"CPU:{2 * g}"], [f"CPU:{2 * g + 1}"]]
        assert f"[{2 * g}:{2 * g + 2}, 0:2, 0:2]" in rows[0][0]
        assert f"[{2 * g}:{2 * g + 2}, 0:2, 2:3]" in rows[0][1]


def test_show_rank3_with_multi_axis_and_replicated_leading_axis(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "show", "--mesh", "x=2,y=2", "--layout", "none,x+y,none", "--shape", "2,4,3")
    ((title, rows),) = grids(out)
    assert code == 0 and title == "tensor[0:2, :, :]"
    assert [devices_in(row[0]) for row in rows] == [[f"CPU:{i}"] for i in range(4)]


def test_show_uneven_layout_draws_empty_blocks(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "show", "--mesh", "x=4", "--layout", "x", "--shape", "2")
    ((_, (row,)),) = grids(out)
    assert code == 0
    # 2 over 4 is chunked 1, 1, 0, 0: devices 2 and 3 hold empty blocks.
    assert ["empty" in cell for cell in row] == [False, False, True, True]
    assert "[2:2]" in row[2] and "[2:2]" in row[3]
    assert "uneven (chunk rule) axis 0: 1/1/0/0" in out


def test_show_long_rank1_layout_turns_vertical_instead_of_cropping(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("COLUMNS", "80")
    code, out, _ = run(capsys, "show", "--mesh", "x=16", "--layout", "x", "--shape", "64")
    ((_, rows),) = grids(out)
    assert code == 0
    assert [(devices_in(row[0]), f"[{4 * i}:{4 * i + 4}]" in row[0]) for i, row in enumerate(rows)] == [
        ([f"CPU:{i}"], True) for i in range(16)
    ]
    assert max(len(line) for line in out.splitlines()[1:]) <= 80


def test_show_wide_grid_wraps_labels_without_losing_any(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("COLUMNS", "80")
    code, out, _ = run(capsys, "show", "--mesh", "x=8,y=2", "--layout", "y,x", "--shape", "8,64")
    ((_, rows),) = grids(out)
    assert code == 0 and len(rows) == 2 and max(len(line) for line in out.splitlines()[1:]) <= 80
    # Row r is y=r; column c is x=c: device 2c + r, columns 8c:8c+8.
    for r, row in enumerate(rows):
        assert [devices_in(cell) for cell in row] == [[f"CPU:{2 * c + r}"] for c in range(8)]
        assert all(f"[{4 * r}:{4 * r + 4}, {8 * c}:{8 * c + 8}]" in cell for c, cell in enumerate(row))


def test_show_rank0_is_one_cell_on_every_device(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "show", "--mesh", "x=3,y=2", "--layout", "", "--shape", "")
    ((_, rows),) = grids(out)
    assert code == 0 and devices_in(rows[0][0]) == [f"CPU:{i}" for i in range(6)]


def test_show_devices_option_and_per_device_table(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(
        capsys, "show", "--mesh", "x=2", "--layout", "x", "--shape", "5", "--devices", "cpu:7,cpu:3", "--per-device"
    )
    ((_, (row,)),) = grids(out)
    assert code == 0
    assert [devices_in(cell) for cell in row] == [["CPU:7"], ["CPU:3"]]
    table = {line.split()[0]: " ".join(line.split()) for line in out.splitlines() if line.strip().startswith("CPU:")}
    assert table["CPU:7"] == "CPU:7 x=0 (0,) [0:3] (3,)"
    assert table["CPU:3"] == "CPU:3 x=1 (1,) [3:5] (2,)"


def test_show_accepts_a_tf_layout_string(capsys: pytest.CaptureFixture[str]) -> None:
    text = Layout(["x", None], Mesh((3, 2), ("x", "y"), [f"CPU:{i}" for i in range(6)])).to_string()
    code, out, _ = run(capsys, "show", "--layout", text, "--shape", "6,4")
    ((_, rows),) = grids(out)
    assert code == 0 and [devices_in(row[0]) for row in rows] == [
        ["CPU:0", "CPU:1"],
        ["CPU:2", "CPU:3"],
        ["CPU:4", "CPU:5"],
    ]


@pytest.mark.parametrize(
    ("argv", "named"),
    [
        (["--mesh", "x=3,y=2", "--layout", "x,z", "--shape", "6,4"], "--layout 'x,z'"),
        (["--mesh", "x=3,y", "--layout", "x", "--shape", "6"], "'y'"),
        (["--mesh", "x=3", "--layout", "x", "--shape", "6,a"], "'a'"),
        (["--mesh", "x=3", "--layout", "x", "--shape", "6,4"], "--shape '6,4'"),
        (["--mesh", "x=3,y=2", "--layout", "x,x", "--shape", "6,4"], "'x'"),
        (["--mesh", "x=3", "--layout", "x", "--shape", "6", "--devices", "CPU:0"], "--devices 'CPU:0'"),
        (["--layout", "x", "--shape", "6"], "--mesh"),
        (["--mesh", "x=3", "--layout", "sharding_specs:x, mesh:|x=3|bad", "--shape", "6"], "--mesh"),
    ],
)
def test_show_bad_arguments_exit_2_with_one_line_naming_the_value(
    capsys: pytest.CaptureFixture[str], argv: list[str], named: str
) -> None:
    code, out, err = run(capsys, "show", *argv)
    assert code == 2 and out == ""
    assert err.count("\n") == 1 and err.startswith("layoutcore show: error: ")
    assert named in err


def test_argparse_errors_exit_2(capsys: pytest.CaptureFixture[str]) -> None:
    for argv in (
        ["show", "--mesh", "x=3", "--layout", "x"],
        ["show", "--mesh", "x=3", "--layout", "x", "--shape", "3", "extra"],
        [],
    ):
        with pytest.raises(SystemExit) as info:
            main(argv)
        assert info.value.code == 2
        err = capsys.readouterr().err
        assert err.startswith("layoutcore") and ": error: " in err and err.count("\n") == 1


# ==============================================================================================
# tour
# ==============================================================================================
def _table_rows(out: str, section: str) -> dict[str, str]:
    """Device rows of the tables in the tour section whose heading starts with ``section``."""
    lines = out.splitlines()
    headings = [i for i, line in enumerate(lines) if re.match(r"^─+ (\d+\.|Summary) ", line)]
    start = next(i for i in headings if lines[i].lstrip("─ ").startswith(section))
    end = next(i for i in [*headings, len(lines)] if i > start)
    return {line.split()[0]: " ".join(line.split()) for line in lines[start:end] if line.strip().startswith("CPU:")}


@pytest.fixture
def tour_out(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> str:
    # Record the variable so that the tour's setdefault is undone after the test.
    monkeypatch.setenv(layoutcore.driver.CPU_DEVICES_ENV, "0")
    monkeypatch.delenv(layoutcore.driver.CPU_DEVICES_ENV)
    monkeypatch.setattr(layoutcore.driver._registry, "_instances", {})
    code, out, err = run(capsys, "tour")
    assert (code, err) == (0, "")
    return out


def test_tour_uses_six_devices_of_the_default_driver(tour_out: str) -> None:
    assert os.environ[layoutcore.driver.CPU_DEVICES_ENV] == "6"
    assert "on the 'numpy' driver" in tour_out
    assert "Devices: ['CPU:0', 'CPU:1', 'CPU:2', 'CPU:3', 'CPU:4', 'CPU:5'] (6 available" in tour_out
    assert "checks FAILED" not in tour_out and "All 22 checks passed on the 'numpy' driver." in tour_out


def test_tour_prints_the_guide_mesh_strings_abbreviated(tour_out: str) -> None:
    # The guide's strings, with the six full device names cut to the first and a count.
    first = FULL(0)
    assert f"mesh_1d.to_string(): |x=6|0,1,2,3,4,5|0,1,2,3,4,5|{first},… (6 devices)\n" in tour_out
    assert f"mesh_2d.to_string(): |x=3,y=2|0,1,2,3,4,5|0,1,2,3,4,5|{first},… (6 devices)\n" in tour_out
    assert f"sharding_specs:x,unsharded, mesh:|x=3,y=2|0,1,2,3,4,5|0,1,2,3,4,5|{first},… (6 devices)" in tour_out
    assert FULL(5) not in tour_out


def test_tour_first_screen_is_not_dominated_by_mesh_strings(tour_out: str) -> None:
    # Each of the guide's five TF strings was 330+ characters; abbreviated, none is over 180.
    mesh_lines = [line for line in tour_out.splitlines()[:40] if "/job:" in line]
    assert len(mesh_lines) == 5 and max(len(line) for line in mesh_lines) <= 180


def test_abbreviate_mesh_string() -> None:
    from layoutcore.cli._tour import abbreviate_mesh_string

    mesh = Mesh((3, 2), ("x", "y"), [f"CPU:{i}" for i in range(6)])
    assert abbreviate_mesh_string(mesh.to_string()) == f"|x=3,y=2|0,1,2,3,4,5|0,1,2,3,4,5|{FULL(0)},… (6 devices)"
    two = Mesh((2,), ("x",), ["CPU:0", "CPU:1"]).to_string()
    assert abbreviate_mesh_string(two) == two  # short enough already
    assert abbreviate_mesh_string("no bars") == "no bars"


def test_tour_steps_are_data() -> None:
    from layoutcore.cli import _tour

    titles = [step.title for step in _tour.STEPS]
    assert titles[0] == "Meshes" and titles[-1].startswith("SPMD") and len(titles) == len(set(titles))
    assert all(callable(step.show) for step in _tour.STEPS)


def test_tour_shows_the_guide_spmd_matmuls(tour_out: str) -> None:
    """The guide's three examples: its sharding specs and each device's component, as it prints them."""
    section = tour_out[tour_out.index("10. SPMD") :]
    assert section.count("Sharding spec: ['unsharded', 'unsharded']") == 2
    assert section.count("Sharding spec: ['y', 'unsharded']") == 1
    assert "pending sums" not in section  # the NumPy driver all-reduces, as TF DTensor does
    rows = [" ".join(line.split()) for line in section.splitlines() if line.strip().startswith("CPU:")]
    coordinates = ["(0, 0)", "(0, 1)", "(1, 0)", "(1, 1)", "(2, 0)", "(2, 1)"]
    assert rows[:6] == [f"CPU:{i} ({i}) [[20, 14], [56, 41]]" for i in range(6)]
    assert rows[6:12] == [f"CPU:{i} {coordinates[i]} [[20, 14], [56, 41]]" for i in range(6)]
    assert rows[12:] == [f"CPU:{i} {coordinates[i]} {['[[20, 14]]', '[[56, 41]]'][i % 2]}" for i in range(6)]


def test_tour_shows_the_guide_components(tour_out: str) -> None:
    assert _table_rows(tour_out, "3.") == {f"CPU:{i}": f"CPU:{i} ({i}) [0, 1]" for i in range(6)}
    rows = _table_rows(tour_out, "4.")
    coordinates = ["(0, 0)", "(0, 1)", "(1, 0)", "(1, 1)", "(2, 0)", "(2, 1)"]
    hybrid = ["[[0, 1]]", "[[0, 1]]", "[[2, 3]]", "[[2, 3]]", "[[4, 5]]", "[[4, 5]]"]
    assert rows == {
        f"CPU:{i}": f"CPU:{i} {coordinates[i]} [[{i}]] [[0, 1], [2, 3], [4, 5]] {hybrid[i]}" for i in range(6)
    }
    assert _table_rows(tour_out, "7.") == {
        f"CPU:{i}": f"CPU:{i} {coordinates[i]} [[1.0, 1.0], [1.0, 1.0]]" for i in range(6)
    }
    relaid = ["[[0], [2], [4]]", "[[1], [3], [5]]"] * 3
    assert _table_rows(tour_out, "6.") == {f"CPU:{i}": f"CPU:{i} {coordinates[i]} {relaid[i]}" for i in range(6)}


def test_tour_shows_pack_refusing_replicas_and_variable_refusing_a_foreign_layout(tour_out: str) -> None:
    assert "-> LayoutError: Replicas of block (0,)" in tour_out and "['CPU:3']" in tour_out
    assert "-> LayoutMismatchError: " in tour_out


def test_tour_shows_the_keras_layout_map_examples(tour_out: str) -> None:
    rows = {
        line.split()[0]: " ".join(line.split()[1:])
        for line in tour_out.splitlines()
        if "dense_" in line or "conv" in line
    }
    assert rows["dense_1.kernel"] == rows["dense_2.kernel"] == "(None, 'model') (None, 'model')"
    assert rows["dense_1.bias"] == rows["dense_2.bias"] == "('model',) ('model',)"
    assert rows["my_model/conv2d_123/kernel"] == "(None, None, None, 'model') (None, None, None, 'model')"
    assert rows["my_model/conv2d_123/bias"] == "('model',) ('model',)"
    assert rows["my_model/conv3d_1/kernel"] == rows["my_model/conv3d_1/bias"] == "None None"


class _Renamed(NumpyDriver):
    name = "renamed"


class _Rotated(NumpyDriver):
    """Hands out each device's neighbour's component: wrong data the tour must catch."""

    name = "rotated"

    def native_unpack(self, tensor: object) -> list[object]:
        components = list(super().native_unpack(tensor))
        return components[1:] + components[:1]


def test_tour_runs_on_the_driver_chosen_by_option_or_environment(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    layoutcore.driver.register_driver("renamed", _Renamed)
    code, out, _ = run(capsys, "--driver", "renamed", "tour")
    assert code == 0 and "on the 'renamed' driver" in out and "_Renamed" in out
    monkeypatch.setenv(layoutcore.driver.DRIVER_ENV, "renamed")
    code, out, _ = run(capsys, "tour")
    assert code == 0 and "All 22 checks passed on the 'renamed' driver." in out


def test_tour_fails_a_driver_that_gives_wrong_components(capsys: pytest.CaptureFixture[str]) -> None:
    layoutcore.driver.register_driver("rotated", _Rotated)
    code, out, _ = run(capsys, "tour", "--driver", "rotated")
    assert code == 1
    assert "FAILED: sharded ['x', 'y']: every device holds its slice of the global value" in out
    assert "FAILED: pack raised LayoutError" in out
    assert "checks FAILED on the 'rotated' driver" in out


def test_tour_with_an_unknown_driver_exits_2_listing_the_installed(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run(capsys, "--driver", "nosuchdriver", "tour")
    assert code == 2 and out == ""
    assert err.startswith("layoutcore tour: error: --driver 'nosuchdriver'") and "'numpy'" in err
    assert err.count("\n") == 1


def test_tour_refuses_too_few_devices(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    layoutcore.driver.register_driver("four", lambda: _Renamed(4))
    code, _, err = run(capsys, "tour", "--driver", "four")
    assert code == 2 and "needs 6 devices" in err and layoutcore.driver.CPU_DEVICES_ENV in err


# ==============================================================================================
# drivers, conformance, version, help
# ==============================================================================================
class _NeedsMissingModule(NumpyDriver):
    name = "needsmissing"
    requires = ("layoutcore_test_no_such_module",)
    install_hint = "pip install needsmissing"
    capabilities = frozenset({Capability.UNEVEN})


def test_drivers_lists_every_driver_with_status_and_capabilities(capsys: pytest.CaptureFixture[str]) -> None:
    layoutcore.driver.register_driver("needsmissing", _NeedsMissingModule)
    code, out, _ = run(capsys, "drivers")
    assert code == 0
    rows: dict[str, str] = {}
    last = ""
    for line in out.splitlines():
        if line.startswith("  ") and line.strip() and "─" not in line:
            if line[2] != " ":  # a new row; else a continuation line of the last row's cells
                last = line.split()[0]
            rows[last] = " ".join([rows.get(last, ""), *line.split()]).strip()
    assert rows["numpy"].startswith("numpy * installed")
    for capability in Capability:  # the reference driver supports everything
        assert str(capability) in rows["numpy"]
    assert rows["needsmissing"] == "needsmissing not installed uneven pip install needsmissing"
    assert rows["driver"] == "driver status capabilities install"
    for info in layoutcore.driver.driver_infos():
        assert info.name in rows
        if not info.installed:
            assert "not installed" in rows[info.name] and info.install_hint in rows[info.name]


def test_conformance_passes_pytest_args_and_driver_to_the_runner(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    calls: list[tuple[list[str] | None, str | None]] = []

    def fake_run(argv: list[str] | None = None, *, driver: str | None = None) -> int:
        calls.append((argv, driver))
        return 5

    import layoutcore_conformance

    # The CLI calls the suite's public entry point, never its private modules.
    monkeypatch.setattr(layoutcore_conformance, "run", fake_run)
    layoutcore.driver.register_driver("mydriver", _Renamed)
    assert main(["conformance", "--driver", "mydriver", "-x", "-k", "pack and not slow"]) == 5
    assert main(["--driver", "numpy", "conformance", "-q"]) == 5
    assert main(["conformance", "--", "--collect-only"]) == 5
    assert main(["conformance"]) == 5
    assert calls == [
        (["-x", "-k", "pack and not slow"], "mydriver"),
        (["-q"], "numpy"),
        (["--collect-only"], None),
        ([], None),
    ]


def test_conformance_with_an_unknown_driver_exits_2(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run(capsys, "conformance", "--driver", "nosuchdriver", "-q")
    assert (code, out) == (2, "")
    assert err.startswith("layoutcore conformance: error: --driver 'nosuchdriver'") and err.count("\n") == 1


def test_conformance_with_an_uninstalled_driver_exits_2_with_the_install_command(
    capsys: pytest.CaptureFixture[str],
) -> None:
    layoutcore.driver.register_driver("needsmissing", _NeedsMissingModule)
    code, _, err = run(capsys, "conformance", "--driver", "needsmissing")
    assert code == 2 and "layoutcore_test_no_such_module" in err and "pip install needsmissing" in err


@pytest.mark.parametrize("missing", ["pytest", "hypothesis", "layoutcore_conformance"])
def test_conformance_without_pytest_says_how_to_install_it(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, missing: str
) -> None:
    """Right after `pip install -e .` (no test extra): one line naming the package and the install
    command, exit status 3, no ModuleNotFoundError traceback."""
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == missing else real(name, *a))
    code, out, err = run(capsys, "conformance")
    assert (code, out) == (3, "")
    assert err == (
        f"layoutcore conformance: error: the conformance suite needs {missing!r}, which is not installed; "
        "install the test extra: pip install 'layoutcore[test]'\n"
    )


def test_cli_names_no_framework_module_and_no_private_suite_module() -> None:
    """The CLI and the tour reach frameworks through the driver only, and the suite through its
    public entry point: no string in them names a framework module or a private suite module."""
    import ast

    for module in ("cli/_main.py", "cli/_tour.py"):
        tree = ast.parse((Path(layoutcore.__file__).parent / module).read_text())
        strings = {
            node.value for node in ast.walk(tree) if isinstance(node, ast.Constant) and isinstance(node.value, str)
        }
        assert not strings & {"jax", "jax.numpy", "tensorflow", "torch"}, module
        assert not [s for s in strings if "layoutcore_conformance." in s], module


def test_version_and_help(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as info:
        main(["--version"])
    assert info.value.code == 0 and capsys.readouterr().out == f"layoutcore {layoutcore.__version__}\n"
    with pytest.raises(SystemExit):
        main(["--help"])
    out = capsys.readouterr().out
    for command in ("tour", "show", "drivers", "conformance"):
        assert command in out
    with pytest.raises(SystemExit):
        main(["show", "--help"])
    out = capsys.readouterr().out
    assert "x+y or (x,y)" in out and "chunk rule" in out


# ==============================================================================================
# The installed console script, in a subprocess
# ==============================================================================================
def _script() -> Path:
    (entry,) = importlib.metadata.entry_points(group="console_scripts", name="layoutcore")
    assert entry.value == "layoutcore.cli:main"
    script = Path(sysconfig.get_path("scripts")) / ("layoutcore.exe" if os.name == "nt" else "layoutcore")
    assert script.exists(), f"console script not installed at {script}; pip install -e ."
    return script


def _subprocess_env() -> dict[str, str]:
    return plain_console_env(240, {k: v for k, v in os.environ.items() if not k.startswith("LAYOUTCORE_")})


def test_console_script_version_show_and_errors() -> None:
    script = _script()
    version = subprocess.run([script, "--version"], capture_output=True, text=True, env=_subprocess_env(), check=True)
    assert version.stdout == f"layoutcore {layoutcore.__version__}\n"
    shown = subprocess.run(
        [script, "show", "--mesh", "x=3,y=2", "--layout", "x,unsharded", "--shape", "6,4"],
        capture_output=True,
        text=True,
        env=_subprocess_env(),
    )
    assert shown.returncode == 0
    assert [devices_in(row[0]) for row in grids(shown.stdout)[0][1]] == [
        ["CPU:0", "CPU:1"],
        ["CPU:2", "CPU:3"],
        ["CPU:4", "CPU:5"],
    ]
    bad = subprocess.run(
        [script, "show", "--mesh", "x=3", "--layout", "q", "--shape", "6"],
        capture_output=True,
        text=True,
        env=_subprocess_env(),
    )
    assert bad.returncode == 2 and bad.stdout == ""
    assert bad.stderr.count("\n") == 1 and "--layout 'q'" in bad.stderr and "Traceback" not in bad.stderr


def test_console_script_tour_sets_six_devices() -> None:
    done = subprocess.run([_script(), "tour"], capture_output=True, text=True, env=_subprocess_env())
    assert done.returncode == 0, done.stderr
    assert "(6 available; LAYOUTCORE_CPU_DEVICES=6)" in done.stdout
    assert "All 22 checks passed on the 'numpy' driver." in done.stdout


def test_console_script_runs_the_real_conformance_suite(tmp_path: Path) -> None:
    done = subprocess.run(
        [_script(), "conformance", "--driver", "numpy", "-q", "-p", "no:cacheprovider", "-k", "seed_dtensor_guide"],
        capture_output=True,
        text=True,
        env=_subprocess_env(),
        cwd=tmp_path,
    )
    assert done.returncode == 0, done.stdout[-2000:]
    assert re.search(r"\b\d+ passed\b", done.stdout) and "failed" not in done.stdout


def test_importing_the_cli_loads_neither_rich_nor_a_framework() -> None:
    code = (
        "import sys, layoutcore, layoutcore.cli; "
        "bad = [m for m in ('rich', 'jax', 'tensorflow', 'torch', 'layoutcore_conformance') if m in sys.modules]; "
        "assert not bad, bad"
    )
    subprocess.run([sys.executable, "-c", code], check=True, env=_subprocess_env())
