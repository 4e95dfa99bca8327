"""One job of the kernels pillar: time every sparse-linear backend on one (shape, pattern,
sparsity, batch) cell, against ``dense`` (plain ``nn.Linear``) and ``dense_mask``, interleaved
in one process with the same threads. Run as a Lightning module's test loop (one "batch" = the
cell), like every job of the suite.

Measured ops, each through autograd as training uses the layer:

* ``forward``: ``y = layer(x)`` with autograd recording (x and the weights require grad);
* ``backward``: ``torch.autograd.grad(y, (x, weights, bias), grad_y)`` on a retained graph;
* ``fwd_bwd``: both, as one training step of the layer does.

``dense`` is a plain ``nn.Linear`` (no mask); ``dense_mask`` is :class:`MaskedLinear`, the dense
weight times the mask in every forward (what DST and pruning libraries run); every other backend
is a :class:`~sparsebench.kernels.SparseLinear` holding only the nnz values. The mask is the
cell's pattern (:mod:`.patterns`: ``random`` unless the section names another).

Timing: ``warmup`` untimed rounds, then ``repeats`` rounds; in each round every (backend, op)
runs once, in the same order, so slow drifts (frequency, other processes) hit every backend
alike. Per (backend, op): median, 10th and 90th percentile of the round times (milliseconds).
"""

from __future__ import annotations

import math
import statistics
import sys
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import lightning.pytorch as pl
import torch
from torch import nn
from torch.utils.data import DataLoader

from .columns import OPS
from .patterns import DEFAULT as DEFAULT_PATTERN
from .patterns import PATTERNS

BASELINES = ("dense", "dense_mask")  # always measured: the references of every ratio
DTYPES = {
    "float32": torch.float32,
    "float64": torch.float64,
    "float16": torch.float16,
    "bfloat16": torch.bfloat16,
}


@dataclass
class KernelJob:
    """A cell plus the section's settings (see the spec's ``kernels`` section)."""

    out_features: int
    in_features: int
    sparsity: float
    batch: int
    backends: tuple[str, ...] = ("torch_csr", "cpu")
    ops: tuple[str, ...] = OPS
    dtype: str = "float32"
    repeats: int = 20
    warmup: int = 3
    seed: int = 0
    device: str = "cpu"
    pattern: str = DEFAULT_PATTERN  # a name in patterns.PATTERNS: the mask every backend runs


def useful_flops(op: str, nnz: int, batch: int) -> float:
    """FLOPs of the sparse products an op needs (2·nnz·B each, Nisa et al. 2018 count):
    forward 1 SpMM, backward 1 SpMM + 1 SDDMM, fwd_bwd all three."""
    return {"forward": 1, "backward": 2, "fwd_bwd": 3}[op] * 2.0 * nnz * batch


def two_four_mask(weight: torch.Tensor) -> torch.Tensor:
    """2:4 mask keeping the 2 largest |w| of every 4 consecutive inputs (the pattern of
    ``semi_structured``, which can only run at sparsity 0.5)."""
    w = weight.abs().reshape(weight.shape[0], -1, 4)
    keep = torch.zeros_like(w, dtype=torch.bool).scatter_(-1, w.topk(2, dim=-1).indices, True)
    return keep.reshape(weight.shape)


class MaskedLinear(nn.Module):
    """The ``dense_mask`` baseline as users have it today: a dense weight Parameter multiplied
    by a fixed bool mask in every forward, y = x (W ⊙ M)ᵀ + b, so autograd's weight gradient
    is (grad_yᵀ x) ⊙ M (jaxpruner, torch.nn.utils.prune). Every product is dense.

    Args:
        linear: the dense layer whose Parameters are used (shared, not copied).
        mask: bool (out_features, in_features).
    """

    def __init__(self, linear: nn.Linear, mask: torch.Tensor):
        super().__init__()
        self.weight, self.bias = linear.weight, linear.bias
        self.register_buffer(
            "mask", mask.to(device=linear.weight.device, dtype=linear.weight.dtype)
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return nn.functional.linear(x, self.weight * self.mask, self.bias)


class _Layer:
    """One timed layer: the module, its input and output gradient, and the grad targets."""

    def __init__(self, module: nn.Module, x: torch.Tensor, grad_y: torch.Tensor):
        self.module = module
        self.x = x.detach().clone().requires_grad_(True)
        self.grad_y = grad_y
        self.params = [p for p in module.parameters() if p.requires_grad]
        self.y = module(self.x)  # graph retained for the backward-only op

    def forward(self) -> torch.Tensor:
        return self.module(self.x)

    def backward(self) -> tuple[torch.Tensor, ...]:
        return torch.autograd.grad(self.y, [self.x, *self.params], self.grad_y, retain_graph=True)

    def fwd_bwd(self) -> tuple[torch.Tensor, ...]:
        y = self.module(self.x)
        return torch.autograd.grad(y, [self.x, *self.params], self.grad_y)


def _grads_on_pattern(layer: _Layer, pattern) -> tuple[torch.Tensor, torch.Tensor]:
    """(grad_x, grad_W values in CSR order) of a layer, whatever its weight storage."""
    from sparsebench.kernels import SparseLinear

    grads = layer.backward()
    gx, gw = grads[0], grads[1]
    if not isinstance(layer.module, SparseLinear):  # dense weight (out, in)
        gw = pattern.gather(gw)
    return gx, gw


def measure(job: KernelJob, progress: Callable[[str], None] | None = None) -> list[dict]:
    """Time ``job``'s backends and baselines; one row per (backend, op), see KERNEL_COLUMNS.

    Raises ValueError for an unknown backend name, pattern or dtype (before anything runs)."""
    from sparsebench.kernels import BACKENDS, SparseLinear, SparsityPattern, get_backend

    for name in job.backends:
        get_backend(name, require_available=False)  # unknown names fail here, with the list
    make_mask = PATTERNS.get(job.pattern)  # CatalogError (a ValueError) lists the patterns
    if job.dtype not in DTYPES:
        raise ValueError(f"unknown dtype {job.dtype!r}; allowed: {', '.join(DTYPES)}")
    dtype, device = DTYPES[job.dtype], torch.device(job.device)
    gen = torch.Generator().manual_seed(job.seed)
    dense = nn.Linear(job.in_features, job.out_features, dtype=dtype)
    with torch.no_grad():  # every number from the cell's seed
        dense.weight.copy_(torch.randn(dense.weight.shape, generator=gen) * 0.05)
        dense.bias.copy_(torch.randn(dense.bias.shape, generator=gen) * 0.05)
    dense = dense.to(device)
    x = torch.randn(job.batch, job.in_features, generator=gen).to(device, dtype)
    grad_y = torch.randn(job.batch, job.out_features, generator=gen).to(device, dtype)
    mask = make_mask(job.out_features, job.in_features, job.sparsity, gen).to(device)

    layers: dict[str, _Layer] = {}
    rows: dict[str, dict[str, Any]] = {}
    names = [*BASELINES, *[b for b in job.backends if b not in BASELINES]]
    pattern = SparsityPattern.from_mask(mask)
    for name in names:
        row = {"backend": name, "status": "ok", "error": None, "nnz": pattern.nnz}
        rows[name] = row
        try:
            if name == "dense":
                layers[name] = _Layer(dense, x, grad_y)
                continue
            if name == "dense_mask":
                layers[name] = _Layer(MaskedLinear(dense, mask), x, grad_y)
                continue
            be_mask = mask
            if name == "semi_structured":
                be_mask = two_four_mask(dense.weight.detach())
                if abs(job.sparsity - 0.5) > 1e-9:
                    raise _Skip("2:4 semi-structured sparsity is 0.5 only")
                if dtype not in (torch.float16, torch.bfloat16):
                    raise _Skip("2:4 tensor cores need float16 or bfloat16 (kernels.dtype)")
            if name == "cpu" and dtype not in (torch.float32, torch.float64):
                raise _Skip(f"the cpu kernels support float32 and float64, not {job.dtype}")
            ok, why = BACKENDS[name].available()
            if not ok:
                raise _Skip(why)
            if name == "cpu" and device.type != "cpu":
                raise _Skip(
                    "the cpu backend runs on CPU tensors; this benchmark is on " + str(device)
                )
            if name == "triton" and device.type != "cuda":
                raise _Skip(
                    "the Triton interpreter is for correctness tests only; timing needs a GPU"
                )
            module = SparseLinear.from_dense(dense, be_mask, backend=name)
            layers[name] = _Layer(module, x, grad_y)
        except _Skip as e:
            row.update(status="skipped", error=str(e))
        except NotImplementedError as e:  # e.g. torch.sparse without a float16 CPU kernel
            row.update(status="skipped", error=f"not supported here: {e}")
        except Exception as e:  # noqa: BLE001 - one backend failing keeps the others
            traceback.print_exc(file=sys.stderr)
            row.update(status="failed", error=f"{type(e).__name__}: {e}")

    errors = _errors_vs_dense_mask(layers, pattern, rows)
    times = {(n, op): [] for n in layers for op in job.ops}
    # Our own loop rather than torch.utils.benchmark's Timer: a round times every backend
    # once, in turn, so that the ratios compare backends under the same machine state
    # (a Timer times one statement in a block of its own; on a shared 2-core machine the
    # load drifts between blocks), and the records keep each round's time for p10/p90.
    sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)
    for r in range(job.warmup + job.repeats):
        for name, layer in list(layers.items()):
            for op in job.ops:
                try:
                    sync()
                    t0 = time.perf_counter()
                    getattr(layer, op)()
                    sync()
                    dt = (time.perf_counter() - t0) * 1e3
                except Exception as e:  # noqa: BLE001
                    traceback.print_exc(file=sys.stderr)
                    rows[name].update(status="failed", error=f"{type(e).__name__}: {e}")
                    del layers[name]
                    break
                if r >= job.warmup:
                    times[(name, op)].append(dt)
        if progress and (r + 1) % max(1, (job.warmup + job.repeats) // 4) == 0:
            progress(f"round {r + 1}/{job.warmup + job.repeats}")

    out = []
    for op in job.ops:
        med = {n: statistics.median(times[(n, op)]) for n in layers if times[(n, op)]}
        for name in names:
            row = dict(rows[name], op=op, repeats=0)
            if row["status"] == "ok" and name in med:
                ts = sorted(times[(name, op)])
                flops = useful_flops(op, pattern.nnz, job.batch)
                row.update(
                    ms_median=med[name],
                    ms_p10=_quantile(ts, 0.1),
                    ms_p90=_quantile(ts, 0.9),
                    repeats=len(ts),
                    useful_flops=flops,
                    gflops_effective=flops / med[name] / 1e6,
                    max_abs_err=errors.get((name, op)),
                )
            mine = med.get(name) if row["status"] == "ok" else None
            for ref in ("dense", "dense_mask", "torch_csr"):
                row[f"{ref}_ms"] = med.get(ref)
                row[f"speedup_vs_{ref}"] = med[ref] / mine if mine and ref in med else None
            out.append(row)
    return out


class _Skip(Exception):
    """A backend that cannot run on this cell here (reason in the message)."""


def _quantile(sorted_times: list[float], q: float) -> float:
    """Linear-interpolated quantile of an ascending list (numpy's default method)."""
    pos = q * (len(sorted_times) - 1)
    lo = math.floor(pos)
    hi = min(lo + 1, len(sorted_times) - 1)
    return sorted_times[lo] + (sorted_times[hi] - sorted_times[lo]) * (pos - lo)


@torch.no_grad()
def _max_abs(a: torch.Tensor, b: torch.Tensor) -> float:
    return float((a - b).abs().max()) if a.numel() else 0.0


def _errors_vs_dense_mask(
    layers: dict[str, _Layer], pattern, rows: dict[str, dict[str, Any]]
) -> dict[tuple[str, str], float]:
    """Max |difference| to dense_mask: forward y; backward max over grad_x and grad_W on the
    pattern; fwd_bwd the max of both. Not for ``dense`` (its weight is not masked) nor
    ``semi_structured`` (its own 2:4 pattern). A backend whose backward raises is marked failed
    in ``rows`` and removed from ``layers``; the others keep their rows."""
    ref = layers.get("dense_mask")
    if ref is None:
        return {}
    y_ref = ref.y.detach()
    gx_ref, gw_ref = _grads_on_pattern(ref, pattern)
    out = {}
    for name, layer in list(layers.items()):
        if name in ("dense", "semi_structured"):
            continue
        try:
            fwd = _max_abs(layer.y.detach(), y_ref)
            gx, gw = _grads_on_pattern(layer, pattern)
        except Exception as e:  # noqa: BLE001 - one backend failing keeps the others
            traceback.print_exc(file=sys.stderr)
            rows[name].update(status="failed", error=f"{type(e).__name__}: {e}")
            del layers[name]
            continue
        bwd = max(_max_abs(gx, gx_ref), _max_abs(gw, gw_ref))
        out.update({(name, "forward"): fwd, (name, "backward"): bwd})
        out[(name, "fwd_bwd")] = max(fwd, bwd)
    return out


class KernelBenchModule(pl.LightningModule):
    """Lightning wrapper: the test loop's single step measures the cell."""

    def __init__(self, job: KernelJob):
        super().__init__()
        self.job = job
        self.rows: list[dict] = []

    def test_step(self, batch, batch_idx):
        with torch.enable_grad():  # the test loop disables autograd; the ops time it
            self.rows = measure(
                self.job, progress=lambda msg: print(msg, file=sys.stderr, flush=True)
            )


def run_kernel_job(job: KernelJob, threads: int) -> list[dict]:
    """Run ``job`` through ``Trainer.test`` with ``threads`` torch threads; its rows."""
    from sparsebench.suite.lightning import quiet_trainer

    torch.set_num_threads(threads)
    module = KernelBenchModule(job)
    trainer = quiet_trainer(
        accelerator="cpu" if job.device == "cpu" else "auto",
        devices=1,
        inference_mode=False,  # inference tensors cannot enter autograd
    )
    trainer.test(module, DataLoader([0]), verbose=False)
    return module.rows
