"""The set-up the cells of one merging batch share: tasks' splits, θ0, experts and heads,
loaded once from the artefacts (safetensors, no unpickling), and the artefacts that the
batch's method settings declare."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping, Sequence
from typing import Any

import torch

from sparsebench.suite import registry
from sparsebench.suite.pillar import Cell

from . import artefacts as arts
from .diagnostics import batch_diagnostics
from .job import BatchState, TaskBank
from .tasks import load_task


class MergingState:
    """(model, seed) -> :class:`BatchState`, plus each merge cell's own artefacts
    (kind -> one state dict per task), loaded once per artefact."""

    def __init__(self) -> None:
        self.states: dict[tuple[str, int], BatchState] = {}
        self.own: dict[str, dict[str, list[dict[str, torch.Tensor]]]] = {}  # cell id -> ...

    def batch(self, cell: Cell) -> BatchState:
        state = self.states[(cell.columns["model"], cell.seed)]
        own = self.own.get(cell.id)
        return dataclasses.replace(state, artefacts=own) if own else state


def _load_from(section: Mapping[str, Any], aid: str, model: str, seed: int, base, base_hash: str):
    """The tensors of artefact ``aid``, refused unless it was made from this batch's θ0 and
    its trunk has θ0's names, shapes and dtypes."""
    tensors, meta = arts.load(aid)
    arts.check_base(aid, meta, arts.base_id(section, model, seed), base_hash)
    arts.check_trunk(aid, tensors, base)
    return tensors


def _own_artefacts(
    section: Mapping[str, Any], cell: Cell, cache: dict[str, dict[str, torch.Tensor]],
    base: dict[str, torch.Tensor], base_hash: str,
) -> dict[str, list[dict[str, torch.Tensor]]]:  # fmt: skip
    """kind -> per-task tensors of the artefacts ``cell``'s method setting declares."""
    info = registry.get_method(cell.method, ("merging",))
    params = registry.build_params(info, json.loads(cell.params_json), families=("merging",))
    out = {}
    model = cell.columns["model"]
    for request in arts.requests(section, cell.method, params):
        per_task = []
        for t in section["tasks"]:
            aid = arts.method_artefact_id(section, model, cell.seed, t, cell.method, request)
            if aid not in cache:
                cache[aid] = _load_from(section, aid, model, cell.seed, base, base_hash)
            per_task.append(cache[aid])
        out[request.kind] = per_task
    return out


def load_state(section: Mapping[str, Any], data_root: str, cells: Sequence[Cell]) -> MergingState:
    out = MergingState()
    tasks = [load_task(t, data_root) for t in section["tasks"]]
    cache: dict[str, dict[str, torch.Tensor]] = {}
    for model, seed in dict.fromkeys((c.columns["model"], c.seed) for c in cells):
        cfg = arts.config(section, model)
        base, _ = arts.load(arts.base_id(section, model, seed))
        base_hash = arts.trunk_hash(base)
        experts, heads = [], []
        for t in section["tasks"]:
            eid = arts.expert_id(section, model, seed, t)
            trunk, head = arts.split_head(_load_from(section, eid, model, seed, base, base_hash))
            experts.append(trunk)
            heads.append(head)
        mine = [c for c in cells if c.columns["model"] == model and c.seed == seed]
        multitask = None
        if any(c.method == "multitask" and c.columns["kind"] == "reference" for c in mine):
            mid = arts.multitask_id(section, model, seed)
            multitask = _load_from(section, mid, model, seed, base, base_hash)
        bank = TaskBank(cfg, heads, tasks)
        state = BatchState(
            cfg, bank, base, experts, multitask, select_examples=section["select_examples"]
        )
        for split, limit in (("val", state.select_examples), ("test", None)):
            state.expert_acc[split] = [
                bank.evaluate(e, i, split, limit)[0] for i, e in enumerate(experts)
            ]
        bank.selection = (state.expert_acc["val"], state.select_examples)
        state.diagnostics = batch_diagnostics(bank, base, experts, state.select_examples)
        out.states[(model, seed)] = state
        for c in mine:
            if c.columns["kind"] == "merge":
                own = _own_artefacts(section, c, cache, base, base_hash)
                if own:
                    out.own[c.id] = own
    return out
