"""One cell of the merging pillar: (trunk, seed, method setting) -> merged model(s) -> per-task
test accuracy, with the method's open hyperparameters chosen on validation.

Protocol (the same for every method of a board):

1. the batch loads θ0, the experts (and their frozen heads), every task's splits and the
   artefacts the method settings declare once;
2. for each point of the method's grid (its ``Params`` fields left ``None``, over
   ``search``), merge and evaluate on every task's validation split; the point with the highest
   average normalized validation accuracy is chosen (the first one on a tie): the curve of
   every point is kept in the record. A method searched in stages (DARE: λ without dropping,
   then p at that λ, as its official code) chooses each stage's fields in turn;
3. the chosen merge is evaluated on every task's test split.

Each cell runs as the test loop of a Lightning module (:func:`run_in_lightning`).

Normalized accuracy (Ilharco et al. 2023, Sec. 4; Yadav et al. 2023, Sec. 6) is per task
first, then averaged: ``mean_t acc(merged on t) / acc(expert t on t)``, both on the same split.
References are cells too: ``zero_shot`` (θ0 with the task heads), ``individual`` (each expert
on its own task: normalized accuracy 1 by definition) and ``multitask`` (joint fine-tuning).
"""

from __future__ import annotations

import dataclasses
import itertools
import json
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.nn.functional as F
from torch.func import functional_call

from sparsebench.methods.merging.base import (
    MergeInputs,
    MergeResult,
    density,
    sign_conflict,
    task_vectors,
)
from sparsebench.suite.memory import peak_mb, reset_peak

from .diagnostics import chance_of
from .models import build_trunk, groups, linear_modules
from .tasks import TaskData

REFERENCES = ("zero_shot", "individual", "multitask")
EVAL_BATCH = 1000


class TaskBank:
    """The pillar's :class:`~sparsebench.methods.merging.base.MergeData`: the trunk's
    architecture, the frozen heads and the tasks' splits; counts the examples handed out."""

    def __init__(self, cfg, heads: Sequence[tuple[torch.Tensor, torch.Tensor]], tasks):
        self.module = build_trunk(cfg).eval()
        self.heads = list(heads)
        self.tasks: list[TaskData] = list(tasks)
        self.n_tasks = len(self.tasks)
        self.linear_keys = list(linear_modules(self.module))
        self.examples_read = 0
        # (experts' validation accuracy per task, examples per task) of the selection
        self.selection: tuple[Sequence[float], int | None] | None = None

    def examples(self, task: int, split: str, n: int) -> tuple[torch.Tensor, torch.Tensor]:
        x, y = getattr(self.tasks[task], split).tensors
        n = min(n, x.shape[0])
        self.examples_read += n
        return x[:n], y[:n]

    def features(self, trunk: Mapping[str, torch.Tensor], x: torch.Tensor) -> torch.Tensor:
        return functional_call(self.module, dict(trunk), (x,))

    def head_logits(self, task: int, features: torch.Tensor) -> torch.Tensor:
        return F.linear(features, *self.heads[task])

    def logits(self, trunk: Mapping[str, torch.Tensor], task: int, x: torch.Tensor):
        return self.head_logits(task, self.features(trunk, x))

    def selection_score(self, trunk: Mapping[str, torch.Tensor]) -> float:
        """Average normalized accuracy of one trunk on the validation examples the selection
        reads (the criterion of :func:`run_merge`)."""
        if self.selection is None:
            raise ValueError("selection_score needs the experts' validation accuracy (prepare)")
        expert_acc, limit = self.selection
        return scores(self, [trunk] * self.n_tasks, "val", expert_acc, limit)["norm_acc"]

    def linear_inputs(self, trunk: Mapping[str, torch.Tensor], task: int, x: torch.Tensor):
        seen: dict[str, torch.Tensor] = {}
        hooks = []
        for key, mod in linear_modules(self.module).items():

            def hook(_m, args, _out, key=key):
                seen[key] = args[0].detach().reshape(-1, args[0].shape[-1])

            hooks.append(mod.register_forward_hook(hook))
        try:
            with torch.no_grad():
                functional_call(self.module, dict(trunk), (x,))
        finally:
            for h in hooks:
                h.remove()
        return seen

    @torch.no_grad()
    def evaluate(
        self, trunk: Mapping[str, torch.Tensor], task: int, split: str, limit: int | None = None
    ):
        """(accuracy, mean cross-entropy) of ``trunk`` + head ``task`` on a split (its first
        ``limit`` examples when given)."""
        x, y = getattr(self.tasks[task], split).tensors
        if limit is not None:
            x, y = x[:limit], y[:limit]
        logits = torch.cat(
            [self.logits(trunk, task, x[i : i + EVAL_BATCH]) for i in range(0, len(x), EVAL_BATCH)]
        )
        return float((logits.argmax(1) == y).float().mean()), float(F.cross_entropy(logits, y))


@dataclass
class BatchState:
    """What the cells of one (trunk, seed) batch share."""

    cfg: Any
    bank: TaskBank
    base: dict[str, torch.Tensor]
    experts: list[dict[str, torch.Tensor]]  # one trunk per task
    multitask: dict[str, torch.Tensor] | None
    expert_acc: dict[str, list[float]] = field(default_factory=dict)  # split -> per task
    select_examples: int | None = None  # validation examples per task the selection reads
    # the cell's method artefacts: kind -> one state dict per task (MergeInputs.artefacts)
    artefacts: dict[str, list[dict[str, torch.Tensor]]] = field(default_factory=dict)
    # the batch's setting diagnostics (diagnostics.batch_diagnostics), in every record
    diagnostics: dict[str, Any] = field(default_factory=dict)


def scores(
    bank: TaskBank,
    result_or_trunks,
    split: str,
    expert_acc: Sequence[float],
    limit: int | None = None,
):
    """Per-task (acc, loss) of a merge result (or a list of per-task trunks) on ``split`` (its
    first ``limit`` examples per task) and the average and normalized accuracies; the experts'
    accuracies ``expert_acc`` must be on the same examples."""
    per = []
    for t in range(bank.n_tasks):
        trunk = (
            result_or_trunks.trunk_for(t)
            if isinstance(result_or_trunks, MergeResult)
            else result_or_trunks[t]
        )
        per.append(bank.evaluate(trunk, t, split, limit))
    accs = [a for a, _ in per]
    norm = [a / e if e > 0 else float("nan") for a, e in zip(accs, expert_acc)]
    return {
        "per_task": per,
        "avg_acc": sum(accs) / len(accs),
        "avg_loss": sum(loss for _, loss in per) / len(per),
        "norm_acc": sum(norm) / len(norm),
        "normalized": norm,
    }


def _stages(cls, params) -> list[tuple[list[str], list[tuple[Any, ...]], dict[str, Any]]]:
    """The method's selection stages restricted to its open (``None``) fields: per stage the
    searched names, their axes and the stand-in values of fields a later stage chooses."""
    open_ = [f.name for f in dataclasses.fields(params) if getattr(params, f.name) is None]
    stages = cls.search_stages(params)
    searched = {n for axes, _ in stages for n in axes}
    missing = [f for f in open_ if f not in searched]
    if missing:
        raise ValueError(f"{cls.__name__}: parameters {missing} are None but have no grid")
    out = []
    for axes, fixed in stages:
        names = [n for n in axes if n in open_]
        out.append((names, [axes[n] for n in names], {n: fixed[n] for n in fixed if n in open_}))
    return out


def run_merge(state: BatchState, method_cls, params, seed: int) -> dict[str, Any]:
    """Select the method's open hyperparameters on validation, evaluate the chosen merge on
    test; returns the record's metric columns."""
    reset_peak()
    method = method_cls()
    experts = state.experts
    tasks = [t.name for t in state.bank.tasks]
    inputs = MergeInputs(
        state.base, experts, tasks, groups(state.cfg), state.bank, seed, state.artefacts
    )
    curve, best, t_sel = [], None, time.perf_counter()
    chosen: dict[str, Any] = {}
    stages = [st for st in _stages(method_cls, params) if st[0]] or [([], [], {})]
    scale = method_cls.scale
    for stage, (names, axes, fixed) in enumerate(stages):  # stages the spec fixed are gone
        best = None
        points = [{**dict(zip(names, v)), **chosen, **fixed} for v in itertools.product(*axes)]
        # A method θ0 + λ·τ_m: τ_m once per value of the other fields, kept until the last
        # point of the stage that scales it (the points keep their order).
        last = {_unscaled(p, scale): i for i, p in enumerate(points)} if scale else {}
        vectors: dict[str, tuple[MergeResult, int]] = {}
        for i, point in enumerate(points):
            resolved = dataclasses.replace(params, **point)
            state.bank.examples_read = 0
            t0 = time.perf_counter()
            if scale is None:
                result = method.merge(inputs, resolved)
                examples = max(result.examples, state.bank.examples_read)
            else:
                key = _unscaled(point, scale)
                if key not in vectors:
                    vec = method.merge_vector(inputs, resolved)
                    vectors[key] = (vec, max(vec.examples, state.bank.examples_read))
                vec, examples = vectors.pop(key) if last[key] == i else vectors[key]
                result = vec.scaled(inputs.base, getattr(resolved, scale))
            merge_s = time.perf_counter() - t0
            val = scores(state.bank, result, "val", state.expert_acc["val"], state.select_examples)
            curve.append(
                {**point, "stage": stage, "val_avg_acc": val["avg_acc"],
                 "val_norm_acc": val["norm_acc"]}
            )  # fmt: skip
            if best is None or val["norm_acc"] > best[2]["norm_acc"]:
                best = (point, result, val, merge_s, examples)
        chosen.update({n: best[0][n] for n in names})
    select_s = time.perf_counter() - t_sel
    point, result, val, merge_s, examples = best
    if len(curve) > 1:
        # The cost of the chosen merge from scratch: methods may memoise work that does not
        # depend on the searched parameters (gradients at θ0, TALL's masks) across the grid.
        fresh = MergeInputs(
            state.base, experts, tasks, groups(state.cfg), state.bank, seed, state.artefacts
        )
        state.bank.examples_read = 0
        t0 = time.perf_counter()
        result = method.merge(fresh, dataclasses.replace(params, **point))
        merge_s = time.perf_counter() - t0
        examples = max(result.examples, state.bank.examples_read)
    test = scores(state.bank, result, "test", state.expert_acc["test"])
    stats = result.record_stats(state.base, experts)
    out = _columns(tasks, test, state.expert_acc["test"])
    out.update(
        val_norm_acc=val["norm_acc"],
        density=stats.density,
        sign_conflict=stats.sign_conflict,
        sign_conflict_chance=chance_of(stats),
        **state.diagnostics,
        merge_s=merge_s,
        select_s=select_s,
        n_candidates=len(curve),
        examples=examples,
        chosen_json=json.dumps({k: v for k, v in point.items() if v is not None}, sort_keys=True),
        at_grid_edge=",".join(at_edge(method_cls.grid_for(params), point)),
        per_task_models=result.per_task is not None,
        curve_json=json.dumps(curve),
        info_json=json.dumps(result.info, sort_keys=True, default=float),
        peak_mem_mb=peak_mb(),
    )
    return out


def _unscaled(point: Mapping[str, Any], scale: str | None) -> str:
    """A grid point without its scale field: the values its τ_m depends on."""
    return json.dumps({k: v for k, v in point.items() if k != scale}, sort_keys=True)


def at_edge(grid: Mapping[str, Sequence[Any]], point: Mapping[str, Any]) -> list[str]:
    """The searched parameters whose chosen value is the smallest or largest of a numeric grid
    of several values: the optimum may lie outside the grid."""
    out = []
    for name, value in point.items():
        values = [v for v in grid.get(name, ()) if isinstance(v, int | float)]
        if (
            len(values) > 1
            and isinstance(value, int | float)
            and value in (min(values), max(values))
        ):
            out.append(name)
    return out


def run_in_lightning(fn) -> dict[str, Any]:
    """Run one cell's work (selection, merge, evaluation) as the test loop of a Lightning
    module, one batch, like every job of the suite. On the CPU: the state dicts are small and
    the evaluation reads CPU tensors (the experts' training uses the accelerator)."""
    import lightning.pytorch as pl
    from torch.utils.data import DataLoader

    from sparsebench.suite.lightning import quiet_trainer

    class _Cell(pl.LightningModule):
        def __init__(self) -> None:
            super().__init__()
            self.result: dict[str, Any] = {}

        def test_step(self, batch, batch_idx):
            with torch.enable_grad():  # data-dependent methods differentiate
                self.result = fn()

    module = _Cell()
    trainer = quiet_trainer(
        accelerator="cpu",
        inference_mode=False,  # no_grad only, which test_step lifts
    )
    trainer.test(module, DataLoader([0], batch_size=1), verbose=False)
    return module.result


def run_reference(state: BatchState, name: str) -> dict[str, Any]:
    """Metric columns of a reference row (no selection: nothing to choose)."""
    reset_peak()
    bank, n = state.bank, state.bank.n_tasks
    if name == "zero_shot":
        trunks, tvs = [state.base] * n, None
    elif name == "individual":
        trunks = state.experts
        tvs = task_vectors(state.base, trunks)
    elif name == "multitask":
        if state.multitask is None:
            raise ValueError("the multitask reference needs the multitask artefact")
        trunks, tvs = [state.multitask] * n, [task_vectors(state.base, [state.multitask])[0]]
    else:
        raise ValueError(f"unknown reference {name!r}; known: {', '.join(REFERENCES)}")
    val = scores(bank, trunks, "val", state.expert_acc["val"], state.select_examples)
    test = scores(bank, trunks, "test", state.expert_acc["test"])
    out = _columns([t.name for t in bank.tasks], test, state.expert_acc["test"])
    out.update(
        val_norm_acc=val["norm_acc"],
        density=density(tvs) if tvs else 0.0,
        sign_conflict=sign_conflict(tvs) if tvs and len(tvs) > 1 else None,
        sign_conflict_chance=chance_of(tvs),
        **state.diagnostics,
        merge_s=0.0,
        select_s=0.0,
        n_candidates=1,
        examples=0,
        chosen_json="{}",
        at_grid_edge="",
        per_task_models=name == "individual",
        curve_json="[]",
        info_json="{}",
        peak_mem_mb=peak_mb(),
    )
    return out


def _columns(tasks: Sequence[str], test: dict[str, Any], expert_acc: Sequence[float]):
    per_task = {
        t: {"acc": a, "loss": loss, "expert_acc": e, "normalized": nrm}
        for t, (a, loss), e, nrm in zip(tasks, test["per_task"], expert_acc, test["normalized"])
    }
    return {
        "avg_acc": test["avg_acc"],
        "norm_acc": test["norm_acc"],
        "avg_loss": test["avg_loss"],
        "min_norm_acc": min(test["normalized"]),
        "per_task_json": json.dumps(per_task, sort_keys=True),
    }
