"""Tables of the kernels pillar: kernel-benchmark records -> validated runs table (pandera) ->
leaderboard (polars) with the issue's goals checked, and a speed-up against sparsity plot.

A record holds the rows of one (shape, sparsity, batch) cell: one per (backend, op).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import polars as pl

from sparsebench.suite.boards import md_table, write_board_files

from .table import OPS

BOARD_COLUMNS = [
    "out_features",
    "in_features",
    "batch",
    "op",
    "sparsity",
    "backend",
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
]


def leaderboard(runs: pl.DataFrame) -> pl.DataFrame:
    """Every ok row, sorted by shape, batch, op, sparsity, then fastest backend first."""
    return (
        runs.filter(pl.col("status") == "ok")
        .select(BOARD_COLUMNS)
        .sort("out_features", "in_features", "batch", "op", "sparsity", "ms_median")
    )


@dataclass(frozen=True)
class Goal:
    """A speed-up the benchmark must show: ``backend``'s ``ratio`` >= ``target`` on one cell
    (layer shape, batch, sparsity, op) measured with ``threads`` threads in ``dtype``."""

    text: str
    backend: str
    op: str
    sparsity: float
    ratio: str  # a speedup_vs_* column
    target: float
    shape: tuple[int, int] = (4096, 4096)
    batch: int = 64
    threads: int = 2
    dtype: str = "float32"


# The kernels issue's goals on a 2-core CPU (4096 x 4096, batch 64).
GOALS = (
    Goal("forward, 95 %: ≥ 5× dense", "cpu", "forward", 0.95, "speedup_vs_dense", 5.0),
    Goal("forward, 95 %: ≥ 1.5× torch_csr", "cpu", "forward", 0.95, "speedup_vs_torch_csr", 1.5),
    Goal("forward, 99 %: ≥ 10× dense", "cpu", "forward", 0.99, "speedup_vs_dense", 10.0),
    Goal("fwd+bwd, 95 %: ≥ 3× dense_mask", "cpu", "fwd_bwd", 0.95, "speedup_vs_dense_mask", 3.0),
)


def goals(runs: pl.DataFrame, device: str = "cpu") -> pl.DataFrame:
    """Each goal with its measured ratio and verdict: ``pass``, ``fails`` or ``not measured``
    (the cell or backend is not in the runs, e.g. a smaller slice)."""
    ok = runs.filter((pl.col("status") == "ok") & (pl.col("device") == device))
    out = []
    for g in GOALS:
        cell = ok.filter(
            (pl.col("backend") == g.backend)
            & (pl.col("op") == g.op)
            & ((pl.col("sparsity") - g.sparsity).abs() < 1e-9)
            & (pl.col("out_features") == g.shape[0])
            & (pl.col("in_features") == g.shape[1])
            & (pl.col("batch") == g.batch)
        )
        right = cell.filter((pl.col("threads") == g.threads) & (pl.col("dtype") == g.dtype))
        value = right[g.ratio][0] if right.height else None
        if value is not None:
            verdict = "pass" if value >= g.target else "fails"
        elif cell.height:  # the cell ran, but not under the goal's conditions
            verdict = f"not measured ({g.threads} threads, {g.dtype})"
        else:
            verdict = "not measured"
        out.append(
            {
                "goal": f"{g.backend} {g.text}",
                "threads": g.threads,
                "measured": value,
                "verdict": verdict,
            }
        )
    return pl.DataFrame(
        out,
        schema={
            "goal": pl.String,
            "threads": pl.Int64,
            "measured": pl.Float64,
            "verdict": pl.String,
        },
    )


def break_even(runs: pl.DataFrame, ratio: str = "speedup_vs_dense") -> pl.DataFrame:
    """Per (shape, batch, op, backend): the lowest measured sparsity from which the backend is
    at least as fast as the reference at every higher sparsity (null: never)."""
    ok = runs.filter(pl.col("status") == "ok").filter(~pl.col("backend").is_in(["dense"]))
    rows = []
    keys = ["out_features", "in_features", "batch", "op", "backend"]
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
    """Lines for the terminal: the goals' verdicts and the best backend per headline cell."""
    lines = []
    for r in goals(runs).iter_rows(named=True):
        value = "–" if r["measured"] is None else f"{r['measured']:.2f}x"
        lines.append(f"  {r['goal']}: {value} ({r['verdict']})")
    return "\n".join(lines)


def speedup_pivot(runs: pl.DataFrame, ratio: str = "speedup_vs_dense") -> pl.DataFrame:
    """Rows (shape, batch, op, sparsity), one column per backend holding ``ratio``."""
    ok = runs.filter(pl.col("status") == "ok").with_columns(
        shape=pl.format("{}x{}", "out_features", "in_features")
    )
    if not ok.height:
        return pl.DataFrame()
    return ok.pivot(on="backend", index=["shape", "batch", "op", "sparsity"], values=ratio).sort(
        "shape", "batch", "op", "sparsity"
    )


def write_leaderboard(runs: pl.DataFrame, out_dir: Path) -> dict[str, Path]:
    """Write ``leaderboard.md`` (goals, break-even, speed-up tables, every row), ``.csv``,
    ``.json`` and ``speedup.png`` (atomically). Returns the paths by kind."""
    out_dir = Path(out_dir)
    board = leaderboard(runs)
    threads = sorted(set(runs["threads"].drop_nulls().to_list()))
    devices = sorted(set(runs["device"].drop_nulls().to_list()))
    goal_table = goals(runs, devices[0] if devices else "cpu")
    lines = [
        f"# Kernels leaderboard: {runs['benchmark'][0]}",
        "",
        "Sparse linear layer y = x Wᵀ + b (W: out × in, unstructured random pattern) timed "
        "through autograd, every backend interleaved with `dense` (nn.Linear) and `dense_mask` "
        f"in one process; {threads} thread(s), device {devices}. Milliseconds are medians "
        "over the rounds; speed-up > 1 is faster than the reference, < 1 slower (a result, "
        "not a failure).",
        "",
        "## Goals (4096 × 4096, batch 64)",
        "",
        *md_table(goal_table),
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
        "## All rows",
        "",
        *md_table(board),
    ]
    other = runs.filter(pl.col("status") != "ok").unique(["backend", "status", "error"])
    if other.height:
        lines += ["", "## Skipped or failed", ""]
        lines += [
            f"- {r['backend']} ({r['status']}): {r['error']}" for r in other.iter_rows(named=True)
        ]
    json_data = {"rows": board.to_dicts(), "goals": goal_table.to_dicts()}
    plots = {"speedup.png": lambda path: speedup_plot(runs, path)}
    return write_board_files(out_dir, "\n".join(lines) + "\n", board, json_data, plots)


def speedup_plot(runs: pl.DataFrame, path: Path) -> None:
    """Speed-up vs dense against sparsity, one line per backend; one panel per (shape, op) at
    the batch closest to 64 (the goals' batch)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    ok = runs.filter((pl.col("status") == "ok") & (pl.col("backend") != "dense"))
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
            for (backend,), g in cell.group_by("backend", maintain_order=True):
                g = g.sort("sparsity")
                ax.plot(g["sparsity"], g["speedup_vs_dense"], "o-", label=backend)
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
