"""Building one artefact of the merging pillar (``sparsebench build merging --artefact ID``):
pre-training θ0, fitting a task head and fine-tuning an expert, the multi-task reference, and
the artefacts methods declare (built by the method's ``build_artefact`` from an
``ArtefactContext`` this module fills). See :mod:`.artefacts` for the layout."""

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
    """Make ``artefact`` (its ``params['kind']``: base, expert, multitask or method)."""
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
    elif kind == "expert":
        base, _ = arts.load(arts.base_id(section, p["model"], seed))
        task = load_task(p["task"], data_root)
        trunk0 = build_trunk(cfg)
        trunk0.load_state_dict(base)
        head = fit_head(trunk0, task.train, seed, section["head_shots"])
        zero_shot = evaluate(trunk0, head, task.val)
        module = train(cfg, base, [head], [task.train], arts.recipe(section, "finetune"), seed)
        acc, loss = evaluate(module.trunk, head, task.val)
        meta = {
            "task": p["task"],
            "base_sha256": arts.trunk_hash(base),
            "head_shots": section["head_shots"],
            "zero_shot_val_acc": zero_shot[0],
            "val_acc": acc,
            "val_loss": loss,
        }
        tensors = {
            **module.trunk.state_dict(),
            "head.weight": head[0],
            "head.bias": head[1],
        }
    elif kind == "method":
        tensors, meta = _method_artefact(section, data_root, cfg, p)
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
            "base_sha256": arts.trunk_hash(base),
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


def _method_artefact(section: Mapping[str, Any], data_root: str, cfg, p: Mapping[str, Any]):
    """(tensors, meta) of a method's own artefact for one task: the method builds it from θ0,
    the task's expert, head and train split, the pillar's expert fine-tuning, and (on
    request, through ``peer``) the other tasks' heads and train splits."""
    from sparsebench.methods.merging.base import ArtefactContext
    from sparsebench.suite import registry
    from sparsebench.suite.method import MethodArtefact

    seed = p["seed"]
    base, _ = arts.load(arts.base_id(section, p["model"], seed))
    task = load_task(p["task"], data_root)
    trunk0 = build_trunk(cfg)
    trunk0.load_state_dict(base)
    expert, head = arts.split_head(
        arts.load(arts.expert_id(section, p["model"], seed, p["task"]))[0]
    )
    recipe = arts.recipe(section, "finetune")

    def finetune(mask: Mapping[str, torch.Tensor] | None = None) -> dict[str, torch.Tensor]:
        module = train(cfg, base, [head], [task.train], recipe, seed, grad_masks=mask)
        return dict(module.trunk.state_dict())

    def peer(name: str):
        if name not in section["tasks"]:
            raise ValueError(f"{name!r} is not one of the spec's tasks {list(section['tasks'])}")
        eid = arts.expert_id(section, p["model"], seed, name)
        other_head = arts.split_head(arts.load(eid)[0])[1]
        return other_head, load_task(name, data_root).train.tensors

    ctx = ArtefactContext(
        task=p["task"], seed=seed, trunk=trunk0, base=base, expert=expert, head=head,
        train=task.train.tensors, groups=groups(cfg), config=cfg, finetune=finetune, peer=peer,
    )  # fmt: skip
    request = MethodArtefact(p["request_kind"], p["request_params"])
    info = registry.get_method(p["method"], ("merging",))
    tensors = dict(info.cls.build_artefact(request, ctx))
    bad = [k for k, v in tensors.items() if not isinstance(v, torch.Tensor)]
    if not tensors or bad:
        raise ValueError(
            f"{p['method']}.build_artefact({request.kind!r}) must return a non-empty dict of "
            f"tensors; got {'nothing' if not tensors else f'non-tensors under {bad[:5]}'}"
        )
    meta: dict[str, Any] = {
        "task": p["task"],
        "method": p["method"],
        "artefact": request.kind,
        "request": dict(request.params),
        "base_sha256": arts.trunk_hash(base),
        **ctx.meta,
    }
    if set(tensors) == set(base):  # a trunk: its validation accuracy under the task's head
        trunk = build_trunk(cfg)
        trunk.load_state_dict(tensors)
        meta["val_acc"], meta["val_loss"] = evaluate(trunk, head, task.val)
    return tensors, meta
