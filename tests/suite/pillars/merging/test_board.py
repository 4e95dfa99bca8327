"""The merging board in the shared style: percent with the unit in the header, n=1 instead of
a zero std, ranks shared within seed noise, method links and the JSON columns block; every
expectation worked out by hand from the rows below."""

from __future__ import annotations

import json
import re
from pathlib import Path

import polars as pl

from sparsebench.suite.pillars.merging.board import leaderboard, markdown, write_leaderboard


def _row(method: str, seed: int, norm: float, kind: str = "merge") -> dict:
    per = {"a": {"acc": norm, "loss": 0.1, "expert_acc": 1.0, "normalized": norm}}
    return {
        "model": "mlp", "method": method, "setting": "", "kind": kind, "status": "ok",
        "seed": seed, "tasks": "a", "norm_acc": norm, "avg_acc": norm, "min_norm_acc": norm,
        "density": 0.25, "sign_conflict": 0.5, "sign_conflict_chance": 0.5, "merge_s": 1250.0,
        "examples": 0, "chosen_json": "{}", "at_grid_edge": "", "per_task_models": False,
        "per_task_json": json.dumps(per), "curve_json": json.dumps(
            [{"lam": 0.3, "stage": 0, "val_avg_acc": norm, "val_norm_acc": norm}]
        ), "error": None, "cell_id": f"mlp/{method}/s{seed}", "benchmark": "b",
    }  # fmt: skip


def _runs(*rows: dict) -> pl.DataFrame:
    return pl.DataFrame(list(rows))


def test_close_merges_share_a_rank_and_separated_ones_do_not() -> None:
    runs = _runs(
        # ties 0.80/0.82/0.84 (mean 0.82, std 0.02); task_arithmetic 0.81/0.83/0.85 (0.83,
        # 0.02): t = 0.01 / sqrt(2 * 0.0004 / 3) = 0.61, p ≈ 0.57: tied.
        *(_row("ties", s, v) for s, v in enumerate((0.80, 0.82, 0.84))),
        *(_row("task_arithmetic", s, v) for s, v in enumerate((0.81, 0.83, 0.85))),
        # averaging 0.60/0.61/0.62: t = 0.22 / sqrt(0.0004/3 + 0.0001/3) = 17: separated.
        *(_row("averaging", s, v) for s, v in enumerate((0.60, 0.61, 0.62))),
    )
    board = leaderboard(runs)
    got = {m: (r, t) for m, r, t in board.select("method", "rank", "tied").rows()}
    assert got == {"task_arithmetic": (1, True), "ties": (1, True), "averaging": (3, False)}
    text = markdown(board, runs)
    assert "| =1 | `task_arithmetic` |" in text and "| 3 | " in text


def test_units_in_headers_percent_cells_and_one_seed_shown_as_such(tmp_path: Path) -> None:
    runs = _runs(_row("ties", 0, 0.8123), _row("zero_shot", 0, 0.7, kind="reference"))
    files = write_leaderboard(runs, tmp_path)
    text = files["md"].read_text(encoding="utf-8")
    assert "| norm. acc (% of expert) | avg acc (%) |" in text
    assert "| merge time (s) |" in text and "sign_conflict" not in text
    assert "81.2 (n=1)" in text and "± 0.0" not in text  # one seed: no invented spread
    assert "| 25 |" in text  # density 0.25 as percent
    assert "| 1,250 |" in text  # seconds with a thousands separator, not 1.25e+03
    # ties' registered source names its code at github.com/prateeky2806/ties-merging
    assert "[`ties`](https://github.com/prateeky2806/ties-merging)" in text
    assert not re.search(r"\[(?:'|\d)", text)  # no Python list in the text
    data = json.loads(files["json"].read_text(encoding="utf-8"))
    assert data["columns"]["norm_acc"]["unit"] == "fraction"
    assert data["columns"]["norm_acc"]["better"] == "higher"
    assert data["columns"]["merge_s"]["unit"] == "s"
    assert data["columns"]["merge_s"]["better"] == "lower"
    assert data["columns"]["method"]["better"] is None
    assert data["rows"][0]["norm_acc"] == 0.8123  # JSON keeps the fraction
