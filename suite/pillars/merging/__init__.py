"""The merging pillar: pre-train θ0, fine-tune one expert per task, merge the experts' trunks
with sparsified task vectors, and read per-task and normalized accuracy next to task-vector
density and merge cost.

The DAG per (trunk, seed): ``base`` (θ0, rotation pre-training) -> ``expert/<task>`` (head
probe + fine-tuning) -> ``multitask`` (joint fine-tuning, needs the experts' heads) and the
artefacts methods declare (``Method.artefacts``: one per task from θ0, that task's expert and
the other tasks' heads, built by the method's ``build_artefact``, only when a cell needs
them); cells of one (trunk, seed) share a process and read those artefacts. See
:mod:`.artefacts`, :mod:`.job` and docs/merging.md.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from sparsebench.suite import registry
from sparsebench.suite.method import MethodArtefact
from sparsebench.suite.pillar import Artefact, Cell, Metric, Pillar, Plot, register_pillar
from sparsebench.suite.spec import Spec, SpecError, section_settings

from . import artefacts as arts
from .columns import COLUMNS

FAMILY = ("merging",)
EXPERTS_PER_JOB = 4


@register_pillar
class MergingPillar(Pillar):
    """Model merging with sparsified task vectors: one expert per task fine-tuned from a shared
    θ0, merged into one trunk by each method; per-task and normalized test accuracy next to
    task-vector density and merge cost."""

    name = "merging"
    title = "Model merging"
    families = FAMILY
    spec_keys = ("merging",)
    fork_cells = False  # records report peak_mem_mb, the job process's own (Pillar)
    columns = COLUMNS
    measured = ("merge_s", "select_s", "peak_mem_mb")
    job_mem_mb = 3000
    cell_minutes = 10.0
    row_key = ("model", "method", "setting_id", "seed")
    extra_method_names = ("zero_shot", "individual", "multitask")  # job.REFERENCES
    # None deterministic: density counts DARE's random drops and the nonzeros of trained task
    # vectors, and examples is the count of the setting that validation chose.
    metrics = (
        Metric("norm_acc", "fraction", True, "mean over tasks of merged ÷ expert test accuracy"),
        Metric("avg_acc", "fraction", True, "mean over tasks of the test accuracy"),
        Metric("min_norm_acc", "fraction", True, "worst task's normalized test accuracy"),
        Metric("avg_loss", "nats", False, "mean over tasks of the test cross-entropy"),
        Metric("val_norm_acc", "fraction", True, "normalized accuracy on validation (selection)"),
        Metric("density", "fraction", False, "nonzeros of the task vectors the method merged"),
        Metric("sign_conflict", "fraction", False, "coordinates whose nonzero entries disagree"),
        Metric("merge_s", "s", False, "wall-clock of the chosen merge (no evaluation)"),
        Metric("examples", "", False, "data examples a data-dependent method read"),
        Metric("peak_mem_mb", "MiB", False, "peak resident memory of the cell"),
    )
    plots = (
        Plot("accuracy_heatmap.png", "heatmap.rst"),
        Plot("density.png", "density.rst"),
        Plot("lambda_curve.png", "curve.rst"),
    )
    batch_max = 8

    def side_tables(self) -> dict[str, Any]:
        from .board import SIDE_TABLES  # the curves and per-task results, parsed once

        return SIDE_TABLES

    # ------------------------------------------------------------------ spec
    def example(self, method: str | None = None) -> dict[str, Any]:
        recipe = {"epochs": 1, "lr": 0.001, "batch_size": 128}
        if method:
            names = [method]
        else:  # the first two data-free methods that need no artefact of their own (by name)
            infos = registry.all_methods(FAMILY)
            names = [
                n
                for n, i in infos.items()
                if i.cls.data_free and not i.cls.artefacts(i.params_cls(), {})
            ][:2]
        methods = {n: dict(registry.get_method(n, FAMILY).cls.test_params) for n in names}
        return {
            "merging": {
                "models": {"mlp": {"kind": "mlp", "width": 32, "depth": 1}},
                "tasks": ["digits", "digits_mirror"],
                "methods": methods,
                "references": ["zero_shot", "individual"],
                "seeds": [0],
                "pretrain": recipe,
                "finetune": recipe,
            }
        }

    def schema(self) -> dict[str, Any]:
        from .tasks import DEFAULT_TASKS, TASKS

        frag = json.loads(Path(__file__).with_name("section.schema.json").read_text())
        sec = frag["merging"]
        recipe = sec.pop("x-recipe")
        props = sec["properties"]
        for phase in ("pretrain", "finetune"):
            props[phase].pop("$recipe")
            props[phase].update(copy.deepcopy(recipe))
        props["tasks"]["items"]["enum"] = list(TASKS)
        props["tasks"]["default"] = list(DEFAULT_TASKS)
        props["methods"]["propertyNames"]["enum"] = list(registry.all_methods(FAMILY))
        return frag

    def check(self, spec: Spec) -> None:
        from sparsebench.suite.data import check_available

        from .models import TrunkConfig
        from .tasks import TASKS

        sec, src = spec.data["merging"], spec.source
        for name, model in sec["models"].items():
            try:
                TrunkConfig(**model).validate()
            except ValueError as e:
                raise SpecError(f"{src}: merging.models.{name}: {e}") from None
        for method in sec["methods"]:
            info = registry.get_method(method, FAMILY)
            for s in settings(spec, method):  # every Params built: names and types checked
                try:
                    info.cls.check(s.params, sec)
                    arts.requests(sec, method, s.params)
                except ValueError as e:
                    raise SpecError(f"{src}: merging.methods.{method}: {e}") from None
        sources = {TASKS[t].source for t in sec["tasks"]}
        for source in sorted(sources):
            try:
                check_available(source, spec.data["data_root"], spec.data["allow_download"])
            except FileNotFoundError as e:
                raise SpecError(f"{src}: merging.tasks: {e}") from None
        if not sec["methods"] and not sec["references"]:
            raise SpecError(f"{src}: merging: no methods and no references: nothing to run")

    # ------------------------------------------------------------------ artefacts
    def artefacts(self, spec: Spec) -> list[Artefact]:
        sec, threads = spec.data["merging"], spec.data["threads"]
        wanted = list(method_requests(spec))
        out = []
        for model in sec["models"]:
            for seed in sec["seeds"]:
                base = arts.base_id(sec, model, seed)
                # a method artefact may read any task's head (ArtefactContext.peer): it waits
                # for every expert of its seed
                all_experts = [
                    arts.files(arts.expert_id(sec, model, seed, t))[0] for t in sec["tasks"]
                ]
                common = {"model": model, "seed": seed}
                out.append(
                    arts.make(base, f"{model} seed {seed}: θ0", [], threads, kind="base", **common)
                )
                experts = []
                for i, task in enumerate(sec["tasks"]):
                    # Experts of a seed share jobs, EXPERTS_PER_JOB at a time: one interpreter
                    # start per few experts, and still a job per core.
                    chunk = f"{arts.model_id(sec, model)}/seed{seed}/{i // EXPERTS_PER_JOB}"
                    eid = arts.expert_id(sec, model, seed, task)
                    experts.append(arts.files(eid)[0])
                    out.append(
                        arts.make(
                            eid,
                            f"{model} seed {seed}: expert {task}",
                            [arts.files(base)[0]],
                            threads,
                            f"{chunk}/experts",
                            kind="expert",
                            task=task,
                            **common,
                        )
                    )
                    for method, request in wanted:  # batched like the experts
                        folder = arts.method_folder(sec, method, request)
                        out.append(
                            arts.make(
                                arts.method_artefact_id(sec, model, seed, task, method, request),
                                f"{model} seed {seed}: {method} {request.kind} {task}",
                                [arts.files(base)[0], *all_experts],
                                threads,
                                f"{chunk}/{folder}",
                                kind="method",
                                method=method,
                                request_kind=request.kind,
                                request_params=dict(request.params),
                                task=task,
                                **common,
                            )
                        )
                out.append(
                    arts.make(
                        arts.multitask_id(sec, model, seed),
                        f"{model} seed {seed}: multi-task",
                        [arts.files(base)[0], *experts],
                        threads,
                        kind="multitask",
                        **common,
                    )
                )
        return out

    def build(self, spec: Spec, artefact: Artefact) -> None:
        from .build import build

        build(spec.data["merging"], spec.data["data_root"], artefact)

    # ------------------------------------------------------------------ cells
    def cells(self, spec: Spec) -> list[Cell]:
        sec = spec.data["merging"]
        tasks = list(sec["tasks"])
        out = []
        for model in sec["models"]:
            for seed in sec["seeds"]:
                base = arts.files(arts.base_id(sec, model, seed))[0]
                experts = [arts.files(arts.expert_id(sec, model, seed, t))[0] for t in tasks]
                rows: list[tuple[str, str, str, str, Any, tuple[str, ...]]] = []
                for ref in sec["references"]:
                    inputs = [base, *experts]
                    if ref == "multitask":
                        inputs.append(arts.files(arts.multitask_id(sec, model, seed))[0])
                    rows.append((ref, "{}", "default", "reference", None, tuple(inputs)))
                for method in sec["methods"]:
                    for s in settings(spec, method):
                        own = [  # the method's own artefacts, one per task
                            arts.files(arts.method_artefact_id(sec, model, seed, t, method, r))[0]
                            for r in arts.requests(sec, method, s.params)
                            for t in tasks
                        ]
                        params_json = json.dumps(registry.params_to_dict(s.params), sort_keys=True)
                        rows.append(
                            (method, params_json, s.setting_id, "merge", s,
                             (base, *experts, *own))
                        )  # fmt: skip
                for method, params_json, setting_id, kind, setting, inputs in rows:
                    label = setting.label if setting else "reference"
                    out.append(
                        Cell(
                            pillar=self.name,
                            id=f"{model}/{method}/{setting_id}/seed{seed}",
                            label=f"{model} {method} ({label}) seed {seed}",
                            method=method,
                            params_json=params_json,
                            setting_id=setting_id,
                            seed=seed,
                            trigger={
                                "params": params_json,
                                "inputs": sorted(set(inputs)),
                                "select_examples": sec["select_examples"],
                                "protocol": 2,
                            },
                            threads=spec.data["threads"],
                            batch=f"{model}/seed{seed}",
                            inputs=tuple(sorted(set(inputs))),
                            columns={
                                "model": model,
                                "experts": arts.expert_set(sec, model),
                                "kind": kind,
                                "tasks": ",".join(tasks),
                                "n_tasks": len(tasks),
                                "head_shots": sec["head_shots"],
                                "setting": label,
                            },
                        )
                    )
        return out

    # ------------------------------------------------------------------ job
    def prepare(self, spec: Spec, cells: Sequence[Cell]) -> Any:
        """Load θ0, the experts, heads and every task's splits once per (trunk, seed)."""
        from .prepare import load_state

        return load_state(spec.data["merging"], spec.data["data_root"], cells)

    def run_cell(self, spec: Spec, cell: Cell, state: Any) -> dict[str, Any]:
        from .job import run_in_lightning, run_merge, run_reference

        if cell.columns["kind"] == "reference":
            return run_in_lightning(lambda: run_reference(state.batch(cell), cell.method))
        info = registry.get_method(cell.method, FAMILY)
        params = registry.build_params(info, json.loads(cell.params_json), families=FAMILY)
        return run_in_lightning(lambda: run_merge(state.batch(cell), info.cls, params, cell.seed))


def settings(spec: Spec, method: str):
    """The parameter settings of ``method`` in the spec's merging section (grid expanded)."""
    return section_settings(spec, "merging", method, FAMILY)


def method_requests(spec: Spec) -> Iterator[tuple[str, MethodArtefact]]:
    """(method, request) of every distinct artefact the spec's method settings declare, in
    spec order: settings that ask for the same artefact share it."""
    sec, seen = spec.data["merging"], set()
    for method in sec["methods"]:
        for s in settings(spec, method):
            for r in arts.requests(sec, method, s.params):
                key = (method, r.kind, json.dumps(dict(r.params), sort_keys=True))
                if key not in seen:
                    seen.add(key)
                    yield method, r
