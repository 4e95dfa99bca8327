"""Building one artefact of the merging pillar (``sparsebench build merging --artefact ID``):
pre-training θ0, fitting a task head and fine-tuning an expert, the CASS-Tuning experts, and
the multi-task reference. See :mod:`.artefacts` for the layout."""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any

import torch

from sparsebench.suite.pillar import Artefact

from . import artefacts as arts
from .models import build_trunk, groups
from .tasks import load_task, pretrain_data
from .train import evaluate, fit_head, train

ROTATIONS = 4  # classes of the pre-training task


def build(section: Mapping[str, Any], data_root: str, artefact: Artefact) -> None:
    """Make ``artefact`` (its ``params['kind']``: base, expert, cass or multitask)."""
    p = artefact.params
    kind = p["kind"]
    cfg = arts.config(section, p["model"])
    seed = p["seed"]
    t0 = time.perf_counter()
    if kind == "base":
        width = build_trunk(cfg).out_dim
        heads = [(torch.zeros(ROTATIONS, width), torch.zeros(ROTATIONS))]
        module = train(
            cfg, None, heads, [pretrain_data(data_root, seed)], arts.recipe(section, "pretrain"),
            seed, train_heads=True,
        )  # fmt: skip
        meta = {"final_loss": module.last_loss, "task": "rotation (RotNet)"}
        tensors = dict(module.trunk.state_dict())
    elif kind in ("expert", "cass"):
        base, _ = arts.load(arts.base_id(section, p["model"], seed))
        task = load_task(p["task"], data_root)
        trunk0 = build_trunk(cfg)
        trunk0.load_state_dict(base)
        if kind == "expert":
            head = fit_head(trunk0, task.train, seed)
            masks, mask_density = None, 1.0
        else:  # the standard expert's frozen head: both kinds share it
            _, head = arts.split_head(
                arts.load(arts.expert_id(section, p["model"], seed, p["task"]))[0]
            )
            masks = _cass_masks(cfg, trunk0, head, task.train, p["keep"], p["n_examples"])
            mask_density = _density(masks)
        zero_shot = evaluate(trunk0, head, task.val)
        module = train(
            cfg, base, [head], [task.train], arts.recipe(section, "finetune"), seed,
            grad_masks=masks,
        )  # fmt: skip
        acc, loss = evaluate(module.trunk, head, task.val)
        meta = {
            "task": p["task"],
            "zero_shot_val_acc": zero_shot[0],
            "val_acc": acc,
            "val_loss": loss,
            "grad_mask_density": mask_density,
        }
        tensors = {
            **module.trunk.state_dict(),
            "head.weight": head[0],
            "head.bias": head[1],
        }
    elif kind == "multitask":
        base, _ = arts.load(arts.base_id(section, p["model"], seed))
        tasks = [load_task(t, data_root) for t in section["tasks"]]
        heads = [
            arts.split_head(arts.load(arts.expert_id(section, p["model"], seed, t.name))[0])[1]
            for t in tasks
        ]
        module = train(
            cfg, base, heads, [t.train for t in tasks], arts.recipe(section, "finetune"), seed
        )
        meta = {
            "tasks": [t.name for t in tasks],
            "val_acc": {t.name: evaluate(module.trunk, h, t.val)[0] for t, h in zip(tasks, heads)},
        }
        tensors = dict(module.trunk.state_dict())
    else:
        raise ValueError(f"unknown merging artefact kind {kind!r}")
    meta.update(
        kind=kind,
        model=p["model"],
        architecture=section["models"][p["model"]],
        seed=seed,
        recipe=section["pretrain" if kind == "base" else "finetune"],
        train_s=time.perf_counter() - t0,
        threads=torch.get_num_threads(),
    )
    arts.save(artefact.id, tensors, meta)


def _cass_masks(cfg, trunk, head, data, keep: float, n: int) -> dict[str, torch.Tensor]:
    """CASS-Tuning's gradient masks: contribution of each head/neuron from the task loss's
    gradient at θ0 on the first ``n`` train examples (see methods/merging/cass.py)."""
    import torch.nn.functional as F

    from sparsebench.methods.merging.cass import tuning_masks

    x, y = data.tensors
    trunk.zero_grad()
    loss = F.cross_entropy(F.linear(trunk(x[:n]), *head), y[:n])
    loss.backward()
    grads = {k: p.grad.detach().clone() for k, p in trunk.named_parameters()}
    base = {k: v.detach() for k, v in trunk.state_dict().items()}
    return tuning_masks(base, groups(cfg), grads, keep)


def _density(masks: Mapping[str, torch.Tensor]) -> float:
    return sum(int(m.sum()) for m in masks.values()) / sum(m.numel() for m in masks.values())
