"""lm_pruning board: runs table -> leaderboard (per pattern and sparsity: method, perplexity
± std over calibration draws, ratio to dense, actual sparsity, FLOPs, pruning time) and the
perplexity-against-sparsity plot."""

from __future__ import annotations

from pathlib import Path

import polars as pl

from sparsebench.suite.boards import (
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

FAMILIES = ("lm_pruning",)
KEYS = ("model", "pattern", "target_sparsity", "method", "setting")
COLUMNS = [
    Col("model", "model", show="text"),
    Col("pattern", "pattern", show="text"),
    Col("target_sparsity", "target sparsity (%)", PCT, None, "pct", 0),
    Col("method", "method", show="method"),
    Col("setting", "setting", show="text"),
    Col("perplexity", "perplexity (per byte)", "", LOWER, "num", 4),
    Col("perplexity_std", "std", "", None, "num", 4),
    Col("ppl_ratio", "÷ dense", "", LOWER, "times", 3),
    Col("test_loss", "loss (nats/byte)", "nats/byte", LOWER, "num", 4),
    Col("actual_sparsity", "actual sparsity (%)", PCT, None, "pct", 1),
    Col("flops_rel_dense", "FLOPs ÷ dense", "", LOWER, "times", 2),
    Col("prune_s", "prune (s)", "s", LOWER, "num", 2),
    Col("calib_sequences", "calibration windows", "", None, "int"),
    Col("seeds", "n", "", None, "int"),
]
_COL = {c.key: c for c in COLUMNS}


def _ok(runs: pl.DataFrame) -> pl.DataFrame:
    return runs.filter(pl.col("status") == "ok")


def leaderboard(runs: pl.DataFrame) -> pl.DataFrame:
    """One row per (model, pattern, target sparsity, method, setting): means ± std over the
    calibration draws, ranked by perplexity within each (model, pattern, sparsity); the dense
    model is the reference of every group and not ranked."""
    ok = _ok(runs)
    if ok.is_empty():
        return pl.DataFrame()
    board = (
        ok.group_by(*KEYS, maintain_order=True)
        .agg(
            pl.len().cast(pl.Int64).alias("seeds"),
            pl.col("perplexity").mean(),
            pl.col("perplexity").std().alias("perplexity_std"),
            pl.col("ppl_ratio").mean(),
            pl.col("test_loss").mean(),
            pl.col("actual_sparsity").mean(),
            pl.col("flops_rel_dense").mean(),
            pl.col("prune_s").mean(),
            pl.col("calib_sequences").max(),
        )
        .with_columns((pl.col("pattern") == "dense").alias("_ref"))
        .sort(
            "model",
            "_ref",
            "pattern",
            "target_sparsity",
            "perplexity",
            descending=[False, True, False, False, False],
        )  # fmt: skip
    )
    board = board.with_columns(pl.when(~pl.col("_ref")).then(pl.col("perplexity")).alias("_by"))
    board = noise_ranks(
        board, "_by", "perplexity_std", "seeds", ["model", "pattern", "target_sparsity"], False
    )
    return board.drop("_ref", "_by")


def markdown(board: pl.DataFrame, runs: pl.DataFrame) -> str:
    lines = [
        "# Language-model pruning",
        "",
        "Post-training pruning of the suite's byte-level language model (every linear layer of "
        "its blocks; embeddings, LayerNorms and the unembedding dense). Perplexity per byte on "
        "held-out files of the stdlib corpus, mean ± std over calibration draws (one draw: its "
        "value and n=1; a method that reads no calibration gives equal draws). ÷ dense: the "
        "perplexity over the unpruned model's on the same windows. Rank by perplexity within "
        "a pattern and sparsity; =k: a rank shared with methods that Welch's t-test (5 %) "
        "cannot tell from the group's best. leaderboard.csv and .json keep every column, "
        "shares as fractions.",
        "",
    ]
    if board.is_empty():
        return "\n".join([*lines, "No finished cells.", ""])
    shown = board.with_columns(
        pl.Series(
            "rank_md",
            [
                rank_text(r, t) if r is not None else "ref"
                for r, t in zip(board["rank"], board["tied"], strict=True)
            ],
            dtype=pl.String,
        ),  # fmt: skip
        pl.Series(
            "method_md",
            [method_link(m, FAMILIES) if m != "dense" else "dense" for m in board["method"]],
            dtype=pl.String,
        ),
        pl.Series(
            "ppl_md",
            [
                mean_std(m, s, n, _COL["perplexity"])
                for m, s, n in board.select("perplexity", "perplexity_std", "seeds").rows()
            ],
            dtype=pl.String,
        ),
    )
    main = [
        Col("rank_md", "rank", show="md"),
        Col("method_md", "method", show="md"),
        _COL["setting"],
        Col("ppl_md", _COL["perplexity"].header, show="md"),
        _COL["ppl_ratio"],
        _COL["actual_sparsity"],
        _COL["flops_rel_dense"],
        _COL["prune_s"],
        _COL["calib_sequences"],
    ]
    for (model,), g in shown.group_by("model", maintain_order=True):
        dense = g.filter(pl.col("pattern") == "dense")
        lines += [f"## {md_escape(model)}", ""]
        if dense.height:
            r = dense.row(0, named=True)
            # the unpruned model does not depend on the calibration draw: one value
            lines += [f"Dense: perplexity {r['perplexity']:.4f}, {r['test_loss']:.4f} "
                      "nats/byte.", ""]  # fmt: skip
        for (pattern, sp), h in g.filter(pl.col("pattern") != "dense").group_by(
            "pattern", "target_sparsity", maintain_order=True
        ):
            lines += [f"### {md_escape(pattern)}, {100 * sp:.0f} % sparse", ""]
            lines += md_frame(h, main, FAMILIES) + [""]
    lines += failed_lines(runs)
    lines += sources_lines([m for m in board["method"].unique().to_list() if m != "dense"],
                           FAMILIES)  # fmt: skip
    return "\n".join(lines)


def write_leaderboard(runs: pl.DataFrame, out_dir: Path) -> dict[str, Path]:
    board = leaderboard(runs)
    json_data = board_json(COLUMNS, board) if board.height else None
    plots = {"perplexity.png": lambda p: plot_perplexity(board, p)}
    return write_board_files(out_dir, markdown(board, runs), board, json_data, plots)


PATTERN_MARKERS = {"2:4": "s", "4:8": "^"}  # other N:M patterns: the next of OTHER_MARKERS
OTHER_MARKERS = "Dv<>p*"


def plot_perplexity(board: pl.DataFrame, path: Path) -> None:
    """Perplexity against the actual sparsity of the linear layers (log y in plain numbers):
    one colour per method, a line through its unstructured sparsities and one marker per N:M
    pattern (the same marker for a pattern across methods); the dense model dashed; the legend
    beside the axes, never over a point."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from sparsebench.suite.boards import log_ticks

    fig, ax = plt.subplots(figsize=(7.8, 4.2), layout="constrained")
    pruned = board.filter(pl.col("pattern") != "dense") if board.height else board
    if pruned.is_empty():
        ax.text(0.5, 0.5, "no finished cells", ha="center", transform=ax.transAxes)
    else:
        others = iter(OTHER_MARKERS)
        markers = dict(PATTERN_MARKERS)
        for p in sorted(set(pruned["pattern"]) - {"unstructured"}):
            markers.setdefault(p, next(others, "x"))
        several = pruned.select("method", "setting").unique().height > pruned["method"].n_unique()
        groups = pruned.group_by("method", "setting", maintain_order=True)
        for i, ((method, setting), g) in enumerate(groups):
            color = f"C{i % 10}"
            if several:  # a method with several settings: one line each, named
                method = f"{method} ({setting})"
            un = g.filter(pl.col("pattern") == "unstructured").sort("target_sparsity")
            if un.height:
                ax.errorbar((100 * un["actual_sparsity"]).to_list(), un["perplexity"].to_list(),
                            yerr=un["perplexity_std"].fill_null(0).to_list(), color=color,
                            marker="o", capsize=3, label=f"{method} unstructured")  # fmt: skip
            for r in g.filter(pl.col("pattern") != "unstructured").iter_rows(named=True):
                ax.errorbar([100 * r["actual_sparsity"]], [r["perplexity"]],
                            yerr=[r["perplexity_std"] or 0], color=color, capsize=3,
                            marker=markers[r["pattern"]], markersize=8, linestyle="none",
                            markerfacecolor="none", label=f"{method} {r['pattern']}")  # fmt: skip
        dense = board.filter(pl.col("pattern") == "dense")
        if dense.height:
            ax.axhline(dense["perplexity"][0], color="gray", linestyle="--", label="dense")
        ax.set_yscale("log")
        log_ticks(ax.yaxis)
        ax.set_xlabel("sparsity of the linear layers (%)")
        ax.set_ylabel("held-out perplexity per byte (log)")
        ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0)
    ax.set_title("Language-model pruning: perplexity against sparsity (lower is better)")
    fig.savefig(path, format="png", dpi=110)
    plt.close(fig)


def summary(runs: pl.DataFrame, top: int = 3) -> str:
    board = leaderboard(runs)
    if board.is_empty():
        return "no finished lm_pruning cells"
    lines = []
    for r in board.iter_rows(named=True):
        if r["rank"] is not None and r["rank"] > top:
            continue
        tag = "ref" if r["rank"] is None else rank_text(r["rank"], r["tied"])
        ppl = mean_std(r["perplexity"], r["perplexity_std"], r["seeds"], _COL["perplexity"])
        name = r["method"] if r["setting"] == "default" else f"{r['method']} ({r['setting']})"
        lines.append(
            f"{r['pattern']:12s} {100 * r['target_sparsity']:3.0f}% {tag:4s} {name:10s} "
            f"perplexity {ppl}"
        )
    return "\n".join(lines)
