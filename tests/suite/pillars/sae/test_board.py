"""The SAE board in the shared style: sweeps inside each other's seed noise at matched L0
share a rank, separated ones do not, one seed shows n=1, the JSON declares units and
directions, and an architecture links to its paper. Expectations worked out by hand."""

from __future__ import annotations

import json
import re

from sparsebench.suite.pillars.sae.board import matched_l0, write_leaderboard

from .test_pillar import _runs


def _at_8(rows: list[tuple]) -> dict[str, tuple]:
    m = matched_l0(_runs(rows), targets=(8.0,))
    return {r["sweep"]: (r["rank"], r["tied"]) for r in m.iter_rows(named=True)}


def test_sweeps_within_noise_share_a_rank_and_separated_ones_do_not():
    # Every setting measured at L0 = 8 in both seeds: topk FVU 0.20 / 0.24 (mean 0.22, std
    # 0.028), batchtopk 0.21 / 0.25 (0.23, 0.028): Welch t = 0.01 / 0.028 = 0.35, p ≈ 0.76.
    close = [
        ("topk", {"k": 8}, 0, 8.0, 0.20, 0.0), ("topk", {"k": 8}, 1, 8.0, 0.24, 0.0),
        ("batchtopk", {"k": 8}, 0, 8.0, 0.21, 0.0), ("batchtopk", {"k": 8}, 1, 8.0, 0.25, 0.0),
    ]  # fmt: skip
    assert _at_8(close) == {"topk": (1, True), "batchtopk": (1, True)}
    # relu_l1 0.60 / 0.61 (0.605, 0.0071) against topk: t = 0.385 / 0.0206 = 18.7, p ≈ 0.02.
    apart = close[:2] + [
        ("relu_l1", {"l1_coeff": 1.0}, 0, 8.0, 0.60, 0.0),
        ("relu_l1", {"l1_coeff": 1.0}, 1, 8.0, 0.61, 0.0),
    ]
    assert _at_8(apart) == {"topk": (1, False), "relu_l1": (2, False)}


def test_one_seed_units_json_columns_and_links(tmp_path):
    rows = [("topk", {"k": 8}, 0, 8.0, 0.2, 0.05), ("topk", {"k": 16}, 0, 16.0, 0.1, 0.1)]
    files = write_leaderboard(_runs(rows), tmp_path, targets=(8.0,))
    md = files["md"].read_text(encoding="utf-8")
    assert "| FVU | L0 (latents/token) | dead latents (%) |" in md
    assert "0.200 (n=1)" in md and "± –" not in md  # one seed: no spread claimed
    assert "| 5.0 (n=1) |" in md  # dead fraction 0.05 in percent
    # TopK's registered source has no URL: a code span, and its text under Sources
    assert "`topk`" in md and "Scaling and evaluating sparse autoencoders" in md
    assert not re.search(r"\[(?:'|\d)", md)
    data = json.loads(files["json"].read_text(encoding="utf-8"))
    assert data["columns"]["fvu"] == {"unit": "1", "better": "lower", "header": "FVU"}
    assert data["columns"]["dead_fraction"]["unit"] == "fraction"
    assert data["columns"]["rank"]["better"] == "lower"
    assert data["rows"][0]["dead_fraction"] == 0.05 and len(data["matched_l0"]) == 1
