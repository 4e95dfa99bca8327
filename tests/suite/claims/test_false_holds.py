"""No "holds" on a tie, on a duplicated or unfinished seed, or on neighbours only: hand-built
tables whose verdicts are worked out by hand (the arithmetic in the comments)."""

import math

import pytest

from sparsebench.suite.claims import ClaimError, judge, load_file
from sparsebench.suite.claims.stats import no_spread, paired_ties, welch_diff

from .conftest import one, rows, table
from .test_judge_at import BATCHTOPK, TOPK, runs, sweep

KEYS = {
    "classification": ("task", "method", "setting_id", "target_sparsity", "seed"),
    "sae": ("activations", "width", "method", "setting_id", "seed"),
}
RIGL, SET, STATIC = {"method": "rigl"}, {"method": "set"}, {"method": "static"}
ORDER = {"kind": "order", "a": RIGL, "b": SET, "op": ">"}
NO_EVIDENCE = "a spread of zero is no evidence for test_acc, which is not deterministic"


def verdict(c, runs, pillar: str = "classification"):
    return judge(c, {pillar: runs}, KEYS)


def sparsity(method: str, values: list[float], target: float = 0.9) -> list[dict]:
    """Rows with actual_sparsity = ``values[seed]`` (a deterministic metric; accuracy 0.9)."""
    out = rows(method, [0.9] * len(values), target)
    for r, v in zip(out, values, strict=True):
        r["actual_sparsity"] = v
    return out


def test_ties_over_seeds_are_no_evidence_for_a_metric_that_is_not_deterministic(claim):
    # 0.901, 0.901 against 0.900, 0.900: Welch's interval would be the point 0.001 > 0
    v = verdict(claim(ORDER), table(rows("rigl", [0.901, 0.901]), rows("set", [0.9, 0.9])))
    assert v.verdict == "inconclusive"
    assert v.reason == (
        f"rigl default 90%: 2 seeds all 0.901; set default 90%: 2 seeds all 0.9: {NO_EVIDENCE}"
    )
    # three equal values have a variance of 1.8e-32 in floating point, not 0: still a tie
    three = table(rows("rigl", [0.901] * 3), rows("set", [0.9] * 3))
    v = verdict(claim(ORDER), three)
    assert v.verdict == "inconclusive" and "3 seeds all 0.901" in v.reason
    _, low, high = welch_diff([0.901] * 3, [0.9] * 3, 0.95)
    assert low == high
    same = table(rows("rigl", [0.9] * 3), rows("set", [0.9] * 3))
    v = verdict(claim({"kind": "equal", "a": RIGL, "b": SET, "tol": 0.01}), same)
    assert v.verdict == "inconclusive" and NO_EVIDENCE in v.reason
    ratio = claim({"kind": "ratio", "a": RIGL, "b": STATIC, "op": ">", "threshold": 1.1})
    v = verdict(ratio, table(rows("rigl", [0.9, 0.9]), rows("static", [0.8, 0.8])))
    assert v.verdict == "inconclusive" and NO_EVIDENCE in v.reason  # not the point 1.125
    value = claim({"kind": "value", "a": RIGL, "op": ">", "bound": 0.85})
    v = verdict(value, table(rows("rigl", [0.9] * 3)))
    assert v.verdict == "inconclusive"
    assert v.reason == f"rigl default 90%: 3 seeds all 0.9: {NO_EVIDENCE}"
    # paired: differences 0.01, 0.01, 0.01 up to rounding (0.83 − 0.82 = 0.010000000000000009)
    paired = claim({**ORDER, "stat": "paired"})
    seedy = table(rows("rigl", [0.83, 0.72, 0.94]), rows("set", [0.82, 0.71, 0.93]))
    v = verdict(paired, seedy)
    assert v.verdict == "inconclusive"
    assert v.reason == (
        f"rigl default 90% − set default 90%: 3 seeds all differ by 0.01: {NO_EVIDENCE}"
    )
    # a slope through points on an exact power law (test_acc = sparsity², both seeds)
    exponent = claim({"kind": "exponent", "a": STATIC, "along": "target_sparsity", "op": "<",
                      "bound": 2.5})  # fmt: skip
    v = verdict(exponent, table(*(rows("static", [x**2, x**2], x) for x in (0.5, 0.7, 0.9))))
    assert v.verdict == "inconclusive" and "lie exactly on a line" in v.reason


def test_one_cell_with_a_spread_is_enough_and_a_deterministic_metric_may_tie(claim):
    # rigl 0.95 × 3 (no spread) against set 0.90, 0.91, 0.92 (s² = 1e-4): se² = 1e-4 / 3,
    # df = 2 (all of it from set), d = 0.04 ± t(0.975, 2) · 0.0057735 = 0.04 ± 0.024842
    v = verdict(claim(ORDER), table(rows("rigl", [0.95] * 3), rows("set", [0.90, 0.91, 0.92])))
    assert v.verdict == "holds"
    assert (v.low, v.high) == pytest.approx((0.015158, 0.064842), abs=1e-6)
    # actual_sparsity is a count: a tie over seeds is a measured zero spread, a point interval
    ties = table(sparsity("rigl", [0.9, 0.9]), sparsity("static", [0.8, 0.8]))
    order = claim({**ORDER, "b": STATIC}, metric="actual_sparsity")
    v = verdict(order, ties)
    assert v.verdict == "holds" and v.low == v.high == pytest.approx(0.1)
    v = verdict(claim({**ORDER, "b": STATIC, "stat": "paired"}, metric="actual_sparsity"), ties)
    assert v.verdict == "holds" and v.low == v.high == pytest.approx(0.1)
    assert no_spread([0.901] * 3) and not no_spread([0.901, 0.9011]) and not no_spread([0.9])
    assert paired_ties([0.83, 0.72, 0.94], [0.82, 0.71, 0.93])
    assert not paired_ties([0.83, 0.72, 0.94], [0.82, 0.71, 0.92])


def test_exact_is_refused_for_a_metric_that_is_not_deterministic(claim, claim_file):
    # one seed each, 0.901 against 0.900: an exact test would hold on it
    with pytest.raises(ClaimError, match=(
        r"toy\.yaml: claim 'c-1': stat: exact is for deterministic metrics \(the same on every "
        r"seed and rerun\), and 'test_acc' of pillar 'classification' is not; its "
        r"deterministic metrics: actual_sparsity, train_flops, train_flops_rel_dense, "
        r"inference_flops, inference_flops_rel_dense\. Use welch")):  # fmt: skip
        claim({**ORDER, "stat": "exact"})
    with pytest.raises(ClaimError, match=r"'val_acc' of pillar 'classification' is not"):
        claim({**ORDER}, metric="val_acc", stat="exact")  # from the file's defaults
    # a count: the FLOPs are a formula of the shapes and the run's masks, never measured
    assert claim({**ORDER, "stat": "exact"}, metric="train_flops").test["stat"] == "exact"
    kernel = one("k-1", kind="value", pillar="kernels", metric="speedup_vs_dense",
                 a={"backend": "cpu"}, op=">", bound=1.2, stat="exact")  # fmt: skip
    with pytest.raises(ClaimError, match=r"k\.yaml: claim 'k-1': .*'speedup_vs_dense' of pillar "
                       r"'kernels' is not; its deterministic metrics: none"):  # fmt: skip
        load_file(claim_file([kernel], name="k.yaml"))
    colors = one("h-1", kind="trend", pillar="hessian", metric="n_colors", a={"method": "colored"},
                 along="n_atoms", direction="constant", tol=0.5, stat="exact")  # fmt: skip
    assert load_file(claim_file([colors], name="h.yaml"))[0].test["stat"] == "exact"
    assert claim({**ORDER, "stat": "exact"}, metric="actual_sparsity").test["min_seeds"] == 1


def test_n_counts_distinct_finished_seeds(claim):
    clear = rows("set", [0.90, 0.905, 0.91])
    # seed 1 read twice: three rows, two seeds
    twice = rows("rigl", [0.93, 0.94, 0.935])
    twice[2]["seed"], twice[2]["cell_id"] = 1, twice[1]["cell_id"]
    v = verdict(claim(ORDER), table(twice, clear))
    assert v.verdict == "inconclusive"
    assert v.reason == (
        "method=rigl: seed 1 has 2 rows: each seed counts once, so a cell with a duplicated "
        "seed is not judged"
    )
    # a row without a status is not finished
    unknown = rows("rigl", [0.93, 0.94]) + rows("rigl", [0.935], status=None)
    unknown[2]["seed"], unknown[2]["cell_id"] = 2, "t/rigl/default/s0.9/seed2"
    v = verdict(claim(ORDER), table(unknown, clear))
    assert v.verdict == "inconclusive"
    assert "method=rigl: 1 row(s) with no status (e.g. t/rigl/default/s0.9/seed2)" in v.reason
    assert "only status ok is finished" in v.reason
    # the same in a sweep read at a matched L0
    at = claim({"kind": "order", "a": {"method": "batchtopk"}, "b": {"method": "topk"},
                "op": "<", "at": {"l0": 8}}, pillar="sae", metric="fvu")  # fmt: skip
    v = verdict(at, runs(sweep("batchtopk", BATCHTOPK, status=None), sweep("topk", TOPK)), "sae")
    assert v.verdict == "inconclusive" and "row(s) of the sweep with no status" in v.reason
    # seed 0's k = 4 read twice, at L0 4 and 4.2: the reading at 8 would use the second
    doubled = sweep("batchtopk", BATCHTOPK)
    doubled.append({**doubled[0], "l0": 4.2})
    v = verdict(at, runs(doubled, sweep("topk", TOPK)), "sae")
    assert v.verdict == "inconclusive" and "seed 0 has 2 rows at k=4" in v.reason


def test_a_ranking_judges_every_pair_not_only_neighbours(claim):
    # rigl 0.900 ± 0.001 (sd), set 0.91 ± 0.06, static 0.920 ± 0.001, claimed rigl > set > static.
    # rigl − set = −0.01 with se² = 1e-6/3 + 0.0036/3, se = 0.0346, df ≈ 2: ± 0.149, inside the
    # noise; set − static likewise. rigl − static = −0.02 with se² = 2e-6/3 (se 0.00081650),
    # df = 4, t = 2.7764: −0.02 ± 0.0022669 = [−0.022267, −0.017733], below 0: fails.
    c = claim({"kind": "ranking", "order": [RIGL, SET, STATIC]})
    runs_ = table(rows("rigl", [0.899, 0.900, 0.901]), rows("set", [0.85, 0.91, 0.97]),
                  rows("static", [0.919, 0.920, 0.921]))  # fmt: skip
    v = verdict(c, runs_)
    assert v.verdict == "fails"
    assert [p["verdict"] for p in v.pairs] == ["inconclusive", "fails", "inconclusive"]
    p = v.pairs[1]
    assert set(p) == {"better", "worse", "verdict", "diff", "low", "high"}
    assert (p["better"], p["worse"]) == ("rigl default 90%", "static default 90%")
    assert (p["diff"], p["low"], p["high"]) == pytest.approx((-0.02, -0.022267, -0.017733),
                                                             abs=1e-6)  # fmt: skip
    assert "rigl default 90% vs static default 90%: fails (diff -0.02" in v.reason


def test_a_missing_cell_does_not_stop_the_other_pairs(claim):
    c = claim({"kind": "ranking", "order": [RIGL, SET, STATIC]})
    # no set cell; rigl 0.901 ± 0.001 clearly below static 0.921 ± 0.001: fails regardless
    reversed_ = table(rows("rigl", [0.90, 0.901, 0.902]), rows("static", [0.92, 0.921, 0.922]))
    v = verdict(c, reversed_)
    assert v.verdict == "fails" and [p["verdict"] for p in v.pairs][1] == "fails"
    # the right order without set: every pair that can be judged holds, yet one cell is missing
    right = table(rows("rigl", [0.92, 0.921, 0.922]), rows("static", [0.90, 0.901, 0.902]))
    v = verdict(c, right)
    assert v.verdict == "inconclusive"
    assert [p["verdict"] for p in v.pairs] == ["inconclusive", "holds", "inconclusive"]
    assert v.pairs[0]["diff"] is None and v.pairs[0]["reason"] == "method=set cannot be judged"
    assert v.reason.startswith("no cell matches method=set; rigl default 90% vs method=set: ")
    # the cells keep their slots (the LaTeX macros MeanA, MeanC), the missing one empty
    assert [c.mean is None for c in v.cells] == [False, True, False] and v.cells[1].problem
    # a trend whose middle cell failed: 0.5 -> 0.9 still rises clearly under "decreasing"
    failed = rows("static", [0.91, 0.911], 0.7, status="failed")
    trend = claim({"kind": "trend", "a": STATIC, "along": "target_sparsity",
                   "direction": "decreasing"})  # fmt: skip
    runs_ = table(rows("static", [0.90, 0.901], 0.5), failed, rows("static", [0.93, 0.931], 0.9))
    v = verdict(trend, runs_)
    assert v.verdict == "fails"
    assert [(p["from"], p["to"], p["verdict"]) for p in v.pairs] == [
        (0.5, 0.7, "inconclusive"), (0.5, 0.9, "fails"), (0.7, 0.9, "inconclusive")]  # fmt: skip
    assert "2 row(s) failed" in v.reason


def test_a_trend_judges_every_pair_along_the_column(claim):
    # "decreasing", but 0.900 -> 0.920 between the ends (the numbers of the ranking test:
    # −0.02 ± 0.0022669), with a noisy middle that hides each step
    c = claim({"kind": "trend", "a": STATIC, "along": "target_sparsity",
               "direction": "decreasing"})  # fmt: skip
    runs_ = table(rows("static", [0.899, 0.900, 0.901], 0.5), rows("static", [0.85, 0.91, 0.97],
                  0.7), rows("static", [0.919, 0.920, 0.921], 0.9))  # fmt: skip
    v = verdict(c, runs_)
    assert v.verdict == "fails"
    assert [p["verdict"] for p in v.pairs] == ["inconclusive", "fails", "inconclusive"]
    assert (v.pairs[1]["diff"], v.pairs[1]["low"]) == pytest.approx((-0.02, -0.022267), abs=1e-6)
    assert "target_sparsity 0.5 → 0.9: fails (change -0.02" in v.reason
    # constant within 0.01: every cell is within 0.008 of the first, but the last two are
    # 0.016 apart. Each cell's two seeds differ by 0.0002 (s² = 2e-8), so se² = 2e-8 for
    # every pair, df = 2 and the half-width is 4.3027 · 1.4142e-4 = 6.085e-4: first -> 0.7
    # 0.008 in [0.00739, 0.00861] holds, first -> 0.9 −0.008 holds, 0.7 -> 0.9 −0.016 in
    # [−0.01661, −0.01539] lies below −0.01: fails
    flat = claim({"kind": "trend", "a": STATIC, "along": "target_sparsity",
                  "direction": "constant", "tol": 0.01})  # fmt: skip
    drift = table(rows("static", [0.9, 0.9002], 0.5), rows("static", [0.908, 0.9082], 0.7),
                  rows("static", [0.892, 0.8922], 0.9))  # fmt: skip
    v = verdict(flat, drift)
    assert v.verdict == "fails"
    assert [(p["from"], p["to"], p["verdict"]) for p in v.pairs] == [
        (0.5, 0.7, "holds"), (0.5, 0.9, "holds"), (0.7, 0.9, "fails")]  # fmt: skip
    assert v.pairs[2]["high"] == pytest.approx(-0.016 + 6.085e-4, abs=1e-6)
    assert math.isclose(v.pairs[0]["low"], 0.008 - 6.085e-4, abs_tol=1e-6)
