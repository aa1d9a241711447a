"""The result tables of ``benchmarks/README.md``, generated from ``benchmarks/results/*.json``.

Run from the repository root::

    python benchmarks/readme_results.py           # rewrite the tables in README.md
    python benchmarks/readme_results.py --check   # exit 1 when README.md differs from the JSON files

Each table sits between ``<!-- results: NAME -->`` and ``<!-- /results -->`` in the README. Every
row shows the target, the measured value read from a result file, and whether the target was met; a
missed target is marked **MISSED**. A column's heading names its file and the statistic that file
records (its top-level ``"statistic"`` field), so the README cannot call a median a minimum.
``tests/test_benchmark_results.py`` checks that the README matches this script's output.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
RESULTS = HERE / "results"
README = HERE / "README.md"

#: What a row's extractor returns: the measured text, and True/False (target met) or None (no target).
Cell = tuple[str, bool | None]
Data = Mapping[str, Any]

_BLOCK = re.compile(r"(<!-- results: (?P<name>[\w.-]+) -->\n)(?P<body>.*?)(<!-- /results -->)", re.DOTALL)


@dataclass(frozen=True, slots=True)
class Row:
    """One measure: its label, its target in words, and how to read it from one result file."""

    label: str
    target: str | Callable[[Data], str]  # words, or read from the first result file
    cell: Callable[[Data], Cell]


@dataclass(frozen=True, slots=True)
class Table:
    """One README table: rows read from one or more result files (one column each)."""

    name: str
    files: tuple[tuple[str, str], ...]  # (file name in results/, column heading after the statistic)
    rows: tuple[Row, ...]


def _time(seconds: float) -> str:
    if seconds < 1e-3:
        return f"{seconds * 1e6:.1f} µs"
    if seconds < 1:
        return f"{seconds * 1e3:.1f} ms"
    return f"{seconds:.2f} s"


def _ratio(value: float) -> str:
    return f"{value:.2f}x"


def _find(rows: list[Data], **match: Any) -> Data:
    """The one row of ``rows`` whose fields equal ``match``.

    Raises:
        KeyError: no row or several rows match (a script renamed a contender: update the table).
    """
    found = [r for r in rows if all(r.get(k) == v for k, v in match.items())]
    if len(found) != 1:
        raise KeyError(f"{len(found)} result rows match {match}")
    return found[0]


# -- bench_numpy ---------------------------------------------------------------------------------------
def _numpy_distribute(d: Data) -> Cell:
    r = d["distribute_zero_copy"]
    views = "views" if r["all_components_share_memory"] else "COPIES"
    return f"{_ratio(r['ratio'])} ({_time(r['big_s'])} / {_time(r['small_s'])}), {views}", r["met"]


def _numpy_copy(kind: str) -> Callable[[Data], Cell]:
    def cell(d: Data) -> Cell:
        r = d["to_numpy_and_relayout"][kind]
        return f"{_ratio(r['ratio_to_copyto'])} ({_time(r['s'])})", r["met"]

    return cell


def _numpy_layout_map(d: Data) -> Cell:
    r = d["layout_map"]
    return (
        f"{_ratio(r['cold_ratio_to_plain_loop'])} of the loop; {r['re_compile_calls_during_1000_lookups']} compiles",
        r["met"],
    )


def _numpy_import(d: Data) -> Cell:
    r = d["import_time"]
    return f"+{r['added_s'] * 1e3:.0f} ms, frameworks {r['frameworks_imported']}", r["met"]


# -- others --------------------------------------------------------------------------------------------
def _mesh_case(label: str) -> Callable[[Data], Cell]:
    def cell(d: Data) -> Cell:
        r = d["cases"][label]
        return _time(r["total_s"]), r["total_s"] < r["target_s"]

    return cell


def _plan(d: Data) -> Cell:
    r = d["plan"]
    return f"{_time(r['seconds'])} ({r['unmatched']} unmatched)", r["seconds"] < r["target_s"]


def _relayout_plan(index: int) -> Callable[[Data], Cell]:
    def cell(d: Data) -> Cell:
        r = list(d["relayout_plan"].values())[index]
        return f"{_time(r['seconds'])} ({r['transfers']:,} transfers)", r["seconds"] < r["target_s"]

    return cell


def _explain(key: str) -> Callable[[Data], Cell]:
    def cell(d: Data) -> Cell:
        r = d["explain"][key]
        return f"{r['ms']:.3f} ms", r["ms"] < r["target_ms"]

    return cell


def _spmd_target(d: Data) -> Cell:
    r = d["matmul"][0]
    return f"{_ratio(r['ratio'])} ({_time(r['spmd_s'])} / {_time(r['np_matmul_s'])})", r["ratio"] <= d["targets"][
        "ratio"
    ]


def _spmd_propagation(d: Data) -> Cell:
    cached = {k: v for k, v in d["propagation_us"].items() if "uncached" not in k}
    worst = max(cached.values())
    return f"≤ {worst:.1f} µs (slowest cached call)", worst < d["targets"]["propagation_us"]


def _side_by_side(op: str, size: str, **extra: Any) -> Callable[[Data], Cell]:
    """A row of bench_jax / bench_tensorflow: layoutcore / native, against ``targets[size]``."""

    def cell(d: Data) -> Cell:
        r = _find(d["rows"], op=op, size=size, **extra)
        return f"{_ratio(r['ratio'])} ({_time(r['layoutcore_s'])} / {_time(r['native_s'])})", (
            r["ratio"] <= d["targets"][size]
        )

    return cell


def _size_target(size: str) -> Callable[[Data], str]:
    """The target of bench_jax / bench_tensorflow for ``size``, from the file's ``targets``."""
    return lambda d: f"≤ {d['targets'][size]:g}x"


def _torch_target(size: str, ours: str, torch: str) -> Callable[[Data], str]:
    return lambda d: f"≤ {_find(d['rows'], size=size, ours=ours, torch=torch)['target']:g}x"


def _tf_step(size: str) -> Callable[[Data], Cell]:
    def cell(d: Data) -> Cell:
        r = _find(d["rows"], size=size)
        return f"{_ratio(r['eager_over_tf_function'])} ({_time(r['tf_function_s'])} per compiled step)", None

    return cell


def _transfer_tf(side: str, name: str, *, targeted: bool) -> Callable[[Data], Cell]:
    def cell(d: Data) -> Cell:
        r = d[side][name]
        text = f"{_ratio(r['memcpy_ratio'])} (median {_ratio(r['memcpy_ratio_median'])}; {_time(r['min_s'])})"
        return text, (r["memcpy_ratio"] < d["target_memcpy_ratio"]) if targeted else None

    return cell


_TRANSFER_TF_ROWS = (  # (side, row label, contender in the result file, whether it has the target)
    ("sender", "sender: components read through DLPack / `memcpy`", "sender_local (DLPack views)", True),
    ("sender", "sender: `.numpy()` per component (before) / `memcpy`", ".numpy() per component (before)", False),
    ("receiver", "receiver: DTensor from aligned blocks / `memcpy`", "pack_owned, aligned blocks", True),
    (
        "receiver",
        "receiver: DTensor from blocks 16 B off (before) / `memcpy`",
        "pack_owned, blocks 16 B off (before)",
        False,
    ),
)


def _torch(size: str, ours: str, torch: str) -> Callable[[Data], Cell]:
    def cell(d: Data) -> Cell:
        r = _find(d["rows"], size=size, ours=ours, torch=torch)
        return f"{_ratio(r['ratio'])} ({r['ours_ms']:.1f} / {r['torch_ms']:.1f} ms)", r["ratio"] <= r["target"]

    return cell


def _torch_module(kind: str) -> Callable[[Data], Cell]:
    def cell(d: Data) -> Cell:
        r = _find(d["rows"], input=kind)
        met = None if r["target"] is None else r["ratio"] <= r["target"]
        return f"{_ratio(r['ratio'])} ({r['layoutcore_ms']:.0f} / {r['torch_ms']:.0f} ms)", met

    return cell


def _trees(key: str) -> Callable[[Data], Cell]:
    def cell(d: Data) -> Cell:
        return f"{d[key]:.1f} ms", d[key] < d["target_ms"]

    return cell


def _trees_hlo(d: Data) -> Cell:
    same = d["traced_relayout_stablehlo_identical"] and d["traced_relayout_compiled_hlo_identical"]
    return ("identical" if same else "DIFFERENT"), same


def _relayout_bytes(case: str) -> Callable[[Data], Cell]:
    """Bytes moved over the floor, layoutcore's and the framework's own call; target: layoutcore at the floor."""

    def ratio(side: Data, floor: int) -> str:
        if "refused" in side:
            return f"refused ({side['refused']})"
        return f"{side['moved_bytes'] / floor:.2f}x" if floor else f"{side['moved_bytes']} B (floor 0)"

    def cell(d: Data) -> Cell:
        r = d["cases"].get(case)
        if r is None:
            return "not measured", None
        if "refused" in r:
            return f"refused ({r['refused']})", None
        floor = r["floor_bytes"]
        ours, native = r["layoutcore"], r["native"]
        met = None if "refused" in ours or d.get("estimate") else ours["moved_bytes"] <= floor
        return f"layoutcore {ratio(ours, floor)}, native {ratio(native, floor)}", met

    return cell


def _relayout_cases() -> tuple[str, ...]:
    """The cases of the relayout-bytes files, in the order the first file lists them."""
    names: dict[str, None] = {}
    for suffix in ("jax", "torch", "torch-gloo", "tensorflow-estimate"):
        path = RESULTS / f"bench_relayout_bytes.{suffix}.json"
        if path.exists():
            names.update(dict.fromkeys(json.loads(path.read_text("utf-8"))["cases"]))
    return tuple(names)


def _wall_target_of(d: Data, case: str) -> tuple[str, float]:
    """A bench_relayout_wall case's target: the ratio field it judges and its bound.

    The case's own ``target`` (``"layoutcore/device_put <= 1.1"``), else the file's, whose second
    bound is the kept cases' where it names them (``"... <= 1.0 on the changed cases, <= 1.05 on the kept ..."``).
    """
    text = str(d["cases"][case].get("target") or d["target"])
    key = re.search(r"(layoutcore/[\w-]+)", text)
    bounds = [float(b) for b in re.findall(r"<= ([\d.]+)", text)]
    if key is None or not bounds:
        raise ValueError(f"{case}: cannot read the target {text!r}")
    return key.group(1), bounds[-1] if "kept" in case and "kept" in text else bounds[0]


def _wall(case: str) -> Callable[[Data], Cell]:
    """A bench_relayout_wall case: the ratio of minima (which the targets judge) and of medians."""

    def cell(d: Data) -> Cell:
        r = d["cases"][case]
        key, bound = _wall_target_of(d, case)
        return f"{_ratio(r[key])} (median {_ratio(r[key + ' (median)'])})", r[key] <= bound

    return cell


def _wall_target(case: str) -> Callable[[Data], str]:
    def text(d: Data) -> str:
        key, bound = _wall_target_of(d, case)
        return f"{key} ≤ {bound:g} (minima)"

    return text


def _cases(name: str) -> tuple[str, ...]:
    path = RESULTS / name
    return tuple(json.loads(path.read_text("utf-8"))["cases"]) if path.exists() else ()


def _interchange(fmt: str, what: str) -> Callable[[Data], Cell]:
    """A foreign format's load: speed against raw reads, or bytes read over the floor (reported)."""

    def cell(d: Data) -> Cell:
        r = d["formats"][fmt]
        if what == "speed":
            return f"raw / load {r['raw_over_load']:.2f} ({r['load_GiB_per_s']:.2f} GiB/s)", None
        if what == "plan":
            return f"{r['measured_over_plan']:.3f}", None
        return f"{r[f'half_{what}_read_over_floor']:.2f}x", None

    return cell


def _interchange_processes(kind: str) -> Callable[[Data], Cell]:
    def cell(d: Data) -> Cell:
        worst = max(d["safetensors_two_jax_processes"][kind]["rchar_over_floor"])
        return f"{worst:.4f}x (the larger of the two processes)", worst <= 1.05

    return cell


def _checkpoint_ratio(key: str, target: float | None) -> Callable[[Data], Cell]:
    """A throughput ratio of bench_checkpoint (the bound's time / layoutcore's; 1 = as fast as the bound)."""

    def cell(d: Data) -> Cell:
        value = d["save_load"][key]
        median = d["save_load"].get("median_ratios", {}).get(key)
        text = _ratio(value) if median is None else f"{_ratio(value)} (median {_ratio(median)})"
        return text, None if target is None else value >= target

    return cell


def _checkpoint_rss(d: Data) -> Cell:
    r = d["save_load"]
    return f"{r['peak_extra_rss_bytes'] / 2**20:.0f} MiB (budget {r['rss_budget_bytes'] / 2**20:.0f} MiB)", (
        r["peak_extra_rss_bytes"] <= r["rss_budget_bytes"]
    )


def _checkpoint_read_plan(d: Data) -> Cell:
    r = d["read_plan_scale"]
    return f"{_time(r['seconds'])}, amplification {r['one_process_of_128_amplification']:.2f}", r["seconds"] < 2


def _checkpoint_case(case: str) -> Callable[[Data], Cell]:
    def cell(d: Data) -> Cell:
        r = d["relayout_cases_bytes_over_floor"][case]
        text = (
            f"exact {_ratio(r['undeclared_exact'])} / declared {_ratio(r['declared_exact'])};"
            f" whole chunks {_ratio(r['undeclared_piece'])} / declared {_ratio(r['declared_piece'])}"
        )
        return text, max(r["undeclared_exact"], r["declared_exact"]) <= 1.05

    return cell


def _checkpoint_cases() -> tuple[str, ...]:
    path = RESULTS / "bench_checkpoint.json"
    return tuple(json.loads(path.read_text("utf-8"))["relayout_cases_bytes_over_floor"]) if path.exists() else ()


def _models(d: Data) -> Cell:
    (r,) = d["rows"]
    return f"{_ratio(r['ratio'])} ({r['layoutcore_ms']:.0f} / {r['torch_ms']:.0f} ms)", r["ratio"] <= r["target"]


# -- bench_transfer ------------------------------------------------------------------------------------
def _transfer_plan(which: str) -> Callable[[Data], Cell]:
    def cell(d: Data) -> Cell:
        r = d["plan_at_scale"]
        return _time(r[f"{which}_s"]), r[f"{which}_s"] < r[f"target_{which}_s"]

    return cell


def _transfer_packing(which: str) -> Callable[[Data], Cell]:
    def cell(d: Data) -> Cell:
        r = d["packing"]
        return f"{_ratio(r[which])} (median {_ratio(r[which + ' (median)'])})", r[which] >= r["target"]

    return cell


_TRANSFER_SYNCS = (
    "2->2 rows->columns, bucket 64 MiB",
    "2->2 rows->columns, bucket 16 MiB",
    "2->2 rows->columns, bucket 4 MiB",
    "2->2 rows->rows, bucket 16 MiB",
    "4->4 rows->columns, bucket 16 MiB",
)


def _transfer_sync(key: str, ratio: str, target: float | None, shown: str = "sync") -> Callable[[Data], Cell]:
    def cell(d: Data) -> Cell:
        r = d["sync"][key]
        seconds = r["seconds_min"]
        median = f"median {_ratio(r[ratio + ' (median)'])}; " if ratio + " (median)" in r else ""
        return (
            f"{_ratio(r[ratio])} ({median}{shown} {_time(seconds[shown])})",
            None if target is None else r[ratio] >= target,
        )

    return cell


_TORCH_PAIRS = (
    ("layoutcore.distribute_tensor", "torch distribute_tensor (user call)"),
    ("layoutcore.distribute_tensor", "torch distribute_tensor (LocalTensor, shared)"),
    ("layoutcore.relayout", "DTensor.redistribute"),
)


# -- bench_device_load ----------------------------------------------------------------------------------
_DEVICE_LOAD_ROWS = (
    (
        "into_rows_noverify_vs_preadv_prealloc",
        "`load(into=...)`, saved layout, `verify=False` / `preadv` into preallocated memory",
    ),
    (
        "into_cols_noverify_vs_preadv_prealloc",
        "`load(into=...)`, rows → columns, `verify=False` / `preadv` into preallocated memory",
    ),
    ("into_rows_vs_preadv_crc_prealloc", "`load(into=...)`, saved layout, checksums / `preadv` + CRC-32C"),
    ("into_cols_vs_preadv_crc_prealloc", "`load(into=...)`, rows → columns, checksums / `preadv` + CRC-32C"),
    ("into_cols_noverify_cold_vs_preadv_prealloc_cold", "`load(into=...)`, rows → columns, cold / `preadv`, cold"),
    (
        "into_loaded_rows_noverify_vs_preadv_prealloc",
        "`load(into=` a previous load's arrays`)`, saved layout, `verify=False` / `preadv`",
    ),
    (
        "into_loaded_cols_noverify_vs_preadv_prealloc",
        "`load(into=` a previous load's arrays`)`, rows → columns, `verify=False` / `preadv`",
    ),
    ("into_loaded_rows_vs_preadv_crc_prealloc", "`load(into=` a previous load's arrays`)`, saved layout, checksums"),
    ("into_loaded_cols_vs_preadv_crc_prealloc", "`load(into=` a previous load's arrays`)`, rows → columns, checksums"),
    (
        "into_cols_noverify_vs_scatter_prealloc",
        "`load(into=...)`, rows → columns, `verify=False` / the same parts `preadv`-scattered raw",
    ),
    ("into_cols_vs_slab_crc_gather", "`load(into=...)`, rows → columns, checksums / raw slabs + CRC-32C + copy out"),
    (
        "into_loaded_cols_noverify_vs_scatter_prealloc_aligned",
        "`load(into=` a previous load's arrays`)`, rows → columns, `verify=False` / raw scatter into aligned blocks",
    ),
    (
        "into_loaded_cols_vs_slab_crc_gather_aligned",
        "`load(into=` a previous load's arrays`)`, rows → columns, checksums / raw slabs into aligned blocks",
    ),
    ("scatter_prealloc_vs_preadv_prealloc", "raw scatter into `np.zeros` blocks / contiguous `preadv` (physics)"),
    ("scatter_prealloc_aligned_vs_preadv_prealloc", "raw scatter into aligned blocks / contiguous `preadv` (physics)"),
    ("slab_crc_gather_vs_preadv_crc_prealloc", "raw slabs into `np.zeros` blocks / contiguous `preadv` + CRC-32C"),
    ("slab_crc_gather_aligned_vs_preadv_crc_prealloc", "raw slabs into aligned blocks / contiguous `preadv` + CRC-32C"),
    ("load_new_rows_vs_fromfile_kept", "`load` new arrays, saved layout, warm / `np.fromfile`, arrays kept"),
    ("load_new_cols_vs_fromfile_kept", "`load` new arrays, rows → columns, warm / `np.fromfile`, arrays kept"),
    ("load_new_rows_cold_vs_fromfile_kept_cold", "`load` new arrays, saved layout, cold / `np.fromfile`, cold"),
    ("load_new_cols_cold_vs_fromfile_kept_cold", "`load` new arrays, rows → columns, cold / `np.fromfile`, cold"),
)
#: The safetensors and Orbax targets (``bench_device_load.py --select interchange``, and full runs).
_INTERCHANGE_ROWS = (
    ("st_numpy_cols_vs_preadv_fresh", "safetensors → NumPy, columns / `preadv` into new memory"),
    ("st_jax_cols_vs_preadv_fresh", "safetensors → JAX, columns / `preadv` into new memory"),
    ("st_torch_cols_vs_preadv_fresh", "safetensors → torch, columns / `preadv` into new memory"),
    ("st_numpy_cols_vs_fromfile_kept", "safetensors → NumPy, columns / `np.fromfile` of the file"),
    ("st_jax_cols_vs_fromfile_kept", "safetensors → JAX, columns / `np.fromfile` of the file"),
    ("st_torch_cols_vs_fromfile_kept", "safetensors → torch, columns / `np.fromfile` of the file"),
    (
        "st_numpy_cols_over_load_file_distribute",
        "safetensors → NumPy, columns: time / `load_file` + `distribute_tensor` (NumPy: views)",
    ),
    ("st_jax_cols_over_load_file_device_put", "safetensors → JAX, columns: time / `load_file` + `jax.device_put`"),
    (
        "st_torch_cols_over_load_file_distribute",
        "safetensors → torch, columns: time / `load_file` + `distribute_tensor`",
    ),
    ("orbax_jax_rows_over_restore", "Orbax → JAX, saved layout: time / `StandardCheckpointer.restore`"),
    (
        "orbax_jax_cols_over_restore_cols",
        "Orbax → JAX, rows → columns: time / `restore` with the column shardings",
    ),
    (
        "orbax_numpy_cols_over_restore_distribute",
        "Orbax → NumPy, rows → columns: time / `restore` as NumPy + `distribute_tensor`",
    ),
)


def _device_target(key: str) -> Callable[[Data], Cell]:
    def cell(d: Data) -> Cell:
        r = d["targets"].get(key)
        if r is None:
            return "not run", None
        return f"{_ratio(r['ratio'])} (median {_ratio(r['median_ratio'])})", r["met"]

    return cell


def _device_target_words(key: str) -> Callable[[Data], str]:
    def words(d: Data) -> str:
        r = d["targets"].get(key)
        if r is None or r["kind"] == "reported":
            return "reported"
        return f"{'≥' if r['kind'] == 'ge' else '≤'} {r['target']:g}x"

    return words


def _device_rss(d: Data) -> Cell:
    rss = d["peak_rss_growth_bytes"]
    worst = max(v for k, v in rss.items() if k.startswith("into"))
    return f"{worst / 2**20:.1f} MiB", worst <= d["rss_budget_bytes"]


def _interchange_bounds(d: Data) -> Cell:
    g = d["GiB_per_s"]
    t = d["load_threads"]
    fresh, whole = g.get(f"st_preadv_fresh_t{t}"), g.get("st_fromfile_kept")
    if fresh is None or whole is None:
        return "not run", None
    return f"{fresh:.2f} GiB/s ({t} threads) / {whole:.2f} GiB/s", None


def _device_bound(d: Data) -> Cell:
    g = d["GiB_per_s"]
    t = d["load_threads"]
    return (
        f"{g['preadv_fresh_t1']:.2f} / {g['preadv_fresh_t2']:.2f} / {g['preadv_fresh_t4']:.2f} / "
        f"{g['preadv_fresh_t8']:.2f} GiB/s (preallocated, {t} threads: {g[f'preadv_prealloc_t{t}']:.2f})",
        None,
    )


TABLES: tuple[Table, ...] = (
    Table(
        "bench_numpy",
        (("bench_numpy.json", "CPU time"), ("bench_numpy.wall.json", "wall time")),
        (
            Row("`distribute_tensor` 1 GiB / 1 MiB, 8 devices", "≤ 2x, components are views", _numpy_distribute),
            Row("`to_numpy` of a packed 256 MiB array / `np.copyto`", "≤ 2x", _numpy_copy("to_numpy")),
            Row(
                "`relayout` `('x','y')` → `(None,'x')` / `np.copyto` of the bytes written",
                "≤ 3x",
                _numpy_copy("relayout"),
            ),
            Row(
                "LayoutMap, 10 000 paths x 200 patterns, cold / plain `re.search` loop",
                "≈ 1x, compiled once",
                _numpy_layout_map,
            ),
            Row("`import layoutcore` after `import numpy`", "≤ 100 ms, no framework", _numpy_import),
        ),
    ),
    Table(
        "bench_plan",
        (("bench_plan.json", "CPU time"),),
        (
            Row("`plan`, 10 000 variables x 200 patterns", "< 0.5 s", _plan),
            Row("`relayout_plan`, 1 024 devices, rank-4 tensor", "< 2 s", _relayout_plan(0)),
            Row("`relayout_plan`, same, another target", "< 2 s", _relayout_plan(1)),
            Row("`relayout_plan`, same, a full all-gather", "< 2 s", _relayout_plan(2)),
            Row("`LayoutMap.explain`, a matched path", "< 1 ms", _explain("matched")),
            Row("`LayoutMap.explain`, an unmatched path (near misses)", "< 1 ms", _explain("unmatched (near misses)")),
        ),
    ),
    Table(
        "bench_relayout_bytes",
        (
            ("bench_relayout_bytes.jax.json", "JAX"),
            ("bench_relayout_bytes.torch.json", "torch simulation"),
            ("bench_relayout_bytes.torch-gloo.json", "torch gloo, 8 processes"),
            ("bench_relayout_bytes.tensorflow-estimate.json", "TF, estimated from the plan"),
        ),
        tuple(Row(f"`{case}`", "layoutcore at the floor", _relayout_bytes(case)) for case in _relayout_cases()),
    ),
    Table(
        "bench_checkpoint",
        (("bench_checkpoint.json", "NumPy driver"),),
        (
            Row(
                "`save` 1 GiB / `ndarray.tofile` of the same blocks (throughput ratio)",
                "≥ 0.8x",
                _checkpoint_ratio("save_vs_tofile", 0.8),
            ),
            Row(
                "`save(sync=True)` / `tofile` + `fsync`", "≥ 0.8x", _checkpoint_ratio("save_sync_vs_tofile_fsync", 0.8)
            ),
            Row(
                "`save` with `read_layouts` / `tofile`", "reported", _checkpoint_ratio("save_declared_vs_tofile", None)
            ),
            Row(
                "`load` into another layout, warm page cache / `np.fromfile` of every file, arrays kept",
                "≥ 0.8x",
                _checkpoint_ratio("load_vs_fromfile", 0.8),
            ),
            Row(
                "`load` into another layout, cold page cache / `np.fromfile`, cold, arrays kept",
                "≥ 0.8x",
                _checkpoint_ratio("load_cold_vs_fromfile_cold", 0.8),
            ),
            Row(
                "`load` of a checkpoint saved with `read_layouts`, warm / `np.fromfile`, arrays kept",
                "reported",
                _checkpoint_ratio("load_declared_vs_fromfile", None),
            ),
            Row(
                "`load` of a checkpoint saved with `read_layouts`, cold / `np.fromfile`, cold",
                "reported",
                _checkpoint_ratio("load_declared_cold_vs_fromfile_cold", None),
            ),
            Row(
                "`load` into another layout, warm / `np.fromfile` dropping each array (pages reused)",
                "reported",
                _checkpoint_ratio("load_vs_fromfile_reused", None),
            ),
            Row("peak extra RSS during `load`", "≤ one shard + 64 MiB", _checkpoint_rss),
            Row("`read_plan`, 10 000 tensors on 1 024 devices", "< 2 s", _checkpoint_read_plan),
            *(
                Row(f"bytes read / floor, per device, `{case}`", "exact ≤ 1.05x", _checkpoint_case(case))
                for case in _checkpoint_cases()
            ),
        ),
    ),
    Table(
        "bench_interchange",
        (("bench_interchange.json", "NumPy driver"),),
        (
            *(
                Row(
                    f"{fmt}: `checkpoint.load` against raw reads of the same bytes",
                    "reported",
                    _interchange(fmt, "speed"),
                )
                for fmt in ("safetensors", "torch-dcp", "orbax")
            ),
            *(
                Row(
                    f"{fmt}: bytes read / floor, one process of two, {half} over 8", "reported", _interchange(fmt, half)
                )
                for fmt in ("safetensors", "torch-dcp", "orbax")
                for half in ("rows", "cols")
            ),
            *(
                Row(f"{fmt}: bytes the OS read / the plan's bytes", "reported", _interchange(fmt, "plan"))
                for fmt in ("safetensors", "torch-dcp", "orbax")
            ),
            Row(
                "safetensors, two JAX processes, rows over 8: bytes read / floor",
                "≤ 1.05x",
                _interchange_processes("rows"),
            ),
            Row(
                "safetensors, two JAX processes, columns over 8: bytes read / floor",
                "≤ 1.05x",
                _interchange_processes("cols"),
            ),
        ),
    ),
    *(
        Table(
            f"bench_relayout_wall.{run}",
            ((f"bench_relayout_wall.{run}.json", f"{label}, wall time"),),
            tuple(
                Row(f"`relayout` {case}", _wall_target(case), _wall(case))
                for case in _cases(f"bench_relayout_wall.{run}.json")
            ),
        )
        for run, label in (
            ("jax", "JAX"),
            ("jax-64mib", "JAX, 64 MiB"),
            ("torch-simulation", "torch simulation"),
            ("torch-gloo", "torch gloo"),
        )
    ),
    Table(
        "bench_spmd",
        (("bench_spmd.json", "wall time"), ("bench_spmd.cpu.json", "CPU time")),
        (
            Row("`a @ b`, 2048², k over `(x, y)` / `np.matmul`", "≤ 1.5x", _spmd_target),
            Row("`layoutcore.propagation` per call", "< 20 µs", _spmd_propagation),
        ),
    ),
    Table(
        "bench_jax",
        (("bench_jax.json", "wall time"),),
        tuple(
            Row(f"`{op}` {size} / `jax.device_put`", _size_target(size), _side_by_side(op, size))
            for size in ("64 MiB", "1 KiB")
            for op in ("distribute_tensor", "relayout")
        ),
    ),
    Table(
        "bench_trees",
        (("bench_trees.json", "wall time"),),
        (
            Row("`tree_shardings`, 1 000 leaves x 200 patterns, cold", "< 50 ms", _trees("tree_shardings_cold_ms")),
            Row("`tree_shardings`, warm", "< 50 ms", _trees("tree_shardings_warm_ms")),
            Row("traced `relayout` HLO vs `with_sharding_constraint`", "identical", _trees_hlo),
        ),
    ),
    Table(
        "bench_tensorflow",
        (("bench_tensorflow.json", "wall time"),),
        tuple(
            Row(f"`{op}` {size} `{layout}` / DTensor", _size_target(size), _side_by_side(op, size, layout=layout))
            for size in ("64 MiB", "1 KiB")
            for op, layout in (
                ("distribute_tensor", "('x', 'y')"),
                ("relayout", "('x', 'y')->('y', None)"),
                ("distribute_tensor", "('x', None)"),
                ("relayout", "('x', None)->(None, 'y')"),
            )
        ),
    ),
    Table(
        "bench_tensorflow_step",
        (("bench_tensorflow_step.json", "wall time"),),
        (
            Row("training step, eager / `tf.function`, small model", "reported", _tf_step("small")),
            Row("training step, eager / `tf.function`, large model", "reported", _tf_step("large")),
        ),
    ),
    Table(
        "bench_transfer_tf",
        (("bench_transfer_tf.json", "one TF process"),),
        tuple(
            Row(label, "< 0.1x" if targeted else "reported", _transfer_tf(side, key, targeted=targeted))
            for side, label, key, targeted in _TRANSFER_TF_ROWS
        ),
    ),
    Table(
        "bench_torch",
        (("bench_torch.json", "CPU time"), ("bench_torch.wall.json", "wall time")),
        tuple(
            Row(f"`{ours}` / {torch}, {size}", _torch_target(size, ours, torch), _torch(size, ours, torch))
            for size in ("64MiB", "1KiB")
            for ours, torch in _TORCH_PAIRS
        ),
    ),
    Table(
        "bench_torch_module",
        (("bench_torch_module.json", "CPU time"),),
        (
            Row("`distribute_module` / `parallelize_module`, DTensor input", "≤ 1.05x", _torch_module("DTensor input")),
            Row(
                "`distribute_module` / `parallelize_module`, plain input (each rank copies its block)",
                "reported",
                _torch_module("plain tensor input"),
            ),
        ),
    ),
    Table(
        "bench_models",
        (("bench_models.json", "wall time"),),
        (
            Row(
                "Llama forward: `distribute_module` + `from_tp_plan` / `parallelize_module`",
                lambda d: f"≤ {d['rows'][0]['target']:g}x",
                _models,
            ),
        ),
    ),
    Table(
        "bench_device_load",
        (("bench_device_load.host.json", "host memory (no GPU lent)"),),
        (
            Row("page-cache read (`preadv`) into new memory, 1 / 2 / 4 / 8 threads", "the bound", _device_bound),
            *(Row(label, _device_target_words(key), _device_target(key)) for key, label in _DEVICE_LOAD_ROWS),
            Row("peak RSS growth during `load(into=...)`", "≤ 64 MiB", _device_rss),
        ),
    ),
    Table(
        "bench_device_load.interchange",
        (
            ("bench_device_load.host.interchange.json", "host memory, `--select interchange`"),
            ("bench_device_load.host.json", "host memory, full run"),
        ),
        (
            Row("safetensors file: `preadv` into new memory / `np.fromfile`", "the bounds", _interchange_bounds),
            *(Row(label, _device_target_words(key), _device_target(key)) for key, label in _INTERCHANGE_ROWS),
        ),
    ),
    Table(
        "bench_mesh_scale",
        (("bench_mesh_scale.json", "CPU time"), ("bench_mesh_scale.wall.json", "wall time")),
        (
            Row(
                "`Mesh` of 100 000 devices: build + `to_string` + `from_string`",
                "< 0.5 s",
                _mesh_case("100 000 devices"),
            ),
            Row("`Mesh` of 1 000 000 devices, the same", "< 5 s", _mesh_case("1 000 000 devices")),
            Row("`Mesh` of 20 000 axes, the same", "< 0.5 s", _mesh_case("20 000 axes")),
        ),
    ),
    Table(
        "bench_transfer",
        (("bench_transfer.json", "torch gloo, 127.0.0.1"),),
        (
            Row("`transfer.plan`, 10 000 tensors, 256 -> 128 devices", "< 2 s", _transfer_plan("first")),
            Row("`transfer.plan`, the same call again (cached)", "< 0.1 s", _transfer_plan("again")),
            Row("packing a sender's column slab / `memcpy` of the bytes", "≥ 0.7x", _transfer_packing("pack/memcpy")),
            Row("unpacking into the receiver's blocks / `memcpy`", "≥ 0.7x", _transfer_packing("unpack/memcpy")),
            *(
                Row(f"{key}: raw `batch_isend_irecv` / sync", "≥ 0.8x", _transfer_sync(key, "raw/sync", 0.8))
                for key in _TRANSFER_SYNCS
            ),
            *(
                Row(f"{key}: gather + broadcast / sync", "≥ 2x", _transfer_sync(key, "gather+broadcast/sync", 2.0))
                for key in _TRANSFER_SYNCS
            ),
            *(
                Row(
                    f"{key}: raw / (`np.copyto` pack + raw), the copy alone",
                    "reported",
                    _transfer_sync(key, "raw/(pack + raw)", None, "pack + raw"),
                )
                for key in _TRANSFER_SYNCS
            ),
        ),
    ),
)


def statistic_words(data: Data) -> str:
    """The statistic a result file records, in words (``"median"``, or ``"matmul: median; ..."``)."""
    stat = data.get("statistic")
    if isinstance(stat, str):
        return stat
    if isinstance(stat, dict):
        return "; ".join(f"{k}: {v}" for k, v in stat.items())
    raise ValueError("records no statistic")


def load(name: str) -> Data:
    data: Data = json.loads((RESULTS / name).read_text("utf-8"))
    return data


def render(table: Table) -> str:
    """One table as Markdown: a column per result file, MISSED where a target was missed."""
    columns = [(name, heading, load(name)) for name, heading in table.files]
    head = ["Measure", "Target"] + [f"{heading}, {statistic_words(data)} (`{name}`)" for name, heading, data in columns]
    lines = ["| " + " | ".join(head) + " |", "|" + " --- |" * len(head)]
    for row in table.rows:
        target = row.target if isinstance(row.target, str) else row.target(columns[0][2])
        cells = []
        for _, _, data in columns:
            text, met = row.cell(data)
            cells.append(text + ("" if met is None or met else " **MISSED**"))
        lines.append("| " + " | ".join([row.label, target, *cells]) + " |")
    return "\n".join(lines) + "\n"


def rendered(readme: str) -> str:
    """``readme`` with every results block replaced by the table rendered from the JSON files."""
    tables = {t.name: t for t in TABLES}

    def replace(match: re.Match[str]) -> str:
        name = match["name"]
        if name not in tables:
            raise KeyError(f"README.md has a results block {name!r} that readme_results.py does not know")
        return match.group(1) + render(tables[name]) + match.group(4)

    return _BLOCK.sub(replace, readme)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--check", action="store_true", help="exit 1 if README.md differs from the JSON files")
    args = parser.parse_args(argv)
    text = README.read_text("utf-8")
    new = rendered(text)
    if args.check:
        if new != text:
            print("benchmarks/README.md is stale: run python benchmarks/readme_results.py")
            return 1
        return 0
    README.write_text(new, "utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
