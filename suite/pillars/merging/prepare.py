"""The set-up the cells of one merging batch share: tasks' splits, θ0, experts and heads,
loaded once from the artefacts (safetensors, no unpickling)."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any

import torch

from sparsebench.suite.pillar import Cell

from . import artefacts as arts
from .job import BatchState, TaskBank
from .tasks import load_task


class MergingState:
    """(model, seed) -> :class:`BatchState`, plus the CASS-Tuning experts by keep fraction."""

    def __init__(self) -> None:
        self.states: dict[tuple[str, int], BatchState] = {}
        self.cass: dict[tuple[str, int, float], list[dict[str, torch.Tensor]]] = {}

    def batch(self, cell: Cell) -> BatchState:
        state = self.states[(cell.columns["model"], cell.seed)]
        keep = cell.columns.get("cass_keep")
        if keep is None:
            return state
        experts = {
            **state.experts,
            "cass_tuned": self.cass[(cell.columns["model"], cell.seed, keep)],
        }
        return dataclasses.replace(state, experts=experts)


def load_state(section: Mapping[str, Any], data_root: str, cells: Sequence[Cell]) -> MergingState:
    out = MergingState()
    tasks = [load_task(t, data_root) for t in section["tasks"]]
    for model, seed in dict.fromkeys((c.columns["model"], c.seed) for c in cells):
        cfg = arts.config(section, model)
        base, _ = arts.load(arts.base_id(section, model, seed))
        experts, heads = [], []
        for t in section["tasks"]:
            trunk, head = arts.split_head(arts.load(arts.expert_id(section, model, seed, t))[0])
            experts.append(trunk)
            heads.append(head)
        mine = [c for c in cells if c.columns["model"] == model and c.seed == seed]
        multitask = None
        if any(c.method == "multitask" and c.columns["kind"] == "reference" for c in mine):
            multitask = arts.load(arts.multitask_id(section, model, seed))[0]
        bank = TaskBank(cfg, heads, tasks)
        state = BatchState(
            cfg, bank, base, {"standard": experts}, multitask,
            select_examples=section["select_examples"],
        )  # fmt: skip
        for split, limit in (("val", state.select_examples), ("test", None)):
            state.expert_acc[split] = [
                bank.evaluate(e, i, split, limit)[0] for i, e in enumerate(experts)
            ]
        bank.selection = (state.expert_acc["val"], state.select_examples)
        out.states[(model, seed)] = state
        for keep in sorted({c.columns["cass_keep"] for c in mine if c.columns["cass_keep"]}):
            out.cass[(model, seed, keep)] = [
                arts.split_head(arts.load(arts.cass_id(section, model, seed, t, keep))[0])[0]
                for t in section["tasks"]
            ]
    return out
