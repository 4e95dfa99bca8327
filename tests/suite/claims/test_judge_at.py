"""``at``: a metric read off a sweep at a matched value of another column, per seed.

The tables are SAE runs tables built by hand. Most points sit at L0 = 4 and 16, so that the
reading at L0 = 8 (the midpoint in log L0) is, in log FVU, the midpoint too: the geometric
mean sqrt(y4 · y16) of the two FVUs, which the numbers below are chosen to make round.
"""

import math

import polars as pl
import pytest

from sparsebench.suite.claims import judge
from sparsebench.suite.claims.outputs import to_json, to_tex

KEYS = {"sae": ("activations", "width", "method", "setting_id", "seed")}


def sweep(
    method: str, points: dict[str, list[tuple[float, float]]], width: int = 128, **extra
) -> list[dict]:
    """SAE rows of one sweep: ``points`` maps a setting (e.g. "k=4") to one (l0, fvu) per
    seed (seed = position in the list)."""
    out = []
    for setting, per_seed in points.items():
        sid = setting.replace("=", "")
        for seed, (l0, fvu) in enumerate(per_seed):
            out.append({
                "cell_id": f"lm/m{width}/{method}/{sid}/seed{seed}",
                "label": f"lm m={width} {method} ({setting}) seed {seed}",
                "activations": "lm", "width": width, "method": method, "setting_id": sid,
                "setting": setting, "seed": seed, "status": extra.get("status", "ok"),
                "l0": l0, "fvu": fvu, "shrinkage": 0.9,
            })  # fmt: skip
    return out


def runs(*groups: list[dict]) -> pl.DataFrame:
    return pl.DataFrame([r for g in groups for r in g])


# at L0 = 8: batchtopk 0.1, 0.08, 0.12 (sqrt(.2·.05), sqrt(.32·.02), sqrt(.18·.08)), mean 0.1;
# topk 0.2, 0.18, 0.22 (sqrt(.4·.1), sqrt(.36·.09), sqrt(.484·.1)), mean 0.2. k = 32 at
# L0 = 32 is past the bracket and must not matter.
BATCHTOPK = {
    "k=4": [(4, 0.2), (4, 0.32), (4, 0.18)],
    "k=16": [(16, 0.05), (16, 0.02), (16, 0.08)],
    "k=32": [(32, 0.001), (32, 0.001), (32, 0.001)],
}
TOPK = {
    "k=4": [(4, 0.4), (4, 0.36), (4, 0.484)],
    "k=16": [(16, 0.1), (16, 0.09), (16, 0.1)],
    "k=32": [(32, 0.9), (32, 0.9), (32, 0.9)],
}
ORDER = {"kind": "order", "a": {"method": "batchtopk"}, "b": {"method": "topk"}, "op": "<"}


def verdict(c, table):
    return judge(c, {"sae": table}, KEYS)


def sae(claim, test, **defaults):
    return claim(test, pillar="sae", metric=defaults.pop("metric", "fvu"), **defaults)


def test_holds_at_a_matched_l0_with_the_interpolated_means_and_brackets(claim):
    c = sae(claim, {**ORDER, "at": {"l0": 8}})
    v = verdict(c, runs(sweep("batchtopk", BATCHTOPK), sweep("topk", TOPK)))
    a, b = v.cells
    assert a.values == pytest.approx([0.1, 0.08, 0.12]) and a.mean == pytest.approx(0.1)
    assert b.values == pytest.approx([0.2, 0.18, 0.22]) and b.mean == pytest.approx(0.2)
    # Welch: both std 0.02, se = sqrt(2 · 0.0004 / 3) = 0.016330, df = 4, t = 2.7764:
    # 0.1 ± 0.045338
    assert v.verdict == "holds" and v.estimate == pytest.approx(0.1)
    assert v.low == pytest.approx(0.1 - 0.045338, abs=1e-5)
    assert a.label == "lm m=128 batchtopk (3 settings) at l0=8"
    assert [(r["low"]["setting"], r["high"]["setting"]) for r in a.at["seeds"]] == [
        ("k=4", "k=16")] * 3  # fmt: skip
    [p] = v.pairs
    assert p["at"] == 8 and p["column"] == "l0" and p["verdict"] == "holds"
    assert [cell["mean"] for cell in p["cells"]] == pytest.approx([0.1, 0.2])
    assert p["cells"][0]["brackets"] == "k=4 … k=16 ×3"
    assert "k=4 … k=16 ×3" in v.reason and "at l0 = 8: holds" in v.reason
    # a point at exactly the matched value is read as it is
    v = verdict(sae(claim, {**ORDER, "at": {"l0": [4]}}), runs(sweep("batchtopk", BATCHTOPK),
                sweep("topk", TOPK)))  # fmt: skip
    assert v.cells[0].values == [0.2, 0.32, 0.18] and v.cells[0].at["seeds"][0]["exact"]
    assert v.cells[0].mean == pytest.approx(0.7 / 3) and v.verdict == "holds"
    assert "k=4 ×3" in v.reason
    assert to_json([v])["claims"][0]["cells"][0]["at"]["column"] == "l0"


def test_fails_and_several_values_combine_as_a_ranking(claim):
    table = runs(sweep("batchtopk", TOPK), sweep("topk", BATCHTOPK))  # roles swapped
    assert verdict(sae(claim, {**ORDER, "at": {"l0": 8}}), table).verdict == "fails"
    # at L0 = 4: batchtopk 0.2, 0.32, 0.18 vs topk 0.4, 0.36, 0.484 (holds); at 8: holds;
    # at 24 (between 16 and 32): batchtopk from 0.05..0.001 far below topk's 0.1..0.9: holds
    both = runs(sweep("batchtopk", BATCHTOPK), sweep("topk", TOPK))
    v = verdict(sae(claim, {**ORDER, "at": {"l0": [4, 8, 24]}}), both)
    assert v.verdict == "holds" and [p["verdict"] for p in v.pairs] == ["holds"] * 3
    assert v.estimate is None and len(v.cells) == 6  # one number per x, in pairs
    # seed by seed at L0 = 24: w = log(24/16) / log 2 = 0.58496; batchtopk seed 0:
    # 0.05^(1 − w) · 0.001^w
    w = math.log(1.5) / math.log(2)
    assert v.pairs[2]["cells"][0]["values"][0] == pytest.approx(0.05 ** (1 - w) * 0.001**w)
    # one x failing makes the whole claim fail, one inconclusive keeps it from holding
    # (k = 32 swapped: at 24, batchtopk about 0.29, 0.20, 0.35 against topk's 0.007-0.008)
    mixed = runs(
        sweep("batchtopk", {**BATCHTOPK, "k=32": [(32, 0.99)] * 3}),
        sweep("topk", {**TOPK, "k=32": [(32, 0.001)] * 3}),
    )
    v = verdict(sae(claim, {**ORDER, "at": {"l0": [8, 24]}}), mixed)
    assert [p["verdict"] for p in v.pairs] == ["holds", "fails"] and v.verdict == "fails"
    v = verdict(sae(claim, {**ORDER, "at": {"l0": [8, 64]}}), both)
    assert [p["verdict"] for p in v.pairs] == ["holds", "inconclusive"]
    assert v.verdict == "inconclusive"
    # an x whose first cell cannot be read keeps its slots: the macros of the next x keep
    # their letters (A, B at 64: empty; C, D at 8: batchtopk's 0.1, topk's 0.2)
    v = verdict(sae(claim, {**ORDER, "at": {"l0": [64, 8]}}), both)
    assert len(v.cells) == 4 and v.cells[0].mean is None and v.cells[1].mean is None
    tex = to_tex([v])
    assert "MeanA" not in tex and "MeanB" not in tex
    assert "\\newcommand{\\claimCOneMeanC}{10.00}" in tex
    assert "\\newcommand{\\claimCOneMeanD}{20.00}" in tex


def test_a_seed_that_does_not_bracket_is_dropped_and_too_few_is_inconclusive(claim):
    # seed 2 of batchtopk: its k = 4 reached L0 9 only, so its sweep spans 9-32, not 8
    short = {**BATCHTOPK, "k=4": [(4, 0.2), (4, 0.32), (9, 0.18)]}
    table = runs(sweep("batchtopk", short), sweep("topk", TOPK))
    v = verdict(sae(claim, {**ORDER, "at": {"l0": 8}}), table)
    assert v.cells[0].values == pytest.approx([0.1, 0.08]) and v.cells[0].n == 2
    assert v.cells[0].at["dropped"] == [{"seed": 2, "range": [9.0, 32.0]}]
    assert "seed 2 dropped (l0 9–32)" in v.reason and v.verdict == "holds"
    v = verdict(sae(claim, {**ORDER, "at": {"l0": 8}, "min_seeds": 3}), table)
    assert v.verdict == "inconclusive"
    assert ("lm m=128 batchtopk (3 settings) at l0=8: 2 seed(s) bracket l0 = 8, the test "
            "needs 3 (seed 2's sweep spans l0 9–32; never extrapolated)") in v.reason  # fmt: skip
    # below every sweep: never extrapolated
    v = verdict(sae(claim, {**ORDER, "at": {"l0": 2}}), table)
    assert v.verdict == "inconclusive" and "0 seed(s) bracket l0 = 2" in v.reason


def test_ambiguous_failed_and_missing_sweeps_are_inconclusive(claim):
    two_widths = runs(
        sweep("batchtopk", BATCHTOPK), sweep("topk", TOPK), sweep("topk", TOPK, width=256)
    )
    v = verdict(sae(claim, {**ORDER, "at": {"l0": 8}}), two_widths)
    assert v.verdict == "inconclusive" and "method=topk matches 2 sweeps" in v.reason
    assert "lm/m128/topk" in v.reason and "lm/m256/topk" in v.reason
    narrowed = sae(claim, {**ORDER, "at": {"l0": 8}}, where={"width": 128})
    assert verdict(narrowed, two_widths).verdict == "holds"
    # selectors that differ in width (half width against full width) each name one sweep
    halves = sae(claim, {**ORDER, "a": {"method": "batchtopk", "width": 128},
                         "b": {"method": "topk", "width": 256}, "at": {"l0": 8}})  # fmt: skip
    v = verdict(halves, two_widths)
    assert v.verdict == "holds" and v.cells[1].label == "lm m=256 topk (3 settings) at l0=8"
    failed = sweep("topk", {"k=32": [(32, None)]}, status="diverged")
    failed[0]["seed"], failed[0]["cell_id"] = 5, "lm/m128/topk/k32/seed5"
    v = verdict(sae(claim, {**ORDER, "at": {"l0": 8}}),
                runs(sweep("batchtopk", BATCHTOPK), sweep("topk", TOPK), failed))  # fmt: skip
    assert v.verdict == "inconclusive" and "1 row(s) of the sweep diverged" in v.reason
    v = verdict(sae(claim, {**ORDER, "b": {"method": "gated"}, "at": {"l0": 8}}),
                runs(sweep("batchtopk", BATCHTOPK)))  # fmt: skip
    assert v.verdict == "inconclusive" and "no cell matches method=gated" in v.reason
    nan = runs(sweep("batchtopk", {**BATCHTOPK, "k=4": [(4, float("nan"))] * 3}),
               sweep("topk", TOPK))  # fmt: skip
    v = verdict(sae(claim, {**ORDER, "at": {"l0": 8}}), nan)
    assert v.verdict == "inconclusive" and "fvu is missing or not finite in 3" in v.reason


def test_a_two_axis_grid_and_a_column_the_sweep_does_not_move_are_inconclusive(claim):
    # batchtopk's grid varies k and threshold_rule: two sweeps under one method name
    two_axes = sweep("batchtopk", BATCHTOPK)
    for r in two_axes:
        rule = "ema" if r["setting"] == "k=16" else "calibrated"
        r["params_json"] = f'{{"k": {r["setting"][2:]}, "threshold_rule": "{rule}"}}'
    topk = sweep("topk", TOPK)
    for r in topk:
        r["params_json"] = f'{{"k": {r["setting"][2:]}}}'
    v = verdict(sae(claim, {**ORDER, "at": {"l0": 8}}), runs(two_axes, topk))
    assert v.verdict == "inconclusive"
    assert "settings differ in k, threshold_rule" in v.reason
    # width is numeric but equal across the sweep: there is nothing to read it at
    v = verdict(sae(claim, {**ORDER, "at": {"width": 128}}), runs(sweep("batchtopk", BATCHTOPK),
                topk))  # fmt: skip
    assert v.verdict == "inconclusive" and "do not move width" in v.reason


def test_a_margin_and_another_metric_at_matched_l0(claim):
    # "within 0.025": FVU(a) − FVU(b) ≤ 0.025 at L0 = 8 is an order test with margin 0.025.
    # a at 8: 0.1, 0.08, 0.12 (mean 0.1); b at 8: sqrt(.16·.04) = 0.08, sqrt(.2304·.0144) =
    # 0.0576, sqrt(.1444·.0576) = 0.0912 (mean 0.076267): a − b = 0.023733 < 0.025, but with
    # stds 0.02 and 0.0171 over 3 seeds the interval reaches past 0.025: inconclusive
    b = {"k=4": [(4, 0.16), (4, 0.2304), (4, 0.1444)],
         "k=16": [(16, 0.04), (16, 0.0144), (16, 0.0576)]}  # fmt: skip
    table = runs(sweep("batchtopk", BATCHTOPK), sweep("topk", b))
    within = sae(claim, {**ORDER, "margin": 0.025, "at": {"l0": 8}})
    v = verdict(within, table)
    assert v.cells[1].mean == pytest.approx((0.08 + 0.0576 + 0.0912) / 3)
    assert v.estimate == pytest.approx(-(0.1 - (0.08 + 0.0576 + 0.0912) / 3))
    assert v.verdict == "inconclusive" and v.low < -0.025 < v.high
    assert verdict(sae(claim, {**within.test, "margin": 0.2}), table).verdict == "holds"
    # a metric that is the same at every setting reads as that value wherever bracketed; the
    # same on every seed too, which for a metric that is not deterministic is no evidence
    gamma = sae(claim, {"kind": "value", "a": {"method": "topk"}, "op": ">", "bound": 0.8,
                        "at": {"l0": 8}}, metric="shrinkage")  # fmt: skip
    v = verdict(gamma, table)
    assert v.cells[0].values == pytest.approx([0.9, 0.9, 0.9]) and v.verdict == "inconclusive"
    assert "3 seeds all 0.9: a spread of zero is no evidence for shrinkage" in v.reason


def test_ranking_at_a_matched_value(claim):
    gated = {"l1_coeff=1.0": [(4, 0.3)] * 3, "l1_coeff=3.0": [(16, 0.1)] * 3}  # 0.1732 at 8
    ranking = sae(claim, {"kind": "ranking", "order": [{"method": "batchtopk"},
                  {"method": "gated"}, {"method": "topk"}], "at": {"l0": [8]}})  # fmt: skip
    table = runs(sweep("batchtopk", BATCHTOPK), sweep("gated", gated), sweep("topk", TOPK))
    v = verdict(ranking, table)
    assert v.cells[1].mean == pytest.approx(math.sqrt(0.03))
    assert v.cells[1].label == "lm m=128 gated (2 settings) at l0=8"
    # batchtopk 0.1 ± 0.02 against gated 0.1732 (no spread): 0.0732 against a half-width of
    # t(0.975, 2) · 0.02 / sqrt(3) = 0.0497: holds; batchtopk against topk 0.2 ± 0.02: 0.1
    # against t(0.975, 4) · sqrt(2 · 0.0004 / 3) = 0.0453: holds; gated against topk: 0.0268,
    # inside 0.0497: inconclusive, and so is the ranking
    assert [p["verdict"] for p in v.pairs[0]["pairs"]] == ["holds", "holds", "inconclusive"]
    assert v.verdict == "inconclusive"
    assert v.pairs[0]["pairs"][0]["diff"] == pytest.approx(math.sqrt(0.03) - 0.1)
