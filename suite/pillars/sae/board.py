"""SAE board: runs table -> per (source, width) a table of every architecture setting (FVU,
L0, dead fraction, loss recovered, sparse probing, MCC, pair recovery, ± std over seeds, cost;
no rank: across settings it would rank the densest first) and the matched-L0 tables, the only
ranking: each architecture sweep read at L0 = 4, 8, 16 per seed by the shared interpolation
rule, mean ± std over the seeds it brackets, how it was read, ranked by FVU; the frontier
plots FVU, loss recovered and dead fraction against L0, one line per sweep (the plots SAEBench
readers look at)."""

from __future__ import annotations

import json
import statistics
from pathlib import Path

import polars as pl

from sparsebench.suite import registry
from sparsebench.suite.boards import failed_lines, fmt, md_table, write_board_files
from sparsebench.suite.interpolate import value_at

KEYS = ("activations", "hookpoint", "width", "method", "sweep", "setting")
MEANS = (
    "fvu", "l0", "dead_fraction", "loss_recovered", "kl_recovered",
    "probe_acc_k1", "probe_acc_k2", "probe_acc_k5",
    "mcc", "recovery_rate", "pair_recovery", "pair_recovery_any", "bipolar_fraction",
    "shrinkage",
)  # fmt: skip
MATCHED_NAMES = {
    "fvu": "FVU",
    "loss_recovered": "loss recovered",
    "dead_fraction": "dead fraction",
    "mcc": "MCC",
    "pair_recovery": "pair recovery",
}
MATCHED = tuple(MATCHED_NAMES)
TARGET_L0 = (4.0, 8.0, 16.0)
# The sparsity knob a sweep varies (k: TopK, BatchTopK, Matryoshka; λ: the others); cells of
# one architecture that differ in nothing else form one sweep.
SWEPT = ("k", "l1_coeff", "sparsity_coeff")
FAMILY = ("sae",)


def _ok(runs: pl.DataFrame) -> pl.DataFrame:
    return runs.filter(pl.col("status") == "ok")


def sweep_label(method: str, params_json: str | None) -> str:
    """The sweep a cell belongs to: the architecture and its fixed parameters that differ from
    its defaults, everything but the swept knob (:data:`SWEPT`), e.g. ``topk`` or
    ``jumprelu (threshold_lr_scale=10.0)``."""
    params = json.loads(params_json) if params_json else {}
    try:  # the defaults as params_json writes them (a tuple default reads back as a list)
        cls = registry.get_method(method, FAMILY).cls
        defaults = json.loads(json.dumps(registry.params_to_dict(cls.Params())))
    except registry.RegistryError:  # an unknown architecture: every fixed parameter shows
        defaults = {}
    fixed = {
        k: v
        for k, v in sorted(params.items())
        if k not in SWEPT and (k not in defaults or defaults[k] != v)
    }
    if not fixed:
        return method
    return f"{method} ({', '.join(f'{k}={v}' for k, v in fixed.items())})"


def with_sweep(runs: pl.DataFrame) -> pl.DataFrame:
    """``runs`` with the column ``sweep`` (:func:`sweep_label`)."""
    pj = runs["params_json"] if "params_json" in runs.columns else [None] * runs.height
    labels = [sweep_label(m, p) for m, p in zip(runs["method"], pj, strict=True)]
    return runs.with_columns(pl.Series("sweep", labels, dtype=pl.String))


def leaderboard(runs: pl.DataFrame) -> pl.DataFrame:
    """One row per (source, width, method setting): means and stds over seeds, sorted by sweep
    and L0; not ranked (a rank across settings rewards the densest; :func:`matched_l0`
    ranks)."""
    ok = _ok(runs)
    if ok.is_empty():
        return pl.DataFrame()
    ok = with_sweep(ok)
    aggs = [pl.len().alias("seeds")]
    for c in MEANS:
        col = pl.col(c) if c in ok.columns else pl.lit(None, dtype=pl.Float64)
        aggs += [col.mean().alias(c), col.std().alias(f"{c}_std")]
    aggs += [pl.col("train_flops").mean(), pl.col("train_s").mean()]
    board = ok.group_by(*KEYS, maintain_order=True).agg(aggs)
    return board.sort("activations", "width", "sweep", "l0", maintain_order=True)


def matched_l0(runs: pl.DataFrame, targets=TARGET_L0) -> pl.DataFrame:
    """Per (source, width, sweep) and target L0: each metric of :data:`MATCHED` read per seed
    from that seed's settings by the shared rule (suite/interpolate.py: x the seed's measured
    L0 per setting, linear in log L0 and in log metric where positive, never extrapolated),
    then the mean and std over the seeds whose FVU is bracketed (``n_seeds``); ``read`` says
    how: ``measured`` (a setting's L0 within 1 % of the target in every seed: the shared
    rule's tolerance), ``interpolated L0 a – b``
    (a, b: the bracketing measured L0s, means over those seeds), or ``not bracketed`` (null
    values). ``rank``: by FVU within (source, width, target) among bracketed sweeps."""
    schema = {
        "activations": pl.String, "hookpoint": pl.String, "width": pl.Int64,
        "method": pl.String, "sweep": pl.String, "target_l0": pl.Float64,
        "n_seeds": pl.Int64, "read": pl.String, "l0_low": pl.Float64, "l0_high": pl.Float64,
    }  # fmt: skip
    for c in MATCHED:
        schema |= {c: pl.Float64, f"{c}_std": pl.Float64}
    ok = _ok(runs)
    if ok.is_empty():
        return pl.DataFrame(schema=schema | {"rank": pl.Int64})
    ok = with_sweep(ok).filter(pl.col("l0") > 0)
    rows = []
    for (source, hp, width, method, sweep), g in ok.group_by(
        "activations", "hookpoint", "width", "method", "sweep", maintain_order=True
    ):
        seeds = sorted(set(g["seed"].to_list()))
        for t in targets:
            row = {"activations": source, "hookpoint": hp, "width": width, "method": method,
                   "sweep": sweep, "target_l0": float(t)}  # fmt: skip
            row |= _read_at(g, seeds, float(t))
            rows.append(row)
    out = pl.DataFrame(rows, schema=schema)
    rank = (
        pl.when(pl.col("fvu").is_not_null())
        .then(pl.col("fvu").rank("min").over("activations", "width", "target_l0"))
        .cast(pl.Int64)
    )
    return out.with_columns(rank.alias("rank"))


def _read_at(g: pl.DataFrame, seeds: list, t: float) -> dict:
    """The metrics of one sweep ``g`` (rows of every seed) at L0 = t (:func:`matched_l0`)."""
    per_seed = []
    for seed in seeds:
        pts = g.filter(pl.col("seed") == seed)
        xs = pts["l0"].cast(pl.Float64).to_list()
        try:
            fvu = value_at(xs, pts["fvu"].cast(pl.Float64).to_list(), t)
        except ValueError:  # two settings at one L0: no single reading
            continue
        if fvu is None:
            continue
        got = {"fvu": fvu}
        for c in MATCHED[1:]:
            if c in pts.columns:
                got[c] = value_at(xs, pts[c].cast(pl.Float64).to_list(), t)
        per_seed.append(got)
    out: dict = {"n_seeds": len(per_seed)}
    if not per_seed:
        return out | {"read": "not bracketed"}
    lows = [s["fvu"].x_low for s in per_seed]
    highs = [s["fvu"].x_high for s in per_seed]
    out |= {"l0_low": statistics.fmean(lows), "l0_high": statistics.fmean(highs)}
    if all(s["fvu"].exact for s in per_seed):
        out["read"] = "measured"
    else:
        out["read"] = f"interpolated L0 {out['l0_low']:.3g} – {out['l0_high']:.3g}"
    for c in MATCHED:
        vals = [s[c].value for s in per_seed if s.get(c) is not None]
        if vals:
            out[c] = statistics.fmean(vals)
            out[f"{c}_std"] = statistics.stdev(vals) if len(vals) > 1 else None
    return out


def markdown(board: pl.DataFrame, matched: pl.DataFrame, runs: pl.DataFrame) -> str:
    lines = ["# Sparse autoencoders", ""]
    if not board.is_empty():
        for (source, hp, width), g in board.group_by(
            "activations", "hookpoint", "width", maintain_order=True
        ):
            lines += [f"## {_title(source, hp)}, width {width}", ""]
            lines += _matched_lines(matched, source, width)
            lines += [
                "Every setting (not ranked: compare at matched L0, above), means ± std over seeds:",
                "",
            ]
            has = [
                c
                for c in ("loss_recovered", "kl_recovered", "mcc", "pair_recovery",
                          "pair_recovery_any")
                if g[c].is_not_null().any()
            ]  # fmt: skip
            probes = [f"probe_acc_k{k}" for k in (1, 5) if g[f"probe_acc_k{k}"].is_not_null().any()]
            show = g.select(
                "method", "setting", "seeds",
                *[_pm(c) for c in ("fvu", "l0", "dead_fraction", *has)],
                *[pl.col(c).round(3) for c in probes],
                pl.col("bipolar_fraction").round(3), pl.col("shrinkage").round(3),
                pl.col("train_flops").map_elements(lambda v: f"{v:.3g}", return_dtype=pl.String),
                pl.col("train_s").round(1),
            )  # fmt: skip
            lines += md_table(show) + [""]
    lines += failed_lines(runs)
    return "\n".join(lines)


def _matched_lines(matched: pl.DataFrame, source: str, width: int) -> list[str]:
    """One table per target L0: every sweep's metrics there, ranked by FVU."""
    m = matched.filter((pl.col("activations") == source) & (pl.col("width") == width))
    if not m.height:
        return []
    lines = [
        "At matched L0, ranked by FVU: each sweep read per seed at the target (linear in log "
        "L0 and log metric between the two settings whose measured L0 bracket it, never "
        "extrapolated), mean ± std over the n seeds it brackets; `read` says how.",
        "",
    ]
    metrics = [c for c in MATCHED if m[c].is_not_null().any()]
    for (t,), g in m.group_by("target_l0", maintain_order=True):
        g = g.sort("rank", nulls_last=True, maintain_order=True)
        show = g.select(
            "rank",
            "sweep",
            *[_pm(c).alias(MATCHED_NAMES[c]) for c in metrics],
            pl.col("n_seeds").alias("n"),
            "read",
        )
        lines += [f"L0 = {t:g}:", ""] + md_table(show) + [""]
    return lines


def _title(source: str, hookpoint: str | None) -> str:
    return f"{source} at {hookpoint}" if hookpoint else source


def _pm(col: str) -> pl.Expr:
    """``mean ± std`` (``± –`` for one seed: no spread was measured), null where the mean is."""
    std = pl.col(f"{col}_std").round(4).cast(pl.String).fill_null("–")
    return (
        pl.when(pl.col(col).is_not_null())
        .then(pl.format("{} ± {}", pl.col(col).round(4), std))
        .alias(col)
    )


def _figure(n: int):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, max(n, 1), figsize=(6.0 * max(n, 1), 4.0), squeeze=False)
    return plt, fig, axes[0]


def plot_frontier(board: pl.DataFrame, path: Path, metric: str, ylabel: str, log_y: bool) -> None:
    """``metric`` against L0 per (source, width) where the metric exists, one line per sweep
    (its settings sorted by L0), error bars over seeds."""
    have = board.filter(pl.col(metric).is_not_null()) if board.height else board
    panels = (
        have.select("activations", "hookpoint", "width").unique(maintain_order=True).rows()
        if have.height
        else []
    )
    plt, fig, axes = _figure(len(panels))
    sweeps = sorted(board["sweep"].unique().to_list()) if board.height else []
    color = {s: f"C{i % 10}" for i, s in enumerate(sweeps)}  # one colour per sweep throughout
    for ax, (source, hp, width) in zip(axes, panels):
        g = have.filter((pl.col("activations") == source) & (pl.col("width") == width))
        for (sweep,), h in g.group_by("sweep", maintain_order=True):
            h = h.filter(pl.col(metric).is_not_null()).sort("l0")
            ax.errorbar(h["l0"], h[metric], yerr=h[f"{metric}_std"].fill_null(0.0), marker="o",
                        capsize=2, label=sweep, color=color[sweep])  # fmt: skip
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
    matched = matched_l0(runs, targets)
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
    """Per (source, width) and target L0 the best sweep at matched L0 (up to ``top`` lines
    per (source, width))."""
    matched = matched_l0(runs)
    if matched.is_empty() or matched["rank"].is_null().all():
        return "no finished SAE cells bracket a target L0"
    lines = []
    best = matched.filter(pl.col("rank") == 1).sort("activations", "width", "target_l0")
    for (source, width), g in best.group_by("activations", "width", maintain_order=True):
        for r in g.head(top).iter_rows(named=True):
            lines.append(
                f"{source:10s} m={width:<5d} L0={r['target_l0']:<3g} #1 {r['sweep']:36s} "
                f"FVU {fmt(r['fvu'])} ({r['n_seeds']} seed(s), {r['read']})"
            )
    return "\n".join(lines)
