"""The merging job's selection protocol on a real (tiny) trunk and real digits tasks: staged
search (DARE's λ-then-p), the selection's example limit, and the bank's MergeData halves."""

from __future__ import annotations

import json

import pytest
import torch

from sparsebench.methods.merging.adamerging import AdaMergingTask
from sparsebench.methods.merging.base import (
    MergeInputs,
    MergeResult,
    add_scaled,
    density,
    sign_conflict,
    task_vectors,
)
from sparsebench.methods.merging.dare import P_GRID, DareTA
from sparsebench.methods.merging.task_arithmetic import LAMBDA_GRID, TaskArithmetic
from sparsebench.methods.merging.ties import Ties, ties_vector
from sparsebench.suite.pillars.merging.config import TrunkConfig
from sparsebench.suite.pillars.merging.diagnostics import sign_conflict_chance
from sparsebench.suite.pillars.merging.job import BatchState, TaskBank, run_merge, scores
from sparsebench.suite.pillars.merging.models import build_trunk, trunk_params
from sparsebench.suite.pillars.merging.tasks import load_task

CFG = TrunkConfig("mlp", width=16, depth=1)
LIMIT = 60


@pytest.fixture(scope="module")
def state() -> BatchState:
    torch.manual_seed(0)
    tasks = [load_task("digits"), load_task("digits_mirror")]
    trunk = build_trunk(CFG)
    base = trunk_params(trunk)
    heads = []
    for t in tasks:  # least-squares probes on θ0's features: better than chance on every task
        x, y = t.train.tensors
        with torch.no_grad():
            f = torch.cat([trunk(x), torch.ones(len(x), 1)], 1)
        w = torch.linalg.lstsq(f, torch.nn.functional.one_hot(y, 10).float()).solution.T
        heads.append((w[:, :-1].contiguous(), w[:, -1].contiguous()))
    bank = TaskBank(CFG, heads, tasks)
    experts = [{k: v + 0.05 * torch.randn_like(v) for k, v in base.items()} for _ in tasks]
    st = BatchState(CFG, bank, base, experts, None, select_examples=LIMIT)
    st.expert_acc["val"] = [bank.evaluate(e, i, "val", LIMIT)[0] for i, e in enumerate(experts)]
    st.expert_acc["test"] = [bank.evaluate(e, i, "test")[0] for i, e in enumerate(experts)]
    bank.selection = (st.expert_acc["val"], LIMIT)
    return st


def test_dare_is_searched_lambda_first_without_dropping_then_p(state):
    out = run_merge(state, DareTA, DareTA.Params(), seed=0)
    curve = json.loads(out["curve_json"])
    first = [p for p in curve if p["stage"] == 0]
    second = [p for p in curve if p["stage"] == 1]
    assert [p["lam"] for p in first] == list(LAMBDA_GRID)
    assert {p["p"] for p in first} == {0.0}  # the host alone
    best_lam = max(first, key=lambda p: p["val_norm_acc"])["lam"]  # first one on a tie
    assert [p["p"] for p in second] == list(P_GRID)
    assert {p["lam"] for p in second} == {best_lam}
    assert out["n_candidates"] == len(LAMBDA_GRID) + len(P_GRID)
    chosen = json.loads(out["chosen_json"])
    assert chosen["lam"] == best_lam and chosen["p"] in P_GRID
    assert chosen["p"] == max(second, key=lambda p: p["val_norm_acc"])["p"]


def test_a_stage_the_spec_fixed_is_skipped(state):
    out = run_merge(state, DareTA, DareTA.Params(lam=0.3), seed=0)
    curve = json.loads(out["curve_json"])
    assert [p["p"] for p in curve] == list(P_GRID)  # one stage: p at the spec's λ
    assert all("lam" not in p for p in curve) and {p["stage"] for p in curve} == {0}
    out = run_merge(state, DareTA, DareTA.Params(p=0.5), seed=0)
    curve = json.loads(out["curve_json"])
    assert [p["lam"] for p in curve] == list(LAMBDA_GRID) and all("p" not in p for p in curve)


def test_selection_reads_only_the_first_select_examples(state):
    trunk = state.experts[0]
    full = scores(state.bank, [trunk, trunk], "val", [1.0, 1.0])
    limited = scores(state.bank, [trunk, trunk], "val", [1.0, 1.0], LIMIT)
    by_hand = [state.bank.evaluate(trunk, t, "val", LIMIT)[0] for t in range(2)]
    assert limited["avg_acc"] == pytest.approx(sum(by_hand) / 2)
    assert state.bank.tasks[0].val.tensors[0].shape[0] > LIMIT  # the limit did bite
    assert state.bank.selection_score(trunk) == pytest.approx(
        sum(a / e for a, e in zip(by_hand, state.expert_acc["val"])) / 2
    )
    assert full["avg_acc"] != limited["avg_acc"] or full["per_task"] != limited["per_task"]


def test_logits_are_features_through_the_head(state):
    x = state.bank.tasks[1].val.tensors[0][:5]
    trunk = state.base
    torch.testing.assert_close(
        state.bank.logits(trunk, 1, x), state.bank.head_logits(1, state.bank.features(trunk, x))
    )


def test_adamerging_starts_at_the_lambda_task_arithmetic_chooses(state):
    ta = run_merge(state, TaskArithmetic, TaskArithmetic.Params(), seed=0)
    ada = run_merge(state, AdaMergingTask, AdaMergingTask.Params(steps=0, n_examples=16), seed=0)
    lam = json.loads(ta["chosen_json"])["lam"]
    assert json.loads(ada["info_json"])["init"] == lam
    assert ada["norm_acc"] == pytest.approx(ta["norm_acc"])  # 0 steps: TA at that λ


# The plain stacked formulas, merging from scratch at every grid point (no merge_vector, no
# statistics counted along the way): the record's columns must not depend on how we merge.
class StackedTA(TaskArithmetic):
    scale = None

    def merge(self, inputs, params):
        tvs = task_vectors(inputs.base, inputs.experts)
        summed = {k: torch.stack([tv[k] for tv in tvs]).sum(0) for k in inputs.base}
        return MergeResult(state=add_scaled(inputs.base, summed, params.lam), task_vectors=tvs)


class StackedDareTA(DareTA):
    scale = None

    def merge(self, inputs, params):
        tvs = task_vectors(inputs.base, inputs.experts)
        for t, tv in enumerate(tvs):  # task after task, keys in order, kept where u >= p
            g = torch.Generator().manual_seed(inputs.seed * 1_000_003 + t)
            for k, v in tv.items():
                keep = torch.rand(v.shape, generator=g) >= params.p
                tv[k] = torch.where(keep, v / (1.0 - params.p), torch.zeros_like(v))
        summed = {k: torch.stack([tv[k] for tv in tvs]).sum(0) for k in inputs.base}
        return MergeResult(state=add_scaled(inputs.base, summed, params.lam), task_vectors=tvs)


class StackedTies(Ties):
    scale = None

    def merge(self, inputs, params):
        merged, trimmed = ties_vector(task_vectors(inputs.base, inputs.experts), params.k)
        return MergeResult(state=add_scaled(inputs.base, merged, params.lam), task_vectors=trimmed)


@pytest.mark.parametrize(
    "method, stacked",
    [(TaskArithmetic, StackedTA), (DareTA, StackedDareTA), (Ties, StackedTies)],
)
def test_record_columns_equal_the_stacked_merge_at_every_point(state, method, stacked):
    out = run_merge(state, method, method.Params(), seed=3)
    ref = run_merge(state, stacked, stacked.Params(), seed=3)
    assert out["chosen_json"] == ref["chosen_json"]
    curve, ref_curve = json.loads(out["curve_json"]), json.loads(ref["curve_json"])
    assert len(curve) == len(ref_curve) == out["n_candidates"]
    for got, exp in zip(curve, ref_curve):
        assert got == pytest.approx(exp, rel=1e-9, abs=1e-12)
    for col in ("norm_acc", "val_norm_acc", "avg_acc", "density", "sign_conflict"):
        assert out[col] == pytest.approx(ref[col], rel=1e-9, abs=1e-12), col
    # the chance level, by its definition on the stacked vectors of the chosen merge
    chosen = json.loads(ref["chosen_json"])
    tvs = stacked().merge(MergeInputs(state.base, state.experts, seed=3), stacked.Params(**chosen))
    assert out["sign_conflict_chance"] == pytest.approx(
        sign_conflict_chance(tvs.task_vectors), rel=1e-9
    )
    assert ref["sign_conflict"] == pytest.approx(sign_conflict(tvs.task_vectors), rel=1e-12)
    assert ref["density"] == pytest.approx(density(tvs.task_vectors), rel=1e-12)
