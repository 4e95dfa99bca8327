"""SAE board: runs table -> per (source, width) a table of every architecture setting (FVU,
L0, dead fraction, loss recovered, sparse probing, MCC, pair recovery, ± std over seeds, cost;
no rank: across settings it would rank the densest first) and the matched-L0 tables, the only
ranking: each architecture sweep read at L0 = 4, 8, 16 per seed by the shared interpolation
rule, mean ± std over the seeds it brackets, how it was read, ranked by FVU; the frontier
plots FVU, loss recovered and dead fraction against L0, one line per sweep (the plots SAEBench
readers look at)."""

from __future__ import annotations

import json
from pathlib import Path

import polars as pl

from sparsebench.suite import registry
from sparsebench.suite.boards import (
    HIGHER,
    LOWER,
    PCT,
    Col,
    board_json,
    failed_lines,
    log_ticks,
    md_escape,
    md_frame,
    mean_std,
    noise_ranks,
    rank_text,
    sources_lines,
    write_board_files,
)
from sparsebench.suite.interpolate import values_at

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
    pairs = list(zip(runs["method"], pj, strict=True))
    label = {pair: sweep_label(*pair) for pair in dict.fromkeys(pairs)}  # once per setting
    return runs.with_columns(pl.Series("sweep", [label[p] for p in pairs], dtype=pl.String))


def leaderboard(runs: pl.DataFrame) -> pl.DataFrame:
    """One row per (source, width, method setting): means and stds over seeds, sorted by sweep
    and L0; not ranked (a rank across settings rewards the densest; :func:`matched_l0`
    ranks)."""
    ok = _ok(runs)
    if ok.is_empty():
        return pl.DataFrame()
    ok = with_sweep(ok)
    aggs = [pl.len().cast(pl.Int64).alias("seeds")]
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
    values). ``rank``: by FVU within (source, width, target) among bracketed sweeps, shared
    (``tied``) with sweeps Welch's t-test cannot tell from the group's best
    (:func:`sparsebench.suite.boards.noise_ranks`)."""
    schema = {
        "activations": pl.String, "hookpoint": pl.String, "width": pl.Int64,
        "method": pl.String, "sweep": pl.String, "target_l0": pl.Float64,
        "n_seeds": pl.Int64, "read": pl.String, "l0_low": pl.Float64, "l0_high": pl.Float64,
    }  # fmt: skip
    for c in MATCHED:
        schema |= {c: pl.Float64, f"{c}_std": pl.Float64}
    ok = _ok(runs)
    if ok.is_empty():
        return pl.DataFrame(schema=schema | {"rank": pl.Int64, "tied": pl.Boolean})
    ok = with_sweep(ok).filter(pl.col("l0") > 0)
    sweeps = ["activations", "hookpoint", "width", "method", "sweep"]
    order = ok.select(sweeps).unique(maintain_order=True).with_row_index("_sweep")
    parts = [
        order.join(
            _read_at(ok, sweeps, float(t)), on=sweeps, how="left", nulls_equal=True
        ).with_columns(target_l0=pl.lit(float(t)), _t=pl.lit(i))
        for i, t in enumerate(targets)
    ]
    if not parts:
        return pl.DataFrame(schema=schema | {"rank": pl.Int64, "tied": pl.Boolean})
    out = (
        pl.concat(parts, how="diagonal_relaxed")
        .sort("_sweep", "_t")
        .with_columns(
            pl.col("n_seeds").fill_null(0),
            pl.col("read").fill_null("not bracketed"),
        )
    )
    out = out.select(
        [
            (pl.col(c) if c in out.columns else pl.lit(None)).cast(d).alias(c)
            for c, d in schema.items()
        ]
    )
    return noise_ranks(out, "fvu", "fvu_std", "n_seeds", ["activations", "width", "target_l0"],
                       higher_better=False)  # fmt: skip


def _read_at(ok: pl.DataFrame, sweeps: list[str], t: float) -> pl.DataFrame:
    """Per sweep, the metrics of :data:`MATCHED` at L0 = t (:func:`matched_l0`): each seed read
    by the shared rule (:func:`sparsebench.suite.interpolate.values_at`), the seeds whose FVU
    is read (two settings at one L0 give no single reading) averaged."""
    seeds = [*sweeps, "seed"]
    fvu = values_at(ok, seeds, "l0", "fvu", t).filter(pl.col("value").is_not_null())
    fvu = fvu.rename({"value": "fvu"})
    for c in MATCHED[1:]:
        if c in ok.columns:
            got = values_at(ok, seeds, "l0", c, t).select(*seeds, pl.col("value").alias(c))
            fvu = fvu.join(got, on=seeds, how="left", nulls_equal=True)
    metrics = [c for c in MATCHED if c in fvu.columns]
    out = fvu.group_by(sweeps, maintain_order=True).agg(
        pl.len().cast(pl.Int64).alias("n_seeds"),
        pl.col("exact").all().alias("_exact"),
        pl.col("x_low").mean().alias("l0_low"),
        pl.col("x_high").mean().alias("l0_high"),
        *[pl.col(c).mean() for c in metrics],
        *[pl.col(c).std().alias(f"{c}_std") for c in metrics],
    )
    low, high = out["l0_low"].to_list(), out["l0_high"].to_list()
    read = [
        "measured" if e else f"interpolated L0 {a:.3g} – {b:.3g}"
        for e, a, b in zip(out["_exact"].to_list(), low, high, strict=True)
    ]
    return out.drop("_exact").with_columns(pl.Series("read", read, dtype=pl.String))


FAMILIES = FAMILY

# Every column: unit in CSV/JSON, better direction, Markdown header. Shares (dead latents,
# probe accuracy, recovery rates) are fractions shown in %; FVU, loss recovered, MCC and
# shrinkage are unitless scores.
COLUMNS: list[Col] = [
    Col("activations", "source", show="text"),
    Col("hookpoint", "hookpoint", show="text"),
    Col("width", "width", "latents", show="int"),
    Col("method", "architecture", show="method"),
    Col("sweep", "sweep", show="text"),
    Col("setting", "setting", show="text"),
    Col("seeds", "seeds", "count", HIGHER, "int"),
    Col("fvu", "FVU", "1", LOWER, digits=3),
    Col("l0", "L0 (latents/token)", "latents per token", LOWER, digits=3),
    Col("dead_fraction", "dead latents (%)", PCT, LOWER, "pct", 1),
    Col("loss_recovered", "loss recovered", "1", HIGHER, digits=3),
    Col("kl_recovered", "KL recovered", "1", HIGHER, digits=3),
    Col("probe_acc_k1", "probe acc k=1 (%)", PCT, HIGHER, "pct", 1),
    Col("probe_acc_k2", "probe acc k=2 (%)", PCT, HIGHER, "pct", 1),
    Col("probe_acc_k5", "probe acc k=5 (%)", PCT, HIGHER, "pct", 1),
    Col("mcc", "MCC", "1", HIGHER, digits=3),
    Col("recovery_rate", "recovered features (%)", PCT, HIGHER, "pct", 1),
    Col("pair_recovery", "pair recovery (%)", PCT, HIGHER, "pct", 1),
    Col("pair_recovery_any", "pair recovery, any latent (%)", PCT, HIGHER, "pct", 1),
    Col("bipolar_fraction", "bipolar latents (%)", PCT, show="pct", digits=1),
    Col("shrinkage", "shrinkage", "1", digits=3),
    Col("train_flops", "train FLOPs", "FLOPs", LOWER, "si"),
    Col("train_s", "train time (s)", "s", LOWER),
    Col("target_l0", "target L0", "latents per token", show="num"),
    Col("n_seeds", "seeds bracketing", "count", HIGHER, "int"),
    Col("read", "read", show="text"),
    Col("l0_low", "L0 below", "latents per token"),
    Col("l0_high", "L0 above", "latents per token"),
    Col("rank", "rank", better=LOWER),
    Col("tied", "tied within noise"),
]
COLUMNS += [Col(f"{c.key}_std", f"{c.header} std", c.unit, LOWER, c.show, c.digits)
            for c in list(COLUMNS) if c.key in MEANS]  # fmt: skip
_COL = {c.key: c for c in COLUMNS}


def _pm_cells(g: pl.DataFrame, metrics: list[str], n: str) -> pl.DataFrame:
    """``g`` with ``<metric>_md``: ``mean ± std`` over ``n`` seeds (``(n=1)`` for one)."""
    return g.with_columns(
        pl.Series(
            f"{c}_md",
            [mean_std(m, s, k, _COL[c]) for m, s, k in g.select(c, f"{c}_std", n).rows()],
            dtype=pl.String,
        )
        for c in metrics
    )


def markdown(board: pl.DataFrame, matched: pl.DataFrame, runs: pl.DataFrame) -> str:
    lines = [
        "# Sparse autoencoders",
        "",
        "Mean ± std over seeds (one seed: its value and n=1); shares (dead latents, probe "
        "accuracy, recovery) in %, FVU, loss recovered and MCC as unitless scores. "
        "leaderboard.csv and .json keep every column, shares as fractions.",
        "",
    ]
    if not board.is_empty():
        for (source, hp, width), g in board.group_by(
            "activations", "hookpoint", "width", maintain_order=True
        ):
            lines += [f"## {md_escape(_title(source, hp))}, width {width:,}", ""]
            lines += _matched_lines(matched, source, width)
            lines += [
                "Every setting (not ranked: compare at matched L0, above):",
                "",
            ]
            has = [
                c
                for c in ("loss_recovered", "kl_recovered", "mcc", "pair_recovery",
                          "pair_recovery_any")
                if g[c].is_not_null().any()
            ]  # fmt: skip
            probes = [f"probe_acc_k{k}" for k in (1, 5) if g[f"probe_acc_k{k}"].is_not_null().any()]
            pm = ["fvu", "l0", "dead_fraction", *has]
            show = [_COL["method"], _COL["setting"], _COL["seeds"]]
            show += [Col(f"{c}_md", _COL[c].header, show="md") for c in pm]
            show += [_COL[c] for c in (*probes, "bipolar_fraction", "shrinkage", "train_flops",
                                       "train_s")]  # fmt: skip
            lines += md_frame(_pm_cells(g, pm, "seeds"), show, FAMILIES) + [""]
    lines += failed_lines(runs)
    if not board.is_empty():
        lines += sources_lines(board["method"].to_list(), FAMILIES)
    return "\n".join(lines)


def _matched_lines(matched: pl.DataFrame, source: str, width: int) -> list[str]:
    """One table per target L0: every sweep's metrics there, ranked by FVU."""
    m = matched.filter((pl.col("activations") == source) & (pl.col("width") == width))
    if not m.height:
        return []
    lines = [
        "At matched L0, ranked by FVU (lower is better): each sweep read per seed at the "
        "target (linear in log L0 and log metric between the two settings whose measured L0 "
        "bracket it, never extrapolated), mean ± std over the seeds it brackets; =k: a rank "
        "shared with sweeps that Welch's t-test (5 %) cannot tell from the group's best (one "
        "seed is never told apart); read: how the value was read.",
        "",
    ]
    metrics = [c for c in MATCHED if m[c].is_not_null().any()]
    for (t,), g in m.group_by("target_l0", maintain_order=True):
        g = g.sort("rank", "fvu", nulls_last=True, maintain_order=True)
        g = _pm_cells(g, metrics, "n_seeds").with_columns(
            pl.Series(
                "rank_md",
                [rank_text(r, k) for r, k in g.select("rank", "tied").rows()],
                dtype=pl.String,
            ),
        )
        show = [Col("rank_md", "rank", show="md"), _COL["sweep"]]
        show += [Col(f"{c}_md", _COL[c].header, show="md") for c in metrics]
        show += [_COL["n_seeds"], _COL["read"]]
        lines += [f"L0 = {t:g}:", "", *md_frame(g, show, FAMILIES), ""]
    return lines


def _title(source: str, hookpoint: str | None) -> str:
    return f"{source} at {hookpoint}" if hookpoint else source


def _figure(n: int):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, max(n, 1), figsize=(6.0 * max(n, 1), 4.0), squeeze=False)
    return plt, fig, axes[0]


def plot_frontier(
    board: pl.DataFrame, path: Path, metric: str, ylabel: str, log_y: bool, scale: float = 1.0
) -> None:
    """``metric`` (times ``scale``: 100 for a share in %) against L0 (log axis, plain tick
    numbers) per (source, width) where the metric exists, one line per sweep (its settings
    sorted by L0), error bars over seeds."""
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
            ax.errorbar(h["l0"], h[metric] * scale, yerr=h[f"{metric}_std"].fill_null(0.0) * scale,
                        marker="o", capsize=2, label=sweep, color=color[sweep])  # fmt: skip
        ax.set_xscale("log")
        log_ticks(ax.xaxis)  # plain 2, 5, 10, not 4×10⁰
        if log_y:
            ax.set_yscale("log")
            log_ticks(ax.yaxis)
        ax.grid(True, which="major", alpha=0.3)
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
            board, p, "dead_fraction", "dead latents (%)", False, 100.0
        ),
    }
    json_data = board_json(COLUMNS, board, matched_l0=matched)
    json_data["leaderboard"] = json_data["rows"]  # the key readers of earlier boards use
    return write_board_files(
        out_dir, markdown(board, matched, runs), board, json_data=json_data, plots=plots
    )


def summary(runs: pl.DataFrame, top: int = 3) -> str:
    """Per (source, width) and target L0 the sweep of the lowest mean FVU in the first rank
    group at matched L0, with how many sweeps share that rank (``top`` does not apply: one
    line per target)."""
    matched = matched_l0(runs)
    if matched.is_empty() or matched["rank"].is_null().all():
        return "no finished SAE cells bracket a target L0"
    lines = []
    best = matched.filter(pl.col("rank") == 1).sort("activations", "width", "target_l0", "fvu")
    for (source, width), g in best.group_by("activations", "width", maintain_order=True):
        for (_,), t in g.group_by("target_l0", maintain_order=True):
            r = t.row(0, named=True)  # the lowest mean FVU of the first rank group
            why = "one seed: not told apart from" if r["n_seeds"] < 2 else "tied within noise with"
            others = f" ({why} {t.height - 1} more)" if t.height > 1 else ""
            lines.append(
                f"{source:10s} m={width:<5d} L0={r['target_l0']:<3g} "
                f"{rank_text(r['rank'], r['tied']):>3} {r['sweep']:36s} "
                f"FVU {mean_std(r['fvu'], r['fvu_std'], r['n_seeds'], _COL['fvu'])}{others} "
                f"({r['n_seeds']} seed(s), {r['read']})"
            )
    return "\n".join(lines)
