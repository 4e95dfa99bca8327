"""A merging method defined only in the tests, with an artefact of its own: the proof that a
new merging method needing its own artefact is one file (tests/test_merging_plugin.py runs it
through Snakemake with ``SPARSEBENCH_PLUGINS=tests.merging_with_artefact``).

``shrunk_mean`` declares one artefact per task, the task's expert shrunk toward θ0,
θ̃_t = θ0 + s·(θ_t − θ0), built from the context the pillar gives; its merge is the uniform
mean of the shrunk experts, θ = θ0 + s·mean_t τ_t, read from ``inputs.artefacts``. ``info``
carries the sums the test checks against the files.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import torch

from sparsebench.methods.merging.base import (
    ArtefactContext,
    MergeInputs,
    MergeResult,
    MergingMethod,
    StateDict,
    task_vectors,
)
from sparsebench.suite.method import MethodArtefact
from sparsebench.suite.registry import register


@register("shrunk_mean", family="merging")
class ShrunkMean(MergingMethod):
    """The uniform mean of experts shrunk toward θ0 by ``scale`` (a test-only method).

    Source: none (test-only): θ = θ0 + s·mean_t (θ_t − θ0), each θ0 + s·(θ_t − θ0) an
    artefact built once per task (its meta carries what ``ctx.peer`` gave for every task).
    """

    @dataclass
    class Params:
        scale: float = 0.5

        def validate(self) -> None:
            if not 0.0 < self.scale <= 1.0:
                raise ValueError(f"scale must be in (0, 1], got {self.scale}")

    @classmethod
    def artefacts(cls, params: Params, section: Mapping[str, Any]) -> list[MethodArtefact]:
        return [MethodArtefact("shrunk", {"scale": params.scale, "tasks": section["tasks"]})]

    @classmethod
    def build_artefact(cls, request: MethodArtefact, ctx: ArtefactContext) -> StateDict:
        s = request.params["scale"]
        ctx.meta["scale"] = s
        for name in request.params["tasks"]:  # what the pillar's peer gives, for the test
            (w, b), (x, y) = ctx.peer(name)  # type: ignore[misc]
            ctx.meta[f"peer_{name}"] = [float(w.double().sum()), x.shape[0], y.shape[0]]
        return {k: ctx.base[k] + s * (ctx.expert[k] - ctx.base[k]) for k in ctx.base}

    def merge(self, inputs: MergeInputs, params: Params) -> MergeResult:
        shrunk = inputs.artefact("shrunk")
        state = {k: torch.stack([e[k] for e in shrunk]).mean(0) for k in inputs.base}
        return MergeResult(
            state=state,
            task_vectors=task_vectors(inputs.base, shrunk),
            info={
                "artefact_sums": [float(sum(e[k].double().sum() for k in e)) for e in shrunk],
                "merged_sum": float(sum(v.double().sum() for v in state.values())),
            },
        )
