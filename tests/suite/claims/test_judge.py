"""Each statement kind judged on small hand-built tables, including the inconclusive cases."""

import math

import polars as pl
import pytest

from sparsebench.suite.claims import ClaimError, judge
from sparsebench.suite.claims.stats import mean_interval, ratio_interval, welch_diff

from .conftest import one, rows, table

KEYS = {"classification": ("task", "method", "setting_id", "target_sparsity", "seed")}
RIGL, SET = {"method": "rigl"}, {"method": "set"}


def verdict(c, runs):
    return judge(c, {"classification": runs}, KEYS)


def counted(method: str, values: list[float], sparsity: float = 0.9) -> list[dict]:
    """Rows whose actual_sparsity (the classification pillar's deterministic metric, the one
    ``stat: exact`` may use) is ``values[seed]``: a stand-in column with chosen numbers."""
    out = rows(method, [0.9] * len(values), sparsity)
    for r, v in zip(out, values, strict=True):
        r["actual_sparsity"] = v
    return out


def test_welch_interval_by_hand():
    # a = 1, 2, 3 (var 1), b = 0, 0, 0: se² = 1/3, df = (1/3)² / ((1/3)²/2) = 2,
    # t(0.975, 2) = 4.3027: d = 2 ± 4.3027 · 0.57735 = 2 ± 2.4841
    d, lo, hi = welch_diff([1, 2, 3], [0, 0, 0], 0.95)
    assert d == 2 and lo == pytest.approx(-0.4841, abs=1e-4) and hi == pytest.approx(4.4841, 1e-4)
    assert welch_diff([1.0], [0.0, 1.0], 0.95)[1:] == (-math.inf, math.inf)  # n = 1: unbounded
    assert welch_diff([2.0, 2.0], [1.0, 1.0], 0.95) == (1.0, 1.0, 1.0)  # no spread: a point
    m, lo, hi = mean_interval([1, 2, 3], 0.95)  # 2 ± 4.3027 / sqrt(3)
    assert m == 2 and hi - m == pytest.approx(4.3027 / math.sqrt(3), 1e-4)
    # ratio by the delta method on log(mean a / mean b): se² = s_a²/(n m_a²) + s_b²/(n m_b²)
    # = 0.04/12 + 0.01/3 = 1/150 (equal terms: df = 4), half-width t(0.975, 4) · se
    # = 2.7764 · 0.08165 = 0.22670
    r, lo, hi = ratio_interval([2, 2.2, 1.8], [1, 1.1, 0.9], 0.95)
    assert r == pytest.approx(2.0) and lo == pytest.approx(2 * math.exp(-0.22670), 1e-4)
    assert hi == pytest.approx(2 * math.exp(0.22670), 1e-4)
    assert ratio_interval([2], [1, 1.1], 0.9)[1:] == (-math.inf, math.inf)  # one seed: unbounded
    assert ratio_interval([2], [1], 0.9, exact=True) == (2.0, 2.0, 2.0)


def test_order_holds_fails_and_is_inconclusive_inside_noise(claim):
    c = claim({"kind": "order", "a": RIGL, "b": SET, "op": ">"})
    clear = table(rows("rigl", [0.93, 0.94, 0.935]), rows("set", [0.90, 0.905, 0.91]))
    v = verdict(c, clear)
    assert v.verdict == "holds" and v.estimate == pytest.approx(0.03) and v.low > 0
    assert [s.n for s in v.cells] == [3, 3] and v.cells[0].mean == pytest.approx(0.935)
    reverse = table(rows("rigl", [0.90, 0.905, 0.91]), rows("set", [0.93, 0.94, 0.935]))
    assert verdict(c, reverse).verdict == "fails"
    noisy = table(rows("rigl", [0.93, 0.90, 0.95]), rows("set", [0.92, 0.91, 0.94]))
    v = verdict(c, noisy)
    assert v.verdict == "inconclusive" and v.low < 0 < v.high and "interval" in v.reason
    # a margin: "rigl ≥ set − 0.05" holds where plain ">" is inside noise
    assert verdict(claim({**c.test, "margin": 0.05}), noisy).verdict == "holds"
    # "<" is the mirror image
    assert verdict(claim({**c.test, "op": "<"}), reverse).verdict == "holds"


def test_missing_single_seed_failed_and_ambiguous_cells_are_inconclusive(claim):
    c = claim({"kind": "order", "a": RIGL, "b": SET, "op": ">"})
    ok = rows("set", [0.90, 0.905, 0.91])
    v = verdict(c, table(ok))
    assert v.verdict == "inconclusive" and "no cell matches method=rigl" in v.reason
    v = verdict(c, table(rows("rigl", [0.99]), ok))
    assert v.verdict == "inconclusive" and "1 seed(s) with test_acc, the test needs 2" in v.reason
    failed = rows("rigl", [0.99, 0.99]) + rows("rigl", [None], status="failed")[:1]
    failed[-1]["seed"], failed[-1]["cell_id"] = 2, "t/rigl/default/s0.9/seed2"
    v = verdict(c, table(failed, ok))
    assert v.verdict == "inconclusive" and "1 row(s) failed" in v.reason
    two = table(rows("rigl", [0.99, 0.98]), rows("rigl", [0.5, 0.51], setting="dT25"), ok)
    v = verdict(c, two)
    assert v.verdict == "inconclusive" and "matches 2 cells" in v.reason
    assert verdict(claim({**c.test, "a": {**RIGL, "setting": "dT25"}}), two).verdict == "fails"
    assert judge(c, {"classification": None}, KEYS).reason.startswith("no runs table")


def test_equal_is_an_equivalence_test(claim):
    c = claim({"kind": "equal", "a": RIGL, "b": SET, "tol": 0.01})
    same = table(rows("rigl", [0.900, 0.901, 0.902]), rows("set", [0.901, 0.900, 0.902]))
    assert verdict(c, same).verdict == "holds"
    far = table(rows("rigl", [0.95, 0.951, 0.952]), rows("set", [0.90, 0.901, 0.902]))
    assert verdict(c, far).verdict == "fails"
    wide = table(rows("rigl", [0.85, 0.95, 0.90]), rows("set", [0.90, 0.901, 0.902]))
    assert verdict(c, wide).verdict == "inconclusive"


def test_ratio_and_value(claim):
    runs = table(counted("rigl", [0.9, 0.9]), counted("static", [0.8, 0.8]))
    c = claim({"kind": "ratio", "a": {"method": "rigl"}, "b": {"method": "static"}, "op": ">",
               "threshold": 1.1}, metric="actual_sparsity", stat="exact")  # fmt: skip
    v = verdict(c, runs)
    assert v.verdict == "holds" and v.estimate == pytest.approx(1.125)
    assert verdict(claim({**c.test, "threshold": 1.2}), runs).verdict == "fails"
    band = claim({"kind": "value", "a": RIGL, "within": [0.85, 0.95]})
    assert verdict(band, table(rows("rigl", [0.9, 0.91, 0.89]))).verdict == "holds"
    assert verdict(band, table(rows("rigl", [0.5, 0.51, 0.49]))).verdict == "fails"
    assert verdict(band, table(rows("rigl", [0.7, 0.99, 0.9]))).verdict == "inconclusive"
    low = claim({"kind": "value", "a": RIGL, "op": "<", "bound": 0.95})
    assert verdict(low, table(rows("rigl", [0.9, 0.91, 0.89]))).verdict == "holds"


def test_ranking_holds_only_if_every_pair_does(claim):
    c = claim({"kind": "ranking", "order": [RIGL, SET, {"method": "static"}]})
    good = table(rows("rigl", [0.95, 0.951, 0.952]), rows("set", [0.92, 0.921, 0.922]),
                 rows("static", [0.90, 0.901, 0.902]))  # fmt: skip
    v = verdict(c, good)
    assert v.verdict == "holds" and [p["verdict"] for p in v.pairs] == ["holds"] * 3
    assert [(p["better"], p["worse"]) for p in v.pairs] == [
        ("rigl default 90%", "set default 90%"), ("rigl default 90%", "static default 90%"),
        ("set default 90%", "static default 90%")]  # fmt: skip
    swapped = table(rows("rigl", [0.95, 0.951, 0.952]), rows("set", [0.90, 0.901, 0.902]),
                    rows("static", [0.92, 0.921, 0.922]))  # fmt: skip
    v = verdict(c, swapped)
    assert v.verdict == "fails" and [p["verdict"] for p in v.pairs] == ["holds", "holds", "fails"]
    # lower-is-better metric: the ranking is by ascending FLOPs (1e8 at 90 %, 2e7 at 98 %,
    # each with a 1 % spread over its two seeds)
    cheaper_first = [{"target_sparsity": 0.98}, {"target_sparsity": 0.9}]
    flops = claim({"kind": "ranking", "order": cheaper_first}, metric="train_flops")
    runs = table(rows("rigl", [0.9, 0.9], 0.9), rows("rigl", [0.8, 0.8], 0.98))
    runs = runs.with_columns(pl.col("train_flops") * (1 + 0.01 * pl.col("seed")))
    assert verdict(flops, runs).verdict == "holds"


def test_trend_along_a_column(claim):
    runs = table(rows("static", [0.95, 0.951, 0.952], 0.9), rows("static", [0.93, 0.931, 0.932],
                 0.95), rows("static", [0.80, 0.801, 0.802], 0.98))  # fmt: skip
    c = claim({"kind": "trend", "a": {"method": "static"}, "along": "target_sparsity",
               "direction": "decreasing"})  # fmt: skip
    v = verdict(c, runs)
    assert v.verdict == "holds"
    assert [(p["from"], p["to"]) for p in v.pairs] == [(0.9, 0.95), (0.9, 0.98), (0.95, 0.98)]
    up = claim({**c.test, "direction": "increasing"})
    assert verdict(up, runs).verdict == "fails"
    flat = claim({"kind": "trend", "a": {"method": "static"}, "along": "target_sparsity",
                  "direction": "constant", "tol": 0.005}, metric="actual_sparsity",
                 stat="exact")  # fmt: skip
    sparse = table(*(counted("static", [x, x], x) for x in (0.9, 0.95, 0.98)))
    assert verdict(flat, sparse).verdict == "fails"  # 0.9 -> 0.95: a change of 0.05 > tol
    one = table(rows("static", [0.95, 0.951], 0.9))
    assert verdict(c, one).verdict == "inconclusive"


def test_a_constant_trend_cannot_creep_and_exact_needs_equal_seeds(claim):
    # steps of 0.8 tol each hold pairwise, but the last value is 1.6 tol from the first
    runs = table(*(counted("static", [v, v], x) for x, v in ((0.5, 1.0), (0.7, 1.8), (0.9, 2.6))))
    c = claim({"kind": "trend", "a": {"method": "static"}, "along": "target_sparsity",
               "direction": "constant", "tol": 1.0}, metric="actual_sparsity",
              stat="exact")  # fmt: skip
    v = verdict(c, runs)
    assert v.verdict == "fails" and [p["from"] for p in v.pairs] == [0.5, 0.5, 0.7]
    assert [p["verdict"] for p in v.pairs] == ["holds", "fails", "holds"]
    varying = table(counted("static", [1.0, 1.1], 0.5), counted("static", [1.0, 1.0], 0.7))
    v = verdict(c, varying)
    assert v.verdict == "inconclusive" and "stat: exact, but actual_sparsity differs" in v.reason


def test_boolean_filters_nan_values_and_a_broken_claim(claim):
    runs = table(rows("rigl", [0.9, 0.91], git_dirty=False), rows("set", [0.8, 0.81],
                 git_dirty=True))  # fmt: skip
    c = claim({"kind": "order", "a": {"git_dirty": False}, "b": {"git_dirty": True}, "op": ">"})
    assert verdict(c, runs).verdict == "holds"
    nan = table(rows("rigl", [0.9, float("nan")]), rows("set", [0.8, 0.81]))
    v = verdict(claim({"kind": "order", "a": RIGL, "b": SET, "op": ">"}), nan)
    assert v.verdict == "inconclusive" and "missing or not finite in 1 finished row" in v.reason


def power(k: float) -> pl.DataFrame:
    """test_acc = sparsity^k · e^(±0.01), the two seeds on either side of the power law (a
    stand-in column with a known exponent k): the least-squares slope is k, and its interval
    is k ± t(0.975, 4) · sqrt(1.5e-4 / Sxx) with Sxx = 2 · Σ (ln x − mean ln x)² = 0.34782
    over x = 0.5, 0.7, 0.9: k ± 2.7764 · 0.020767 = k ± 0.0577."""
    e = math.exp(0.01)
    return table(*(rows("static", [x**k * e, x**k / e], x) for x in (0.5, 0.7, 0.9)))


def test_exponent_of_a_power_law(claim):
    runs = power(2)
    c = claim({"kind": "exponent", "a": {"method": "static"}, "along": "target_sparsity",
               "op": "<", "bound": 2.5})  # fmt: skip
    v = verdict(c, runs)
    assert v.verdict == "holds" and v.estimate == pytest.approx(2.0)
    assert verdict(claim({**c.test, "bound": 1.5}), runs).verdict == "fails"
    # "about linear" is a band: a slope of 2 or of 0.5 is outside [0.7, 1.3], a slope of 1 inside
    band = {k: v for k, v in c.test.items() if k not in ("op", "bound")} | {"within": [0.7, 1.3]}
    v = verdict(claim(band), runs)
    assert v.verdict == "fails" and "against the band [0.7, 1.3]" in v.reason
    assert v.low == pytest.approx(2 - 0.0577, abs=1e-3)
    sub = power(0.5)
    assert verdict(claim(band), sub).verdict == "fails"
    assert verdict(c, sub).verdict == "holds"  # the one-sided bound lets a sub-linear slope hold
    lin = power(1)
    assert verdict(claim(band), lin).verdict == "holds"
    with pytest.raises(ClaimError, match="'exponent' test takes either op and bound, or within"):
        claim({**band, "op": "<", "bound": 1.3})
    with pytest.raises(ClaimError, match="'exponent' test takes op and bound together"):
        claim({k: v for k, v in c.test.items() if k != "bound"})


def test_ratio_ranking_and_exponent_are_inconclusive_inside_noise(claim):
    # ratio with seed noise (delta-method interval): 1.125 on average, but the interval of
    # the ratio straddles the threshold 1.1
    noisy = table(rows("rigl", [0.95, 0.85, 0.90], 0.9), rows("static", [0.85, 0.75, 0.80], 0.9))
    c = claim({"kind": "ratio", "a": RIGL, "b": {"method": "static"}, "op": ">",
               "threshold": 1.1})  # fmt: skip
    v = verdict(c, noisy)
    assert v.verdict == "inconclusive" and v.estimate == pytest.approx(1.125)
    assert v.low < 1.1 < v.high
    clear = table(rows("rigl", [0.90, 0.901, 0.899]), rows("static", [0.70, 0.701, 0.699]))
    assert verdict(c, clear).verdict == "holds"
    # ranking: one pair inside the noise makes the whole ranking inconclusive
    r = claim({"kind": "ranking", "order": [RIGL, SET, {"method": "static"}]})
    close = table(rows("rigl", [0.95, 0.951, 0.952]), rows("set", [0.92, 0.90, 0.94]),
                  rows("static", [0.91, 0.93, 0.915]))  # fmt: skip
    v = verdict(r, close)
    assert v.verdict == "inconclusive" and v.pairs[2]["worse"] == "static default 90%"
    assert v.pairs[2]["verdict"] == "inconclusive"  # set vs static: 0.0017 apart
    # exponent: a noisy power law whose slope interval straddles the bound
    pts = [(0.5, [0.2, 0.35]), (0.7, [0.6, 0.35]), (0.9, [0.6, 1.0])]
    e = claim({"kind": "exponent", "a": {"method": "static"}, "along": "target_sparsity",
               "op": "<", "bound": 2.0})  # fmt: skip
    v = verdict(e, table(*(rows("static", vals, x) for x, vals in pts)))
    assert v.verdict == "inconclusive" and v.low < 2.0 < v.high


def test_a_diverged_cell_is_inconclusive_not_holds(claim):
    c = claim({"kind": "order", "a": RIGL, "b": SET, "op": ">"})
    diverged = rows("rigl", [0.99, 0.99, None])
    diverged[-1]["status"] = "diverged"
    v = verdict(c, table(diverged, rows("set", [0.90, 0.905, 0.91])))
    assert v.verdict == "inconclusive" and "diverged" in v.reason


def test_judge_pillar_judges_only_the_claims_about_that_pillar(claim_file):
    from sparsebench.suite.claims import judge_pillar

    kernel = {"kind": "value", "pillar": "kernels", "metric": "speedup_vs_dense",
              "a": {"backend": "cpu"}, "op": ">", "bound": 5.0}  # fmt: skip
    mixed = claim_file(
        [one("k-1", **kernel), one("c-1", kind="order", a=RIGL, b=SET, op=">")], name="m.yaml"
    )
    # a file about classification only is not parsed: its unknown metric raises nothing here
    broken = claim_file([one("c-2", kind="value", a=RIGL, op=">", bound=1.0, metric="nope")],
                        name="c.yaml")  # fmt: skip
    # three repeats of the cell (a timing is not deterministic: one would be inconclusive)
    runs = pl.DataFrame(
        [
            {
                "cell_id": f"8x8/s0.9/b1/seed{s}",
                "seed": s,
                "backend": b,
                "op": "forward",
                "status": "ok",
                "speedup_vs_dense": x + 0.1 * (s - 1),
            }
            for b, x in (("cpu", 6.5), ("torch_csr", 2.0))
            for s in range(3)
        ]
    )
    # 6.5 ± t(0.975, 2) · 0.1 / sqrt(3) = 6.5 ± 0.248: above 5
    [v] = judge_pillar("kernels", runs, [mixed, broken])
    assert v.claim.id == "k-1" and v.verdict == "holds" and v.estimate == pytest.approx(6.5)
    slower = runs.with_columns(speedup_vs_dense=pl.col("speedup_vs_dense") - 2.5)
    [v] = judge_pillar("kernels", slower, [mixed])
    assert v.verdict == "fails"  # 4 ± 0.248
    assert judge_pillar("kernels", None, [mixed])[0].verdict == "inconclusive"  # no table
    with pytest.raises(ClaimError, match="unknown metric 'nope'"):
        judge_pillar("classification", runs, [broken])


def test_paired_interval_matches_scipy_ttest_rel():
    from scipy import stats as sps

    from sparsebench.suite.claims.stats import paired_diff

    a, b = [0.80, 0.76, 0.83, 0.79], [0.77, 0.74, 0.79, 0.77]
    d, lo, hi = paired_diff(a, b, 0.95)
    ci = sps.ttest_rel(a, b).confidence_interval(0.95)
    assert d == pytest.approx(0.0275) and (lo, hi) == pytest.approx((ci.low, ci.high), abs=1e-12)
    # by hand: differences 0.03, 0.02, 0.04 -> mean 0.03, sd 0.01, t(0.975, 2) = 4.3027
    d, lo, hi = paired_diff([0.83, 0.72, 0.94], [0.80, 0.70, 0.90], 0.95)
    assert d == pytest.approx(0.03) and hi - d == pytest.approx(4.3027 * 0.01 / math.sqrt(3), 1e-4)
    assert paired_diff([1.0], [0.0], 0.95)[1:] == (-math.inf, math.inf)  # one pair: unbounded
    # equal differences on every seed: no evidence the spread is small, so unbounded
    assert paired_diff([0.901, 0.902], [0.900, 0.901], 0.95)[1:] == (-math.inf, math.inf)
    with pytest.raises(ValueError, match="equal lengths"):
        paired_diff([1.0, 2.0], [1.0], 0.95)


def test_paired_decides_where_the_seeds_offset_both_cells(claim):
    """Both methods move with the seed (a shared θ0 and experts): Welch's interval holds the
    seed-to-seed spread and is inconclusive; the paired one removes it and holds."""
    seedy = table(rows("rigl", [0.83, 0.72, 0.94]), rows("set", [0.80, 0.70, 0.90]))
    welch = claim({"kind": "order", "a": RIGL, "b": SET, "op": ">"})
    paired = claim({"kind": "order", "a": RIGL, "b": SET, "op": ">", "stat": "paired"})
    assert verdict(welch, seedy).verdict == "inconclusive"
    v = verdict(paired, seedy)
    assert v.verdict == "holds" and v.estimate == pytest.approx(0.03) and v.low > 0
    assert "(paired by seed)" in v.reason
    worse = table(rows("rigl", [0.77, 0.66, 0.87]), rows("set", [0.80, 0.70, 0.90]))
    assert verdict(paired, worse).verdict == "fails"
    # the pairs follow the seeds, not the row order
    shuffled = table(rows("rigl", [0.83, 0.72, 0.94]), rows("set", [0.80, 0.70, 0.90])[::-1])
    assert verdict(paired, shuffled).estimate == pytest.approx(0.03)
    # paired interval 0.03 ± 4.3027 · 0.01 / √3 = [0.0052, 0.0548]: inside ± 0.06, not ± 0.05
    eq = claim({"kind": "equal", "a": RIGL, "b": SET, "tol": 0.06, "stat": "paired"})
    assert verdict(eq, seedy).verdict == "holds"
    assert verdict(claim({**eq.test, "tol": 0.05}), seedy).verdict == "inconclusive"
    ranking = claim({"kind": "ranking", "order": [RIGL, SET], "stat": "paired"})
    assert verdict(ranking, seedy).verdict == "holds"


def test_paired_needs_the_same_seeds_and_a_difference_of_two_cells(claim):
    paired = claim({"kind": "order", "a": RIGL, "b": SET, "op": ">", "stat": "paired"})
    fewer = table(rows("rigl", [0.83, 0.72, 0.94]), rows("set", [0.80, 0.70]))
    v = verdict(paired, fewer)
    assert v.verdict == "inconclusive"
    assert "needs the same seeds" in v.reason and "[0, 1, 2]" in v.reason and "[0, 1]" in v.reason
    with pytest.raises(ClaimError, match="stat: paired compares two cells seed by seed"):
        claim({"kind": "value", "a": RIGL, "op": ">", "bound": 0.5, "stat": "paired"})


@pytest.mark.parametrize("replicate", ["seed", "trial"])
def test_replicate_parts_are_stripped_as_the_regex_strips_them(replicate):
    import random

    import polars as pl

    from sparsebench.suite.claims.judge import _replicate_parts, _strip_replicate

    rng = random.Random(1)
    parts = ["trial1", "trial22", "a", "seed3", "", "trialx", "b7", "seed١٢", "xseed1"]
    ids = ["a/seed1/seed2/seed3", "seed1/b", "a/trial1/trial2/trial3"]
    ids += ["/".join(rng.choice(parts) for _ in range(rng.randint(1, 5))) for _ in range(2000)]
    want = [_replicate_parts(replicate)[0].sub("", c) for c in ids]
    assert _strip_replicate(pl.Series(ids), replicate).to_list() == want
