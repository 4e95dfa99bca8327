"""Merging board: runs table -> leaderboard (method x normalized / average accuracy ± std over
seeds, per-task accuracy, rank, task-vector density, merge cost), the λ-curve table, and
three plots: per-task accuracy heatmap, normalized accuracy against task-vector density, and
the validation curve of each method's searched hyperparameter."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl

from sparsebench.suite.atomic import write_atomic
from sparsebench.suite.boards import (
    HIGHER,
    LOWER,
    PCT,
    Col,
    board_json,
    failed_lines,
    md_escape,
    md_frame,
    mean_std,
    method_link,
    noise_ranks,
    rank_text,
    sources_lines,
    write_board_files,
)

KEYS = ("model", "method", "setting")


def label_expert_sets(runs: pl.DataFrame) -> pl.DataFrame:
    """Rows merged from different expert sets (another fine-tuning recipe or task list, kept
    by ``sparsebench leaderboard`` from an older spec) are never compared: where one model
    has several, ``model`` becomes ``<model> [<experts>]`` for the whole board."""
    if "experts" not in runs.columns or runs.is_empty():
        return runs
    several = runs.group_by("model").agg(pl.col("experts").drop_nulls().n_unique().alias("_n"))
    runs = runs.join(several, on="model", how="left")
    label = pl.format("{} [{}]", "model", "experts")
    apart = (pl.col("_n") > 1) & pl.col("experts").is_not_null()  # null: records from before
    return runs.with_columns(
        pl.when(apart).then(label).otherwise(pl.col("model")).alias("model")
    ).drop("_n")


def _ok(runs: pl.DataFrame) -> pl.DataFrame:
    return runs.filter(pl.col("status") == "ok")


PER_TASK_SCHEMA = {"task": pl.String} | {
    k: pl.Float64 for k in ("acc", "loss", "expert_acc", "normalized")
}


def per_task_rows(runs: pl.DataFrame, key: str = "source") -> pl.DataFrame:
    """One row per (ok row, task) of ``runs``' ``per_task_json``, with the row's ``key``: the
    side table ``per_task`` (parsed once, by the aggregation)."""
    rows = []
    for k, text in _ok(runs).select(key, "per_task_json").iter_rows():
        for task, m in json.loads(text).items():
            rows.append({key: k, "task": task, **m})
    return pl.DataFrame(rows, schema={key: runs.schema[key], **PER_TASK_SCHEMA})


def _with_keys(runs: pl.DataFrame, side: pl.DataFrame | None, make) -> pl.DataFrame:
    """The side rows (from the aggregation's side table, or made now from ``runs``) with each
    ok row's board keys and seed, in the order of ``runs``."""
    ok = _ok(runs)
    if side is None or "source" not in runs.columns:
        ok = ok.with_row_index("_row")
        side, key = make(ok, "_row"), "_row"
    else:
        key = "source"
    keys = ok.select(key, *KEYS, "seed")
    return keys.join(side, on=key, how="inner", maintain_order="left_right").drop(key)


def per_task(runs: pl.DataFrame, side: pl.DataFrame | None = None) -> pl.DataFrame:
    """One row per (model, method, setting, seed, task): test acc and normalized acc."""
    schema = {k: pl.String for k in KEYS} | {"seed": pl.Int64} | PER_TASK_SCHEMA
    return _with_keys(runs, side, per_task_rows).cast(schema).select(list(schema))


def leaderboard(runs: pl.DataFrame, tasks: pl.DataFrame | None = None) -> pl.DataFrame:
    """One row per (model, method, setting): means ± std over seeds, rank by normalized
    accuracy among the single-model merges of a model, and apart from them among the merges
    that keep one trunk per task (TALL masks: T trunks and the task id at inference);
    references are not ranked."""
    ok = _ok(runs)
    if ok.is_empty():
        return pl.DataFrame()
    board = (
        ok.group_by(*KEYS, "kind", maintain_order=True)
        .agg(
            pl.len().cast(pl.Int64).alias("seeds"),
            pl.col("norm_acc").mean().alias("norm_acc"),
            pl.col("norm_acc").std().alias("norm_acc_std"),
            pl.col("avg_acc").mean().alias("avg_acc"),
            pl.col("avg_acc").std().alias("avg_acc_std"),
            pl.col("min_norm_acc").mean().alias("min_norm_acc"),
            pl.col("density").mean().alias("density"),
            pl.col("sign_conflict").mean().alias("sign_conflict"),
            pl.col("sign_conflict_chance").mean().alias("sign_conflict_chance"),
            pl.col("merge_s").mean().alias("merge_s"),
            pl.col("examples").mean().alias("examples"),
            pl.col("chosen_json").unique().sort().str.join(" / ").alias("chosen"),
            pl.col("at_grid_edge")
            .filter(pl.col("at_grid_edge") != "")
            .unique()
            .sort()
            .str.join(",")
            .alias("at_grid_edge"),
            pl.col("per_task_models").any().alias("per_task_models"),
        )
        .with_columns(pl.col("kind").eq("reference").alias("_ref"))
        .sort(
            "model", "_ref", "per_task_models", "norm_acc", descending=[False, False, False, True]
        )
    )
    # Rank merges only; references get none (their masked mean is null).
    board = board.with_columns(
        pl.when(pl.col("kind") == "merge").then(pl.col("norm_acc")).alias("_rank_by")
    )
    board = noise_ranks(
        board, "_rank_by", "norm_acc_std", "seeds", ["model", "kind", "per_task_models"], True
    )
    tasks = tasks if tasks is not None else per_task(runs)
    tasks = tasks.group_by(*KEYS, "task", maintain_order=True).agg(pl.col("acc").mean())
    wide = tasks.pivot(on="task", index=list(KEYS), values="acc")
    wide = wide.rename({c: f"acc_{c}" for c in wide.columns if c not in KEYS})
    return board.drop("_ref", "_rank_by").join(wide, on=list(KEYS), how="left")


CURVE_SCHEMA = {"point": pl.String, "param": pl.String, "value": pl.Float64} | {
    "val_avg_acc": pl.Float64,
    "val_norm_acc": pl.Float64,
}


def curve_rows(runs: pl.DataFrame, key: str = "source") -> pl.DataFrame:
    """One row per (ok row, grid point) of ``runs``' ``curve_json``, with the row's ``key``:
    the side table ``curve`` (parsed once, by the aggregation)."""
    rows = []
    for k, text in _ok(runs).select(key, "curve_json").iter_rows():
        for point in json.loads(text):
            # the stage's searched parameter comes first (the others: earlier stages' choices)
            params = {p: v for p, v in point.items() if not p.startswith("val_") and p != "stage"}
            first = next(iter(params), None)
            rows.append(
                {
                    key: k,
                    "point": json.dumps(params, sort_keys=True),
                    "param": first,
                    "value": float(params[first]) if first and _number(params[first]) else None,
                    "val_avg_acc": point["val_avg_acc"],
                    "val_norm_acc": point["val_norm_acc"],
                }
            )
    return pl.DataFrame(rows, schema={key: runs.schema[key], **CURVE_SCHEMA})


def cell_curves(runs: pl.DataFrame, side: pl.DataFrame | None = None) -> pl.DataFrame:
    """The validation curve of every cell: one row per (cell, grid point), long format with the
    grid point as JSON (``point``) and its first parameter's value (``value``)."""
    schema = {k: pl.String for k in KEYS} | {"seed": pl.Int64} | CURVE_SCHEMA
    return _with_keys(runs, side, curve_rows).cast(schema).select(list(schema))


def lambda_curve(curves: pl.DataFrame) -> pl.DataFrame:
    """``lambda_curve.csv``: one row per (model, method, setting, grid point) of
    :func:`cell_curves`, the mean and std over its seeds (``seeds``) of the validation
    accuracies, in the order the points were searched. Each cell's own curve stays in
    ``runs.parquet`` (``curve_json``): a row per cell and point would make this file grow with
    the seeds (345 MB at 200,000 cells)."""
    val = ("val_avg_acc", "val_norm_acc")
    return curves.group_by(*KEYS, "point", "param", "value", maintain_order=True).agg(
        pl.len().cast(pl.Int64).alias("seeds"),
        *(pl.col(c).mean() for c in val),
        *(pl.col(c).std().alias(f"{c}_std") for c in val),
    )


SIDE_TABLES = {"per_task": per_task_rows, "curve": curve_rows}


def _number(v) -> bool:
    return isinstance(v, int | float) and not isinstance(v, bool)


def heads_text(runs: pl.DataFrame) -> str:
    """How the frozen task heads were fit, from the records' ``head_shots``."""
    shots = runs["head_shots"].unique().to_list() if "head_shots" in runs.columns else []
    if len(shots) != 1:
        return "θ0 with the frozen task heads"
    if shots[0] is None:
        return "θ0 with heads fit on each task's whole training split: not zero-shot"
    return f"θ0 with heads fit on {shots[0]} labelled examples per class"


FAMILIES = ("merging",)

# Every leaderboard column: unit in CSV/JSON, better direction, Markdown header. Accuracies and
# normalized accuracy (merged ÷ expert, so 100 % is the expert) are fractions, shown in %.
COLUMNS: list[Col] = [
    Col("model", "model", show="text"),
    Col("method", "method", show="method"),
    Col("setting", "setting", show="text"),
    Col("kind", "kind", show="text"),
    Col("seeds", "seeds", "count", HIGHER, "int"),
    Col("norm_acc", "norm. acc (% of expert)", PCT, HIGHER, "pct", 1),
    Col("norm_acc_std", "norm. acc std (% of expert)", PCT, LOWER, "pct", 1),
    Col("avg_acc", "avg acc (%)", PCT, HIGHER, "pct", 1),
    Col("avg_acc_std", "avg acc std (%)", PCT, LOWER, "pct", 1),
    Col("min_norm_acc", "worst task (% of expert)", PCT, HIGHER, "pct", 1),
    Col("density", "task-vector density (%)", PCT, show="pct", digits=0),
    Col("sign_conflict", "sign conflict (%)", PCT, show="pct", digits=0),
    Col("sign_conflict_chance", "chance (%)", PCT, show="pct", digits=0),
    Col("merge_s", "merge time (s)", "s", LOWER),
    Col("examples", "examples used", "count", show="int"),
    Col("chosen", "chosen on validation", show="text"),
    Col("at_grid_edge", "at grid edge", show="text"),
    Col("per_task_models", "one trunk per task"),
    Col("rank", "rank", better=LOWER),
    Col("tied", "tied within noise"),
]
_COL = {c.key: c for c in COLUMNS}


def _pm_text(board: pl.DataFrame, col: str) -> pl.Series:
    """``mean ± std`` cells of ``col`` (``(n=1)`` for one seed)."""
    c = _COL[col]
    return pl.Series(
        f"{col}_md",
        [
            mean_std(m, s, n, c)
            for m, s, n in zip(board[col], board[f"{col}_std"], board["seeds"], strict=True)
        ],
        dtype=pl.String,
    )


def markdown(board: pl.DataFrame, runs: pl.DataFrame) -> str:
    lines = [
        "# Model merging",
        "",
        "Normalized accuracy = mean over tasks of (merged ÷ expert test accuracy), in % of the "
        "expert; accuracies in %; mean ± std over seeds (one seed: its value and n=1). Rank by "
        "normalized accuracy; =k: a rank shared with merges that Welch's t-test (5 %) cannot "
        "tell from the group's best (one seed is never told apart). Hyperparameters chosen on "
        f"validation. References: `zero_shot` ({heads_text(runs)}), `individual` (each "
        "expert on its own task), `multitask` (joint fine-tuning). Density: nonzeros of the "
        "task vectors the method merged. leaderboard.csv and .json keep every column, shares "
        "as fractions.",
        "",
    ]
    if board.is_empty():
        return "\n".join([*lines, "No finished cells.", ""])
    shown = board.with_columns(
        pl.Series(
            "rank_md",
            [rank_text(r, t) for r, t in zip(board["rank"], board["tied"], strict=True)],
            dtype=pl.String,
        ),
        pl.Series(
            "method_md",
            [
                method_link(m, FAMILIES) + (" †" if t and k == "merge" else "")
                for m, t, k in board.select("method", "per_task_models", "kind").rows()
            ],
            dtype=pl.String,
        ),
        _pm_text(board, "norm_acc"),
        _pm_text(board, "avg_acc"),
    )
    main = [
        Col("rank_md", "rank", show="md"),
        Col("method_md", "method", show="md"),
        _COL["setting"],
        Col("norm_acc_md", _COL["norm_acc"].header, show="md"),
        Col("avg_acc_md", _COL["avg_acc"].header, show="md"),
        _COL["min_norm_acc"],
        _COL["density"],
        _COL["sign_conflict"],
        _COL["sign_conflict_chance"],
        _COL["merge_s"],
        _COL["seeds"],
        _COL["chosen"],
        _COL["at_grid_edge"],
    ]
    for (model,), g in shown.group_by("model", maintain_order=True):
        tasks = runs.filter(pl.col("model") == model)["tasks"].drop_nulls()
        lines += [f"## {md_escape(model)}: {md_escape(tasks[0] if len(tasks) else '')}", ""]
        lines += setting_lines(runs.filter(pl.col("model") == model))
        lines += md_frame(g, main, FAMILIES)
        lines += [
            "",
            "† one trunk per task (TALL masks), not one merged model: ranked apart from the "
            "single-model merges. Chance: the sign conflict that independent fair signs on "
            "the same nonzero pattern give (1 − 2^(1−T) for dense vectors of T tasks). At grid "
            "edge: searched parameters chosen at the end of their grid in some seed (the "
            "optimum may lie outside it).",
            "",
            "Per-task test accuracy (%), mean over seeds:",
            "",
        ]
        task_cols = [c for c in g.columns if c.startswith("acc_")]
        per = [_COL["method"], _COL["setting"]]
        per += [Col(c, md_escape(c[4:]), PCT, HIGHER, "pct", 1) for c in task_cols]  # spec names
        lines += md_frame(g, per, FAMILIES) + [""]
    lines += failed_lines(runs)
    lines += sources_lines(board["method"].to_list(), FAMILIES)
    return "\n".join(lines)


DIAGNOSTICS = ("tau_rel_norm", "tau_cosine", "own_gain", "others_cost")


def setting_lines(runs: pl.DataFrame) -> list[str]:
    """One line on the setting of a trunk's batches (diagnostics.py), mean ± std over seeds:
    whether its task vectors are small, near orthogonal, and add to or take from a task."""
    ok = _ok(runs)
    if ok.is_empty() or any(c not in ok.columns for c in DIAGNOSTICS):
        return []
    per_seed = ok.group_by("seed").agg(pl.col(c).drop_nulls().first() for c in DIAGNOSTICS)
    per_seed = per_seed.drop_nulls()
    if per_seed.is_empty():
        return []

    def pm(c: str, scale: float = 1.0, digits: int = 3) -> str:
        v = per_seed[c] * scale
        std = v.std() if len(v) > 1 else None
        return f"{v.mean():.{digits}f}" + (f" ± {std:.{digits}f}" if std is not None else "")

    lam = ok["others_lambda"].drop_nulls()
    lam_text = f"{lam[0]:g}" if len(lam) else "?"
    n = len(per_seed)
    return [
        f"Setting ({n} seed{'s' if n > 1 else ''}, validation): ‖τ_t‖/‖θ0‖ "
        f"{pm('tau_rel_norm')}; mean cosine between tasks' vectors {pm('tau_cosine')}; a "
        f"task's own vector adds {pm('own_gain', 100, 1)} points to θ0; the other tasks' "
        f"vectors at λ = {lam_text} change the expert by {pm('others_cost', 100, 1)} points.",
        "",
    ]


def write_leaderboard(runs: pl.DataFrame, out_dir: Path) -> dict[str, Path]:
    from sparsebench.suite.tables import side_table

    sides = {name: side_table(Path(out_dir), name, runs) for name in SIDE_TABLES}
    runs = label_expert_sets(runs)
    tasks = per_task(runs, sides["per_task"])
    board = leaderboard(runs, tasks)
    curve = cell_curves(runs, sides["curve"])
    write_atomic(Path(out_dir) / "lambda_curve.csv", lambda_curve(curve).write_csv)
    plots = {
        "accuracy_heatmap.png": lambda p: plot_heatmap(tasks, p),
        "density.png": lambda p: plot_density(board, p),
        "lambda_curve.png": lambda p: plot_curve(curve, p),
    }
    cols = COLUMNS + [Col(c, c[4:], PCT, HIGHER, "pct") for c in board.columns if c[:4] == "acc_"]
    json_data = board_json(cols, board) if board.height else None
    return write_board_files(out_dir, markdown(board, runs), board, json_data, plots)


def _figure(n: int, width: float = 6.0, height: float = 4.0):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, max(n, 1), figsize=(width * max(n, 1), height), squeeze=False)
    return plt, fig, axes[0]


def plot_heatmap(tasks: pl.DataFrame, path: Path) -> None:
    """Rows: method (setting); columns: task; colour: mean test accuracy (%) on a scale from
    the lowest to the highest value shown (a 0–100 scale paints 85–97 % one colour), every
    cell's value written in it. ``tasks``: :func:`per_task`'s rows."""
    models = tasks["model"].unique(maintain_order=True).to_list() or [""]
    rows = max([tasks.filter(pl.col("model") == m).select(KEYS).unique().height for m in models])
    cols = tasks["task"].n_unique() if tasks.height else 1
    plt, fig, axes = _figure(len(models), 1.2 + 0.75 * cols + 2.5, 1.6 + 0.38 * max(rows, 1))
    for ax, model in zip(axes, models):
        g = tasks.filter(pl.col("model") == model)
        if g.is_empty():
            ax.set_axis_off()
            continue
        g = g.with_columns(
            pl.when(pl.col("setting").is_in(["", "default"]))
            .then(pl.col("method"))
            .otherwise(pl.format("{} ({})", "method", "setting"))
            .alias("row"),
            (pl.col("setting") == "reference").alias("_ref"),
        )
        m = g.group_by("row", "task", maintain_order=True).agg(
            pl.col("acc").mean() * 100, pl.col("_ref").first()
        )
        # merges first, best mean over tasks on top; the references below them
        order = m.group_by("row").agg(pl.col("_ref").first(), pl.col("acc").mean().alias("_m"))
        wide = (
            m.pivot(on="task", index="row", values="acc")
            .join(order, on="row")
            .sort("_ref", "_m", descending=[False, True])
            .drop("_ref", "_m")
        )
        names = [c for c in wide.columns if c != "row"]
        values = wide.select(names).to_numpy()
        low, high = float(np.nanmin(values)), float(np.nanmax(values))
        if high - low < 1.0:  # a flat board still gets a visible scale
            low, high = low - 0.5, high + 0.5
        im = ax.imshow(values, vmin=low, vmax=high, cmap="viridis", aspect="auto")
        for i in range(values.shape[0]):
            for j in range(values.shape[1]):
                v = values[i, j]
                if v == v:  # not NaN
                    dark = (v - low) / (high - low) < 0.55  # viridis is dark below ~0.55
                    ax.text(j, i, f"{v:.1f}", ha="center", va="center", fontsize=7,
                            color="white" if dark else "black")  # fmt: skip
        ax.set_xticks(range(len(names)), names, rotation=30, ha="right", fontsize=8)
        ax.set_yticks(range(wide.height), wide["row"].to_list(), fontsize=8)
        ax.set_title(f"{model}: test accuracy (%) per task", fontsize=10)
        bar = fig.colorbar(im, ax=ax, fraction=0.04, pad=0.02)
        bar.set_label(f"test accuracy (%), scale {low:.0f}–{high:.0f}", fontsize=8)
    fig.tight_layout()
    fig.savefig(path, format="png", dpi=110)
    plt.close(fig)


def plot_density(board: pl.DataFrame, path: Path) -> None:
    """Normalized accuracy (% of expert, mean ± std over seeds) against task-vector density
    (%), one marker per method setting, the legend outside the axes; each reference a dashed
    line labelled with its name and value."""
    models = board["model"].unique(maintain_order=True).to_list() if board.height else [""]
    plt, fig, axes = _figure(len(models), 8.0, 4.6)
    markers = "osD^vP*Xh<>"
    for ax, model in zip(axes, models):
        g = board.filter((pl.col("model") == model) & (pl.col("kind") == "merge"))
        for i, r in enumerate(g.iter_rows(named=True)):
            if r["density"] is None:
                continue
            label = _label(r["method"], r["setting"])
            label += " † (one trunk per task)" if r["per_task_models"] else ""
            # hollow markers of different shapes: two merges at one point stay visible
            ax.errorbar(100 * r["density"], 100 * r["norm_acc"],
                        yerr=100 * (r["norm_acc_std"] or 0), fmt=markers[i % len(markers)],
                        color=f"C{i % 10}", capsize=3, markersize=8 + (i % 3) * 2,
                        markerfacecolor="none", markeredgewidth=1.6, label=label)  # fmt: skip
        refs = board.filter((pl.col("model") == model) & (pl.col("kind") == "reference"))
        # references sorted by value, labels alternately at the left and the right end so
        # that two close lines (individual 100, multitask 101) keep readable labels
        for k, r in enumerate(refs.sort("norm_acc").iter_rows(named=True)):
            y = 100 * r["norm_acc"]
            ax.axhline(y, ls="--", lw=0.8, color="grey")
            ax.text(0.01 if k % 2 == 0 else 0.99, y, f"{r['method']} {y:.1f}",
                    ha="left" if k % 2 == 0 else "right", va="bottom", fontsize=7,
                    color="dimgrey", transform=ax.get_yaxis_transform())  # fmt: skip
        ax.set_xlabel("task-vector density (% nonzero)")
        ax.set_ylabel("normalized test accuracy (% of expert)")
        ax.set_xlim(-5, 105)
        ax.margins(y=0.1)
        ax.grid(True, alpha=0.3)
        ax.set_title(model)
        if g.height:
            ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0), title="merge")
    fig.tight_layout()
    fig.savefig(path, format="png", dpi=110)
    plt.close(fig)


def _label(method: str, setting: str | None) -> str:
    """``method`` with its setting unless that is the default (or empty)."""
    return method if setting in (None, "", "default") else f"{method} ({setting})"


# The searched parameters' usual symbols (the methods' Params fields keep ASCII names).
PARAM_NAMES = {"lam": "λ (scaling)", "k": "k (kept fraction)", "p": "p (drop rate)"}


def plot_curve(curve: pl.DataFrame, path: Path) -> None:
    """Validation normalized accuracy (% of expert) along each searched hyperparameter, one
    panel per (model, parameter) so that λ, k and p each have their own axis (mean over seeds
    of the best value over the other parameters at each point)."""
    g = curve.filter(pl.col("value").is_not_null()) if curve.height else curve
    panels = g.select("model", "param").unique(maintain_order=True).rows() if g.height else []
    models = list(dict.fromkeys(m for m, _ in panels)) or [""]
    params = list(dict.fromkeys(p for _, p in panels)) or [""]
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(len(models), len(params), figsize=(4.6 * len(params) + 2.6,
                             3.6 * len(models)), squeeze=False, layout="constrained")  # fmt: skip
    names = g.select("method", "setting").unique(maintain_order=True).rows() if g.height else []
    color = {n: f"C{i % 10}" for i, n in enumerate(names)}
    # every line at once: the best over the other parameters per (seed, value), then the mean
    # over seeds; lines in the order their cells come in each panel
    line = ["model", "param", "method", "setting"]
    best = g.group_by(*line, "seed", "value").agg(pl.col("val_norm_acc").max())
    means = best.group_by(*line, "value").agg(pl.col("val_norm_acc").mean())
    lines = {k: v.sort("value") for k, v in means.partition_by(line, as_dict=True).items()}
    order = g.select(line).unique(maintain_order=True).rows() if g.height else []
    handles: dict[str, Any] = {}
    for i, model in enumerate(models):
        for j, param in enumerate(params):
            ax = axes[i][j]
            mine = [(m, p, me, st) for m, p, me, st in order if m == model and p == param]
            if not mine:
                ax.set_axis_off()
                continue
            for key in mine:
                m, method, setting = lines[key], key[2], key[3]
                handles[_label(method, setting)] = ax.plot(
                    m["value"], 100 * m["val_norm_acc"], marker="o", markersize=4,
                    color=color[(method, setting)])[0]  # fmt: skip
            ax.set_xlabel(f"{PARAM_NAMES.get(param, param)} (searched on validation)")
            ax.set_ylabel("validation norm. acc (% of expert)")
            ax.set_title(f"{model}: {PARAM_NAMES.get(param, param)}", fontsize=10)
            ax.grid(True, alpha=0.3)
    if handles:  # one legend for every panel (a method keeps its colour), outside the axes
        fig.legend(handles.values(), handles.keys(), loc="outside right upper", fontsize=8)
    fig.savefig(path, format="png", dpi=110)
    plt.close(fig)


def summary(runs: pl.DataFrame, top: int = 3) -> str:
    board = leaderboard(label_expert_sets(runs))
    if board.is_empty():
        return "no finished merging cells"
    lines = []
    for (model,), g in board.group_by("model", maintain_order=True):
        merges = g.filter(pl.col("kind") == "merge").head(top)
        refs = g.filter(pl.col("kind") == "reference")
        for r in [*merges.iter_rows(named=True), *refs.iter_rows(named=True)]:
            tag = rank_text(r["rank"], r["tied"]) if r["rank"] is not None else "ref"
            norm = mean_std(r["norm_acc"], r["norm_acc_std"], r["seeds"], _COL["norm_acc"])
            avg = mean_std(r["avg_acc"], r["avg_acc_std"], r["seeds"], _COL["avg_acc"])
            density = "–" if r["density"] is None else f"{100 * r['density']:.0f}"
            lines.append(
                f"{model:8s} {tag:4s} {r['method']:18s} norm acc (% of expert) {norm:<14} "
                f"avg acc (%) {avg:<14} density (%) {density}"
            )
    return "\n".join(lines)
