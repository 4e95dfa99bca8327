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

from sparsebench.suite.boards import md_code, md_escape, write_board_files
from sparsebench.suite.schemas import TableError

GROUP_KEYS: tuple[str, ...] = ("task", "target_sparsity", "method", "setting_id")
RANK_KEYS: tuple[str, ...] = ("task", "target_sparsity")
DENSE = "dense"

# Column -> dtype of the leaderboard, in output order (also used to read leaderboard.json back).
LEADERBOARD_SCHEMA: dict[str, pl.DataType] = {
    "task": pl.String(),
    "target_sparsity": pl.Float64(),
    "rank": pl.Int64(),
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
    "mask_updates_mean": pl.Float64(),  # steps at which some mask changed
    "trained_density_mean": pl.Float64(),  # active for the last 10 % of steps (table.py)
    "effective_density_mean": pl.Float64(),  # active and on an input-output path, at the end
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


def build_leaderboard(runs: pl.DataFrame) -> pl.DataFrame:
    """One row per (task, target_sparsity, method, setting_id) with statistics over seeds.

    Means (and the test-accuracy std, null for n=1) use only ``status == "ok"`` rows; ``n`` is
    their count and ``n_failed`` counts failed/diverged rows of the group. A group whose runs all
    failed is kept with n=0, null statistics and null rank. ``train_wall_rel_dense`` divides the
    group's mean training wall-clock by the mean of the task's dense runs (null without dense).
    ``rank`` is 1 for the best test accuracy within (task, target_sparsity), ties share the
    lowest rank. Sorted by task, target_sparsity, rank. Columns: :data:`LEADERBOARD_SCHEMA`.

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
        pl.col("mask_updates").mean().alias("mask_updates_mean"),
        pl.col("trained_density").mean().alias("trained_density_mean"),
        pl.col("effective_density").mean().alias("effective_density_mean"),
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
    labels = runs.group_by("method", "setting_id").agg(pl.col("setting").first())
    board = (
        stats.join(failed, on=keys, how="full", coalesce=True, nulls_equal=True)
        .join(labels, on=["method", "setting_id"], how="left")
        .with_columns(pl.col("n", "n_failed").fill_null(0))
        .join(dense_wall, on="task", how="left")
        .with_columns(
            (pl.col("train_wall_s_mean") / pl.col("_dense_wall")).alias("train_wall_rel_dense"),
            pl.col("test_acc_mean")
            .rank(method="min", descending=True)
            .over(list(RANK_KEYS))
            .cast(pl.Int64)
            .alias("rank"),
        )
        .sort([*RANK_KEYS, "rank", "method", "setting_id"], nulls_last=True)
    )
    return board.select([pl.col(c).cast(t) for c, t in LEADERBOARD_SCHEMA.items()])


# ---------------------------------------------------------------------------- formatting


def _pct(x: float | None) -> str:
    return "–" if x is None else f"{100 * x:.2f}"


def _acc_cell(row: dict[str, Any]) -> str:
    """``97.12 ± 0.15 (n=3)`` in percent; no ± for a single seed."""
    if row["n"] == 0 or row["test_acc_mean"] is None:
        return f"– (n=0, {row['n_failed']} failed)"
    std = row["test_acc_std"]
    spread = f" ± {100 * std:.2f}" if std is not None else ""
    return f"{100 * row['test_acc_mean']:.2f}{spread} (n={row['n']})"


def _times(x: float | None) -> str:
    return "–" if x is None else f"{x:.2f}×"


def _num(x: float | None, fmt: str = ".2f") -> str:
    return "–" if x is None else format(x, fmt)


_MD_HEADER = (
    "| rank | method | setting | test acc % | val acc % | actual sparsity % | alloc | init "
    "| mask updates | trained density % | effective density % | reach | train FLOPs "
    "| train FLOPs ÷ dense | inference FLOPs ÷ dense | train s | train s ÷ dense | infer ms "
    "| failed |"
)
_MD_RULE = "|" + "---|" * _MD_HEADER.count(" | ") + "---|"


def _md_row(row: dict[str, Any]) -> str:
    cells = [
        _num(row["rank"], "d"),
        md_code(row["method"]),
        md_escape(row["setting"]),
        _acc_cell(row),
        _pct(row["val_acc_mean"]),
        _pct(row["actual_sparsity_mean"]),
        _allocation(row),
        md_escape(row["init"] or "–"),
        _num(row["mask_updates_mean"], ".3g"),
        _pct(row["trained_density_mean"]),
        _pct(row["effective_density_mean"]),
        _num(row["reachable_outputs_min"]),
        _num(row["train_flops_mean"], ".3g"),
        _times(row["train_flops_rel_dense_mean"]),
        _times(row["inference_flops_rel_dense_mean"]),
        _num(row["train_wall_s_mean"]),
        _times(row["train_wall_rel_dense"]),
        _num(row["infer_ms_median"]),
        str(row["n_failed"]),
    ]
    return "| " + " | ".join(cells) + " |"


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


def _md_table(rows: list[dict[str, Any]]) -> list[str]:
    return [_MD_HEADER, _MD_RULE, *(_md_row(r) for r in rows), ""]


def _distinct(runs: pl.DataFrame, column: str) -> str:
    if column not in runs.columns:
        return "unknown"
    values = runs.get_column(column).drop_nulls().unique().sort().to_list()
    return ", ".join(str(v) for v in values) or "unknown"


def leaderboard_markdown(runs: pl.DataFrame, board: pl.DataFrame | None = None) -> str:
    """The Markdown leaderboard of ``runs`` (``board`` = its :func:`build_leaderboard`).

    One section per task, the dense baseline first as reference, then one table per sparsity;
    a footnote with the threads / concurrent jobs the timings were measured with, and the failed
    runs with their errors. Raises :class:`TableError` as :func:`build_leaderboard` does.
    """
    board = build_leaderboard(runs) if board is None else board
    bench = _distinct(runs, "benchmark")
    out = [
        f"# Leaderboard: {bench}",
        "",
        "Test accuracy in percent, mean ± std over seeds (n = seeds that finished); rank within "
        "(task, sparsity) by mean test accuracy. Costs are means over seeds and relative to the "
        "dense baseline of the same task (÷ dense). Inference ms is the median over seeds. "
        "alloc: layer-wise allocation at the start, →where it ended when that differs, and "
        "(± pt) the largest move of a layer's density away from the start allocation; init: "
        "initial-weight rule; mask updates: steps at which some mask changed (mean); trained "
        "density: weights active for at least the last 10 % of the steps; effective density: "
        "active weights on some input-to-output path; reach: lowest share of outputs "
        "reachable from the input (below 1: part of the network is disconnected).",
        "",
    ]
    for task in board.get_column("task").unique(maintain_order=True).to_list():
        tb = board.filter(pl.col("task") == task)
        truns = runs.filter(pl.col("task") == task)
        out += [f"## Task `{task}`", ""]
        meta = [f"{c} {_distinct(truns, c)}" for c in ("dataset", "model") if c in runs.columns]
        if meta:
            out += ["; ".join(meta), ""]
        dense = tb.filter(pl.col("target_sparsity") == 0.0)
        out += ["**Dense reference**", ""]
        out += _md_table(dense.to_dicts()) if dense.height else ["(no dense baseline run)", ""]
        for (sparsity,), part in tb.filter(pl.col("target_sparsity") > 0.0).group_by(
            "target_sparsity", maintain_order=True
        ):
            out += [f"### Sparsity {100 * sparsity:g}%", ""]
            out += _md_table(part.to_dicts())
    threads, jobs = _distinct(runs, "threads"), _distinct(runs, "parallel_jobs")
    devices = _distinct(runs, "device")
    execution = _distinct(runs, "execution")
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
    return "\n".join(out)


# ---------------------------------------------------------------------------- plot


def pareto_plot(board: pl.DataFrame, path: Path) -> None:
    """Test accuracy (%) vs training FLOPs (log) per task: one line per method (and setting)
    through its sparsities with std error bars; dense as a dashed line and a marker.

    Uses the Agg canvas directly, never pyplot, so it neither needs a display nor changes a
    caller's matplotlib backend.
    """
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    tasks = board.get_column("task").unique(maintain_order=True).to_list()
    ncols = min(3, max(1, len(tasks)))
    nrows = max(1, math.ceil(len(tasks) / ncols))
    fig = Figure(figsize=(5.5 * ncols, 4.2 * nrows), layout="constrained")
    FigureCanvasAgg(fig)
    axes = fig.subplots(nrows, ncols, squeeze=False).ravel()
    for ax in axes[len(tasks) :]:
        ax.set_visible(False)
    plotted = board.filter(pl.col("test_acc_mean").is_not_null() & (pl.col("train_flops_mean") > 0))
    for ax, task in zip(axes, tasks):
        tb = plotted.filter(pl.col("task") == task)
        settings = tb.select("method", "setting_id", "setting").unique(maintain_order=True)
        multi = settings.group_by("method").len().filter(pl.col("len") > 1)
        multi_methods = set(multi.get_column("method").to_list())
        for method, setting, label_text in settings.iter_rows():
            line = tb.filter((pl.col("method") == method) & (pl.col("setting_id") == setting)).sort(
                "train_flops_mean"
            )
            x = line.get_column("train_flops_mean").to_list()
            y = [100 * v for v in line.get_column("test_acc_mean").to_list()]
            err = [100 * (v or 0.0) for v in line.get_column("test_acc_std").to_list()]
            label = f"{method} [{label_text}]" if method in multi_methods else method
            if method == DENSE:
                ax.axhline(y[0], color="black", linestyle="--", linewidth=1, label=label)
                ax.errorbar(x, y, yerr=err, color="black", marker="*", markersize=10,
                            linestyle="none", capsize=3)  # fmt: skip
            else:
                ax.errorbar(x, y, yerr=err, marker="o", capsize=3, label=label)
        ax.set_xscale("log")
        ax.set_title(task)
        ax.set_xlabel("training FLOPs")
        ax.set_ylabel("test accuracy (%)")
        ax.grid(True, which="both", alpha=0.3)
        if tb.height:
            ax.legend(fontsize="small")
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
    return write_board_files(Path(out_dir), md, board, plots=plots)


def read_leaderboard(out_dir: Path) -> pl.DataFrame:
    """Read ``leaderboard.json`` from ``out_dir`` with the leaderboard's dtypes.

    Raises :class:`TableError` if it does not exist (write it with :func:`write_leaderboard`).
    """
    path = Path(out_dir) / "leaderboard.json"
    if not path.is_file():
        raise TableError(f"no leaderboard at {path}; run `sparsebench leaderboard {out_dir}`")
    return pl.read_json(path, schema=LEADERBOARD_SCHEMA)


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
            rank = "-" if r["rank"] is None else str(r["rank"])
            flops = _times(r["train_flops_rel_dense_mean"])
            name = r["method"] if r["setting_id"] == "default" else f"{r['method']}[{r['setting']}]"
            lines.append(
                f"  {rank:>2}. {name:<18} {_acc_cell(r):<24} "
                f"train FLOPs {flops} dense  train {_num(r['train_wall_s_mean'])} s"
            )
    return "\n".join(lines)
