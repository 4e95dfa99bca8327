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
    method_link,
    sources_lines,
    write_board_files,
)

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


FAMILIES = FAMILY

# Every column: unit in CSV/JSON, better direction, Markdown header.
COLUMNS: list[Col] = [
    Col("system", "system", show="text"),
    Col("n_atoms", "atoms", "count", show="int"),
    Col("potential", "potential", show="text"),
    Col("K", "reach K (hops)", "hops", show="int"),
    Col("method", "method", show="method"),
    Col("n_colors", "colors", "count", LOWER, "int"),
    Col("max_row_atoms", "densest row (atoms)", "count", show="int"),
    Col("n_hvps", "HVPs", "count", LOWER, "int"),
    Col("nnz", "nonzeros", "count", show="int"),
    Col("fill", "fill (%)", PCT, show="pct", digits=2),
    Col("t_pattern_s", "pattern (s)", "s", LOWER),
    Col("t_coloring_s", "coloring (s)", "s", LOWER),
    Col("t_hvp_s", "HVPs (s)", "s", LOWER),
    Col("t_decompress_s", "recovery (s)", "s", LOWER),
    Col("wall_s", "total (s)", "s", LOWER),
    Col("dense_wall_s", "dense (s)", "s", LOWER),
    Col("speedup_vs_dense", "speed-up vs dense", "ratio", HIGHER, "times", 1),
    Col("max_abs_err", "max abs error", "energy / length²", LOWER, "sci"),
    Col("rel_err", "rel. error", "1", LOWER, "sci"),
    Col("err_reference", "error vs", show="text"),
    Col("peak_mem_mb", "peak memory (MiB)", "MiB", LOWER),
    Col("trials", "trials", "count", HIGHER, "int"),
    Col("exponent", "exponent p", "1", LOWER, digits=3),
    Col("exponent_per_hvp", "exponent per HVP", "1", LOWER, digits=3),
    Col("sizes", "sizes fitted", "count", HIGHER, "int"),
]
_COL = {c.key: c for c in COLUMNS}
_STRUCTURE = ["n_atoms", "method", "K", "n_colors", "max_row_atoms", "n_hvps", "nnz", "fill",
              "rel_err", "max_abs_err", "err_reference"]  # fmt: skip
_TIMES = ["n_atoms", "method", "t_pattern_s", "t_coloring_s", "t_hvp_s", "t_decompress_s",
          "wall_s", "dense_wall_s", "speedup_vs_dense", "peak_mem_mb", "trials"]  # fmt: skip


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
            f"{with_dense['speedup_vs_dense'][-1]:.1f}× dense at "
            f"{with_dense['n_atoms'][-1]:,} atoms"
            if with_dense.height
            else "no dense"
        )
        p, p_hvp = expo.get((system, potential, method), (None, None))
        lines.append(
            f"  {system:13s} {potential:6s} {method} colors "
            f"{join_values(big['n_colors'].to_list(), ' / ')} at "
            f"{join_values(big['n_atoms'].to_list(), ' / ')} atoms (densest row "
            f"{join_values(big['max_row_atoms'].to_list(), ' / ')}); max rel. error "
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
    legend = "; ".join(f"{method_link(m, FAMILIES)}: {md_escape(infos[m].cls.brief)}"
                       for m in present)  # fmt: skip
    lines = [
        f"# Hessian leaderboard: {md_escape(runs['benchmark'][0])}",
        "",
        f"Methods: {legend}. Seconds on the job's threads. Rel. error: the Frobenius error vs "
        "dense (or the max relative error on random-probe HVPs when dense was not computed, "
        "column error vs). One row per configuration: with several trials (independent jobs "
        "of the same cell), its times, speed-up and memory are the medians over the trials "
        "and its errors the largest. Fill: structural nonzeros ÷ (3N)². leaderboard.csv and "
        ".json keep every column, fill as a fraction.",
        "",
    ]
    for (system, potential), g in board.group_by("system", "potential", maintain_order=True):
        lines += [f"## {md_escape(system)}, {md_code(potential)}", ""]
        lines += ["Exactness and structure:", ""]
        lines += [*md_frame(g, [_COL[c] for c in _STRUCTURE], FAMILIES), ""]
        lines += ["Time (medians over trials):", ""]
        lines += [*md_frame(g, [_COL[c] for c in _TIMES], FAMILIES), ""]
    lines += [
        "## Scaling of the exact sparse Hessians",
        "",
        f"Fitted p in total time ∝ atoms^p over sizes with ≥ {SCALING_MIN_ATOMS} atoms, and the "
        "same fit of total time ÷ HVPs (the cost per HVP, free of a changing color count):",
        "",
    ]
    if expo.height:
        scaling = [_COL[c] for c in ("system", "potential", "method", "exponent",
                                     "exponent_per_hvp", "sizes")]  # fmt: skip
        lines += md_frame(expo, scaling, FAMILIES)
    else:
        lines.append(f"(no sizes with ≥ {SCALING_MIN_ATOMS} atoms)")
    failed = runs.filter(pl.col("status") != "ok")
    if failed.height:
        lines += ["", "## Failed jobs", ""]
        lines += [
            f"- {md_escape(r['system'])} n={r['size']} {md_escape(r['potential'])} "
            f"{md_code(r['method'])}: {md_escape(r['error'])}"
            for r in failed.iter_rows(named=True)
        ]
    threads = join_values(sorted(set(runs["threads"].drop_nulls().to_list())))
    jobs = join_values(sorted(set(runs["parallel_jobs"].drop_nulls().to_list())))
    lines += ["", f"Timings with {threads} thread(s) per job and {jobs} concurrent job(s).", ""]
    lines += sources_lines(present, FAMILIES)
    json_data = board_json(COLUMNS, board, scaling=expo)
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
        1, max(1, len(panels)), figsize=(5.2 * max(1, len(panels)), 4.2), squeeze=False
    )
    for ax, (system, potential) in zip(axes[0], panels):
        g = ok.filter((pl.col("system") == system) & (pl.col("potential") == potential))
        for method, style in styles.items():
            m = g.filter(pl.col("method") == method).sort("n_atoms")
            if m.height:
                ax.plot(m["n_atoms"], m["wall_s"], style, label=method)
        ax.set_xscale("log")
        ax.set_yscale("log")
        log_ticks(ax.xaxis)  # plain 100, 200, 500 that do not overlap
        log_ticks(ax.yaxis)
        ax.tick_params(axis="x", labelrotation=45, labelsize=8)
        ax.set_xlabel("atoms (log scale)")
        ax.set_ylabel("Hessian wall-clock (s, log scale)")
        ax.set_title(f"{system}, {potential}")
        ax.grid(True, which="major", alpha=0.3)
        ax.legend(fontsize=8)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110, format="png")  # path may be a .tmp name
    plt.close(fig)
