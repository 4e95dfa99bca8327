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
from sparsebench.suite.boards import (
    HIGHER,
    LOWER,
    PCT,
    Col,
    board_json,
    cell,
    join_values,
    log_ticks,
    md_code,
    md_escape,
    md_frame,
    sources_lines,
    write_board_files,
)

from .columns import OPS
from .patterns import DEFAULT as DEFAULT_PATTERN

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

FAMILIES = ("kernels",)

# Every column: unit in CSV/JSON, better direction, Markdown header.
COLUMNS: list[Col] = [
    Col("out_features", "out", "count", show="int"),
    Col("in_features", "in", "count", show="int"),
    Col("shape", "shape (out×in)", show="text"),
    Col("pattern", "pattern", show="text"),
    Col("batch", "batch", "count", show="int"),
    Col("op", "op", show="text"),
    Col("sparsity", "sparsity (%)", PCT, show="pct", digits=0),
    Col("backend", "backend", show="method"),
    Col("nnz", "nonzeros", "count", show="int"),
    Col("ms_median", "median (ms)", "ms", LOWER),
    Col("ms_p10", "p10 (ms)", "ms", LOWER),
    Col("ms_p90", "p90 (ms)", "ms", LOWER),
    Col("dense_ms", "dense (ms)", "ms", LOWER),
    Col("dense_mask_ms", "dense × mask (ms)", "ms", LOWER),
    Col("speedup_vs_dense", "speed-up vs dense", "ratio", HIGHER, "times"),
    Col("speedup_vs_dense_mask", "vs dense × mask", "ratio", HIGHER, "times"),
    Col("speedup_vs_torch_csr", "vs torch CSR", "ratio", HIGHER, "times"),
    Col("gflops_effective", "useful GFLOP/s", "GFLOP/s", HIGHER),
    Col("max_abs_err", "max abs error", "1", LOWER, "sci"),
    Col("threads", "threads", "count", show="int"),
    Col("trials", "trials", "count", HIGHER, "int"),
    Col("break_even_sparsity", "break-even sparsity (%)", PCT, LOWER, "pct", 0),
    Col("claim", "claim", show="code"),
    Col("statement", "statement", show="text"),
    Col("verdict", "verdict", show="text"),
    Col("estimate", "estimate", "claim's metric"),
    Col("low", "low", "claim's metric"),
    Col("high", "high", "claim's metric"),
    Col("test", "test", show="text"),
    Col("random_nnz", "random nonzeros", "count", show="int"),
    Col("random_ms", "random median (ms)", "ms", LOWER),
    Col("random_speedup_vs_dense", "random speed-up vs dense", "ratio", HIGHER, "times"),
    Col("speedup_vs_random", "speed-up vs random", "ratio", HIGHER, "times"),
]
_COL = {c.key: c for c in COLUMNS}


def _cols(*keys: str) -> list[Col]:
    return [_COL[k] for k in keys]


def _with_shape(df: pl.DataFrame) -> pl.DataFrame:
    return df.with_columns(shape=pl.format("{}×{}", "out_features", "in_features"))


def _ms_range(df: pl.DataFrame) -> pl.DataFrame:
    """``df`` with ``ms_md``: the median and the p10–p90 range of the rounds, ``1.23
    (1.10–1.40)``."""
    c = _COL["ms_median"]
    return df.with_columns(
        pl.Series(
            "ms_md",
            [
                "–" if m is None else f"{cell(m, c)} ({cell(lo, c)}–{cell(hi, c)})"
                for m, lo, hi in df.select("ms_median", "ms_p10", "ms_p90").rows()
            ],
            dtype=pl.String,
        )
    )


def _pivot_lines(pivot: pl.DataFrame) -> list[str]:
    """The speed-up pivot with its backend columns as ratios (× after the number)."""
    if pivot.is_empty():
        return []
    keys = ["shape", "pattern", "batch", "op", "sparsity"]
    ratio = [Col(b, md_code(b), "ratio", HIGHER, "times") for b in pivot.columns if b not in keys]
    return md_frame(pivot, _cols(*keys) + ratio, FAMILIES)


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


def leaderboard(runs: pl.DataFrame, trials: pl.DataFrame | None = None) -> pl.DataFrame:
    """One row per ok configuration (the median over its trials: ``trials``, or
    :func:`over_trials` of ``runs``), sorted by shape, pattern, batch, op, sparsity, then
    fastest backend first."""
    return (
        (over_trials(runs) if trials is None else trials)
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


def break_even(
    runs: pl.DataFrame, ratio: str = "speedup_vs_dense", trials: pl.DataFrame | None = None
) -> pl.DataFrame:
    """Per (shape, pattern, batch, op, backend): the lowest measured sparsity from which the
    backend is at least as fast as the reference at every higher sparsity (null: never), on
    the medians over trials (``trials``, or :func:`over_trials` of ``runs``)."""
    ok = (over_trials(runs) if trials is None else trials).filter(
        ~pl.col("backend").is_in(["dense"])
    )
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
    """Lines for the terminal: per layer, sparsity and op, the fastest backend's speed-up over
    dense (medians over trials); then the decided claims about this pillar with their numbers
    (the claims engine's reason) and how many are undecided (the board lists them)."""
    from sparsebench.suite.claims import judge_pillar

    keys = ["out_features", "in_features", "batch", "sparsity", "op"]
    ok = over_trials(runs).filter(
        (pl.col("backend") != "dense") & pl.col("speedup_vs_dense").is_not_null()
    )
    best = (
        ok.sort("speedup_vs_dense", descending=True)
        .group_by(keys, maintain_order=True)
        .first()
        .sort(keys)
    )
    lines = [
        f"  {r['out_features']}x{r['in_features']} batch {r['batch']} sparsity "
        f"{r['sparsity']:.0%} {r['op']}: {r['backend']} {r['speedup_vs_dense']:.2f}x dense "
        f"({r['trials']} trial(s))"
        for r in best.iter_rows(named=True)
    ]
    verdicts = judge_pillar("kernels", with_pattern(runs))
    lines += [
        f"  {v.verdict}: {v.claim.id}: {v.reason}" for v in verdicts if v.verdict != "inconclusive"
    ]
    undecided = sum(v.verdict == "inconclusive" for v in verdicts)
    if undecided:
        lines.append(f"  {undecided} claim(s) undecided here (the board's claims table says why)")
    return "\n".join(lines)


def pattern_comparison(runs: pl.DataFrame, trials: pl.DataFrame | None = None) -> pl.DataFrame:
    """Each ok row of a pattern other than ``random`` next to the ``random`` row of the same
    (shape, sparsity, batch, op, backend): both nnz, both median ms, both speed-ups vs dense
    and ``speedup_vs_random``, the pattern's speed-up vs dense over random's (above 1: the
    pattern runs faster). The two patterns are two cells, i.e. two jobs; each speed-up is
    against the dense layer timed in its own job, so load that differs between the jobs
    cancels in ``speedup_vs_random`` (not in the raw ms). Empty when only ``random`` ran.
    Medians over trials (``trials``, or :func:`over_trials` of ``runs``)."""
    keys = ["out_features", "in_features", "sparsity", "batch", "op", "backend"]
    ok = over_trials(runs) if trials is None else trials
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


def speedup_pivot(
    runs: pl.DataFrame, ratio: str = "speedup_vs_dense", trials: pl.DataFrame | None = None
) -> pl.DataFrame:
    """Rows (shape, pattern, batch, op, sparsity), one column per backend holding ``ratio``
    (its median over trials: ``trials``, or :func:`over_trials` of ``runs``)."""
    ok = _with_shape(over_trials(runs) if trials is None else trials)
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
    trials = over_trials(runs)  # once: every table below reads the medians over trials
    board = leaderboard(runs, trials)
    threads = join_values(sorted(set(runs["threads"].drop_nulls().to_list())))
    devices = md_escape(join_values(sorted(set(runs["device"].drop_nulls().to_list()))))
    claims = claim_verdicts(runs)
    patterns = pattern_comparison(runs, trials)
    lines = [
        f"# Kernels leaderboard: {md_escape(runs['benchmark'][0])}",
        "",
        "Sparse linear layer y = x Wᵀ + b (W: out × in, with the cell's pattern: `random` is "
        "unstructured uniform) timed through autograd, every backend interleaved with `dense` "
        f"(nn.Linear) and `dense_mask` in one process; {threads} thread(s), device {devices}. "
        "Milliseconds are medians over the rounds, with the p10–p90 range of the rounds in "
        "brackets; speed-up > 1× is faster than the reference, < 1× slower (a result, not a "
        "failure). One row per configuration: with several trials (independent jobs of the "
        "same cell, column trials), its ms, speed-ups and GFLOP/s are the medians over the "
        "trials and the max abs error the largest; the claims are judged on the trials "
        "themselves (n = trials). leaderboard.csv and .json keep every column, sparsity as a "
        "fraction.",
        "",
        "## Claims (claims/*.yaml about this pillar, judged by the claims engine)",
        "",
        # a claim file's text, escaped cell by cell
        *md_frame(
            claims, _cols("claim", "statement", "verdict", "estimate", "low", "high", "test")
        ),  # fmt: skip
        "",
        "## Break-even sparsity vs dense (lowest sparsity from which a backend stays ≥ 1×)",
        "",
        *md_frame(
            _with_shape(break_even(runs, trials=trials)),
            _cols("shape", "pattern", "batch", "op", "backend", "break_even_sparsity"),
            FAMILIES,
        ),  # fmt: skip
        "",
        "## Speed-up vs dense nn.Linear",
        "",
        *_pivot_lines(speedup_pivot(runs, trials=trials)),
        "",
        "## Speed-up vs dense_mask",
        "",
        *_pivot_lines(speedup_pivot(runs, "speedup_vs_dense_mask", trials)),
        "",
    ]
    if patterns.height:
        keys = ("shape", "sparsity", "batch", "op", "backend", "pattern", "nnz", "random_nnz",
                "ms_median", "random_ms", "speedup_vs_dense", "random_speedup_vs_dense",
                "speedup_vs_random")  # fmt: skip
        lines += [
            "## Patterns against `random` (same shape, sparsity, batch, op and backend)",
            "",
            *md_frame(_with_shape(patterns), _cols(*keys), FAMILIES),
            "",
        ]
    every = _cols("shape", "pattern", "batch", "op", "sparsity", "backend", "nnz")
    every += [Col("ms_md", "median (p10–p90) (ms)", show="md")]
    every += _cols("speedup_vs_dense", "speedup_vs_dense_mask", "speedup_vs_torch_csr",
                   "gflops_effective", "max_abs_err", "trials")  # fmt: skip
    lines += ["## All rows", "", *md_frame(_ms_range(_with_shape(board)), every, FAMILIES)]
    other = runs.filter(pl.col("status") != "ok").unique(["backend", "status", "error"])
    if other.height:
        lines += ["", "## Skipped or failed", ""]
        lines += [
            f"- {md_code(r['backend'])} ({md_escape(r['status'])}): {md_escape(r['error'])}"
            for r in other.iter_rows(named=True)
        ]
    lines += ["", *sources_lines(sorted(set(board["backend"].to_list())), FAMILIES)]
    json_data = board_json(COLUMNS, board, claims=claims, patterns=patterns)
    plots = {"speedup.png": lambda path: speedup_plot(runs, path, trials)}
    return write_board_files(out_dir, "\n".join(lines) + "\n", board, json_data, plots)


def speedup_plot(runs: pl.DataFrame, path: Path, trials: pl.DataFrame | None = None) -> None:
    """Speed-up vs dense against sparsity, one line per (backend, pattern); one panel per
    (shape, op) at the batch closest to 64 (the claims' batch); medians over trials
    (``trials``, or :func:`over_trials` of ``runs``)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    ok = (over_trials(runs) if trials is None else trials).filter(pl.col("backend") != "dense")
    batches = sorted(set(ok["batch"].to_list())) or [64]
    batch = min(batches, key=lambda b: abs(b - 64))
    ok = ok.filter(pl.col("batch") == batch)
    shapes = sorted(set(zip(ok["out_features"].to_list(), ok["in_features"].to_list())))
    ops = [op for op in OPS if op in set(ok["op"].to_list())]
    labels = ok.select("backend", "pattern").unique(maintain_order=True).rows()
    names = [b if p == DEFAULT_PATTERN else f"{b} ({p})" for b, p in labels]
    color = {n: f"C{i % 10}" for i, n in enumerate(names)}  # one colour per line in every panel
    fig, axes = plt.subplots(
        max(1, len(shapes)),
        max(1, len(ops)),
        figsize=(4 * max(1, len(ops)) + 1.8, 3.2 * max(1, len(shapes))),
        squeeze=False,
        layout="constrained",
    )
    handles: dict[str, object] = {}
    for i, (o, n) in enumerate(shapes):
        for j, op in enumerate(ops):
            ax = axes[i][j]
            cell = ok.filter(
                (pl.col("out_features") == o) & (pl.col("in_features") == n) & (pl.col("op") == op)
            )
            for (backend, pattern), g in cell.group_by("backend", "pattern", maintain_order=True):
                g = g.sort("sparsity")
                label = backend if pattern == DEFAULT_PATTERN else f"{backend} ({pattern})"
                y = g["speedup_vs_dense"]
                # the backend's rounds p10–p90 as speed-ups against dense's median: the
                # slowest rounds (p90 ms) give the low end
                low = y - g["dense_ms"] / g["ms_p90"]
                high = g["dense_ms"] / g["ms_p10"] - y
                err = [
                    low.fill_null(0.0).clip(0.0).to_list(),
                    high.fill_null(0.0).clip(0.0).to_list(),
                ]
                handles[label] = ax.errorbar(100 * g["sparsity"], y, yerr=err, fmt="o-", capsize=3,
                                             markersize=4, color=color[label])  # fmt: skip
            ax.axhline(1.0, color="grey", lw=0.8, ls="--")
            ax.set_yscale("log")
            log_ticks(ax.yaxis)
            ax.grid(True, which="major", alpha=0.3)
            ax.set_title(f"{o}×{n}, {op}, batch {batch}", fontsize=9)
            ax.set_xlabel("sparsity (%)")
            ax.set_ylabel("speed-up vs dense (×, log scale)")
            ax.set_xticks(sorted({100 * v for v in cell["sparsity"].to_list()}))
    if handles:  # one legend for all panels, outside them: it never covers a point
        fig.legend(handles.values(), handles.keys(), loc="outside right upper", fontsize=8)
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110, format="png")  # path may be a .tmp name
    plt.close(fig)
