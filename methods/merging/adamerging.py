"""AdaMerging: learn the Task Arithmetic coefficients by entropy minimisation on unlabeled test
inputs (Yang et al. 2024), task-wise and layer-wise."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import ClassVar, Literal

import torch

from sparsebench.suite.registry import register

from ._data import chunks, entropy, memo, read, require_data
from .base import MergeData, MergeInputs, MergeResult, MergingMethod, StateDict, add_scaled, combine
from .task_arithmetic import LAMBDA_GRID

TA_INIT = "task_arithmetic"
CLAMP_MARGIN = 1e-3  # a start at TA's λ = 1.0 (its grid's end) begins at 0.999


class _AdaMerging(MergingMethod):
    """Shared implementation; ``granularity`` is ``"task"`` (one λ_t per task) or ``"layer"``
    (one λ_t^l per task and trunk parameter tensor l)."""

    granularity: ClassVar[str] = "task"
    data_free = False
    test_params = {"steps": 20}  # the contract tests' tiny run: seconds, not a minute

    @dataclass
    class Params:
        steps: int = 500  # Adam steps (the official code's 500 "epochs", one step each)
        lr: float = 1e-3
        # initial λ: Task Arithmetic's λ chosen on validation (the role of the official code's
        # prior 0.3, TA's λ for its CLIP ViTs), or a number (0.3: the literal constant)
        init: float | Literal["task_arithmetic"] = TA_INIT
        batch_size: int = 32  # unlabeled inputs per task per step (2 batches of 16 officially)
        n_examples: int = 1024  # pool of unlabeled test inputs per task (official: whole set)
        clamp: bool = True  # λ clamped to [0, 1] in the forward pass (official code)

        def validate(self) -> None:
            if self.steps < 0:  # 0: Task Arithmetic with λ = init
                raise ValueError(f"steps must be >= 0, got {self.steps}")
            for name in ("batch_size", "n_examples"):
                if getattr(self, name) < 1:
                    raise ValueError(f"{name} must be >= 1, got {getattr(self, name)}")
            if self.lr <= 0:
                raise ValueError(f"lr must be > 0, got {self.lr}")
            if isinstance(self.init, str) and self.init != TA_INIT:
                raise ValueError(f"init must be a number or {TA_INIT!r}, got {self.init!r}")
            if not isinstance(self.init, str):
                low, high = (0.0, 1.0) if self.clamp else (0.0, float("inf"))
                if not low < self.init < high:  # at the clamp's ends its gradient is 0: frozen
                    raise ValueError(
                        f"init must be {TA_INIT!r} or a number in ({low:g}, {high:g})"
                        f"{' (clamp: true)' if self.clamp else ''}, got {self.init}"
                    )

    def merge(self, inputs: MergeInputs, params: Params) -> MergeResult:
        data = require_data(inputs, self.method_name)
        keys = list(inputs.base)
        n_tasks = len(inputs.experts)
        tvs = inputs.task_vectors()
        stacked = {k: torch.stack([tv[k] for tv in tvs]).detach() for k in keys}  # (T, *shape)
        base = {k: v.detach() for k, v in inputs.base.items()}
        pools, read_n = [], 0
        for t in range(n_tasks):
            x, _ = read(data, t, "test", params.n_examples)  # labels are never used
            pools.append(x)
            read_n += x.shape[0]

        init = self.initial_lambda(inputs, params)
        if params.clamp:  # at 0 or 1 the clamp passes no gradient: start just inside
            init = min(max(init, CLAMP_MARGIN), 1.0 - CLAMP_MARGIN)
        shape = (n_tasks,) if self.granularity == "task" else (len(keys), n_tasks)
        ref = next(iter(base.values()))
        raw = torch.full(shape, init, dtype=ref.dtype, device=ref.device, requires_grad=True)
        opt = torch.optim.Adam([raw], lr=params.lr, betas=(0.9, 0.999), weight_decay=0.0)
        g = torch.Generator().manual_seed(int(inputs.seed))

        def merged(lam_raw: torch.Tensor) -> StateDict:
            lam = lam_raw.clamp(0.0, 1.0) if params.clamp else lam_raw
            out = {}
            for i, k in enumerate(keys):
                coef = lam if self.granularity == "task" else lam[i]
                coef = coef.to(stacked[k].device).reshape(-1, *([1] * (stacked[k].dim() - 1)))
                out[k] = base[k] + (coef * stacked[k]).sum(0)
            return out

        before = _mean_entropy(data, merged(raw.detach()), pools)
        for _ in range(params.steps):
            batches = [
                pool[
                    torch.randperm(pool.shape[0], generator=g)[: params.batch_size].to(pool.device)
                ]
                for pool in pools
            ]
            # one trunk for every task: one forward pass over the tasks' batches, each task's
            # slice of the features through its own head
            feats = data.features(merged(raw), torch.cat(batches))
            loss, start = 0.0, 0
            for t, b in enumerate(batches):
                head = data.head_logits(t, feats[start : start + b.shape[0]])
                loss = loss + entropy(head).mean()
                start += b.shape[0]
            opt.zero_grad()
            loss.backward()
            opt.step()

        with torch.no_grad():
            lam = raw.detach().clamp(0.0, 1.0) if params.clamp else raw.detach()
            state = {k: v.detach() for k, v in merged(raw.detach()).items()}
        after = _mean_entropy(data, state, pools)
        per_task = lam if self.granularity == "task" else lam.mean(0)
        info = {
            "lambdas": [float(v) for v in per_task],
            "init": init,
            "entropy_before": before,
            "entropy_after": after,
        }
        if self.granularity == "layer":
            info["lambda_min"] = float(lam.min())
            info["lambda_max"] = float(lam.max())
        return MergeResult(state=state, task_vectors=tvs, examples=read_n, info=info)

    @staticmethod
    def initial_lambda(inputs: MergeInputs, params: Params) -> float:
        """The λ at which every coefficient starts: ``params.init`` when a number; for
        ``"task_arithmetic"`` the λ of Task Arithmetic's grid (0.01, ..., 1.00) with the
        highest :meth:`MergeData.selection_score` (the first one on a tie): the choice a
        default ``task_arithmetic`` cell makes, on the labeled validation examples every
        method's selection reads (not counted in ``examples``, as no method's selection is).
        With ``clamp`` the merge then starts at this value moved into [0.001, 0.999]."""
        if not isinstance(params.init, str):
            return float(params.init)

        def search() -> float:
            data = require_data(inputs, "adamerging")
            summed = combine(inputs.task_vectors(), lambda s: s.sum(0))
            best, best_score = LAMBDA_GRID[0], -math.inf
            for lam in LAMBDA_GRID:
                score = data.selection_score(add_scaled(inputs.base, summed, lam))
                if score > best_score:
                    best, best_score = lam, score
            return float(best)

        return memo(inputs, ("adamerging_init",), search)


def _mean_entropy(data: MergeData, trunk: StateDict, pools: list[torch.Tensor]) -> float:
    """Σ_t over tasks of the mean prediction entropy on task t's whole pool, divided by T."""
    total = 0.0
    with torch.no_grad():
        for t, x in enumerate(pools):
            ent = torch.cat([entropy(data.logits(trunk, t, x[s])) for s in chunks(x.shape[0])])
            total += float(ent.mean())
    return total / len(pools)


@register("adamerging_task", family="merging")
class AdaMergingTask(_AdaMerging):
    """Task-wise AdaMerging: θ = θ0 + Σ_t λ_t τ_t with one coefficient λ_t per task, learned
    by entropy minimisation on unlabeled test inputs.

    λ is initialised at Task Arithmetic's λ chosen on validation and trained by Adam (lr 1e-3,
    betas (0.9, 0.999), no weight decay) for 500 steps on Σ_t H_t, H_t the mean Shannon entropy
    of softmax(logits) of the merged trunk with task t's head on a batch of task t's unlabeled
    **test** inputs (labels are never read): the paper's test-time adaptation protocol, so this
    method sees (unlabeled) test inputs, unlike the others. λ is clamped to [0, 1] in the
    forward pass, as in the official code.

    Defaults (official code, github.com/EnnengYang/AdaMerging): steps 500, lr 1e-3, 32 inputs
    per task per step (its loop sums the mean entropies of two shuffled batches of
    16; we take the mean over 32: the same up to a constant factor, which Adam ignores). The
    official prior 0.3 is Task Arithmetic's λ for its CLIP ViTs (Ilharco et al. 2023); at our
    scale TA's λ is far smaller (0.01-0.05), and 0.3 would start AdaMerging where every merge
    is worse than θ0, so ``init`` defaults to the λ TA chooses on validation
    (:meth:`initial_lambda`; ``init: 0.3`` is the literal constant). Ours:
    the pool is the first ``n_examples`` = 1024 test inputs of each task (officially the whole
    test set); each step draws its batch without replacement from the pool with a generator
    seeded by ``MergeInputs.seed``. ``info``: the learned λ per task, the mean entropy over
    the pools before and after. Task vectors: the raw τ_t.

    Source: Yang, Wang, Shen, Liu, Guo, Wang, Tao, "AdaMerging: Adaptive Model Merging for
    Multi-Task Learning", ICLR 2024, Sec. 3 (task-wise AdaMerging, entropy objective).
    """

    granularity = "task"
    Params = _AdaMerging.Params


@register("adamerging_layer", family="merging")
class AdaMergingLayer(_AdaMerging):
    """Layer-wise AdaMerging: θ^l = θ0^l + Σ_t λ_t^l τ_t^l with one coefficient per task t and
    trunk parameter tensor l (a "layer" is one state-dict entry, as in the official code),
    learned by entropy minimisation on unlabeled test inputs.

    Training exactly as :class:`AdaMergingTask` (init at TA's validation λ, Adam lr 1e-3, betas
    (0.9, 0.999), 500 steps, 32 unlabeled test inputs per task per step, λ clamped to [0, 1];
    the pool of ``n_examples`` = 1024 test inputs per task is ours). ``info``: per task the mean
    of its learned λ_t^l over tensors, the overall min and max, the mean entropy before and
    after. Task vectors: the raw τ_t.

    Source: Yang, Wang, Shen, Liu, Guo, Wang, Tao, "AdaMerging: Adaptive Model Merging for
    Multi-Task Learning", ICLR 2024, Sec. 3 (layer-wise AdaMerging, entropy objective).
    """

    granularity = "layer"
    Params = _AdaMerging.Params
