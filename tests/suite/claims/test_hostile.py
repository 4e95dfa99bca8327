"""Claims that would hold without evidence, found by trying to make them: near-ties of a
measured metric, filters that pick a cell's rows, ratios of non-positive means, one cell
compared with itself, and a results folder named like a glob pattern."""

import pytest

from sparsebench.suite.claims import ClaimError, judge
from sparsebench.suite.claims.judge import load_tables

from .conftest import rows, table

KEYS = {"classification": ("task", "method", "setting_id", "target_sparsity", "seed")}
ORDER = {"kind": "order", "a": {"method": "rigl"}, "b": {"method": "set"}, "op": ">"}


def verdict(c, runs):
    return judge(c, {"classification": runs}, KEYS)


def test_values_equal_up_to_float32_rounding_are_a_tie(claim):
    # 0.901 and 0.901 + 1e-11: a spread of rounding, not of seeds (float32 steps are ~1e-7)
    near = table(rows("rigl", [0.901, 0.901 + 1e-11, 0.901]), rows("set", [0.9, 0.9, 0.9]))
    v = verdict(claim(ORDER), near)
    assert v.verdict == "inconclusive" and "not deterministic" in v.reason
    paired = verdict(claim({**ORDER, "stat": "paired"}), near)
    assert paired.verdict == "inconclusive"
    # a real spread of a thousandth still counts
    spread = table(rows("rigl", [0.93, 0.94, 0.935]), rows("set", [0.90, 0.905, 0.91]))
    assert verdict(claim(ORDER), spread).verdict == "holds"


@pytest.mark.parametrize(
    ("selector", "column"),
    [
        ({"method": "rigl", "status": "ok"}, "'status'"),
        ({"method": "rigl", "seed": [0, 1]}, "'seed'"),
        ({"method": "rigl", "test_acc": [0.95, 0.96]}, "'test_acc'"),
    ],
)
def test_a_filter_that_picks_some_rows_of_a_cell_is_refused(claim, selector, column):
    with pytest.raises(ClaimError, match=rf"a filter on {column} selects some rows of a cell"):
        claim({**ORDER, "a": selector})


def test_a_cell_against_itself_and_a_non_positive_ratio_threshold_are_refused(claim):
    with pytest.raises(ClaimError, match="a and b name the same cell"):
        claim({**ORDER, "b": {"method": "rigl"}, "margin": 0.05})
    with pytest.raises(ClaimError, match="order names a cell twice"):
        claim({"kind": "ranking", "order": [{"method": "rigl"}, {"method": "rigl"}]})
    ratio = {"kind": "ratio", "a": {"method": "rigl"}, "b": {"method": "set"}, "op": ">"}
    with pytest.raises(ClaimError, match=r"threshold: 0 is not allowed; .* threshold > 0"):
        claim({**ratio, "threshold": 0})


def test_an_exact_ratio_of_zero_or_negative_means_is_inconclusive(claim):
    ratio = {"kind": "ratio", "a": {"method": "rigl"}, "b": {"method": "set"},
             "op": ">", "threshold": 1.2, "stat": "exact"}  # fmt: skip
    c = claim(ratio, metric="train_flops")
    zero = table(rows("rigl", [0.9], train_flops=0.0), rows("set", [0.9], train_flops=0.0))
    v = verdict(c, zero)  # 0 / 0 read as inf would "hold"
    assert v.verdict == "inconclusive" and "a ratio needs positive means" in v.reason
    signs = table(rows("rigl", [0.9], train_flops=-2.0), rows("set", [0.9], train_flops=-1.0))
    assert verdict(c, signs).verdict == "inconclusive"  # −2 / −1 = 2 would "hold"


def test_a_results_folder_named_like_a_pattern_reads_only_itself(tmp_path):
    runs = table(rows("rigl", [0.93, 0.94]))
    other = tmp_path / "benchX" / "classification"
    other.mkdir(parents=True)
    runs.write_parquet(other / "runs.parquet")
    assert load_tables(tmp_path / "bench?", {"classification"}) == {"classification": None}
    broken = tmp_path / "b" / "classification"
    broken.mkdir(parents=True)
    (broken / "runs.parquet").write_bytes(b"not parquet")
    with pytest.raises(ClaimError, match=r"runs\.parquet: not a readable runs table .* aggregate"):
        load_tables(tmp_path / "b", {"classification"})


def test_a_claim_file_that_is_no_regular_file_and_a_metric_that_is_no_number(claim, tmp_path):
    import os

    from sparsebench.suite.claims import load_file

    with pytest.raises(ClaimError, match=r"not a regular file; a claim file is a YAML text file"):
        load_file(tmp_path)  # a folder
    fifo = tmp_path / "pipe.yaml"
    os.mkfifo(fifo)  # reading it would block: it is refused before any read
    with pytest.raises(ClaimError, match=r"pipe\.yaml: not a regular file"):
        load_file(fifo)
    words = table(rows("rigl", [0.93, 0.94]), rows("set", [0.90, 0.91]))
    words = words.with_columns(test_acc=words["test_acc"].cast(str))
    v = verdict(claim(ORDER), words)
    assert v.verdict == "inconclusive" and "column 'test_acc' holds String, not numbers" in v.reason
