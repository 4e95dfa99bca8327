"""The merging pillar's artefacts: θ0, the experts, the multi-task model and the artefacts
methods declare, per trunk and seed, trained once and shared by every benchmark that asks for
the same ones.

``results/artefacts/merging/<model>-<h>/seed<s>/base/``                 θ0 (pre-trained trunk)
``results/artefacts/merging/<model>-<h>/seed<s>/expert-<f>/<task>/``    an expert + its head
``results/artefacts/merging/<model>-<h>/seed<s>/multitask-<f>-<t>/``    joint fine-tuning
``results/artefacts/merging/<model>-<h>/seed<s>/m-<method>-<kind>-<r>/<task>/``  a method's own

``<h>`` hashes the trunk's architecture and the pre-training recipe, ``<f>`` the fine-tuning
recipe, ``<t>`` the task list, ``<r>`` a method artefact's request parameters and the
fine-tuning recipe (its inputs are θ0 and the seed's experts): changing any of them names new
artefacts (an existing one is never rebuilt). Each folder holds ``model.safetensors`` (tensors
under their names: trunk parameters, plus the task head as ``head.weight``/``head.bias`` for an
expert; loaded without unpickling) and ``meta.json`` (training time, accuracies, the recipe).
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Mapping
from dataclasses import asdict
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import torch

from sparsebench.suite import paths, tensorfile
from sparsebench.suite.method import MethodArtefact
from sparsebench.suite.pillar import Artefact

from .config import Recipe, TrunkConfig

PILLAR = "merging"
MODEL_FILE = "model.safetensors"
META_FILE = "meta.json"
_KIND = re.compile(r"^[a-z][a-z0-9_]*$")


def _hash(obj: Any) -> str:
    return hashlib.sha1(json.dumps(obj, sort_keys=True).encode()).hexdigest()[:8]


def config(spec_section: Mapping[str, Any], model: str) -> TrunkConfig:
    return TrunkConfig(**spec_section["models"][model])


def recipe(spec_section: Mapping[str, Any], phase: str) -> Recipe:
    return Recipe(**spec_section[phase])


def model_id(section: Mapping[str, Any], model: str) -> str:
    key = {"model": section["models"][model], "pretrain": section["pretrain"], "v": 1}
    return f"{model}-{_hash(key)}"


def base_id(section: Mapping[str, Any], model: str, seed: int) -> str:
    return f"{model_id(section, model)}/seed{seed}/base"


# v2: artefacts made from θ0 record its content hash (``base_sha256``), checked at merge time
ARTEFACT_VERSION = 2


def _heads_and_finetune(section: Mapping[str, Any]) -> dict[str, Any]:
    """What an expert depends on beyond θ0: its head's examples and its fine-tuning."""
    return {"finetune": section["finetune"], "head_shots": section["head_shots"]}


def _ft(section: Mapping[str, Any]) -> str:
    return _hash({**_heads_and_finetune(section), "v": ARTEFACT_VERSION})


def expert_id(section: Mapping[str, Any], model: str, seed: int, task: str) -> str:
    return f"{model_id(section, model)}/seed{seed}/expert-{_ft(section)}/{task}"


def method_folder(section: Mapping[str, Any], method: str, request: MethodArtefact) -> str:
    """``m-<method>-<kind>-<r>``: the folder (under a seed's) of one method artefact."""
    key = {"params": dict(request.params), **_heads_and_finetune(section), "v": ARTEFACT_VERSION}
    return f"m-{method}-{request.kind}-{_hash(key)}"


def method_artefact_id(
    section: Mapping[str, Any], model: str, seed: int, task: str, method: str,
    request: MethodArtefact,
) -> str:  # fmt: skip
    folder = method_folder(section, method, request)
    return f"{model_id(section, model)}/seed{seed}/{folder}/{task}"


def requests(section: Mapping[str, Any], method: str, params: Any) -> list[MethodArtefact]:
    """The artefacts one setting of ``method`` declares (``Method.artefacts``), checked: a
    snake_case kind, unique within the setting, JSON-able parameters."""
    from sparsebench.suite import registry

    info = registry.get_method(method, (PILLAR,))
    out = list(info.cls.artefacts(params, section))
    kinds = [r.kind for r in out]
    for r in out:
        if not isinstance(r, MethodArtefact) or not _KIND.match(r.kind):
            raise ValueError(
                f"{method}.artefacts() returned {r!r}; allowed: MethodArtefact(kind, params) "
                "with a snake_case kind ([a-z][a-z0-9_]*)"
            )
        try:
            json.dumps(dict(r.params), sort_keys=True)
        except TypeError as e:
            raise ValueError(
                f"{method}.artefacts(): {r.kind} parameters are not JSON: {e}"
            ) from None
    if len(set(kinds)) < len(kinds):
        raise ValueError(f"{method}.artefacts(): kinds {kinds} repeat; each kind once")
    return out


def multitask_id(section: Mapping[str, Any], model: str, seed: int) -> str:
    tasks = _hash(list(section["tasks"]))
    return f"{model_id(section, model)}/seed{seed}/multitask-{_ft(section)}-{tasks}"


def expert_set(section: Mapping[str, Any], model: str) -> str:
    """Identity of the experts a cell merges (seed aside): records from other expert sets are
    never ranked together (see board.label_expert_sets)."""
    return f"{model_id(section, model)}/expert-{_ft(section)}/tasks-{_hash(list(section['tasks']))}"


def files(artefact_id: str) -> tuple[str, str]:
    """(model.safetensors, meta.json) of an artefact."""
    folder = paths.artefact(PILLAR, artefact_id)
    return str(folder / MODEL_FILE), str(folder / META_FILE)


def make(
    artefact_id: str, label: str, inputs: list[str], threads: int, batch: str = "", **params: Any
) -> Artefact:
    """An artefact of the merging pillar; ``params`` (kind, model, seed, task, ...) go to
    :func:`.build.build`."""
    return Artefact(
        PILLAR, artefact_id, label, files(artefact_id), tuple(inputs), threads, params, batch
    )


# ------------------------------------------------------------------ safetensors I/O
def save(artefact_id: str, tensors: Mapping[str, torch.Tensor], meta: Mapping[str, Any]) -> None:
    """Write model.safetensors then meta.json of ``artefact_id``, each atomically."""
    tensorfile.save(*files(artefact_id), tensors, meta)


def load(artefact_id: str) -> tuple[dict[str, torch.Tensor], dict[str, Any]]:
    """(tensors, meta) of an artefact. Raises FileNotFoundError naming the file and how to make
    it when it is missing."""
    return tensorfile.load(
        *files(artefact_id),
        f"it is made by the workflow (sparsebench run SPEC) or "
        f"`sparsebench build merging --artefact {artefact_id} --spec SPEC`",
        "merging artefact",
    )


def trunk_hash(tensors: Mapping[str, torch.Tensor]) -> str:
    """SHA-256 of a state dict's content (names, dtypes, shapes and bytes, in name order): the
    identity of the θ0 an expert was fine-tuned from, which its ``meta.json`` records."""
    import torch

    h = hashlib.sha256()
    for name in sorted(tensors):
        t = tensors[name].detach().contiguous().cpu()
        h.update(f"{name}|{t.dtype}|{tuple(t.shape)}|".encode())
        h.update(t.view(-1).view(torch.uint8).numpy().tobytes() if t.numel() else b"")
    return h.hexdigest()


def check_base(artefact_id: str, meta: Mapping[str, Any], base_id_: str, base_hash: str) -> None:
    """Refuse an artefact made from another θ0 than the batch's (same shapes would merge
    silently into nonsense): its ``base_sha256`` must be the hash of ``base_id_``'s trunk."""
    got = meta.get("base_sha256")
    if got != base_hash:
        raise ValueError(
            f"{files(artefact_id)[1]}: base_sha256 is {got!r}, but the θ0 it is merged with "
            f"({files(base_id_)[0]}) hashes to {base_hash!r}: this artefact was made from "
            f"another θ0; delete its folder {paths.artefact(PILLAR, artefact_id)} and rerun to "
            "rebuild it from this one"
        )


def check_trunk(artefact_id: str, tensors: Mapping[str, torch.Tensor], base) -> None:
    """Refuse an artefact whose trunk tensors differ from θ0's in name, shape or dtype (a
    merge would fail deep inside a matrix product, naming no file)."""
    trunk, _ = split_head(tensors) if "head.weight" in tensors else (tensors, None)
    for name, want in base.items():
        if name.startswith("head."):  # θ0's own pre-training head, if any, is not merged
            continue
        got = trunk.get(name)
        if got is None or got.shape != want.shape or got.dtype != want.dtype:
            found = "missing" if got is None else f"{got.dtype} {list(got.shape)}"
            raise ValueError(
                f"{files(artefact_id)[0]}: tensor {name!r} is {found}, θ0's is {want.dtype} "
                f"{list(want.shape)}; delete its folder {paths.artefact(PILLAR, artefact_id)} "
                "and rerun to rebuild it"
            )


def split_head(tensors: Mapping[str, torch.Tensor]) -> tuple[dict[str, torch.Tensor], tuple]:
    """(trunk state dict, (head weight, head bias)) of an expert file."""
    trunk = {k: v for k, v in tensors.items() if not k.startswith("head.")}
    return trunk, (tensors["head.weight"], tensors["head.bias"])


def recipe_dict(r: Recipe) -> dict[str, Any]:
    return asdict(r)
