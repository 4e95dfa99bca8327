"""The SAE pillar: spec errors, cells, the held-out evaluation and the matched-L0 board."""

from __future__ import annotations

import json
import math
import statistics

import polars as pl
import pytest
import torch

from sparsebench.suite.pillar import get_pillar
from sparsebench.suite.pillars.sae.board import (
    leaderboard,
    matched_l0,
    summary,
    sweep_label,
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
         r"sae\.sources\.s\.model\.width: unknown key; allowed: d_model, "),
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

    # both pairs occur with both signs among these tokens, so both are scored
    assert all(bool((codes[:, i] > 0).any() and (codes[:, i] < 0).any()) for i in (0, 1))
    acts = Activations("synthetic", x, x, 1.0, d, codes=codes, n_pairs=2)
    out = evaluate(Oracle(), acts, batch=400)
    assert out["fvu"] == pytest.approx(0.0, abs=1e-10)
    assert out["mcc"] == pytest.approx(1.0) and out["recovery_rate"] == 1.0
    assert out["l0"] == pytest.approx(float((codes != 0).sum(1).double().mean()))
    assert out["bipolar_fraction"] == pytest.approx(2 / 16)  # the two pairs' latents
    # the true codes are signed latents on the true directions: both pairs recovered
    assert out["pair_recovery"] == 1.0 and out["pair_recovery_any"] == 1.0
    Oracle.encode = lambda self, xs: codes.clamp_min(0.0)  # the same, non-negative
    relu = evaluate(Oracle(), acts, batch=400)
    assert relu["pair_recovery"] == 0.0 and relu["pair_recovery_any"] == 1.0
    assert evaluate(Oracle(), Activations("synthetic", x, x, 1.0, d))["pair_recovery"] is None


def test_synthetic_activations_carry_the_held_out_codes_and_pairs():
    from sparsebench.methods.sae.synthetic import SyntheticConfig, sample

    src = _spec().data["sae"]["sources"]["synthetic"]
    acts = load(src, seed=0)
    cfg = SyntheticConfig(**{k: src[k] for k in ("n_features", "d", "n_bipolar")})
    x, codes = sample(cfg, 2048 + 512, 0)
    assert acts.n_pairs == 4 and torch.equal(acts.codes, codes[2048:])
    assert torch.allclose(acts.eval, x[2048:] * acts.scale)


JUMP = {"sparsity_coeff": 0.5, "threshold_lr_scale": 10.0}


def _runs(rows: list[tuple]) -> pl.DataFrame:
    """Runs of one source and width: (method, params, seed, l0, fvu, dead_fraction)."""
    n = len(rows)
    method, params, seed, l0, fvu, dead = (list(c) for c in zip(*rows, strict=True))
    return pl.DataFrame(
        {
            "status": ["ok"] * n, "activations": ["s"] * n, "hookpoint": [""] * n,
            "width": [32] * n, "method": method,
            "params_json": [json.dumps(p, sort_keys=True) for p in params],
            "setting": [", ".join(f"{k}={v}" for k, v in sorted(p.items())) for p in params],
            "seed": seed, "fvu": fvu, "l0": l0, "dead_fraction": dead,
            **{c: [None] * n for c in ("mcc", "loss_recovered", "kl_recovered",
                                       "probe_acc_k1", "probe_acc_k2", "probe_acc_k5")},
            **{c: [0.0] * n for c in ("recovery_rate", "bipolar_fraction", "shrinkage",
                                      "train_flops", "train_s")},
        },
        schema_overrides={c: pl.Float64 for c in ("mcc", "loss_recovered", "kl_recovered",
                                                   "probe_acc_k1", "probe_acc_k2",
                                                   "probe_acc_k5")},
    )  # fmt: skip


def _sweeps() -> pl.DataFrame:
    """TopK k = 4, 16 with two seeds whose measured L0s differ; JumpReLU at 10x threshold lr,
    two settings hitting L0 = 2 and 8 in both seeds."""
    return _runs([
        ("topk", {"k": 4}, 0, 4.0, 0.4, 0.0), ("topk", {"k": 16}, 0, 16.0, 0.2, 0.3),
        ("topk", {"k": 4}, 1, 3.0, 0.5, 0.0), ("topk", {"k": 16}, 1, 12.0, 0.25, 0.3),
        ("jumprelu", JUMP, 0, 2.0, 0.3, 0.1), ("jumprelu", {**JUMP, "sparsity_coeff": 0.1},
                                               0, 8.0, 0.1, 0.2),
        ("jumprelu", JUMP, 1, 2.0, 0.3, 0.1), ("jumprelu", {**JUMP, "sparsity_coeff": 0.1},
                                               1, 8.0, 0.12, 0.2),
    ])  # fmt: skip


def _geo(x0, y0, x1, y1, t):
    """y at t on the line through (log x0, log y0) and (log x1, log y1), by hand."""
    w = (math.log(t) - math.log(x0)) / (math.log(x1) - math.log(x0))
    return math.exp((1 - w) * math.log(y0) + w * math.log(y1))


def test_a_sweep_is_an_architecture_and_its_fixed_parameters():
    assert sweep_label("topk", json.dumps({"k": 4, "aux_coeff": 1 / 32})) == "topk"
    assert sweep_label("jumprelu", json.dumps(JUMP)) == "jumprelu (threshold_lr_scale=10.0)"
    assert sweep_label("jumprelu", json.dumps({"sparsity_coeff": 2.5})) == "jumprelu"
    assert sweep_label("gated", json.dumps({"l1_coeff": 1.0, "lr": 1e-4})) == "gated (lr=0.0001)"
    # params_json holds every parameter; a tuple default reads back as a list and is no change
    every = {"k": 8, "aux_coeff": 1 / 32, "prefix_fractions": [0.0625, 0.125, 0.25, 0.5, 1.0]}
    assert sweep_label("matryoshka_batchtopk", json.dumps(every)) == "matryoshka_batchtopk"
    two = json.dumps({**every, "prefix_fractions": [0.5, 1.0]})
    assert (
        sweep_label("matryoshka_batchtopk", two)
        == "matryoshka_batchtopk (prefix_fractions=[0.5, 1.0])"
    )


def test_matched_l0_reads_each_seed_then_averages_the_bracketed_seeds():
    m = matched_l0(_sweeps(), targets=(4.0, 8.0, 16.0, 32.0))
    got = {(r["sweep"], r["target_l0"]): r for r in m.iter_rows(named=True)}
    # L0 = 8: topk seed 0 between L0 4 and 16, seed 1 between 3 and 12
    s0, s1 = _geo(4, 0.4, 16, 0.2, 8), _geo(3, 0.5, 12, 0.25, 8)
    r = got[("topk", 8.0)]
    assert r["fvu"] == pytest.approx((s0 + s1) / 2)
    assert r["fvu_std"] == pytest.approx(abs(s0 - s1) / math.sqrt(2))
    assert r["n_seeds"] == 2 and r["read"] == "interpolated L0 3.5 – 14"
    # a fraction that is 0 at one end is linear in its value: w = 1/2 and w = log(8/3)/log(4)
    w1 = math.log(8 / 3) / math.log(4)
    assert r["dead_fraction"] == pytest.approx((0.15 + 0.3 * w1) / 2)
    # jumprelu hits L0 = 8 in both seeds: measured, ranked first
    j = got[("jumprelu (threshold_lr_scale=10.0)", 8.0)]
    assert j["read"] == "measured" and j["fvu"] == pytest.approx(0.11)
    assert j["fvu_std"] == pytest.approx(statistics.stdev([0.1, 0.12]))
    assert (j["rank"], r["rank"]) == (1, 2)
    # L0 = 16: only seed 0 reaches it (seed 1 tops out at 12); L0 = 4: seed 0 measured,
    # seed 1 interpolated between 3 and 12
    assert (got[("topk", 16.0)]["n_seeds"], got[("topk", 16.0)]["fvu"]) == (1, 0.2)
    assert got[("topk", 16.0)]["read"] == "measured"
    assert got[("topk", 4.0)]["read"] == "interpolated L0 3.5 – 8"
    assert got[("topk", 4.0)]["fvu"] == pytest.approx((0.4 + _geo(3, 0.5, 12, 0.25, 4)) / 2)
    # never extrapolated: jumprelu stops at 8, nothing reaches 32
    for key in (("jumprelu (threshold_lr_scale=10.0)", 16.0), ("topk", 32.0)):
        assert got[key]["read"] == "not bracketed" and got[key]["n_seeds"] == 0
        assert got[key]["fvu"] is None and got[key]["rank"] is None
    assert got[("topk", 16.0)]["rank"] == 1  # the only bracketed sweep there


def test_sweeps_differing_in_a_fixed_parameter_are_ranked_apart():
    runs = _runs([
        ("jumprelu", {"sparsity_coeff": 0.1}, 0, 4.0, 0.3, 0.0),
        ("jumprelu", {"sparsity_coeff": 0.5}, 0, 16.0, 0.1, 0.0),
        ("jumprelu", JUMP, 0, 8.0, 0.2, 0.0),
    ])  # fmt: skip
    m = matched_l0(runs, targets=(8.0,)).sort("rank", "fvu")  # one seed each: a shared rank
    assert m["sweep"].to_list() == ["jumprelu", "jumprelu (threshold_lr_scale=10.0)"]
    assert m["fvu"].to_list() == pytest.approx([math.sqrt(0.03), 0.2])


def test_board_has_no_rank_across_settings_and_shows_how_each_value_was_read(tmp_path):
    board = leaderboard(_sweeps())
    assert "rank" not in board.columns and board.height == 4
    assert board["sweep"].unique().sort().to_list() == [
        "jumprelu (threshold_lr_scale=10.0)", "topk"
    ]  # fmt: skip
    files = write_leaderboard(_sweeps(), tmp_path, targets=(8.0, 16.0))
    md = files["md"].read_text()
    assert "| rank | sweep | FVU | dead latents (%) | seeds bracketing | read |" in md
    # text cells are escaped Markdown (they come from the spec): they render as written
    jumprelu = "jumprelu \\(threshold\\_lr\\_scale=10.0\\)"
    # FVU 0.10 / 0.12: 0.110 ± 0.014; dead fraction 0.2 in both seeds: 20.0 ± 0.0 %. Against
    # topk (0.294 ± 0.017) Welch's t is 11.9: ranked apart, no "=".
    assert f"| 1 | {jumprelu} | 0.110 ± 0.014 | 20.0 ± 0.0 | 2 | measured |" in md
    assert f"| – | {jumprelu} | – | – | 0 | not bracketed |" in md
    assert "| 2 | topk |" in md and "| 2 | interpolated L0 3.5 – 14 |" in md
    data = json.loads(files["json"].read_text())
    assert len(data["leaderboard"]) == 4 and len(data["matched_l0"]) == 4
    assert files["fvu_vs_l0.png"].stat().st_size > 0
    lines = summary(_sweeps()).splitlines()
    assert [line.split()[2] for line in lines] == ["L0=4", "L0=8", "L0=16"]
    assert " 1 jumprelu (threshold_lr_scale=10.0)" in lines[1] and " 1 topk" in lines[2]
    assert "FVU 0.200 (n=1)" in lines[2]  # one seed reaches L0 = 16: no spread
