"""One job of the classification pillars (dst, pruning): spec cell -> Lightning fit/test ->
record. Called by ``sparsebench run`` (and so by the Snakemake rule ``run_job``)."""

from __future__ import annotations

import json
import logging
import math
import statistics
import sys
import time
import traceback
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from sparsebench.suite import record as rec
from sparsebench.suite import registry
from sparsebench.suite.spec import Spec

log = logging.getLogger("sparsebench")
CPU_EXECUTION = ("cpu",)  # execution backends that run on CPU tensors only


@dataclass(frozen=True)
class JobArgs:
    """Coordinates of one job within a spec."""

    task: str
    method: str
    params: dict[str, Any]
    sparsity: float
    seed: int
    threads: int = 1
    parallel_jobs: int = 1


def _quiet_lightning() -> None:
    for name in ("lightning.pytorch", "lightning.fabric", "lightning"):
        logging.getLogger(name).setLevel(logging.ERROR)
    warnings.filterwarnings("ignore", ".*does not have many workers.*")
    warnings.filterwarnings("ignore", ".*GPU available but not used.*")


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


def run_classification(spec: Spec, job: JobArgs) -> dict[str, Any]:
    """Train and test one (task, method, params, sparsity, seed) cell; return its record.

    Raises whatever fails (bad data, diverged training, ...); :func:`run_and_record` turns an
    exception into a failed record.
    """
    import lightning.pytorch as pl
    from torch.utils.data import DataLoader

    from sparsebench.suite.data import load_dataset
    from sparsebench.suite.execution import use_backend
    from sparsebench.suite.flops import TrainFlopsCounter, layer_flops, sparse_forward_flops
    from sparsebench.suite.lit import ClassificationModule, FlopsCallback, RunContext
    from sparsebench.suite.models import build_model

    _quiet_lightning()
    torch.set_num_threads(job.threads)
    task = spec.task(job.task)
    recipe = task["recipe"]
    info = registry.get_method(job.method)
    params = registry.build_params(job.method, job.params, where=f"methods.{job.method}")

    pl.seed_everything(job.seed, workers=True, verbose=False)
    data = load_dataset(task["dataset"], spec.data["data_root"], spec.data["allow_download"])
    model = build_model(task["model"], data.input_shape, data.num_classes)

    loader_gen = torch.Generator().manual_seed(job.seed)
    train_loader = DataLoader(
        data.train, batch_size=recipe["batch_size"], shuffle=True, generator=loader_gen
    )
    eval_bs = recipe["eval_batch_size"]
    val_loader = DataLoader(data.val, batch_size=eval_bs)
    test_loader = DataLoader(data.test, batch_size=eval_bs)
    steps_per_epoch = len(train_loader)
    total_steps = steps_per_epoch * recipe["epochs"]

    dense_flops = layer_flops(model, data.input_shape)
    counter = TrainFlopsCounter(dense_flops)
    ctx = RunContext(
        total_steps=total_steps,
        steps_per_epoch=steps_per_epoch,
        epochs=recipe["epochs"],
        batch_size=recipe["batch_size"],
        seed=job.seed,
        generator=torch.Generator().manual_seed(10_000 + job.seed),
        flops=counter,
        train_data=data.train,
    )
    module = ClassificationModule(model, data.num_classes, recipe, total_steps)
    use_backend(module.model, module.masks, spec.data["execution"])
    method = info.cls(params, job.sparsity if info.sparse else 0.0, ctx)
    trainer = pl.Trainer(
        max_epochs=recipe["epochs"],
        # The cpu kernels take CPU tensors: such a job stays on the CPU even next to a GPU.
        accelerator="cpu" if spec.data["execution"] in CPU_EXECUTION else "auto",
        devices=1,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        num_sanity_val_steps=0,
        deterministic=True,
        callbacks=[method, FlopsCallback(counter)],  # method first: FLOPs see its masks
    )
    t0 = time.perf_counter()
    trainer.fit(module, train_loader, val_loader)
    train_wall_s = time.perf_counter() - t0
    val = {k: float(v) for k, v in trainer.callback_metrics.items()}
    test = trainer.test(module, test_loader, verbose=False)[0]

    store = module.masks
    densities = store.densities()
    f_sparse = sparse_forward_flops(dense_flops, densities)
    f_dense = float(sum(dense_flops.values()))
    masked_out = store.total - store.total_nnz
    params_total = sum(p.numel() for p in model.parameters())

    infer_bs = spec.data["infer"]["batch_size"]
    x_test = data.test.tensors[0]
    reps = math.ceil(infer_bs / len(x_test))
    x_inf = x_test.repeat(reps, *[1] * (x_test.dim() - 1))[:infer_bs].to(module.device)
    infer = inference_ms(module.model, x_inf, spec.data["infer"]["repeats"])

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
        "train_flops_rel_dense": counter.total / counter.dense_total,
        "inference_flops_rel_dense": f_sparse / f_dense,
        "params_total": params_total,
        "params_nonzero": params_total - masked_out,
        "train_wall_s": train_wall_s,
        "infer_ms": infer,
        "infer_batch": infer_bs,
        "device": str(module.device),
        "layer_densities_json": json.dumps(densities, sort_keys=True),
    }


def base_record(spec: Spec, job: JobArgs) -> dict[str, Any]:
    """The identifying and provenance columns of a job's record (no metrics)."""
    from sparsebench.suite.spec import Setting

    task = spec.task(job.task)
    info = registry.get_method(job.method)
    params = registry.build_params(job.method, job.params, where=f"methods.{job.method}")
    setting = Setting(job.method, params, registry.setting_id(params))
    out = {c: None for c in rec.COMMON_COLUMNS}
    out.update(
        benchmark=spec.benchmark,
        pillar=info.pillar,
        task=job.task,
        dataset=task["dataset"],
        model=task["model"],
        method=job.method,
        params_json=setting.params_json,
        setting_id=setting.setting_id,
        setting=registry.setting_label(params),
        execution=spec.data["execution"],
        target_sparsity=job.sparsity if info.sparse else 0.0,
        seed=job.seed,
        threads=job.threads,
        parallel_jobs=job.parallel_jobs,
        spec_hash=spec.hash,
        epochs=task["recipe"]["epochs"],
    )
    out.update(rec.provenance())
    return out


def run_and_record(spec: Spec, job: JobArgs, out: str | Path) -> dict[str, Any]:
    """Run one job and write its record atomically to ``out``, whatever happens.

    A diverged run (non-finite loss) gets status ``diverged``, any other exception status
    ``failed``; both keep the error message and leave the metrics null. Returns the record.
    """
    from sparsebench.suite.lit import DivergedError

    record = base_record(spec, job)
    record["started_at"] = rec.now_iso()
    try:
        record.update(run_classification(spec, job))
    except DivergedError as e:
        record.update(status="diverged", error=str(e))
    except Exception as e:  # noqa: BLE001 - any failure becomes a failed record
        traceback.print_exc(file=sys.stderr)
        record.update(status="failed", error=f"{type(e).__name__}: {e}")
    record["finished_at"] = rec.now_iso()
    rec.write_json_atomic(out, record)
    return record
