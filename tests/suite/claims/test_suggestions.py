"""A mistyped pillar, metric, column or method in a claim file, or a task or setting in a
selector that no row holds, suggests the closest name; a name close to none suggests none."""

import pytest

from sparsebench.suite.claims import ClaimError, judge, load_file

from .conftest import one, rows, table

ORDER = {"kind": "order", "a": {"method": "rigl"}, "b": {"method": "set"}, "op": ">"}
KEYS = {"classification": ("task", "method", "setting_id", "target_sparsity", "seed")}


def _error(claim_file, **test) -> str:
    with pytest.raises(ClaimError) as e:
        load_file(claim_file([one("x", **{**ORDER, **test})]))
    return str(e.value)


def test_a_mistyped_pillar(claim_file):
    # other tests may register more pillars (after sae): the message lists them too
    msg = _error(claim_file, pillar="clasification")
    assert "claim 'x': pillar: unknown pillar 'clasification'; registered pillars: " in msg
    assert msg.endswith("; did you mean 'classification'?")
    msg = _error(claim_file, pillar="qqqqzz")
    assert "registered pillars: classification, hessian" in msg and "did you mean" not in msg


def test_a_mistyped_metric(claim_file):
    msg = _error(claim_file, metric="test_accc")
    assert "toy.yaml: claim 'x': unknown metric 'test_accc' of pillar 'classification'" in msg
    assert msg.endswith("; did you mean 'test_acc'?")
    assert "did you mean" not in _error(claim_file, metric="qqqqzz")


def test_a_mistyped_column_in_a_selector_or_at(claim_file):
    msg = _error(claim_file, where={"taks": "t"})
    assert "unknown column 'taks' of pillar 'classification'; its columns: " in msg
    assert msg.endswith("; did you mean 'task'?")
    assert "did you mean" not in _error(claim_file, where={"qqqqzz": "t"})
    msg = _error(claim_file, at={"target_sparsty": 0.9})
    assert "at: 'target_sparsty' is an unknown column of pillar 'classification'" in msg
    assert msg.endswith("; did you mean 'target_sparsity'?")
    assert "did you mean" not in _error(claim_file, at={"qqqqzz": 0.9})


def test_a_mistyped_method_in_a_selector(claim_file):
    msg = _error(claim_file, b={"method": "sett"})
    assert "toy.yaml: claim 'x': unknown method 'sett' of pillar 'classification'" in msg
    assert msg.endswith("; did you mean 'set'?")
    assert "did you mean" not in _error(claim_file, b={"method": "qqqqzz"})


def test_a_task_or_setting_no_row_holds_suggests_the_closest_one_that_does(claim):
    runs = table(
        rows("rigl", [0.93, 0.94], task="mnist", setting="p0a1"),
        rows("set", [0.90, 0.91], task="mnist", setting="p0a1"),
    )
    v = judge(claim({**ORDER, "where": {"task": "mnsit"}}), {"classification": runs}, KEYS)
    assert v.verdict == "inconclusive"
    assert v.reason.startswith(
        "no cell matches task=mnsit, method=rigl; did you mean task='mnist'?"
    )
    v = judge(claim({**ORDER, "where": {"setting": "p0b1"}}), {"classification": runs}, KEYS)
    assert "no cell matches setting=p0b1, method=rigl; did you mean setting='p0a1'?" in v.reason
    v = judge(claim({**ORDER, "where": {"task": "qqqqzz"}}), {"classification": runs}, KEYS)
    assert "no cell matches task=qqqqzz, method=rigl" in v.reason
    assert "did you mean" not in v.reason
