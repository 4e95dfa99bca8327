"""Merging board: runs table -> leaderboard (method x normalized / average accuracy ± std over
seeds, per-task accuracy, rank, task-vector density, merge cost), the λ-curve table, and
three plots: per-task accuracy heatmap, normalized accuracy against task-vector density, and
the validation curve of each method's searched hyperparameter."""

from __future__ import annotations

import json
from pathlib import Path

import polars as pl

from sparsebench.suite.atomic import write_atomic
from sparsebench.suite.boards import failed_lines, fmt, md_table, write_board_files

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


def per_task(runs: pl.DataFrame) -> pl.DataFrame:
    """One row per (model, method, setting, seed, task): test acc and normalized acc."""
    rows = []
    for r in _ok(runs).iter_rows(named=True):
        for task, m in json.loads(r["per_task_json"]).items():
            rows.append({**{k: r[k] for k in KEYS}, "seed": r["seed"], "task": task, **m})
    schema = {k: pl.String for k in KEYS} | {"seed": pl.Int64, "task": pl.String}
    schema |= {k: pl.Float64 for k in ("acc", "loss", "expert_acc", "normalized")}
    return pl.DataFrame(rows, schema=schema)


def leaderboard(runs: pl.DataFrame) -> pl.DataFrame:
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
            pl.len().alias("seeds"),
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
    rank = (
        pl.when(pl.col("kind") == "merge")
        .then(
            pl.col("norm_acc").rank("min", descending=True).over("model", "kind", "per_task_models")
        )
        .otherwise(None)
        .cast(pl.Int64)
    )
    tasks = per_task(runs).group_by(*KEYS, "task", maintain_order=True).agg(pl.col("acc").mean())
    wide = tasks.pivot(on="task", index=list(KEYS), values="acc")
    wide = wide.rename({c: f"acc_{c}" for c in wide.columns if c not in KEYS})
    return board.with_columns(rank.alias("rank")).drop("_ref").join(wide, on=list(KEYS), how="left")


def lambda_curve(runs: pl.DataFrame) -> pl.DataFrame:
    """The validation curve of every cell: one row per (cell, grid point), long format with the
    grid point as JSON (``point``) and its first parameter's value (``value``)."""
    rows = []
    for r in _ok(runs).iter_rows(named=True):
        for point in json.loads(r["curve_json"]):
            # the stage's searched parameter comes first (the others: earlier stages' choices)
            params = {k: v for k, v in point.items() if not k.startswith("val_") and k != "stage"}
            first = next(iter(params), None)
            rows.append(
                {
                    **{k: r[k] for k in KEYS},
                    "seed": r["seed"],
                    "point": json.dumps(params, sort_keys=True),
                    "param": first,
                    "value": float(params[first]) if first and _number(params[first]) else None,
                    "val_avg_acc": point["val_avg_acc"],
                    "val_norm_acc": point["val_norm_acc"],
                }
            )
    schema = {k: pl.String for k in KEYS} | {"seed": pl.Int64, "point": pl.String}
    schema |= {"param": pl.String, "value": pl.Float64}
    schema |= {"val_avg_acc": pl.Float64, "val_norm_acc": pl.Float64}
    return pl.DataFrame(rows, schema=schema)


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


def markdown(board: pl.DataFrame, runs: pl.DataFrame) -> str:
    lines = [
        "# Model merging",
        "",
        "Normalized accuracy = mean over tasks of (merged ÷ expert test accuracy); ± is the "
        "std over seeds; hyperparameters chosen on validation (`chosen`). References: "
        f"`zero_shot` ({heads_text(runs)}), `individual` (each expert on its own task), "
        "`multitask` (joint fine-tuning). Density: nonzeros of the task vectors the method "
        "merged.",
        "",
    ]
    if board.is_empty():
        return "\n".join([*lines, "No finished cells.", ""])
    for (model,), g in board.group_by("model", maintain_order=True):
        tasks = runs.filter(pl.col("model") == model)["tasks"].drop_nulls()
        lines += [f"## {model}: {tasks[0] if len(tasks) else ''}", ""]
        lines += setting_lines(runs.filter(pl.col("model") == model))
        main = g.select(
            pl.col("rank").map_elements(fmt, return_dtype=pl.String).alias("rank"),
            pl.when(pl.col("per_task_models") & (pl.col("kind") == "merge"))
            .then(pl.col("method") + " †")
            .otherwise(pl.col("method"))
            .alias("method"),
            "setting",
            _pm("norm_acc"),
            _pm("avg_acc"),
            "min_norm_acc",
            "density",
            "sign_conflict",
            pl.col("sign_conflict_chance").alias("chance"),
            "merge_s",
            "examples",
            "seeds",
            "chosen",
            pl.col("at_grid_edge").alias("edge"),
        )
        lines += md_table(main)
        lines += [
            "",
            "† one trunk per task (TALL masks), not one merged model: ranked apart from the "
            "single-model merges. `chance`: the sign conflict that independent fair signs on "
            "the same nonzero pattern give (1 − 2^(1−T) for dense vectors of T tasks). `edge`: "
            "searched parameters chosen at the end of their grid in some seed (the optimum may "
            "lie outside it).",
            "",
            "Per-task test accuracy (mean over seeds):",
            "",
        ]
        task_cols = [c for c in g.columns if c.startswith("acc_")]
        short = g.select("method", "setting", *task_cols).rename({c: c[4:] for c in task_cols})
        lines += md_table(short) + [""]
    lines += failed_lines(runs)
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


def _pm(col: str) -> pl.Expr:
    return pl.format(
        "{} ± {}",
        pl.col(col).round(3),
        pl.col(f"{col}_std").round(3).fill_null(0.0),
    ).alias(col)


def write_leaderboard(runs: pl.DataFrame, out_dir: Path) -> dict[str, Path]:
    runs = label_expert_sets(runs)
    board = leaderboard(runs)
    curve = lambda_curve(runs)
    write_atomic(Path(out_dir) / "lambda_curve.csv", curve.write_csv)
    plots = {
        "accuracy_heatmap.png": lambda p: plot_heatmap(runs, p),
        "density.png": lambda p: plot_density(board, p),
        "lambda_curve.png": lambda p: plot_curve(curve, p),
    }
    return write_board_files(out_dir, markdown(board, runs), board, plots=plots)


def _figure(n: int, width: float = 6.0, height: float = 4.0):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, max(n, 1), figsize=(width * max(n, 1), height), squeeze=False)
    return plt, fig, axes[0]


def plot_heatmap(runs: pl.DataFrame, path: Path) -> None:
    """Rows: method (setting); columns: task; colour: mean test accuracy."""
    tasks = per_task(runs)
    models = tasks["model"].unique(maintain_order=True).to_list() or [""]
    plt, fig, axes = _figure(len(models), 7.0, 0.35 * 16 + 1.5)
    for ax, model in zip(axes, models):
        g = tasks.filter(pl.col("model") == model)
        if g.is_empty():
            ax.set_axis_off()
            continue
        g = g.with_columns(pl.format("{} ({})", "method", "setting").alias("row"))
        m = g.group_by("row", "task", maintain_order=True).agg(pl.col("acc").mean())
        wide = m.pivot(on="task", index="row", values="acc")
        names = [c for c in wide.columns if c != "row"]
        im = ax.imshow(wide.select(names).to_numpy(), vmin=0, vmax=1, cmap="viridis", aspect="auto")
        ax.set_xticks(range(len(names)), names, rotation=45, ha="right", fontsize=7)
        ax.set_yticks(range(wide.height), wide["row"].to_list(), fontsize=7)
        ax.set_title(f"{model}: test accuracy per task")
        fig.colorbar(im, ax=ax, fraction=0.04)
    fig.tight_layout()
    fig.savefig(path, format="png", dpi=110)
    plt.close(fig)


def plot_density(board: pl.DataFrame, path: Path) -> None:
    """Normalized accuracy (mean ± std over seeds) against task-vector density, per method."""
    models = board["model"].unique(maintain_order=True).to_list() if board.height else [""]
    plt, fig, axes = _figure(len(models))
    for ax, model in zip(axes, models):
        g = board.filter((pl.col("model") == model) & (pl.col("kind") == "merge"))
        for r in g.iter_rows(named=True):
            if r["density"] is None:
                continue
            ax.errorbar(r["density"], r["norm_acc"], yerr=r["norm_acc_std"] or 0, fmt="o",
                        capsize=3, label=f"{r['method']} ({r['setting']})")  # fmt: skip
        for r in board.filter(
            (pl.col("model") == model) & (pl.col("kind") == "reference")
        ).iter_rows(named=True):
            ax.axhline(r["norm_acc"], ls="--", lw=0.8, color="grey")
            ax.annotate(r["method"], (0.0, r["norm_acc"]), fontsize=7, color="grey")
        ax.set_xlabel("task-vector density (nonzero fraction)")
        ax.set_ylabel("normalized test accuracy")
        ax.set_title(model)
        ax.legend(fontsize=6, loc="lower right")
    fig.tight_layout()
    fig.savefig(path, format="png", dpi=110)
    plt.close(fig)


def plot_curve(curve: pl.DataFrame, path: Path) -> None:
    """Validation normalized accuracy along each method's first searched parameter (mean over
    seeds and over the other parameters' best values)."""
    models = curve["model"].unique(maintain_order=True).to_list() if curve.height else [""]
    plt, fig, axes = _figure(len(models))
    for ax, model in zip(axes, models):
        g = curve.filter((pl.col("model") == model) & pl.col("value").is_not_null())
        keys = ["method", "setting", "param"]
        for (method, setting, param), h in g.group_by(*keys, maintain_order=True):
            best = h.group_by("seed", "value").agg(pl.col("val_norm_acc").max())
            m = best.group_by("value").agg(pl.col("val_norm_acc").mean()).sort("value")
            ax.plot(
                m["value"], m["val_norm_acc"], marker=".", label=f"{method} ({setting}): {param}"
            )
        ax.set_xlabel("searched parameter value (λ, k, p, ...)")
        ax.set_ylabel("normalized validation accuracy")
        ax.set_title(model)
        ax.legend(fontsize=6)
    fig.tight_layout()
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
            tag = f"#{r['rank']}" if r["rank"] is not None else "ref"
            lines.append(
                f"{model:8s} {tag:4s} {r['method']:18s} norm acc {fmt(r['norm_acc'])} "
                f"avg acc {fmt(r['avg_acc'])} density {fmt(r['density'])}"
            )
    return "\n".join(lines)
