"""The lm_pruning board: ranks within a pattern and sparsity, the dense model as the
reference of every group, and spec strings escaped."""

from __future__ import annotations

import json

import polars as pl

from sparsebench.suite.pillars.lm_pruning.board import leaderboard, summary, write_leaderboard


def _runs() -> pl.DataFrame:
    rows = []
    for seed in (0, 1, 2):
        for method, pattern, sp, ppl in [
            ("dense", "dense", 0.0, 3.0),
            ("magnitude", "unstructured", 0.5, 5.0),
            ("wanda", "unstructured", 0.5, 4.0 + 0.01 * seed),
            ("sparsegpt", "unstructured", 0.5, 3.5 + 0.01 * seed),
            ("magnitude", "2:4", 0.5, 9.0),
            ("sparsegpt", "2:4", 0.5, 6.0 + 0.01 * seed),
        ]:
            rows.append({
                "status": "ok", "model": "lm-x/model", "method": method, "setting": "default",
                "pattern": pattern, "target_sparsity": sp, "seed": seed, "perplexity": ppl,
                "ppl_ratio": ppl / 3.0, "test_loss": 1.0, "actual_sparsity": sp,
                "flops_rel_dense": 1 - sp, "prune_s": 1.0, "calib_sequences": 128,
                "error": None,
            })  # fmt: skip
    return pl.DataFrame(rows)


def test_ranks_within_each_pattern_and_sparsity_and_the_dense_model_is_not_ranked():
    board = leaderboard(_runs())
    ranks = {(r["pattern"], r["method"]): r["rank"] for r in board.iter_rows(named=True)}
    assert ranks[("dense", "dense")] is None
    assert [ranks[("unstructured", m)] for m in ("sparsegpt", "wanda", "magnitude")] == [1, 2, 3]
    assert [ranks[("2:4", m)] for m in ("sparsegpt", "magnitude")] == [1, 2]
    assert board.filter(pl.col("method") == "wanda")["seeds"].to_list() == [3]
    text = summary(_runs())
    assert "unstructured  50% 1    sparsegpt" in text and "ref  dense" in text


def test_board_files_escape_names_and_declare_units(tmp_path):
    runs = _runs().with_columns(pl.lit("<b>x</b>").alias("setting"))
    files = write_leaderboard(runs, tmp_path)
    md = files["md"].read_text()
    assert "<b>" not in md and "### unstructured, 50 % sparse" in md
    assert "Dense: perplexity 3.0000, 1.0000 nats/byte." in md
    data = json.loads(files["json"].read_text())
    assert data["columns"]["perplexity"]["better"] == "lower"
    assert files["perplexity.png"].stat().st_size > 10_000
