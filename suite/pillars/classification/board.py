"""The classification board: runs table -> leaderboard (polars only).

``build_leaderboard`` reduces the ok runs to one row per (task, sparsity,
method, setting): mean ± std over seeds, rank within (task, sparsity), cost relative to the dense
baseline of the task. ``write_leaderboard`` writes it as Markdown, CSV, JSON and a Pareto plot.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import polars as pl

from sparsebench.suite.boards import (
    HIGHER,
    LOWER,
    PCT,
    Col,
    board_json,
    join_values,
    log_ticks,
    md_code,
    md_escape,
    md_frame,
    mean_std,
    method_link,
    noise_ranks,
    rank_text,
    sources_lines,
    write_board_files,
)
from sparsebench.suite.frames import TableError

GROUP_KEYS: tuple[str, ...] = ("task", "target_sparsity", "method", "setting_id")
RANK_KEYS: tuple[str, ...] = ("task", "target_sparsity")
DENSE = "dense"

# Column -> dtype of the leaderboard, in output order (also used to read leaderboard.json back).
LEADERBOARD_SCHEMA: dict[str, pl.DataType] = {
    "task": pl.String(),
    "target_sparsity": pl.Float64(),
    "rank": pl.Int64(),
    "tied": pl.Boolean(),  # the rank is shared with a row inside the seed noise
    "method": pl.String(),
    "setting_id": pl.String(),
    "setting": pl.String(),  # readable non-default parameters, e.g. "zeta=0.1"
    "n": pl.Int64(),
    "n_failed": pl.Int64(),
    "test_acc_mean": pl.Float64(),
    "test_acc_std": pl.Float64(),
    "val_acc_mean": pl.Float64(),
    "actual_sparsity_mean": pl.Float64(),
    "distribution": pl.String(),  # layer-wise allocation at the start (erk | uniform | global)
    "allocation": pl.String(),  # ... and at the end (erk | uniform | global | redistributed)
    "allocation_shift_max": pl.Float64(),  # largest move of a layer's density (table.py)
    "init": pl.String(),  # initial-weight rule (default | swi | scaled)
    "pattern": pl.String(),  # unstructured | N:M | activation (weights dense)
    "mask_updates_mean": pl.Float64(),  # steps at which some mask changed
    "trained_density_mean": pl.Float64(),  # active for the last 10 % of steps (table.py)
    "effective_density_mean": pl.Float64(),  # active and on an input-output path, at the end
    "activation_density_mean": pl.Float64(),  # active hidden units (activation sparsity only)
    "reachable_outputs_min": pl.Float64(),  # lowest over seeds of the start and end values
    "train_flops_mean": pl.Float64(),
    "train_flops_rel_dense_mean": pl.Float64(),
    "inference_flops_mean": pl.Float64(),
    "inference_flops_rel_dense_mean": pl.Float64(),
    "train_wall_s_mean": pl.Float64(),
    "train_wall_rel_dense": pl.Float64(),
    "infer_ms_median": pl.Float64(),
}


# ---------------------------------------------------------------------------- leaderboard


def _setting_labels(runs: pl.DataFrame) -> pl.DataFrame:
    """(method, setting_id) -> the board's setting label: the readable non-default
    parameters, with an N:M pattern always named (its default, 2:4, would read "default")."""
    labels = runs.group_by("method", "setting_id", maintain_order=True).agg(
        pl.col("setting").first(),
        (pl.col("pattern") if "pattern" in runs.columns else pl.lit(None, pl.String))
        .drop_nulls()
        .first()
        .alias("_pattern"),
    )
    nm = pl.col("_pattern").str.contains(r"^\d+:\d+$") & ~pl.col("setting").str.contains("pattern=")
    named = (
        pl.when(pl.col("setting") == "default")
        .then(pl.lit("pattern=") + pl.col("_pattern"))
        .otherwise(pl.lit("pattern=") + pl.col("_pattern") + pl.lit(", ") + pl.col("setting"))
    )
    return labels.with_columns(
        pl.when(nm.fill_null(False)).then(named).otherwise(pl.col("setting")).alias("setting")
    ).drop("_pattern")


def build_leaderboard(runs: pl.DataFrame) -> pl.DataFrame:
    """One row per (task, target_sparsity, method, setting_id) with statistics over seeds.

    Means (and the test-accuracy std, null for n=1) use only ``status == "ok"`` rows; ``n`` is
    their count and ``n_failed`` counts failed/diverged rows of the group. A group whose runs all
    failed is kept with n=0, null statistics and null rank. ``train_wall_rel_dense`` divides the
    group's mean training wall-clock by the mean of the task's dense runs (null without dense).
    ``rank`` is 1 for the best test accuracy within (task, target_sparsity); rows that
    Welch's t-test cannot tell apart from their group's best at 5 % share its rank and are
    ``tied`` (:func:`sparsebench.suite.boards.noise_ranks`). Sorted by task, target_sparsity,
    rank, mean. Columns: :data:`LEADERBOARD_SCHEMA`.

    Raises :class:`TableError` if ``runs`` lacks a column the leaderboard needs.
    """
    needed = {*GROUP_KEYS, "setting", "status", "test_acc", "val_acc", "actual_sparsity",
              "train_flops", "inference_flops", "train_flops_rel_dense",
              "inference_flops_rel_dense", "train_wall_s", "infer_ms"}  # fmt: skip
    missing = sorted(needed - set(runs.columns))
    if missing:
        raise TableError(f"runs table lacks column(s) for the leaderboard: {', '.join(missing)}")
    keys = list(GROUP_KEYS)
    # Columns older runs tables lack: null when absent.
    added = {"distribution": pl.String, "trained_density": pl.Float64,
             "reachable_outputs_init": pl.Float64, "reachable_outputs": pl.Float64,
             "allocation": pl.String, "allocation_shift": pl.Float64, "init": pl.String,
             "mask_updates": pl.Int64, "effective_density": pl.Float64}  # fmt: skip
    for col, dtype in added.items():
        if col not in runs.columns:
            runs = runs.with_columns(pl.lit(None, dtype=dtype).alias(col))
    ok = runs.filter(pl.col("status") == "ok")
    stats = ok.group_by(keys).agg(
        pl.len().cast(pl.Int64).alias("n"),
        pl.col("test_acc").mean().alias("test_acc_mean"),
        pl.col("test_acc").std(ddof=1).alias("test_acc_std"),  # null when n == 1
        pl.col("val_acc").mean().alias("val_acc_mean"),
        pl.col("actual_sparsity").mean().alias("actual_sparsity_mean"),
        pl.col("distribution").drop_nulls().first().alias("distribution"),
        pl.col("allocation").drop_nulls().first().alias("allocation"),
        pl.col("allocation_shift").max().alias("allocation_shift_max"),
        pl.col("init").drop_nulls().first().alias("init"),
        pl.col("pattern").drop_nulls().first().alias("pattern"),
        pl.col("mask_updates").mean().alias("mask_updates_mean"),
        pl.col("trained_density").mean().alias("trained_density_mean"),
        pl.col("effective_density").mean().alias("effective_density_mean"),
        pl.col("activation_density").mean().alias("activation_density_mean"),
        pl.min_horizontal("reachable_outputs_init", "reachable_outputs")
        .min()
        .alias("reachable_outputs_min"),
        pl.col("train_flops").mean().alias("train_flops_mean"),
        pl.col("train_flops_rel_dense").mean().alias("train_flops_rel_dense_mean"),
        pl.col("inference_flops").mean().alias("inference_flops_mean"),
        pl.col("inference_flops_rel_dense").mean().alias("inference_flops_rel_dense_mean"),
        pl.col("train_wall_s").mean().alias("train_wall_s_mean"),
        pl.col("infer_ms").median().alias("infer_ms_median"),
    )
    failed = (
        runs.filter(pl.col("status") != "ok")
        .group_by(keys)
        .agg(pl.len().cast(pl.Int64).alias("n_failed"))
    )
    dense_wall = (
        ok.filter(pl.col("method") == DENSE)
        .group_by("task")
        .agg(pl.col("train_wall_s").mean().alias("_dense_wall"))
    )
    labels = _setting_labels(runs)
    board = (
        stats.join(failed, on=keys, how="full", coalesce=True, nulls_equal=True)
        .join(labels, on=["method", "setting_id"], how="left")
        .with_columns(pl.col("n", "n_failed").fill_null(0))
        .join(dense_wall, on="task", how="left")
        .with_columns(
            (pl.col("train_wall_s_mean") / pl.col("_dense_wall")).alias("train_wall_rel_dense"),
        )
        .sort([*RANK_KEYS, "method", "setting_id"])
    )
    board = noise_ranks(board, "test_acc_mean", "test_acc_std", "n", list(RANK_KEYS), True)
    board = board.sort(
        [*RANK_KEYS, "rank", "test_acc_mean", "method", "setting_id"],
        descending=[False, False, False, True, False, False],
        nulls_last=True,
    )
    return board.select([pl.col(c).cast(t) for c, t in LEADERBOARD_SCHEMA.items()])


# ---------------------------------------------------------------------------- formatting


FAMILIES = ("dst", "pruning")

# Every leaderboard column: its unit in CSV/JSON, the better direction and its Markdown header.
COLUMNS: list[Col] = [
    Col("task", "task", show="code"),
    Col("target_sparsity", "sparsity (%)", PCT, show="pct", digits=0),
    Col("rank", "rank", better=LOWER),
    Col("tied", "tied within noise"),
    Col("method", "method", show="method"),
    Col("setting_id", "setting id", show="code"),
    Col("setting", "setting", show="text"),
    Col("n", "seeds", "count", HIGHER, "int"),
    Col("n_failed", "failed", "count", LOWER, "int"),
    Col("test_acc_mean", "test acc (%)", PCT, HIGHER, "pct"),
    Col("test_acc_std", "test acc std (%)", PCT, LOWER, "pct"),
    Col("val_acc_mean", "val acc (%)", PCT, HIGHER, "pct"),
    Col("actual_sparsity_mean", "actual sparsity (%)", PCT, show="pct"),
    Col("distribution", "start allocation", show="text"),
    Col("allocation", "end allocation", show="text"),
    Col("allocation_shift_max", "largest layer shift (%)", PCT, show="pct", digits=1),
    Col("init", "init", show="text"),
    Col("mask_updates_mean", "mask updates", "count", show="int"),
    Col("trained_density_mean", "trained density (%)", PCT, show="pct"),
    Col("effective_density_mean", "effective density (%)", PCT, show="pct"),
    Col("activation_density_mean", "activation density (%)", PCT, show="pct"),
    Col("pattern", "pattern", show="text"),
    Col("reachable_outputs_min", "reach (%)", PCT, HIGHER, "pct", digits=0),
    Col("train_flops_mean", "train FLOPs", "FLOPs", LOWER, "si"),
    Col("train_flops_rel_dense_mean", "train FLOPs ÷ dense", "ratio", LOWER, "times", 3),
    Col("inference_flops_mean", "inference FLOPs", "FLOPs", LOWER, "si"),
    Col("inference_flops_rel_dense_mean", "inference FLOPs ÷ dense", "ratio", LOWER, "times", 3),
    Col("train_wall_s_mean", "train time (s)", "s", LOWER),
    Col("train_wall_rel_dense", "train time ÷ dense", "ratio", LOWER, "times"),
    Col("infer_ms_median", "inference (ms)", "ms", LOWER),
]
_COL = {c.key: c for c in COLUMNS}
ACC = _COL["test_acc_mean"]


def _acc_cell(row: dict[str, Any]) -> str:
    """``97.12 ± 0.15`` in percent over n ≥ 2 seeds, ``97.12 (n=1)`` for one seed."""
    if row["n"] == 0 or row["test_acc_mean"] is None:
        return f"– ({row['n_failed']} failed)"
    return mean_std(row["test_acc_mean"], row["test_acc_std"], row["n"], ACC)


def _times(x: float | None) -> str:
    return "–" if x is None else f"{x:.2f}×"


def _num(x: float | None, fmt: str = ".2f") -> str:
    return "–" if x is None else format(x, fmt)


def _allocation(row: dict[str, Any]) -> str:
    """The start allocation, with where it ended when that differs (``erk→global``) and the
    largest layer move when a layer moved by more than a percentage point."""
    start, end = row["distribution"], row.get("allocation")
    text = start or "–"
    if end and end != start:
        text = f"{text}→{end}"
    shift = row.get("allocation_shift_max")
    if shift is not None and shift > 0.01:
        text += f" (±{100 * shift:.0f} pt)"
    return text


def _activation_lines(runs: pl.DataFrame) -> list[str]:
    """The measured share of active hidden units of the activation-sparsity rows (dense
    weights, so they stand with the dense model), mean over seeds."""
    if "activation_density" not in runs.columns:
        return []
    act = runs.filter(pl.col("activation_density").is_not_null() & (pl.col("status") == "ok"))
    if act.is_empty():
        return []
    means = act.group_by("method", "setting", maintain_order=True).agg(
        pl.col("activation_density").mean()
    )
    cells = [
        f"{method_link(m, FAMILIES)} ({md_escape(st)}) {100 * d:.1f} %" for m, st, d in means.rows()
    ]
    return [
        "Activation sparsity (weights dense): active MLP hidden units over the test set, "
        f"{'; '.join(cells)}.",
        "",
    ]


def _display(board: pl.DataFrame) -> pl.DataFrame:
    """``board`` with the text cells of its Markdown tables: rank (``=2`` when tied), test
    accuracy (mean ± std or n=1), seeds (with failed ones) and the allocation."""
    rows = board.to_dicts()
    return board.with_columns(
        pl.Series("rank_md", [rank_text(r["rank"], r["tied"]) for r in rows], dtype=pl.String),
        pl.Series("acc_md", [_acc_cell(r) for r in rows], dtype=pl.String),
        pl.Series("alloc_md", [_allocation(r) for r in rows], dtype=pl.String),
        pl.Series(
            "seeds_md",
            [f"{r['n']}" + (f" ({r['n_failed']} failed)" if r["n_failed"] else "") for r in rows],
            dtype=pl.String,
        ),
    )


# The per-sparsity table: quality and cost (the mask diagnostics have a table of their own).
_MAIN = [
    Col("rank_md", "rank", show="md"),
    _COL["method"],
    _COL["setting"],
    Col("acc_md", "test acc (%)", show="md"),
    Col("seeds_md", "seeds", show="md"),
    _COL["val_acc_mean"],
    _COL["train_flops_rel_dense_mean"],
    _COL["inference_flops_rel_dense_mean"],
    _COL["train_wall_s_mean"],
    _COL["infer_ms_median"],
]
_MASKS = [
    _COL["target_sparsity"],
    _COL["method"],
    _COL["setting"],
    _COL["actual_sparsity_mean"],
    Col("alloc_md", "allocation (start→end, largest shift)", show="text"),
    _COL["init"],
    _COL["mask_updates_mean"],
    _COL["trained_density_mean"],
    _COL["effective_density_mean"],
    _COL["reachable_outputs_min"],
]


def _pivot(board: pl.DataFrame) -> list[str]:
    """Sparsity as columns: one row per sparse method (and setting), its test accuracy at each
    sparsity and its training FLOPs ÷ dense at each, sorted by accuracy at the highest
    sparsity; the dense reference as a line above."""
    sparse = board.filter(pl.col("target_sparsity") > 0.0)
    levels = sorted(set(sparse["target_sparsity"].to_list()))
    if not levels:
        return []
    rows = []
    for (method, setting), g in sparse.group_by("method", "setting", maintain_order=True):
        at = {r["target_sparsity"]: r for r in g.to_dicts()}
        rows.append((method, setting, at))
    top = levels[-1]
    rows.sort(key=lambda r: -(r[2].get(top, {}).get("test_acc_mean") or -1.0))
    pct = [f"{100 * s:g} %" for s in levels]
    lines = [
        "| method | setting | " + " | ".join(f"test acc (%) at {p}" for p in pct)
        + f" | train FLOPs ÷ dense at {' / '.join(pct)} |",
        "|" + "---|" * (len(levels) + 3),
    ]  # fmt: skip
    for method, setting, at in rows:
        accs = [_acc_cell(at[s]) if s in at else "–" for s in levels]
        flops = [_times(at[s]["train_flops_rel_dense_mean"]) if s in at else "–" for s in levels]
        lines.append(
            f"| {method_link(method, FAMILIES)} | {md_escape(setting)} | {' | '.join(accs)} "
            f"| {' / '.join(flops)} |"
        )
    return [*lines, ""]


def _distinct(runs: pl.DataFrame, column: str) -> str:
    if column not in runs.columns:
        return "unknown"
    return join_values(runs.get_column(column).drop_nulls().unique().sort().to_list())


def leaderboard_markdown(runs: pl.DataFrame, board: pl.DataFrame | None = None) -> str:
    """The Markdown leaderboard of ``runs`` (``board`` = its :func:`build_leaderboard`).

    One section per task: the dense reference, the sparsity-as-columns pivot, one table per
    sparsity (rank, accuracy and costs), and one table of what the masks ended as; a footnote
    with the threads / concurrent jobs the timings were measured with, the failed runs with
    their errors and the methods' sources. Raises :class:`TableError` as
    :func:`build_leaderboard` does.
    """
    board = _display(build_leaderboard(runs) if board is None else board)
    bench = md_escape(_distinct(runs, "benchmark"))
    out = [
        f"# Leaderboard: {bench}",
        "",
        "Test accuracy in percent, mean ± std over seeds (one seed: its value and n=1). Rank "
        "within (task, sparsity) by mean test accuracy; =k: a rank shared with rows that "
        "Welch's t-test (5 %) cannot tell from the group's best (one seed is never told "
        "apart). Costs are means over seeds, ÷ dense relative to the same task's dense "
        "baseline; inference ms is the median over seeds. Allocation: layer-wise allocation "
        "at the start, →where it ended when that differs, and (± pt) the largest move of a "
        "layer's density; init: initial-weight rule; mask updates: steps at which some mask "
        "changed; trained density: weights active for at least the last 10 % of the steps; "
        "effective density: active weights on some input-to-output path; reach: lowest "
        "share of outputs reachable from the input (below 100: part of the network is "
        "disconnected). leaderboard.csv and .json keep every column, shares as fractions.",
        "",
    ]
    for task in board.get_column("task").unique(maintain_order=True).to_list():
        tb = board.filter(pl.col("task") == task)
        truns = runs.filter(pl.col("task") == task)
        out += [f"## Task {md_code(task)}", ""]
        meta = [f"{c} {md_escape(_distinct(truns, c))}" for c in ("dataset", "model")
                if c in runs.columns]  # fmt: skip
        if meta:
            out += ["; ".join(meta), ""]
        dense = tb.filter((pl.col("target_sparsity") == 0.0) & (pl.col("method") == DENSE))
        if dense.height:
            refs = [
                f"{method_link(r['method'], FAMILIES)} {_acc_cell(r)}" for r in dense.to_dicts()
            ]
            out += [f"**Dense reference**: test acc (%) {'; '.join(refs)}", ""]
        else:
            out += ["(no dense baseline run)", ""]
        out += _pivot(tb)
        for (sparsity,), part in tb.group_by("target_sparsity", maintain_order=True):
            title = "Dense weights" if sparsity == 0.0 else f"Sparsity {100 * sparsity:g} %"
            out += [f"### {title}", "", *md_frame(part, _MAIN, FAMILIES), ""]
            if sparsity == 0.0:
                out += _activation_lines(truns)
        masks = tb.filter(pl.col("target_sparsity") > 0.0)
        if masks.height:
            out += ["### Masks", "", *md_frame(masks, _MASKS, FAMILIES), ""]
    threads, jobs = _distinct(runs, "threads"), _distinct(runs, "parallel_jobs")
    devices = md_escape(_distinct(runs, "device"))
    execution = md_escape(_distinct(runs, "execution"))
    out += [
        "---",
        "",
        f"Timings were measured with {threads} torch thread(s) per job and {jobs} concurrent "
        f"job(s) (device: {devices}; sparse layers executed as {execution}); wall-clock "
        "compares only within one such setting.",
        "",
    ]
    bad = runs.filter(pl.col("status") != "ok")
    if bad.height:
        out += [f"## Failed runs ({bad.height})", ""]
        for r in bad.sort(["task", "target_sparsity", "method", "setting_id", "seed"]).to_dicts():
            error = str(r.get("error") or "").strip()
            error = md_escape(error if len(error) <= 300 else error[:297] + "...")
            out.append(
                f"- {md_code(r['task'])} {md_code(r['method'])} ({md_escape(r['setting'])}) "
                f"sparsity {r['target_sparsity']:g} seed {r['seed']}: "
                f"**{md_escape(r['status'])}**: {error}"
            )
        out.append("")
    out += sources_lines(board["method"].to_list(), FAMILIES)
    return "\n".join(out)


# ---------------------------------------------------------------------------- plot


# One marker per sparsity level, in order (the same shape means the same sparsity in every panel).
SPARSITY_MARKERS = ("o", "s", "^", "D", "v", "P", "X", "h")


def pareto_plot(board: pl.DataFrame, path: Path) -> None:
    """Test accuracy (%) vs training FLOPs (log) per task: one line per method (and setting)
    through its sparsities with std error bars, the marker shape giving the sparsity (its own
    legend) and each cluster of points of one sparsity labelled with it; dense as a dashed
    line and a star.

    Uses the Agg canvas directly, never pyplot, so it neither needs a display nor changes a
    caller's matplotlib backend.
    """
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure
    from matplotlib.lines import Line2D

    tasks = board.get_column("task").unique(maintain_order=True).to_list()
    ncols = min(3, max(1, len(tasks)))
    nrows = max(1, math.ceil(len(tasks) / ncols))
    fig = Figure(figsize=(6.5 * ncols, 4.8 * nrows), layout="constrained")
    FigureCanvasAgg(fig)
    axes = fig.subplots(nrows, ncols, squeeze=False).ravel()
    for ax in axes[len(tasks) :]:
        ax.set_visible(False)
    plotted = board.filter(pl.col("test_acc_mean").is_not_null() & (pl.col("train_flops_mean") > 0))
    levels = sorted(s for s in set(plotted["target_sparsity"].to_list()) if s > 0)
    marker = {s: SPARSITY_MARKERS[i % len(SPARSITY_MARKERS)] for i, s in enumerate(levels)}
    for ax, task in zip(axes, tasks):
        tb = plotted.filter(pl.col("task") == task)
        settings = tb.select("method", "setting_id", "setting").unique(maintain_order=True)
        multi = settings.group_by("method").len().filter(pl.col("len") > 1)
        multi_methods = set(multi.get_column("method").to_list())
        for i, (method, setting, label_text) in enumerate(settings.iter_rows()):
            line = tb.filter((pl.col("method") == method) & (pl.col("setting_id") == setting)).sort(
                "train_flops_mean"
            )
            x = line.get_column("train_flops_mean").to_list()
            y = [100 * v for v in line.get_column("test_acc_mean").to_list()]
            err = [100 * (v or 0.0) for v in line.get_column("test_acc_std").to_list()]
            label = f"{method} ({label_text})" if method in multi_methods else method
            if method == DENSE:
                ax.axhline(y[0], color="black", linestyle="--", linewidth=1, label=label)
                ax.errorbar(x, y, yerr=err, color="black", marker="*", markersize=11,
                            linestyle="none", capsize=3)  # fmt: skip
                continue
            color = f"C{i % 10}"
            if "activation" in line.get_column("pattern").to_list():
                label = f"{method} ({label_text}; weights dense, ✕)"
            ax.errorbar(x, y, yerr=err, color=color, capsize=3, label=label, marker="none")
            for xi, yi, s in zip(x, y, line.get_column("target_sparsity").to_list()):
                # 0 % beside dense: activation sparsity, whose weights stay dense
                ax.plot(xi, yi, marker=marker.get(s, "X"), color=color, markersize=7,
                        markeredgecolor="white", linestyle="none")  # fmt: skip
        # One label per sparsity cluster (points within a factor 1.5 of FLOPs), above its top;
        # where clusters of several sparsities share their FLOPs (pruning trains dense first)
        # the marker shapes alone tell them apart: labels there would cover the points.
        sparse = tb.filter(pl.col("target_sparsity") > 0)
        near = [(r["target_sparsity"], r["train_flops_mean"]) for r in sparse.iter_rows(named=True)]
        done: list[tuple[float, float]] = []
        for r in sparse.sort("test_acc_mean", descending=True).iter_rows(named=True):
            s, xf = r["target_sparsity"], r["train_flops_mean"]
            if any(s == ds and abs(math.log10(xf / dx)) < 0.18 for ds, dx in done):
                continue
            if any(s != ds and abs(math.log10(xf / dx)) < 0.18 for ds, dx in near):
                continue
            done.append((s, xf))
            top = 100 * (r["test_acc_mean"] + (r["test_acc_std"] or 0.0))
            ax.annotate(f"{100 * s:g} %", (xf, top), textcoords="offset points", xytext=(0, 4),
                        ha="center", va="bottom", fontsize=8, color="dimgray")  # fmt: skip
        ax.set_xscale("log")
        log_ticks(ax.xaxis, si_prefix=True)
        ax.set_title(task)
        ax.set_xlabel("training FLOPs (log scale)")
        ax.set_ylabel("test accuracy (%)")
        ax.grid(True, which="major", alpha=0.3)
        ax.margins(y=0.12)
        if tb.height:
            first = ax.legend(fontsize="small", loc="lower right", title="method")
            ax.add_artist(first)
            shapes = [
                Line2D(
                    [], [], marker=marker[s], color="gray", linestyle="none", label=f"{100 * s:g} %"
                )
                for s in levels
            ]
            if shapes:
                ax.legend(handles=shapes, fontsize="small", loc="upper left", title="sparsity")
        else:
            ax.text(0.5, 0.5, "no finished runs", ha="center", va="center",
                    transform=ax.transAxes)  # fmt: skip
    fig.savefig(path, dpi=120, format="png")  # path may be a .tmp name


# ---------------------------------------------------------------------------- outputs


def write_leaderboard(runs: pl.DataFrame, out_dir: Path) -> dict[str, Path]:
    """Write ``leaderboard.md``, ``.csv``, ``.json`` and ``pareto.png`` into ``out_dir``.

    ``runs`` is the (validated) runs table. Returns the written paths by kind ("md", "csv",
    "json", "png"). Raises :class:`TableError` if ``runs`` has no rows or lacks needed columns,
    ``OSError`` if the folder cannot be written.
    """
    if runs.height == 0:
        raise TableError("runs table is empty: nothing to rank; run the benchmark first")
    board = build_leaderboard(runs)
    md = leaderboard_markdown(runs, board)
    plots = {"pareto.png": lambda path: pareto_plot(board, path)}
    return write_board_files(Path(out_dir), md, board, board_json(COLUMNS, board), plots)


def read_leaderboard(out_dir: Path) -> pl.DataFrame:
    """Read ``leaderboard.json`` from ``out_dir`` with the leaderboard's dtypes.

    Raises :class:`TableError` if it does not exist (write it with :func:`write_leaderboard`).
    """
    path = Path(out_dir) / "leaderboard.json"
    if not path.is_file():
        raise TableError(f"no leaderboard at {path}; run `sparsebench leaderboard {out_dir}`")
    import json

    rows = json.loads(path.read_text(encoding="utf-8"))
    rows = rows["rows"] if isinstance(rows, dict) else rows  # a board from before the block
    return pl.from_dicts(rows, schema=LEADERBOARD_SCHEMA)


def summary(source: Path | pl.DataFrame, top: int = 3) -> str:
    """A short text of the best ``top`` rows per (task, sparsity), for the terminal.

    ``source`` is a folder holding ``leaderboard.json``, a leaderboard frame, or a runs frame
    (recognised by its ``status`` column; the leaderboard is built from it). Raises
    :class:`TableError` if the folder has no leaderboard.
    """
    if isinstance(source, pl.DataFrame):
        board = build_leaderboard(source) if "status" in source.columns else source
    else:
        board = read_leaderboard(Path(source))
    lines: list[str] = []
    for (task, sparsity), part in board.group_by(["task", "target_sparsity"], maintain_order=True):
        label = "dense reference" if sparsity == 0.0 else f"sparsity {100 * sparsity:g}%"
        lines.append(f"{task} @ {label}")
        for r in part.head(top).to_dicts():
            rank = rank_text(r["rank"], r.get("tied"))
            flops = _times(r["train_flops_rel_dense_mean"])
            name = r["method"] if r["setting_id"] == "default" else f"{r['method']}[{r['setting']}]"
            lines.append(
                f"  {rank:>3}. {name:<40} test acc (%) {_acc_cell(r):<14} "
                f"train FLOPs {flops} dense  train {_num(r['train_wall_s_mean'])} s"
            )
    return "\n".join(lines)
