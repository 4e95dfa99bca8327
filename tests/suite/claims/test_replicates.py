"""The pillar's replicate column: the kernels and hessian pillars repeat a cell in trials
(independent jobs of one configuration), and the claims engine counts, checks and pairs those
trials as it does seeds. Hand-built tables; the arithmetic is in the comments."""

import math

import pytest

from sparsebench.suite.claims import judge
from sparsebench.suite.claims.parse import parse
from sparsebench.suite.pillar import Pillar, get_pillar

from .conftest import PAPER, one

KERNELS, HESSIAN = get_pillar("kernels"), get_pillar("hessian")
KEYS = {"kernels": KERNELS.row_key, "hessian": HESSIAN.row_key}
T_975_2 = 4.3027  # t(0.975, 2 degrees of freedom)


def kernel_claim(**test):
    data = {
        "paper": PAPER,
        "defaults": {"pillar": "kernels", "metric": "speedup_vs_dense", "stat": "welch"},
        "claims": [one("k-1", **test)],
    }
    return parse(data, "toy.yaml")[0]


def trials(backend: str, speedups: list[float], trial_ids: list[int] | None = None) -> list[dict]:
    """One kernels row per trial of the cell 64x64/s0.95/b8, ``backend`` forward: the ids and
    labels the pillar gives trials (trial 0 bare, then ``/trial<t>``), the section seed 0 on
    every row (the same weights and inputs in every trial)."""
    out = []
    for t, x in zip(trial_ids or range(len(speedups)), speedups, strict=True):
        suffix = (f"/trial{t}", f" trial {t}") if t else ("", "")
        out.append({"cell_id": f"64x64/s0.95/b8{suffix[0]}",
                    "label": f"64x64 sparsity 0.95 batch 8{suffix[1]}", "seed": 0, "trial": t,
                    "backend": backend, "op": "forward", "sparsity": 0.95, "status": "ok",
                    "speedup_vs_dense": x})  # fmt: skip
    return out


def verdict(c, rows, pillar: str = "kernels"):
    import polars as pl

    return judge(c, {pillar: pl.DataFrame(rows)}, KEYS)


def test_the_timing_pillars_replicate_on_trials_the_others_on_seeds():
    assert Pillar.replicate == "seed" and get_pillar("classification").replicate == "seed"
    for p in (KERNELS, HESSIAN):
        # rows of different trials of one cell are not duplicates of each other
        assert p.replicate == "trial" and "trial" in p.row_key and p.columns["trial"] is int


def test_three_trials_are_three_replicates_of_one_cell():
    c = kernel_claim(kind="value", a={"backend": "cpu"}, op=">", bound=5.0)
    v = verdict(c, trials("cpu", [9.0, 10.0, 11.0]))
    # mean 10, sd 1, t(0.975, 2) = 4.3027: 10 ± 4.3027 / sqrt(3) = 10 ± 2.484, above 5
    assert v.verdict == "holds", v.reason
    assert v.estimate == pytest.approx(10.0)
    half = T_975_2 / math.sqrt(3)
    assert half == pytest.approx(2.484, abs=1e-3)
    assert v.low == pytest.approx(10 - half, abs=1e-3) and v.high == pytest.approx(10 + half, 1e-4)
    [cell] = v.cells
    assert cell.n == 3 and cell.seeds == [0, 1, 2] and cell.std == pytest.approx(1.0)
    assert cell.label == "64x64 sparsity 0.95 batch 8"  # the mean is over trials
    # the bound inside the interval: inconclusive, not holds
    high = kernel_claim(kind="value", a={"backend": "cpu"}, op=">", bound=9.0)
    assert verdict(high, trials("cpu", [9.0, 10.0, 11.0])).verdict == "inconclusive"


def test_a_duplicated_trial_is_not_judged():
    c = kernel_claim(kind="value", a={"backend": "cpu"}, op=">", bound=5.0)
    # trial 1 twice (a record read twice): two rows, one measurement
    v = verdict(c, trials("cpu", [9.0, 10.0, 10.0], trial_ids=[0, 1, 1]))
    assert v.verdict == "inconclusive"
    assert "trial 1 has 2 rows" in v.reason and "each trial counts once" in v.reason
    # one trial is one measurement: too few for an interval
    v = verdict(c, trials("cpu", [9.0]))
    assert v.verdict == "inconclusive" and "1 trial(s) with speedup_vs_dense" in v.reason


def test_paired_pairs_the_backends_of_one_trial():
    # trial t's backends run in one job: the load of that job moves both
    cpu, csr = trials("cpu", [3.0, 6.0, 9.0]), trials("torch_csr", [2.0, 5.2, 8.1])
    c = kernel_claim(kind="order", a={"backend": "cpu"}, b={"backend": "torch_csr"}, op=">")
    assert verdict(c, cpu + csr).verdict == "inconclusive"  # Welch: 6 vs 5.1, sd about 3
    paired = kernel_claim(kind="order", a={"backend": "cpu"}, b={"backend": "torch_csr"},
                          op=">", stat="paired")  # fmt: skip
    v = verdict(paired, cpu + csr)
    # differences 1.0, 0.8, 0.9: mean 0.9, sd 0.1, 0.9 ± 4.3027 · 0.1 / sqrt(3) = 0.9 ± 0.248
    assert v.verdict == "holds" and "paired by trial" in v.reason
    assert v.low == pytest.approx(0.9 - T_975_2 * 0.1 / math.sqrt(3), abs=1e-3)
    # trial 2 missing from one backend: the trials do not pair
    v = verdict(paired, cpu + csr[:2])
    assert v.verdict == "inconclusive" and "the same trials" in v.reason


def test_hessian_trials_are_replicates_too():
    import polars as pl

    data = {
        "paper": PAPER,
        "defaults": {"pillar": "hessian", "metric": "speedup_vs_dense"},
        "claims": [one("h-1", kind="value", a={"method": "colored"}, op=">", bound=2.0)],
    }
    [c] = parse(data, "toy.yaml")
    rows = [
        {"cell_id": "alkane/schnet/colored/n100" + (f"/trial{t}" if t else ""),
         "label": "alkane n=100 schnet colored" + (f" trial {t}" if t else ""), "seed": 0,
         "trial": t, "system": "alkane", "n_atoms": 302, "potential": "schnet",
         "method": "colored", "status": "ok", "speedup_vs_dense": x}
        for t, x in enumerate([4.0, 5.0, 6.0])
    ]  # fmt: skip
    v = judge(c, {"hessian": pl.DataFrame(rows)}, KEYS)
    assert v.verdict == "holds" and v.cells[0].n == 3 and v.estimate == pytest.approx(5.0)
