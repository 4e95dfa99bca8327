"""Tables of the kernels pillar: kernel-benchmark records -> validated runs table (pandera) ->
leaderboard (polars) with the verdicts of the claims about this pillar (judged by the claims
engine, :func:`sparsebench.suite.claims.judge_pillar`), and a speed-up against sparsity plot.

A record holds the rows of one (shape, pattern, sparsity, batch) cell: one per (backend, op).
With several trials (the section's ``trials``: independent jobs of the same cell) the boards
show one row per configuration, the median over its trials (:func:`over_trials`); the claims
are judged on the trials themselves.
"""

from __future__ import annotations

from pathlib import Path

import polars as pl

from sparsebench.suite import boards
from sparsebench.suite.boards import md_escape, md_table, write_board_files

from .patterns import DEFAULT as DEFAULT_PATTERN
from .table import OPS

BOARD_COLUMNS = [
    "out_features",
    "in_features",
    "pattern",
    "batch",
    "op",
    "sparsity",
    "backend",
    "nnz",
    "ms_median",
    "ms_p10",
    "ms_p90",
    "dense_ms",
    "dense_mask_ms",
    "speedup_vs_dense",
    "speedup_vs_dense_mask",
    "speedup_vs_torch_csr",
    "gflops_effective",
    "max_abs_err",
    "threads",
    "trials",
]

# What makes two rows the same configuration (its trials differ in nothing else), and the
# columns that vary from trial to trial: medians over the trials on the board.
CONFIGURATION = ["out_features", "in_features", "pattern", "batch", "op", "sparsity", "backend",
                 "dtype", "device", "threads"]  # fmt: skip
TIMINGS = ["ms_median", "ms_p10", "ms_p90", "dense_ms", "dense_mask_ms", "torch_csr_ms",
           "speedup_vs_dense", "speedup_vs_dense_mask", "speedup_vs_torch_csr",
           "gflops_effective"]  # fmt: skip


def over_trials(runs: pl.DataFrame) -> pl.DataFrame:
    """The ok rows, one per configuration: the median over its trials of each timing,
    speed-up and GFLOP/s, the largest ``max_abs_err``, and ``trials``
    (:func:`sparsebench.suite.boards.over_trials`)."""
    return boards.over_trials(runs, CONFIGURATION, TIMINGS, largest=("max_abs_err",))


def leaderboard(runs: pl.DataFrame) -> pl.DataFrame:
    """One row per ok configuration (the median over its trials), sorted by shape, pattern,
    batch, op, sparsity, then fastest backend first."""
    return (
        over_trials(runs)
        .select(BOARD_COLUMNS)
        .sort("out_features", "in_features", "pattern", "batch", "op", "sparsity", "ms_median")
    )


def with_pattern(runs: pl.DataFrame) -> pl.DataFrame:
    """``runs`` with the ``pattern`` column filled: a table aggregated from records written
    before patterns were an axis lacks it (or has it null), and those cells are all random."""
    if "pattern" not in runs.columns:
        return runs.with_columns(pattern=pl.lit(DEFAULT_PATTERN))
    return runs.with_columns(pl.col("pattern").fill_null(DEFAULT_PATTERN))


def claim_verdicts(runs: pl.DataFrame) -> pl.DataFrame:
    """The shipped claims about this pillar (``claims/*.yaml`` whose tests address
    ``kernels``), judged against ``runs`` by the claims engine: one row per claim with its
    statement, verdict and the engine's reason (its numbers). A claim whose cell this run lacks
    (e.g. a smaller slice, or another thread count than the claim names) is inconclusive."""
    from sparsebench.suite.claims import judge_pillar

    rows = [
        {
            "claim": v.claim.id,
            "statement": v.claim.statement,
            "verdict": v.verdict,
            "estimate": v.estimate,
            "low": v.low,
            "high": v.high,
            "test": v.reason,
        }
        for v in judge_pillar("kernels", with_pattern(runs))
    ]
    schema = dict.fromkeys(("claim", "statement", "verdict"), pl.String)
    schema |= {"estimate": pl.Float64, "low": pl.Float64, "high": pl.Float64, "test": pl.String}
    return pl.DataFrame(rows, schema=schema)


def break_even(runs: pl.DataFrame, ratio: str = "speedup_vs_dense") -> pl.DataFrame:
    """Per (shape, pattern, batch, op, backend): the lowest measured sparsity from which the
    backend is at least as fast as the reference at every higher sparsity (null: never), on
    the medians over trials."""
    ok = over_trials(runs).filter(~pl.col("backend").is_in(["dense"]))
    rows = []
    keys = ["out_features", "in_features", "pattern", "batch", "op", "backend"]
    for key, g in ok.group_by(keys, maintain_order=True):
        g = g.sort("sparsity")
        s, r = g["sparsity"].to_list(), g[ratio].to_list()
        even = None
        for i in range(len(s) - 1, -1, -1):
            if r[i] is None or r[i] < 1.0:
                break
            even = s[i]
        rows.append(dict(zip(keys, key), break_even_sparsity=even))
    schema = {k: runs.schema[k] for k in keys} | {"break_even_sparsity": pl.Float64}
    return pl.DataFrame(rows, schema=schema).sort(keys)


def summary(runs: pl.DataFrame, top: int = 3) -> str:
    """Lines for the terminal: the verdict of every claim about this pillar, with its numbers
    (the claims engine's reason)."""
    from sparsebench.suite.claims import judge_pillar

    return "\n".join(
        f"  {v.verdict}: {v.claim.id}: {v.reason}"
        for v in judge_pillar("kernels", with_pattern(runs))
    )


def pattern_comparison(runs: pl.DataFrame) -> pl.DataFrame:
    """Each ok row of a pattern other than ``random`` next to the ``random`` row of the same
    (shape, sparsity, batch, op, backend): both nnz, both median ms, both speed-ups vs dense
    and ``speedup_vs_random``, the pattern's speed-up vs dense over random's (above 1: the
    pattern runs faster). The two patterns are two cells, i.e. two jobs; each speed-up is
    against the dense layer timed in its own job, so load that differs between the jobs
    cancels in ``speedup_vs_random`` (not in the raw ms). Empty when only ``random`` ran.
    Medians over trials."""
    keys = ["out_features", "in_features", "sparsity", "batch", "op", "backend"]
    ok = over_trials(runs)
    base = ok.filter(pl.col("pattern") == DEFAULT_PATTERN).select(
        *keys,
        random_nnz="nnz",
        random_ms="ms_median",
        random_speedup_vs_dense="speedup_vs_dense",
    )
    other = ok.filter(pl.col("pattern") != DEFAULT_PATTERN).select(
        *keys, "pattern", "nnz", "ms_median", "speedup_vs_dense"
    )
    return (
        other.join(base, on=keys, how="left")
        .with_columns(
            speedup_vs_random=pl.col("speedup_vs_dense") / pl.col("random_speedup_vs_dense")
        )
        .sort("out_features", "in_features", "pattern", "batch", "op", "sparsity", "backend")
    )


def speedup_pivot(runs: pl.DataFrame, ratio: str = "speedup_vs_dense") -> pl.DataFrame:
    """Rows (shape, pattern, batch, op, sparsity), one column per backend holding ``ratio``
    (its median over trials)."""
    ok = over_trials(runs).with_columns(shape=pl.format("{}x{}", "out_features", "in_features"))
    if not ok.height:
        return pl.DataFrame()
    index = ["shape", "pattern", "batch", "op", "sparsity"]
    return ok.pivot(on="backend", index=index, values=ratio).sort(index)


def write_leaderboard(runs: pl.DataFrame, out_dir: Path) -> dict[str, Path]:
    """Write ``leaderboard.md`` (the claims' verdicts, break-even, speed-up tables, patterns
    against ``random``, every row), ``.csv``, ``.json`` and ``speedup.png`` (atomically).
    Returns the paths by kind."""
    out_dir = Path(out_dir)
    runs = with_pattern(runs)
    board = leaderboard(runs)
    threads = sorted(set(runs["threads"].drop_nulls().to_list()))
    devices = sorted(set(runs["device"].drop_nulls().to_list()))
    claims = claim_verdicts(runs)
    patterns = pattern_comparison(runs)
    lines = [
        f"# Kernels leaderboard: {runs['benchmark'][0]}",
        "",
        "Sparse linear layer y = x Wᵀ + b (W: out × in, with the cell's pattern: `random` is "
        "unstructured uniform) timed through autograd, every backend interleaved with `dense` "
        f"(nn.Linear) and `dense_mask` in one process; {threads} thread(s), device {devices}. "
        "Milliseconds are medians over the rounds; speed-up > 1 is faster than the reference, "
        "< 1 slower (a result, not a failure). One row per configuration: with several trials "
        "(independent jobs of the same cell, column `trials`), its ms, speed-ups and GFLOP/s "
        "are the medians over the trials and max_abs_err the largest; the claims are judged "
        "on the trials themselves (n = trials).",
        "",
        "## Claims (claims/*.yaml about this pillar, judged by the claims engine)",
        "",
        *md_table(claims),  # a claim file's text, escaped cell by cell
        "",
        "## Break-even sparsity vs dense (lowest sparsity from which a backend stays ≥ 1×)",
        "",
        *md_table(break_even(runs)),
        "",
        "## Speed-up vs dense nn.Linear",
        "",
        *md_table(speedup_pivot(runs)),
        "",
        "## Speed-up vs dense_mask",
        "",
        *md_table(speedup_pivot(runs, "speedup_vs_dense_mask")),
        "",
    ]
    if patterns.height:
        lines += [
            "## Patterns against `random` (same shape, sparsity, batch, op and backend)",
            "",
            *md_table(patterns),
            "",
        ]
    lines += ["## All rows", "", *md_table(board)]
    other = runs.filter(pl.col("status") != "ok").unique(["backend", "status", "error"])
    if other.height:
        lines += ["", "## Skipped or failed", ""]
        lines += [
            f"- {r['backend']} ({r['status']}): {md_escape(r['error'])}"  # registered names
            for r in other.iter_rows(named=True)
        ]
    json_data = {
        "rows": board.to_dicts(),
        "claims": claims.to_dicts(),
        "patterns": patterns.to_dicts(),
    }
    plots = {"speedup.png": lambda path: speedup_plot(runs, path)}
    return write_board_files(out_dir, "\n".join(lines) + "\n", board, json_data, plots)


def speedup_plot(runs: pl.DataFrame, path: Path) -> None:
    """Speed-up vs dense against sparsity, one line per (backend, pattern); one panel per
    (shape, op) at the batch closest to 64 (the claims' batch)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    ok = over_trials(runs).filter(pl.col("backend") != "dense")  # one point per configuration
    batches = sorted(set(ok["batch"].to_list())) or [64]
    batch = min(batches, key=lambda b: abs(b - 64))
    ok = ok.filter(pl.col("batch") == batch)
    shapes = sorted(set(zip(ok["out_features"].to_list(), ok["in_features"].to_list())))
    ops = [op for op in OPS if op in set(ok["op"].to_list())]
    fig, axes = plt.subplots(
        max(1, len(shapes)),
        max(1, len(ops)),
        figsize=(4 * max(1, len(ops)), 3.2 * max(1, len(shapes))),
        squeeze=False,
    )
    for i, (o, n) in enumerate(shapes):
        for j, op in enumerate(ops):
            ax = axes[i][j]
            cell = ok.filter(
                (pl.col("out_features") == o) & (pl.col("in_features") == n) & (pl.col("op") == op)
            )
            for (backend, pattern), g in cell.group_by("backend", "pattern", maintain_order=True):
                g = g.sort("sparsity")
                label = backend if pattern == DEFAULT_PATTERN else f"{backend} ({pattern})"
                ax.plot(g["sparsity"], g["speedup_vs_dense"], "o-", label=label)
            ax.axhline(1.0, color="grey", lw=0.8, ls="--")
            ax.set_yscale("log")
            ax.set_title(f"{o}×{n}, {op}, batch {batch}", fontsize=9)
            ax.set_xlabel("sparsity")
            ax.set_ylabel("speed-up vs dense")
            ax.legend(fontsize=7)
    fig.tight_layout()
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110, format="png")  # path may be a .tmp name
    plt.close(fig)
