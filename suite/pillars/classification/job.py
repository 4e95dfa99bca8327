"""One cell of the classification pillar (dst, pruning): Lightning fit/test -> metric
columns. The spine (:mod:`sparsebench.suite.job`) writes the record."""

from __future__ import annotations

import json
import math
import statistics
import time
from typing import Any

import torch

from sparsebench.suite import registry
from sparsebench.suite.lightning import quiet_trainer
from sparsebench.suite.pillar import Cell
from sparsebench.suite.spec import Spec

from . import FAMILIES

CPU_EXECUTION = ("cpu", "sparse")  # execution backends that run on CPU tensors only
TRAINED_FRACTION = 0.1  # a connection counts as trained after 10 % of the run's steps


@torch.no_grad()
def inference_ms(model: torch.nn.Module, x: torch.Tensor, repeats: int) -> float:
    """Median milliseconds of ``model(x)`` over ``repeats`` timed calls after 3 warm-up calls.

    Args:
        model: the network, put in eval mode here.
        x: a batch ``(B, *input_shape)`` on the model's device.
        repeats: number of timed calls.
    """
    model.eval()
    sync = torch.cuda.synchronize if x.is_cuda else (lambda: None)
    for _ in range(3):
        model(x)
    sync()
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        model(x)
        sync()
        times.append((time.perf_counter() - t0) * 1e3)
    return statistics.median(times)


def run_classification(spec: Spec, cell: Cell, data: Any = None) -> dict[str, Any]:
    """Train and test one (task, method setting, sparsity, seed) cell; return its metric
    columns. ``data`` is the task's loaded dataset (loaded here when None).

    Raises whatever fails (bad data, diverged training: DivergedError, ...); the spine turns
    an exception into a failed (or diverged) record.
    """
    import lightning.pytorch as pl
    from torch.utils.data import DataLoader

    from sparsebench.suite.data import batch_loader, load_dataset
    from sparsebench.suite.models import build_model
    from sparsebench.suite.pillars.classification.connectivity import reachable_output_fraction
    from sparsebench.suite.pillars.classification.flops import (
        TrainFlopsCounter,
        layer_flops,
        sparse_forward_flops,
    )

    from .connectivity import effective_density
    from .execution import VALUES_ONLY, use_backend
    from .lit import ClassificationModule, RunContext, run_callbacks

    sec = spec.data["classification"]
    task = sec["tasks"][cell.columns["task"]]
    recipe = task["recipe"]
    info = registry.get_method(cell.method, FAMILIES)
    params = registry.build_params(
        info, json.loads(cell.params_json), f"classification.methods.{cell.method}"
    )
    seed, sparsity = cell.seed, cell.columns["target_sparsity"]

    pl.seed_everything(seed, workers=True, verbose=False)
    if data is None:
        data = load_dataset(task["dataset"], spec.data["data_root"], spec.data["allow_download"])
    model = build_model(task["model"], data.input_shape, data.num_classes)

    loader_gen = torch.Generator().manual_seed(seed)
    train_loader = batch_loader(data.train, recipe["batch_size"], loader_gen)
    eval_bs = recipe["eval_batch_size"]
    val_loader = DataLoader(data.val, batch_size=eval_bs)
    test_loader = DataLoader(data.test, batch_size=eval_bs)
    steps_per_epoch = len(train_loader)
    recipe_steps = steps_per_epoch * recipe["epochs"]
    # more than the recipe for a method that trains several rounds (IMP's levels)
    total_steps = info.cls.training_steps(params, sparsity, recipe_steps)

    dense_flops = layer_flops(model, data.input_shape)
    counter = TrainFlopsCounter(dense_flops)
    ctx = RunContext(
        total_steps=total_steps,
        steps_per_epoch=steps_per_epoch,
        epochs=recipe["epochs"],
        batch_size=recipe["batch_size"],
        seed=seed,
        generator=torch.Generator().manual_seed(10_000 + seed),
        flops=counter,
        train_data=data.train,
        new_model=lambda: build_model(task["model"], data.input_shape, data.num_classes),
    )
    module = ClassificationModule(
        model,
        data.num_classes,
        recipe,
        recipe_steps,
        info.cls.schedule_position(params, sparsity, recipe_steps),
    )
    use_backend(module.model, module.masks, sec["execution"])
    # before training: values-only layers (execution: sparse) hold nnz values, not weights
    params_total = sum(p.numel() for p in model.parameters())
    method = info.cls(params, sparsity, ctx)
    module.optimizer_factory = getattr(method, "make_optimizer", None)
    callbacks, connectivity = run_callbacks(method, ctx, data.input_shape, sec["execution"])
    rounds = total_steps != recipe_steps
    trainer = quiet_trainer(
        # the recipe's epochs, or the steps of every round of a method that trains several
        max_epochs=-1 if rounds else recipe["epochs"],
        max_steps=total_steps if rounds else -1,
        # The cpu kernels take CPU tensors: such a job stays on the CPU even next to a GPU.
        accelerator="cpu" if sec["execution"] in CPU_EXECUTION else "auto",
        devices=1,
        num_sanity_val_steps=0,
        deterministic=True,
        callbacks=callbacks,
    )
    if sec["execution"] == VALUES_ONLY:
        # Load (the first time: compile, about a minute) the kernels the layers will run on,
        # untimed, so that train_wall_s times training only; no random number is drawn.
        from sparsebench.kernels.backends import _cpu_build

        _cpu_build.load_extension()
    elif sec["execution"] != "dense_mask":
        # One untimed forward builds/loads the kernel backend (the cpu extension's first load
        # compiles it, about a minute) so that train_wall_s times training only. No weight
        # changes and no random number is drawn, so the run itself is unchanged.
        with torch.no_grad():
            module.model(data.train.tensors[0][:2])
    t0 = time.perf_counter()
    trainer.fit(module, train_loader, val_loader)
    train_wall_s = time.perf_counter() - t0
    val = {k: float(v) for k, v in trainer.callback_metrics.items()}
    test = trainer.test(module, test_loader, verbose=False)[0]

    store = module.masks
    densities = store.densities()
    # one dense run of the recipe: every round of a multi-round method (IMP) counts against it
    dense_run = (
        3.0 * counter.f_dense * len(data.train) * recipe["epochs"]
        if rounds
        else counter.dense_total
    )
    # Trained: active for at least the last TRAINED_FRACTION of the run (see table.py).
    trained_density = store.trained_density(math.ceil(TRAINED_FRACTION * total_steps))
    f_sparse = sparse_forward_flops(dense_flops, densities)
    f_dense = float(sum(dense_flops.values()))
    masked_out = store.total - store.total_nnz

    infer_bs = sec["infer"]["batch_size"]
    x_test = data.test.tensors[0]
    reps = math.ceil(infer_bs / len(x_test))
    x_inf = x_test.repeat(reps, *[1] * (x_test.dim() - 1))[:infer_bs].to(module.device)
    infer = inference_ms(module.model, x_inf, sec["infer"]["repeats"])
    # Wall-clock of the method's mask updates (MaskMethod.timed_update); null when it has none.
    regrowth_s, regrowth_updates = method.update_timing()
    activations = method.activation_density()
    with method.plain_network():  # the masks' structure, not the method's activation rule
        reachable = reachable_output_fraction(module.model, store, data.input_shape)
        effective = effective_density(module.model, store, data.input_shape)
    distribution = getattr(params, "distribution", None)

    return {
        "status": "ok",
        "error": None,
        "actual_sparsity": store.sparsity(),
        "test_acc": float(test["test_acc"]),
        "test_loss": float(test["test_loss"]),
        "val_acc": val.get("val_acc"),
        "val_loss": val.get("val_loss"),
        "epochs": recipe["epochs"],
        "steps": trainer.global_step,
        "train_flops": counter.total,
        "inference_flops": f_sparse,
        "train_flops_rel_dense": counter.total / dense_run,
        "inference_flops_rel_dense": f_sparse / f_dense,
        "params_total": params_total,
        "params_nonzero": params_total - masked_out,
        "train_wall_s": train_wall_s,
        "infer_ms": infer,
        "infer_batch": infer_bs,
        "device": str(module.device),
        "layer_densities_json": json.dumps(densities, sort_keys=True),
        "distribution": distribution,
        "allocation": info.cls.final_allocation(params) if store.is_sparse else None,
        "pattern": info.cls.pattern(params) if store.is_sparse or activations else None,
        "activation_density": activations,
        "allocation_shift": allocation_shift(
            store, distribution, 1.0 - sparsity, getattr(params, "dense_first_layer", False)
        ),
        "init": getattr(params, "init", None) if info.sparse else None,
        "mask_updates": store.mask_updates,
        "trained_density": trained_density,
        "reachable_outputs_init": connectivity.at_start,
        "reachable_outputs": reachable,
        "effective_density_init": connectivity.effective_at_start,
        "effective_density": effective,
        "regrowth_s": regrowth_s,
        "regrowth_updates": regrowth_updates,
    }


def allocation_shift(
    store: Any, distribution: str | None, density: float, dense_first_layer: bool = False
) -> float | None:
    """Largest |final density - the density ``distribution`` gives the layer at the run's
    target ``density``| over the prunable layers: 0 when a method kept its start's allocation,
    large when it moved weights between layers (global pruning, redistribution). None for a
    dense run or a ``global`` start (which prescribes no layer densities)."""
    from .masks import DISTRIBUTIONS, layer_densities

    if not store.is_sparse or distribution not in DISTRIBUTIONS:
        return None
    target = layer_densities(store.shapes, density, distribution, dense_first_layer)
    return max(abs(store.density(n) - d) for n, d in target.items())
