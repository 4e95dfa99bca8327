"""Seeds an undecided claim would need, non-default levels, and the seed-noise-only note."""

import pytest

from sparsebench.suite.claims import ClaimError, judge
from sparsebench.suite.claims.outputs import badge, to_markdown, verdict_note
from sparsebench.suite.claims.stats import seeds_needed

from .conftest import rows, table

KEYS = {"classification": ("task", "method", "setting_id", "target_sparsity", "seed")}
ORDER = {"kind": "order", "a": {"method": "rigl"}, "b": {"method": "set"}, "op": ">"}


def test_seeds_needed_by_hand():
    # one variance 1, distance 2: n = 3 gives t(0.975, 2) · 1/√3 = 4.303 · 0.5774 = 2.484 > 2,
    # n = 4 gives t(0.975, 3) · 1/2 = 3.182 / 2 = 1.591 < 2
    assert seeds_needed([1.0], 2.0, 0.95, True) == 4
    # two variances 1 and 1 (Welch, n per cell): se = √(2/n), df = 2(n − 1);
    # n = 3: 2.776 · 0.8165 = 2.267 > 2, n = 4: 2.447 · 0.7071 = 1.730 < 2
    assert seeds_needed([1.0, 1.0], 2.0, 0.95, False) == 4
    assert seeds_needed([1.0], 0.01, 0.95, True) is None  # about 38,000 seeds: past the cap
    assert seeds_needed([0.0, 0.0], 1.0, 0.95, False) is None  # no spread: nothing to say
    assert seeds_needed([1.0], 0.0, 0.95, True) is None  # on the boundary: never decided


def test_an_inconclusive_order_says_how_many_seeds_would_decide_it(claim):
    # rigl 0.93, 0.91, 0.95 and set 0.92, 0.90, 0.94: d = 0.01, both variances 0.0004;
    # se(n) = √(0.0008 / n), df = 2(n − 1): n = 31: 2.0003 · 0.005080 = 0.01016 > 0.01,
    # n = 32: 1.9990 · 0.005 = 0.009995 < 0.01
    runs = table(rows("rigl", [0.93, 0.91, 0.95]), rows("set", [0.92, 0.90, 0.94]))
    v = judge(claim(ORDER), {"classification": runs}, KEYS)
    assert v.verdict == "inconclusive" and v.seeds_needed == 32
    assert verdict_note(v) == " (about 32 seeds per cell would decide it)"
    clear = table(rows("rigl", [0.93, 0.94, 0.935]), rows("set", [0.90, 0.905, 0.91]))
    decided = judge(claim(ORDER), {"classification": clear}, KEYS)
    assert decided.verdict == "holds" and decided.seeds_needed is None
    # paired: differences 0.01, 0.01, 0.01 tie (no evidence) -> no estimate either
    paired = judge(claim({**ORDER, "stat": "paired"}), {"classification": runs}, KEYS)
    assert paired.verdict == "inconclusive" and paired.seeds_needed is None


def test_a_level_other_than_the_suites_needs_a_reason_and_shows(claim):
    with pytest.raises(ClaimError, match=r"level: 0\.9 differs from the suite's 0\.95; say why"):
        claim({**ORDER, "level": 0.9})
    c = claim({**ORDER, "level": 0.9, "level_why": "the paper tests at 90 %"})
    runs = table(rows("rigl", [0.93, 0.94, 0.935]), rows("set", [0.90, 0.905, 0.91]))
    v = judge(c, {"classification": runs}, KEYS)
    assert (
        badge([v])
        == "claims: 1 holds / 0 fails / 0 inconclusive (of 1); 1 at a level other than 95%"
    )
    assert verdict_note(v) == " (at the 90% level)"
    page = to_markdown([v], "b")
    assert "**holds** (at the 90% level) †" in page
    assert "† The interval covers the spread over seeds (or trials) only" in page
    flops = claim({**ORDER, "stat": "exact"}, metric="train_flops")  # counted: no such note
    assert "†" not in to_markdown([judge(flops, {"classification": runs}, KEYS)], "b")
