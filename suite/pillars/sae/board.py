"""SAE board: runs table -> leaderboard per (source, width): architecture setting × FVU, L0,
dead fraction, loss recovered, sparse probing, MCC (± std over seeds), cost; the matched-L0
table (each architecture's sweep interpolated at the target L0s, log-linear in L0); the
frontier plots FVU, loss recovered and dead fraction against L0, one line per architecture (the
plots SAEBench readers look at)."""

from __future__ import annotations

from pathlib import Path

import polars as pl

from sparsebench.suite.boards import failed_lines, fmt, md_table, write_board_files
from sparsebench.suite.interpolate import value_at

KEYS = ("activations", "hookpoint", "width", "method", "setting")
MEANS = (
    "fvu", "l0", "dead_fraction", "loss_recovered", "kl_recovered",
    "probe_acc_k1", "probe_acc_k2", "probe_acc_k5",
    "mcc", "recovery_rate", "bipolar_fraction", "shrinkage",
)  # fmt: skip
MATCHED_NAMES = {
    "fvu": "FVU",
    "loss_recovered": "loss recovered",
    "dead_fraction": "dead fraction",
    "mcc": "MCC",
}
MATCHED = tuple(MATCHED_NAMES)
TARGET_L0 = (4.0, 8.0, 16.0)


def _ok(runs: pl.DataFrame) -> pl.DataFrame:
    return runs.filter(pl.col("status") == "ok")


def leaderboard(runs: pl.DataFrame) -> pl.DataFrame:
    """One row per (source, width, method, setting): means and stds over seeds; rank by FVU
    within (source, width) among settings (compare at matched L0 with :func:`matched_l0`)."""
    ok = _ok(runs)
    if ok.is_empty():
        return pl.DataFrame()
    aggs = [pl.len().alias("seeds")]
    for c in MEANS:
        aggs += [pl.col(c).mean().alias(c), pl.col(c).std().alias(f"{c}_std")]
    aggs += [pl.col("train_flops").mean(), pl.col("train_s").mean()]
    board = ok.group_by(*KEYS, maintain_order=True).agg(aggs)
    rank = pl.col("fvu").rank("min").over("activations", "width").cast(pl.Int64)
    return board.with_columns(rank.alias("rank")).sort("activations", "width", "rank")


def matched_l0(board: pl.DataFrame, targets=TARGET_L0) -> pl.DataFrame:
    """Per (source, width, method) and target L0: FVU, loss recovered, dead fraction and MCC
    interpolated between the two settings whose mean L0 bracket the target (linear in log L0 and
    in log metric where positive);
    null when the sweep does not reach the target (no extrapolation)."""
    rows = []
    if board.is_empty():
        return pl.DataFrame()
    for (source, width, method), g in board.group_by(
        "activations", "width", "method", maintain_order=True
    ):
        g = g.filter(pl.col("l0") > 0).sort("l0")
        l0s = g["l0"].to_list()
        for t in targets:
            row = {"activations": source, "width": width, "method": method, "target_l0": float(t)}
            for c in MATCHED:
                row[c] = _interp(l0s, g[c].to_list(), t)
            rows.append(row)
    schema = {
        "activations": pl.String,
        "width": pl.Int64,
        "method": pl.String,
        "target_l0": pl.Float64,
    }
    schema |= {c: pl.Float64 for c in MATCHED}
    return pl.DataFrame(rows, schema=schema)


def _interp(xs: list[float], ys: list, t: float) -> float | None:
    """The shared rule (log L0, log metric where positive; suite/interpolate.py), or a single
    setting within 5 % of the target."""
    got = value_at(xs, ys, t)
    if got is not None:
        return got.value
    if len(xs) == 1 and abs(xs[0] - t) / t < 0.05 and ys[0] is not None:
        return float(ys[0])
    return None


def markdown(board: pl.DataFrame, matched: pl.DataFrame, runs: pl.DataFrame) -> str:
    lines = ["# Sparse autoencoders", ""]
    if not board.is_empty():
        for (source, hp, width), g in board.group_by(
            "activations", "hookpoint", "width", maintain_order=True
        ):
            lines += [f"## {_title(source, hp)}, width {width}", ""]
            has = [c for c in ("loss_recovered", "kl_recovered", "mcc") if g[c].is_not_null().any()]
            probes = [f"probe_acc_k{k}" for k in (1, 5) if g[f"probe_acc_k{k}"].is_not_null().any()]
            show = g.select(
                "rank", "method", "setting", "seeds",
                *[_pm(c) for c in ("fvu", "l0", "dead_fraction", *has)],
                *[pl.col(c).round(3) for c in probes],
                pl.col("bipolar_fraction").round(3), pl.col("shrinkage").round(3),
                pl.col("train_flops").map_elements(lambda v: f"{v:.3g}", return_dtype=pl.String),
                pl.col("train_s").round(1),
            )  # fmt: skip
            lines += md_table(show) + [""]
            m = matched.filter((pl.col("activations") == source) & (pl.col("width") == width))
            if m.height:
                lines += [
                    "At matched L0 (interpolated in log L0 and log metric; empty: the sweep "
                    "does not reach it):",
                    "",
                ]
                for metric, name in MATCHED_NAMES.items():
                    if m[metric].is_null().all():
                        continue
                    wide = m.pivot(on="target_l0", index="method", values=metric)
                    targets = [c for c in wide.columns if c != "method"]
                    wide = wide.with_columns(pl.col(targets).round(4))
                    if metric == "fvu":  # the ranking that compares like with like
                        wide = wide.with_columns(
                            pl.col(c).rank("min").cast(pl.Int64).alias(f"rank @ L0={float(c):g}")
                            for c in targets
                        )
                    wide = wide.rename({c: f"{name} @ L0={float(c):g}" for c in targets})
                    lines += md_table(wide) + [""]
    lines += failed_lines(runs)
    return "\n".join(lines)


def _title(source: str, hookpoint: str | None) -> str:
    return f"{source} at {hookpoint}" if hookpoint else source


def _pm(col: str) -> pl.Expr:
    return pl.format(
        "{} ± {}", pl.col(col).round(3), pl.col(f"{col}_std").round(3).fill_null(0.0)
    ).alias(col)


def _figure(n: int):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, max(n, 1), figsize=(6.0 * max(n, 1), 4.0), squeeze=False)
    return plt, fig, axes[0]


def plot_frontier(board: pl.DataFrame, path: Path, metric: str, ylabel: str, log_y: bool) -> None:
    """``metric`` against L0 per (source, width) where the metric exists, one line per
    architecture (its settings sorted by L0), error bars over seeds."""
    have = board.filter(pl.col(metric).is_not_null()) if board.height else board
    panels = (
        have.select("activations", "hookpoint", "width").unique(maintain_order=True).rows()
        if have.height
        else []
    )
    plt, fig, axes = _figure(len(panels))
    methods = sorted(board["method"].unique().to_list()) if board.height else []
    color = {m: f"C{i % 10}" for i, m in enumerate(methods)}  # one colour per method throughout
    for ax, (source, hp, width) in zip(axes, panels):
        g = have.filter((pl.col("activations") == source) & (pl.col("width") == width))
        for (method,), h in g.group_by("method", maintain_order=True):
            h = h.filter(pl.col(metric).is_not_null()).sort("l0")
            ax.errorbar(h["l0"], h[metric], yerr=h[f"{metric}_std"].fill_null(0.0), marker="o",
                        capsize=2, label=method, color=color[method])  # fmt: skip
        ax.set_xscale("log")
        if log_y:
            ax.set_yscale("log")
        ax.set_xlabel("L0 (active latents per token)")
        ax.set_ylabel(ylabel)
        ax.set_title(f"{_title(source, hp)}, width {width}")
        ax.legend(fontsize=7)
    if not panels:
        axes[0].set_axis_off()
    fig.tight_layout()
    fig.savefig(path, format="png", dpi=110)
    plt.close(fig)


def write_leaderboard(runs: pl.DataFrame, out_dir: Path, targets=TARGET_L0) -> dict[str, Path]:
    board = leaderboard(runs)
    matched = matched_l0(board, targets)
    plots = {
        "fvu_vs_l0.png": lambda p: plot_frontier(board, p, "fvu", "FVU (held-out tokens)", True),
        "loss_recovered_vs_l0.png": lambda p: plot_frontier(
            board, p, "loss_recovered", "loss recovered (held-out tokens)", False
        ),
        "dead_vs_l0.png": lambda p: plot_frontier(
            board, p, "dead_fraction", "dead fraction", False
        ),
    }
    json_data = {"leaderboard": board.to_dicts(), "matched_l0": matched.to_dicts()}
    return write_board_files(
        out_dir, markdown(board, matched, runs), board, json_data=json_data, plots=plots
    )


def summary(runs: pl.DataFrame, top: int = 3) -> str:
    board = leaderboard(runs)
    if board.is_empty():
        return "no finished SAE cells"
    lines = []
    for (source, width), g in board.group_by("activations", "width", maintain_order=True):
        for r in g.head(top).iter_rows(named=True):
            lines.append(
                f"{source:10s} m={width:<5d} #{r['rank']:<3d} {r['method']:22s} "
                f"{r['setting']:24s} FVU {fmt(r['fvu'])} L0 {fmt(r['l0'])} "
                f"dead {fmt(r['dead_fraction'])} "
                + (
                    f"LR {fmt(r['loss_recovered'])}"
                    if r["loss_recovered"] is not None
                    else f"MCC {fmt(r['mcc'])}"
                )
            )
    return "\n".join(lines)
