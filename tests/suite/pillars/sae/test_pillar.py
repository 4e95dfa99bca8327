"""The SAE pillar: spec errors, cells, the held-out evaluation and the matched-L0 board."""

from __future__ import annotations

import json

import polars as pl
import pytest
import torch

from sparsebench.suite.pillar import get_pillar
from sparsebench.suite.pillars.sae.board import (
    _interp,
    leaderboard,
    matched_l0,
    write_leaderboard,
)
from sparsebench.suite.pillars.sae.job import evaluate
from sparsebench.suite.pillars.sae.sources import Activations, load
from sparsebench.suite.spec import SpecError, validate

PILLAR = get_pillar("sae")


def _spec(**section):
    base = PILLAR.example()["sae"]
    data = {"benchmark": "s", "data_root": "/nonexistent-data", "sae": {**base, **section}}
    return validate(data, source="s.yaml")


@pytest.mark.parametrize(
    ("section", "expected"),
    [
        ({"methods": {"relu": {}}}, r"sae\.methods.*'relu'.*topk"),
        ({"methods": {"topk": {"k": 64}}},
         r"sae\.methods\.topk: k = 64 exceeds the width 32; allowed: 1 to the smallest"),
        # a source's own widths count, and every k-based architecture checks its k
        ({"sources": {"s": {"kind": "synthetic", "n_features": 16, "d": 8, "n_bipolar": 0,
                            "widths": [4]}},
          "methods": {"batchtopk": {"k": 8}}},
         r"sae\.methods\.batchtopk: k = 8 exceeds the width 4"),
        ({"methods": {"topk": {"kk": 4}}}, r"sae\.methods\.topk.*unknown parameter 'kk'"),
        ({"sources": {"s": {"kind": "text"}}}, r"sae\.sources\.s\.kind.*synthetic"),
        ({"sources": {"s": {"kind": "synthetic", "n_bipolar": 99, "n_features": 8}}},
         r"sae\.sources\.s\.n_bipolar must be in \[0, n_features\]"),
        ({"sources": {"s": {"kind": "lm", "hookpoint": "blocks.2.hook_resid_post"}}},
         r"sae\.sources\.s\.hookpoint: 'blocks\.2\.hook_resid_post' is not a hookpoint .*"
         r"available: blocks\.0\.hook_resid_post, .*blocks\.1\.hook_attn_out"),
        ({"sources": {"s": {"kind": "image", "hookpoint": "fc3"}}},
         r"sae\.sources\.s\.hookpoint: 'fc3' .* available: fc1\.hook_post, fc2\.hook_post"),
        ({"sources": {"s": {"kind": "image", "hookpoint": "fc2.hook_post", "d": 3}}},
         r"sae\.sources\.s\.d: not a key of a source of kind 'image'; allowed: kind, widths, "),
        ({"sources": {"s": {"kind": "lm", "hookpoint": "blocks.0.hook_mlp_out",
                            "model": {"width": 3}}}},
         r"sae\.sources\.s\.model\.width: not a key of the lm model; allowed: d_model, "),
        ({"sources": {"s": {"kind": "lm", "hookpoint": "blocks.0.hook_mlp_out",
                            "model": {"d_model": 30}}}},
         r"sae\.sources\.s\.model\.d_model \(30\) must be a multiple of model\.n_heads"),
        ({"sources": {"s": {"kind": "lm"}}},
         r"sae\.sources\.s\.hookpoint: missing; a lm source reads one of: blocks\.0\.hook_"),
        ({"sources": {"s": {"kind": "lm", "hookpoint": "blocks.0.hook_mlp_out",
                            "eval_tokens": 10_000_000}}},
         r"sae\.sources\.s\.eval_tokens: 10000000 held-out tokens .* allowed at most \d+"),
        ({"sources": {"s": {"kind": "lm", "hookpoint": "blocks.0.hook_mlp_out",
                            "model": {"corpus_bytes": 10**9}}}},
         r"sae\.sources\.s\.model\.corpus_bytes: 1000000000 exceeds the stdlib train split"),
        ({"sources": {"s": {"kind": "image", "hookpoint": "fc1.hook_post",
                            "model": {"dataset": "cifar10"}}}},
         r"sae\.sources\.s\.model\.dataset: 'cifar10' is not 1×28×28 .* allowed: .*mnist5k"),
        ({"sources": {"s": {"kind": "image", "hookpoint": "fc1.hook_post",
                            "model": {"dataset": "mnist"}}}},
         r"sae\.sources\.s\.model\.dataset: .*mnist"),
        ({"train": {"steps": 0}}, r"sae\.train\.steps"),
        ({"widths": []}, r"sae\.widths"),
    ],
)  # fmt: skip
def test_spec_errors_name_the_key_and_what_is_allowed(section, expected):
    with pytest.raises(SpecError, match=expected):
        spec = _spec(**section)
        PILLAR.check(spec)


def test_cells_cover_sources_widths_settings_and_seeds():
    spec = _spec(widths=[16, 32], seeds=[0, 1], methods={"topk": {"k": [2, 4]}, "relu_l1": {}})
    cells = PILLAR.cells(spec)
    assert len(cells) == 2 * 2 * 3
    ids = {c.id for c in cells}
    assert "synthetic/m16/relu_l1/default/seed1" in ids
    assert len({c.batch for c in cells}) == 2  # one batch per (source, seed)
    assert all(c.trigger["train"]["steps"] == 20 for c in cells)


def test_activations_are_scaled_and_held_out_tokens_apart():
    src = _spec().data["sae"]["sources"]["synthetic"]
    acts = load(src, seed=0)
    assert acts.train.shape == (2048, 8) and acts.eval.shape == (512, 8)
    assert float(acts.train.norm(dim=1).mean()) == pytest.approx(8**0.5, rel=1e-5)
    assert acts.dictionary.shape == (32, 8)
    again = load(src, seed=0)
    assert torch.equal(again.eval, acts.eval)


def test_evaluate_a_perfect_dictionary_sae_by_hand():
    """An SAE whose decoder is the true dictionary and whose encoder returns the true codes
    reconstructs exactly: FVU 0, MCC 1, L0 = the codes' own."""
    from sparsebench.methods.sae.synthetic import SyntheticConfig, sample, true_dictionary

    cfg = SyntheticConfig(n_features=16, d=8, n_bipolar=2)
    d = true_dictionary(cfg, 0)
    x, codes = sample(cfg, 400, 0, d)

    class Oracle(torch.nn.Module):
        width, W_dec = 16, d

        def encode(self, xs):
            return (
                codes[: xs.shape[0]]
                if xs.shape[0] == 400
                else torch.linalg.lstsq(d.T, xs.T).solution.T
            )

        def decode(self, z):
            return z @ d

    out = evaluate(Oracle(), Activations("synthetic", x, x, 1.0, d), batch=400)
    assert out["fvu"] == pytest.approx(0.0, abs=1e-10)
    assert out["mcc"] == pytest.approx(1.0) and out["recovery_rate"] == 1.0
    assert out["l0"] == pytest.approx(float((codes != 0).sum(1).double().mean()))
    assert out["bipolar_fraction"] > 0  # the two bipolar features fire with both signs


def _two_sweeps() -> pl.DataFrame:
    return pl.DataFrame(
        {
            "status": ["ok"] * 4, "activations": ["s"] * 4, "hookpoint": [""] * 4,
            "width": [32] * 4,
            "method": ["topk", "topk", "relu_l1", "relu_l1"],
            "setting": ["k=4", "k=16", "a", "b"], "seed": [0] * 4,
            "fvu": [0.4, 0.2, 0.5, 0.3], "l0": [4.0, 16.0, 2.0, 8.0],
            "dead_fraction": [0.1, 0.3, 0.0, 0.2], "mcc": [0.5, 0.7, 0.4, 0.6],
            **{c: [0.0] * 4 for c in ("recovery_rate", "bipolar_fraction",
                                      "shrinkage", "train_flops", "train_s", "loss_recovered",
                                      "kl_recovered", "probe_acc_k1", "probe_acc_k2",
                                      "probe_acc_k5")},
        }
    )  # fmt: skip


def test_board_compares_fvu_dead_fraction_and_mcc_at_matched_l0(tmp_path):
    files = write_leaderboard(_two_sweeps(), tmp_path, targets=(8.0,))
    md = files["md"].read_text()
    for header in ("FVU @ L0=8", "rank @ L0=8", "dead fraction @ L0=8", "MCC @ L0=8"):
        assert header in md
    # topk at L0 = 8: halfway in log L0 between k=4 and k=16, in log metric: the geometric
    # means sqrt(0.4 · 0.2), sqrt(0.1 · 0.3), sqrt(0.5 · 0.7)
    assert "| topk | 0.283 | 1 |" in md and "| topk | 0.173 |" in md
    assert "| topk | 0.592 |" in md
    data = json.loads(files["json"].read_text())
    matched = {r["method"]: r for r in data["matched_l0"]}
    assert matched["relu_l1"]["dead_fraction"] == pytest.approx(0.2)
    assert matched["topk"]["mcc"] == pytest.approx(0.35**0.5) and len(data["leaderboard"]) == 4


def test_matched_l0_interpolates_in_log_l0_and_never_extrapolates():
    assert _interp([4.0, 16.0], [0.4, 0.2], 8.0) == pytest.approx(0.08**0.5)
    assert _interp([4.0, 16.0], [0.4, 0.2], 32.0) is None
    runs = pl.DataFrame(
        {
            "status": ["ok"] * 4, "activations": ["s"] * 4, "hookpoint": [""] * 4,
            "width": [32] * 4,
            "method": ["topk", "topk", "relu_l1", "relu_l1"],
            "setting": ["k=4", "k=16", "a", "b"], "seed": [0] * 4,
            "fvu": [0.4, 0.2, 0.5, 0.3], "l0": [4.0, 16.0, 2.0, 8.0],
            **{c: [0.0] * 4 for c in ("dead_fraction", "mcc", "recovery_rate", "bipolar_fraction",
                                      "shrinkage", "train_flops", "train_s", "loss_recovered",
                                      "kl_recovered", "probe_acc_k1", "probe_acc_k2",
                                      "probe_acc_k5")},
        }
    )  # fmt: skip
    board = leaderboard(runs)
    assert board.filter(pl.col("rank") == 1)["setting"].to_list() == ["k=16"]
    m = matched_l0(board, targets=(8.0,))
    got = dict(zip(m["method"], m["fvu"]))
    assert got["topk"] == pytest.approx(0.08**0.5) and got["relu_l1"] == pytest.approx(0.3)
