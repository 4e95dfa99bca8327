"""The classification pillar: dynamic sparse training (``dst``) and pruning (``pruning``) on
image classification tasks, one cell per (task, method setting, sparsity, seed).

Spec section ``classification:``: ``tasks`` (dataset, model, recipe), ``methods`` (a list value
is a grid axis), ``sparsities``, ``seeds``, ``distribution`` (one layer-wise allocation for
every sparse method), ``init`` (one initial-weight rule for them), ``execution`` (how masked
layers run) and ``infer`` (inference timing). The dense baseline ignores ``sparsities`` and runs
once per (task, seed) at sparsity 0. Cells of one (task, method setting) share a process
(batch): the dataset is loaded once and every seed and sparsity runs after it.
"""

from __future__ import annotations

import dataclasses
import inspect
import json
import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from sparsebench.suite import registry
from sparsebench.suite.catalog import did_you_mean
from sparsebench.suite.pillar import Cell, Metric, Pillar, Plot, register_pillar
from sparsebench.suite.spec import Spec, SpecError, expand_grid

from .columns import COLUMNS, IDENT

FAMILIES = ("dst", "pruning")
KEY = "classification"


@register_pillar
class ClassificationPillar(Pillar):
    """Sparse training and pruning of image classifiers: test accuracy next to training and
    inference FLOPs and wall-clock, relative to the task's dense baseline."""

    name = "classification"
    title = "Dynamic sparse training and pruning"
    families = FAMILIES
    spec_keys = (KEY,)
    moved_keys = (
        "tasks",
        "methods",
        "sparsities",
        "seeds",
        "execution",
        "infer",
        "distribution",
        "init",
    )
    columns = COLUMNS
    measured = ("train_wall_s", "infer_ms", "regrowth_s")
    job_mem_mb = 3000
    cell_minutes = 5.0
    row_key = IDENT
    cell_axes = ("target_sparsity", "epochs")
    # deterministic (a spread of zero over seeds is evidence, and `stat: exact` is allowed):
    # what is counted, not measured. actual_sparsity (every method keeps exactly n_keep
    # nonzeros) and the FLOPs, which are a formula of the layer shapes and the run's own
    # masks and update schedule: methods whose count depends on training (ARC's phases end
    # when the mask converges, CHT's link prediction follows its topology, SNFS and GraNet
    # move nonzeros between layers) vary across seeds, and an exact claim then says so
    # (inconclusive: use welch), but no seed ever measures a count with noise.
    metrics = (
        Metric("test_acc", "fraction", True, "top-1 accuracy on the test split"),
        Metric("test_loss", "nats", False, "mean cross-entropy on the test split"),
        Metric("val_acc", "fraction", True, "top-1 accuracy on the validation split"),
        Metric(
            "actual_sparsity", "fraction", True, "zeros among prunable weights", deterministic=True
        ),
        Metric(
            "train_flops",
            "FLOPs",
            False,
            "training FLOPs (RigL paper's accounting)",
            deterministic=True,
        ),
        Metric(
            "train_flops_rel_dense",
            "×",
            False,
            "training FLOPs ÷ the dense baseline's",
            deterministic=True,
        ),
        Metric(
            "inference_flops", "FLOPs", False, "forward FLOPs of one example", deterministic=True
        ),
        Metric(
            "inference_flops_rel_dense", "×", False, "inference FLOPs ÷ dense", deterministic=True
        ),
        Metric(
            "activation_density",
            "fraction",
            False,
            "active MLP hidden units over the test set (activation sparsity)",
        ),  # fmt: skip
        Metric("train_wall_s", "s", False, "wall-clock of Trainer.fit"),
        Metric("infer_ms", "ms", False, "median forward of infer.batch_size examples"),
    )
    plots = (Plot("pareto.png", "pareto.rst"),)
    batch_max = 12

    # ------------------------------------------------------------------ spec
    def example(self, method: str | None = None) -> dict[str, Any]:
        if method:
            methods = {method: dict(registry.get_method(method, FAMILIES).cls.test_params)}
        else:
            methods = {"dense": {}, "rigl": {}}
        name, task = _example_task(method)
        return {
            KEY: {
                "infer": {"batch_size": 8, "repeats": 2},
                "tasks": {name: task},
                "methods": methods,
                "sparsities": [0.9],
            }
        }

    def schema(self) -> dict[str, Any]:
        from sparsebench.kernels import BACKENDS

        from .execution import VALUES_ONLY

        frag = json.loads(Path(__file__).with_name("section.schema.json").read_text())
        # Backends that take any (unstructured) mask can run a masked layer during training.
        props = frag[KEY]["properties"]
        props["execution"]["enum"] = [
            *(n for n, b in BACKENDS.items() if b.unstructured),
            VALUES_ONLY,
        ]
        return frag

    def check(self, spec: Spec) -> None:
        src, data = spec.source, spec.data[KEY]
        _check_registries(data, src)
        # before the methods' settings: a method that cannot run this way at all is the first
        # thing to fix
        _check_execution(data, src)
        for method in data["methods"]:
            settings(spec, method)  # builds every Params: names and types checked here
        _check_shared_keys(data, src)
        methods = registry.all_methods(FAMILIES)
        if any(methods[m].sparse for m in data["methods"]) and not data["sparsities"]:
            raise SpecError(f"{src}: {KEY}.sparsities: sparse methods need at least one sparsity")
        for s in data["sparsities"]:
            if f"{float(s):g}" == "1":  # cell ids and boards print six significant digits
                raise SpecError(
                    f"{src}: {KEY}.sparsities: {s!r} prints as 1 (100 %) in cell ids and boards "
                    "(six significant digits); allowed: below 0.9999995, e.g. 0.99999"
                )
        _preflight(spec)

    # ------------------------------------------------------------------ cells
    def cells(self, spec: Spec) -> list[Cell]:
        data = spec.data[KEY]
        gpus = int(_execution_backend(data["execution"]).needs_gpu)
        out = []
        for task_name, task in data.get("tasks", {}).items():
            for method in task_methods(data, task_name):
                info = registry.get_method(method, FAMILIES)
                for setting in settings(spec, method):
                    sparsities = cell_sparsities(info, setting.params, data)
                    trigger = {
                        "method_params": json.loads(setting.params_json),
                        # the task's `methods` filter only selects cells: not a trigger
                        "task": {k: v for k, v in task.items() if k != "methods"},
                        "execution": data["execution"],
                    }
                    for s in sparsities:
                        for seed in data["seeds"]:
                            out.append(
                                Cell(
                                    pillar=self.name,
                                    id=f"{task_name}/{method}/{setting.setting_id}/"
                                    f"s{float(s):g}/seed{seed}",
                                    label=f"{task_name} {method} [{setting.label}] "
                                    f"s={float(s):g} seed={seed}",
                                    method=method,
                                    params_json=setting.params_json,
                                    setting_id=setting.setting_id,
                                    seed=seed,
                                    trigger=trigger,
                                    threads=spec.data["threads"],
                                    gpus=gpus,
                                    batch=f"{task_name}/{method}/{setting.setting_id}",
                                    columns={
                                        "family": info.family,
                                        "task": task_name,
                                        "dataset": task["dataset"],
                                        "model": task["model"],
                                        "execution": data["execution"],
                                        "target_sparsity": float(s),
                                        "epochs": task["recipe"]["epochs"],
                                        "setting": setting.label,
                                    },
                                )
                            )
        return out

    # ------------------------------------------------------------------ job
    def prepare(self, spec: Spec, cells: Sequence[Cell]) -> dict[str, Any]:
        """Load each task's dataset once for the batch (the expensive shared set-up)."""
        from sparsebench.suite.data import load_dataset

        data = {}
        for task_name in dict.fromkeys(c.columns["task"] for c in cells):
            task = spec.data[KEY]["tasks"][task_name]
            try:
                data[task_name] = load_dataset(
                    task["dataset"], spec.data["data_root"], spec.data["allow_download"]
                )
            except Exception as e:  # noqa: BLE001 - the cells of this task fail with it
                data[task_name] = e
        return data

    def run_cell(self, spec: Spec, cell: Cell, state: Any) -> dict[str, Any]:
        from .job import run_classification

        data = (state or {}).get(cell.columns["task"])
        if isinstance(data, Exception):
            raise data
        return run_classification(spec, cell, data)


def settings(spec: Spec, method: str):
    """The parameter settings of ``method`` in ``spec`` (its grid expanded). The spec's
    ``distribution`` fills the method's ``distribution`` parameter where the method has one
    and the spec's ``methods.<name>`` does not set it."""
    info = registry.get_method(method, FAMILIES)
    raw = dict(spec.data[KEY]["methods"][method] or {})
    fields = {f.name for f in dataclasses.fields(info.cls.Params)}
    where = f"{spec.source}: {KEY}.methods.{method}"
    for key, note in SHARED_KEYS.items():
        shared = spec.data[KEY].get(key)
        if shared is not None and key in fields and key not in raw:
            raw[key] = shared
            where += f" (with the section's {key}: {shared!r}{note})"
    return expand_grid(info, raw, where)


# Section keys that fill the parameter of the same name of every method that has one and does
# not set it (one allocation, one init per board); the note is added to its errors.
SHARED_KEYS = {"distribution": "; global is for pruning methods and acdc/arc_acdc", "init": ""}


# Tiny tasks for a method's example spec, tried in order until the method's check_model
# accepts the model: the MLP on digits (3 x 79 steps: enough for the published schedules of
# GMP and RigL), LeNet-5 on mnist5k for CNN-only methods (2 epochs: CHT acts at epoch ends),
# the MLP on the 1,000-class wide1k for HASTE's large output layer (157 steps: RigL's T_end
# passes ΔT = 100), the MLP on digits with AdamW for a method that takes Adam's steps.
_EXAMPLE_TASKS = (
    ("digits_mlp", {"dataset": "digits", "model": "lenet300_100",
                    "recipe": {"epochs": 3, "batch_size": 16, "lr": 0.05}}),
    ("mnist5k_cnn", {"dataset": "mnist5k", "model": "lenet5",
                     "recipe": {"epochs": 2, "batch_size": 64, "lr": 0.05}}),
    ("wide1k_mlp", {"dataset": "wide1k", "model": "lenet300_100",
                    "recipe": {"epochs": 1, "batch_size": 128, "lr": 0.05}}),
    ("digits_mlp_adamw", {"dataset": "digits", "model": "lenet300_100",
                          "recipe": {"epochs": 3, "batch_size": 16, "optimizer": "adamw",
                                     "lr": 0.001}}),
)  # fmt: skip


def _example_task(method: str | None) -> tuple[str, dict[str, Any]]:
    if method is None:
        return _EXAMPLE_TASKS[0]
    from sparsebench.suite.data import DATASETS
    from sparsebench.suite.models import build_model
    from sparsebench.suite.pillars.classification.masks import prunable_layers

    info = registry.get_method(method, FAMILIES)
    params = registry.build_params(info, {}, "example")
    for name, task in _EXAMPLE_TASKS:
        d = DATASETS[task["dataset"]]
        try:
            info.cls.check_model(
                params, prunable_layers(build_model(task["model"], d.input_shape, d.num_classes))
            )
            check_recipe = getattr(info.cls, "check_recipe", None)
            if check_recipe is not None:  # a method with its own optimizer (HORST: Adam's)
                check_recipe(params, task["recipe"])
        except ValueError:
            continue
        return name, task
    return _EXAMPLE_TASKS[0]  # its check error is the message a user would see


def cell_sparsities(info: Any, params: Any, data: dict[str, Any]) -> list[float]:
    """The target sparsities of a method setting's cells: the spec's list, or the one the
    method's pattern fixes (N:M: 1 - N/M); [0.0] for a dense method."""
    if not info.sparse:
        return [0.0]
    fixed = info.cls.fixed_sparsity(params)
    return data["sparsities"] if fixed is None else [fixed]


def task_methods(data: dict[str, Any], task_name: str) -> list[str]:
    """The section's methods that run on task ``task_name`` (its ``methods`` list, else all);
    ``data`` is the ``classification`` section."""
    only = data["tasks"][task_name].get("methods")
    return [m for m in data["methods"] if only is None or m in only]


def _check_shared_keys(data: dict[str, Any], source: str) -> None:
    """A section-level :data:`SHARED_KEYS` value must fill some method's parameter: one that
    applies to none (e.g. ``init`` on a dense-only board) would be silently ignored."""
    for key in SHARED_KEYS:
        value = data.get(key)
        if value is None:
            continue
        takers = [
            m
            for m in data["methods"]
            if key
            in {f.name for f in dataclasses.fields(registry.get_method(m, FAMILIES).cls.Params)}
        ]
        if not takers:
            raise SpecError(
                f"{source}: {KEY}.{key}: {value!r} applies to none of the section's methods "
                f"({', '.join(data['methods'])}: none takes {key!r}); remove it or "
                "add a sparse method"
            )


def _execution_backend(execution: str) -> Any:
    """The kernel backend an ``execution`` value runs on."""
    from sparsebench.kernels import BACKENDS

    from .execution import VALUES_ONLY, VALUES_ONLY_BACKEND

    return BACKENDS[VALUES_ONLY_BACKEND if execution == VALUES_ONLY else execution]


def _check_execution(data: dict[str, Any], source: str) -> None:
    """The ``execution`` backend must be able to run the methods, and run on this machine
    (its reason otherwise) unless it needs a GPU this machine lacks (asked at the run's start
    of the machines that run the jobs)."""
    import torch

    from sparsebench.kernels import BACKENDS

    from .execution import VALUES_ONLY, VALUES_ONLY_BACKEND

    name = data["execution"]
    dense = [
        m
        for m in data["methods"]
        if (cls := registry.get_method(m, FAMILIES).cls).straight_through or cls.hooks_layers
    ]
    if dense and name != "dense_mask":
        raise SpecError(
            f"{source}: {KEY}.execution: {name!r} cannot run {', '.join(dense)}, which "
            "train(s) dense weights behind the masks or hook the layers' modules (a kernel "
            "backend replaces them); use execution: dense_mask"
        )
    if name == VALUES_ONLY:
        others = [
            m
            for m in data["methods"]
            if not registry.get_method(m, FAMILIES).cls.runs_values_only()
        ]
        if others:
            takers = sorted(
                m
                for m, info in registry.all_methods(FAMILIES).items()
                if info.cls.runs_values_only()
            )
            raise SpecError(
                f"{source}: {KEY}.execution: 'sparse' (values-only layers) cannot run "
                f"{', '.join(others)}: only methods with a values-only topology update run "
                f"this way ({', '.join(takers)}); use execution: cpu (the same kernels on "
                "dense weights) or dense_mask for the others"
            )
        name = VALUES_ONLY_BACKEND
    backend = BACKENDS[name]
    if backend.needs_gpu and not torch.cuda.is_available():
        # Its cells ask for a GPU (Cell.gpus): whether the machines that run the jobs have
        # one is asked when the run starts (suite/gpus.py); a cluster's submitting machine
        # usually has none. TRITON_INTERPRET=1 is for the kernels' tests, not for training.
        return
    ok, why = backend.available()
    if not ok:
        raise SpecError(
            f"{source}: {KEY}.execution: backend {name!r} cannot run here: {why}; "
            "use dense_mask or another backend (`sparsebench kernels` lists them)"
        )


def _preflight(spec: Spec) -> None:
    """Checks that need the registries' knowledge but no data: the model fits the dataset, the
    torchvision files are there (or may be downloaded), every method can act within the task's
    step budget. Catches at validation what would otherwise fail one job at a time."""
    import torch

    from sparsebench.suite.data import DATASETS, DatasetNotFoundError, check_available
    from sparsebench.suite.models import build_model
    from sparsebench.suite.pillars.classification.masks import prunable_layers

    from .execution import VALUES_ONLY

    src, data, top = spec.source, spec.data[KEY], spec.data
    for name, task in data["tasks"].items():
        info = DATASETS[task["dataset"]]
        try:
            model = build_model(task["model"], info.input_shape, info.num_classes)
        except ValueError as e:
            raise SpecError(f"{src}: {KEY}.tasks.{name}.model: {e}") from None
        layers = prunable_layers(model)
        convs = [n for n, m in layers.items() if not isinstance(m, torch.nn.Linear)]
        sparse_here = any(registry.get_method(m, FAMILIES).sparse for m in task_methods(data, name))
        if convs and sparse_here and data["execution"] == VALUES_ONLY:
            raise SpecError(
                f"{src}: {KEY}.tasks.{name}.model: execution: 'sparse' runs Linear layers "
                f"values-only, and {task['model']} has convolutions ({', '.join(convs)}), "
                "which would still train as dense x mask; use a fully connected model for "
                "this task, or execution: cpu / dense_mask"
            )
        try:
            check_available(task["dataset"], top["data_root"], top["allow_download"])
        except DatasetNotFoundError as e:
            raise SpecError(f"{src}: {KEY}.tasks.{name}.dataset: {e}") from None
        recipe = task["recipe"]
        if recipe.get("nesterov"):  # torch refuses it only when the job builds the optimizer
            optimizer = recipe.get("optimizer", "sgd")
            if optimizer != "sgd":
                raise SpecError(
                    f"{src}: {KEY}.tasks.{name}.recipe.nesterov: true applies to SGD only; "
                    f"this recipe's optimizer is {optimizer}"
                )
            if recipe.get("momentum", 0.9) == 0:
                raise SpecError(
                    f"{src}: {KEY}.tasks.{name}.recipe.nesterov: true needs momentum > 0 "
                    "(got momentum: 0)"
                )
        steps_per_epoch = math.ceil(info.n_train / recipe["batch_size"])
        total_steps = steps_per_epoch * recipe["epochs"]
        for method in task_methods(data, name):
            cls = registry.get_method(method, FAMILIES).cls
            for setting in settings(spec, method):
                try:
                    if "steps_per_epoch" in inspect.signature(cls.check_budget).parameters:
                        # methods that act at epoch ends need the epoch length too
                        cls.check_budget(setting.params, total_steps, steps_per_epoch)
                    else:
                        cls.check_budget(setting.params, total_steps)
                    cls.check_model(setting.params, layers)
                    check_recipe = getattr(cls, "check_recipe", None)
                    if check_recipe is not None:  # a method that brings its own optimizer
                        check_recipe(setting.params, recipe)
                    if registry.get_method(method, FAMILIES).sparse:
                        # methods whose reach depends on the model get its layers too
                        by_layers = "layers" in inspect.signature(cls.check_sparsity).parameters
                        for sparsity in cell_sparsities(
                            registry.get_method(method, FAMILIES), setting.params, data
                        ):
                            if by_layers:
                                cls.check_sparsity(setting.params, sparsity, layers)
                            else:
                                cls.check_sparsity(setting.params, sparsity)
                except ValueError as e:
                    raise SpecError(
                        f"{src}: {KEY}.methods.{method} (setting {setting.label}) on "
                        f"{KEY}.tasks.{name}: {e}"
                    ) from None


def _check_registries(data: dict[str, Any], source: str) -> None:
    from sparsebench.suite.data import DATASETS
    from sparsebench.suite.models import MODELS

    for name, task in data["tasks"].items():
        if task["dataset"] not in DATASETS:
            raise SpecError(
                f"{source}: {KEY}.tasks.{name}.dataset: {DATASETS.unknown(task['dataset'])}"
            )
        if task["model"] not in MODELS:
            raise SpecError(f"{source}: {KEY}.tasks.{name}.model: {MODELS.unknown(task['model'])}")
    known = registry.all_methods(FAMILIES)
    for method, params in data["methods"].items():
        if method not in known:
            raise SpecError(
                f"{source}: {KEY}.methods.{method}: unknown method {method!r}; "
                f"registered methods: {', '.join(sorted(known))}{did_you_mean(method, known)}"
            )
        if params is not None and not isinstance(params, dict):
            raise SpecError(f"{source}: {KEY}.methods.{method}: expected a mapping of parameters")
    for name, task in data["tasks"].items():
        extra = [m for m in task.get("methods", []) if m not in data["methods"]]
        if extra:
            raise SpecError(
                f"{source}: {KEY}.tasks.{name}.methods: {', '.join(map(repr, extra))} not in "
                f"the section's `methods`; allowed: {', '.join(data['methods'])}"
                f"{did_you_mean(extra[0], data['methods'])}"
            )
