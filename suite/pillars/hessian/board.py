"""Hessian pillar tables: records -> validated runs table (pandera) -> leaderboard and scaling
plot (polars, matplotlib).

The leaderboard has one row per (system, n_atoms, potential, method) and, per (system,
potential) and exact sparse method (registered ``exact`` and sparse), the fitted exponent p of
wall_s ∝ n_atoms^p (least squares on log-log over sizes with n_atoms >= 300, where fixed
overheads no longer dominate). The board names no method: it reads them from the registry.
With several trials (the section's ``trials``: independent jobs of the same cell) every table
and the plot use one row per configuration, the median over its trials (:func:`over_trials`).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import polars as pl

from sparsebench.suite import boards, registry
from sparsebench.suite.boards import fmt, md_escape, write_board_files

SCALING_MIN_ATOMS = 300  # above the sizes where fixed per-job overheads dominate
FAMILY = ("hessian",)
# matplotlib formats of the scaling plot, one per registered method in the registry's order
STYLES = ("o-", "s--", "^:", "D-.", "v-", "x--", "P:")
# What makes two rows the same configuration (its trials differ in nothing else), and the
# columns that vary from trial to trial: medians over the trials on the board.
CONFIGURATION = ["system", "size", "n_atoms", "potential", "potential_params_json", "method",
                 "order", "threads"]  # fmt: skip
TIMINGS = ["t_pattern_s", "t_coloring_s", "t_hvp_s", "t_decompress_s", "wall_s", "dense_wall_s",
           "speedup_vs_dense", "peak_mem_mb"]  # fmt: skip


def over_trials(runs: pl.DataFrame) -> pl.DataFrame:
    """The ok rows, one per configuration: the median over its trials of each time, speed-up
    and peak memory, the largest error, and ``trials``
    (:func:`sparsebench.suite.boards.over_trials`)."""
    return boards.over_trials(runs, CONFIGURATION, TIMINGS, largest=("max_abs_err", "rel_err"))


def exact_sparse_methods() -> list[str]:
    """The registered methods whose Hessian is exact and computed from a sparsity pattern: the
    ones whose scaling the board fits and the summary reports."""
    return [n for n, info in registry.all_methods(FAMILY).items() if info.sparse and info.cls.exact]


def scaling_exponents(runs: pl.DataFrame, methods: list[str] | None = None) -> pl.DataFrame:
    """Least-squares slope of log(wall_s) against log(n_atoms) per (system, potential, method)
    for ``methods`` (default: :func:`exact_sparse_methods`), over sizes with n_atoms >=
    SCALING_MIN_ATOMS (null with fewer than 2 sizes), on the medians over trials (one point
    per size).

    ``exponent_per_hvp`` fits wall_s / n_hvps instead: the cost of one compressed HVP and its
    share of pattern, coloring and recovery, which separates the growth of the work per HVP
    (linear in N for a local potential) from a growing number of colors."""
    methods = exact_sparse_methods() if methods is None else methods
    ok = over_trials(runs).filter(
        pl.col("method").is_in(methods) & (pl.col("n_atoms") >= SCALING_MIN_ATOMS)
    )
    rows = []
    groups = ok.group_by("system", "potential", "method", maintain_order=True)
    for (system, potential, method), g in groups:
        p = p_hvp = None
        if g.height >= 2:
            log_n = np.log(g["n_atoms"].to_numpy())
            wall = g["wall_s"].to_numpy()
            p = float(np.polyfit(log_n, np.log(wall), 1)[0])
            p_hvp = float(np.polyfit(log_n, np.log(wall / g["n_hvps"].to_numpy()), 1)[0])
        rows.append(
            {
                "system": system,
                "potential": potential,
                "method": method,
                "exponent": p,
                "exponent_per_hvp": p_hvp,
                "sizes": g.height,
            }
        )
    return pl.DataFrame(
        rows,
        schema={
            "system": pl.String,
            "potential": pl.String,
            "method": pl.String,
            "exponent": pl.Float64,
            "exponent_per_hvp": pl.Float64,
            "sizes": pl.Int64,
        },
    )


def leaderboard(runs: pl.DataFrame) -> pl.DataFrame:
    """One row per ok (system, n_atoms, potential, method): the median over its trials,
    sorted."""
    cols = [
        "system",
        "n_atoms",
        "potential",
        "K",
        "method",
        "n_colors",
        "max_row_atoms",
        "n_hvps",
        "nnz",
        "fill",
        "t_pattern_s",
        "t_coloring_s",
        "t_hvp_s",
        "t_decompress_s",
        "wall_s",
        "dense_wall_s",
        "speedup_vs_dense",
        "max_abs_err",
        "rel_err",
        "err_reference",
        "peak_mem_mb",
        "trials",
    ]
    return over_trials(runs).select(cols).sort("system", "potential", "method", "n_atoms")


def summary(runs: pl.DataFrame, top: int = 3) -> str:
    """A few lines for the terminal: per (system, potential) and exact sparse method, its
    colors, worst error, speed-up at the largest size with a dense reference, and scaling
    exponent (every pair: ``top`` does not apply)."""
    methods = exact_sparse_methods()
    ok = over_trials(runs)
    expo = {
        (r["system"], r["potential"], r["method"]): (r["exponent"], r["exponent_per_hvp"])
        for r in scaling_exponents(runs, methods).iter_rows(named=True)
    }
    lines = []
    groups = ok.filter(pl.col("method").is_in(methods)).group_by(
        "system", "potential", "method", maintain_order=True
    )
    for (system, potential, method), g in groups:
        big = g.filter(pl.col("n_atoms") >= SCALING_MIN_ATOMS).sort("n_atoms")
        if not big.height:  # only small sizes: show them all
            big = g.sort("n_atoms")
        with_dense = g.filter(pl.col("speedup_vs_dense").is_not_null()).sort("n_atoms")
        speed = (
            f"{with_dense['speedup_vs_dense'][-1]:.1f}x dense at {with_dense['n_atoms'][-1]} atoms"
            if with_dense.height
            else "no dense"
        )
        p, p_hvp = expo.get((system, potential, method), (None, None))
        lines.append(
            f"  {system:13s} {potential:6s} {method} colors {big['n_colors'].to_list()} at "
            f"{big['n_atoms'].to_list()} atoms (densest row {big['max_row_atoms'].to_list()}); "
            "max rel_err "
            f"{g['rel_err'].max():.1e}  {speed}  exponent "
            f"{'–' if p is None else f'{p:.2f}'} (per HVP "
            f"{'–' if p_hvp is None else f'{p_hvp:.2f}'})"
        )
    return "\n".join(lines)


def write_leaderboard(runs: pl.DataFrame, out_dir: Path) -> dict[str, Path]:
    """Write ``leaderboard.md``, ``.csv``, ``.json`` and ``scaling.png`` (atomically).
    Returns the paths by kind."""
    out_dir = Path(out_dir)
    board = leaderboard(runs)
    expo = scaling_exponents(runs)
    infos = registry.all_methods(FAMILY)
    present = [m for m in infos if m in set(runs["method"].to_list())]
    legend = "; ".join(f"`{m}`: {infos[m].cls.brief}" for m in present)
    lines = [
        f"# Hessian leaderboard: {runs['benchmark'][0]}",
        "",
        f"Methods: {legend}. Seconds on the job's threads; `rel_err` is the Frobenius error vs "
        "dense (or the max relative error on random-probe HVPs when dense was not computed). "
        "One row per configuration: with several trials (independent jobs of the same cell, "
        "column `trials`), its times, speed-up and memory are the medians over the trials "
        "and its errors the largest.",
        "",
    ]
    header = list(board.columns)
    lines.append("| " + " | ".join(header) + " |")
    lines.append("|" + "---|" * len(header))
    for row in board.iter_rows():
        lines.append("| " + " | ".join(fmt(v) for v in row) + " |")
    lines += [
        "",
        "## Scaling of the exact sparse Hessians",
        "",
        f"Fitted p in wall_s ∝ n_atoms^p over sizes with ≥ {SCALING_MIN_ATOMS} atoms, and the "
        "same fit of wall_s / n_hvps (the cost per HVP, free of a changing color count):",
        "",
        "| system | potential | method | exponent | exponent per HVP | sizes |",
        "|---|---|---|---|---|---|",
    ]
    for r in expo.iter_rows(named=True):
        lines.append(
            f"| {r['system']} | {r['potential']} | {r['method']} | {fmt(r['exponent'])} | "
            f"{fmt(r['exponent_per_hvp'])} | {r['sizes']} |"
        )
    if not expo.height:
        lines.append(f"| (no sizes with ≥ {SCALING_MIN_ATOMS} atoms) | | | | | |")
    failed = runs.filter(pl.col("status") != "ok")
    if failed.height:
        lines += ["", "## Failed jobs", ""]
        lines += [
            f"- {r['system']} n={r['size']} {r['potential']} {r['method']}: {md_escape(r['error'])}"
            for r in failed.iter_rows(named=True)
        ]
    threads = sorted(set(runs["threads"].drop_nulls().to_list()))
    jobs = sorted(set(runs["parallel_jobs"].drop_nulls().to_list()))
    lines += ["", f"Timings with {threads} thread(s) per job and {jobs} concurrent job(s)."]
    json_data = {"rows": board.to_dicts(), "scaling": expo.to_dicts()}
    plots = {"scaling.png": lambda path: scaling_plot(runs, path)}
    return write_board_files(out_dir, "\n".join(lines) + "\n", board, json_data, plots)


def scaling_plot(runs: pl.DataFrame, path: Path) -> None:
    """Wall-clock against n_atoms (log-log), one line per method (a style per registered
    method, in the registry's order), one panel per (system, potential)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    ok = over_trials(runs)  # one point per configuration
    styles = {m: STYLES[i % len(STYLES)] for i, m in enumerate(registry.all_methods(FAMILY))}
    panels = ok.select("system", "potential").unique(maintain_order=True).rows()
    fig, axes = plt.subplots(
        1, max(1, len(panels)), figsize=(4.5 * max(1, len(panels)), 3.8), squeeze=False
    )
    for ax, (system, potential) in zip(axes[0], panels):
        g = ok.filter((pl.col("system") == system) & (pl.col("potential") == potential))
        for method, style in styles.items():
            m = g.filter(pl.col("method") == method).sort("n_atoms")
            if m.height:
                ax.plot(m["n_atoms"], m["wall_s"], style, label=method)
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel("atoms")
        ax.set_ylabel("Hessian wall-clock (s)")
        ax.set_title(f"{system}, {potential}")
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=8)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110, format="png")  # path may be a .tmp name
    plt.close(fig)
