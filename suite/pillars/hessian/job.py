"""One cell of the hessian pillar: (system, size, potential, method) -> Hessian -> metrics.

The job is a Lightning module whose test loop computes one Hessian (one batch: the system), so
it runs through the same ``Trainer`` as every other pillar (accelerator picked by Lightning).
Methods are registered in the ``hessian`` family (methods/hessian/, the contract in its
``base.py``): the job asks a method for its pattern's hops (none: every column by dense HVPs),
whether it must be exact, and whether it applies to the potential.
"""

from __future__ import annotations

import math
import statistics
import time
from dataclasses import dataclass, field
from typing import Any

import lightning.pytorch as pl
import numpy as np
import torch
from torch.utils.data import DataLoader

from sparsebench.suite.memory import peak_mb, reset_peak

EXACT_RTOL = 1e-8  # an exact method's Hessian further than this from its reference fails


@dataclass
class HessianJob:
    """One cell of the hessian benchmark (see the spec's ``hessian`` section)."""

    system: str
    size: int
    potential: str
    method: str
    potential_params: dict[str, Any] = field(default_factory=dict)
    order: str = "smallest_last"
    chunk: int | None = None  # None: auto_chunk(n_atoms)
    repeats: int = 1
    dense_max_atoms: int = 1000
    seed: int = 0


def _timed(fn, repeats: int = 1) -> tuple[Any, float]:
    """(result of the last call, median seconds over ``repeats`` calls)."""
    times, out = [], None
    for _ in range(repeats):
        t0 = time.perf_counter()
        out = fn()
        times.append(time.perf_counter() - t0)
    return out, statistics.median(times)


class HessianModule(pl.LightningModule):
    """Test loop of one batch: computes the job's Hessian and keeps its metrics in ``result``."""

    def __init__(self, job: HessianJob):
        super().__init__()
        self.job = job
        self.result: dict[str, Any] = {}

    def test_step(self, batch, batch_idx):
        self.result = compute(self.job, self.device)


def compute(job: HessianJob, device: torch.device | str = "cpu") -> dict[str, Any]:
    """Build the system and potential, compute the Hessian by ``job.method``, measure it.

    Raises ValueError for an unknown method, system or potential parameter, or a method that
    does not apply to the potential (its ``skip`` reason)."""
    from sparsebench.methods.hessian.hvp import (
        ColoredHessian,
        PatternError,
        auto_chunk,
        dense_hessian,
        hvps,
        probe_check,
    )
    from sparsebench.methods.hessian.pattern import HessianPattern
    from sparsebench.methods.hessian.potentials import POTENTIALS, build_potential
    from sparsebench.methods.hessian.systems import build_system
    from sparsebench.suite.registry import get_method

    method = get_method(job.method, ("hessian",)).cls()
    atoms = build_system(job.system, job.size, seed=job.seed)
    params = dict(job.potential_params)
    if POTENTIALS.get(job.potential).seeded:
        params.setdefault("seed", job.seed)  # the section's seed also draws its weights
    pot = build_potential(job.potential, atoms, dtype=torch.float64, device=device, **params)
    x = torch.as_tensor(atoms.get_positions(), dtype=torch.float64, device=device)
    n = len(atoms)
    chunk = job.chunk if job.chunk is not None else auto_chunk(n)
    out: dict[str, Any] = {"n_atoms": n, "K": pot.hops, "pattern_hops": pot.hops, "chunk": chunk}
    hvps(pot.energy, x, torch.zeros(1, 3 * n, dtype=x.dtype, device=device))  # warm-up

    def dense_reference() -> np.ndarray:
        dense, t_dense = _timed(lambda: dense_hessian(pot.energy, x, chunk), job.repeats)
        out["dense_wall_s"] = t_dense
        return dense.cpu().numpy()

    reason = method.skip(pot.hops)
    if reason is not None:
        raise ValueError(f"{job.method} {reason}; {job.potential} has K = {pot.hops}")
    hops = method.pattern_hops(pot.hops)
    if hops is None:  # no pattern: every column
        dense_reference()
        t = out["dense_wall_s"]
        out.update(
            n_colors=3 * n,
            max_row_atoms=n,
            n_hvps=3 * n,
            nnz=9 * n * n,
            fill=1.0,
            t_pattern_s=0.0,
            t_coloring_s=0.0,
            t_hvp_s=t,
            t_decompress_s=0.0,
            wall_s=t,
            speedup_vs_dense=1.0,
            max_abs_err=0.0,
            rel_err=0.0,
            err_reference="self",
            peak_mem_mb=peak_mb(),
        )
        return out

    pattern, t_pattern = _timed(lambda: HessianPattern.of_potential(pot, n, hops))
    prepared, t_coloring = _timed(lambda: ColoredHessian.prepare(pattern, job.order))
    b, t_hvp = _timed(lambda: prepared.compressed(pot.energy, x, chunk), job.repeats)
    h, t_dec = _timed(lambda: prepared.decompress(b))
    wall = t_pattern + t_coloring + t_hvp + t_dec
    out.update(
        pattern_hops=hops,
        n_colors=prepared.n_colors,
        max_row_atoms=pattern.max_row_atoms,
        n_hvps=prepared.n_colors,
        nnz=pattern.nnz,
        fill=pattern.fill,
        t_pattern_s=t_pattern,
        t_coloring_s=t_coloring,
        t_hvp_s=t_hvp,
        t_decompress_s=t_dec,
        wall_s=wall,
        peak_mem_mb=peak_mb(),
    )  # before any dense reference: this method's own peak
    if n <= job.dense_max_atoms:
        dense = dense_reference()
        diff = h.toarray() - dense
        out.update(
            max_abs_err=float(np.abs(diff).max()),
            rel_err=float(np.linalg.norm(diff) / np.linalg.norm(dense)),
            speedup_vs_dense=out["dense_wall_s"] / wall,
            err_reference="dense",
        )
    else:
        # No dense reference: the max relative error of h v against true HVPs on 4 probes.
        err = probe_check(pot.energy, x, h, n_probes=4, seed=job.seed, rtol=math.inf)
        out.update(rel_err=err, err_reference="probes")
    if method.exact and out["rel_err"] > EXACT_RTOL:
        raise PatternError(
            f"{job.method} Hessian is not exact: rel_err {out['rel_err']:.2e} > {EXACT_RTOL:.0e} "
            f"(vs {out['err_reference']}); the sparsity pattern misses nonzeros"
        )
    return out


def run_hessian_job(job: HessianJob, threads: int = 1) -> dict[str, Any]:
    """Run ``job`` through a Lightning ``Trainer.test`` and return its metrics plus device,
    threads and peak memory."""
    from sparsebench.suite.lightning import quiet_trainer

    torch.set_num_threads(threads)
    reset_peak()  # the cells of a batch share the process: each measures its own peak
    module = HessianModule(job)
    trainer = quiet_trainer(
        accelerator="auto",
        devices=1,
    )
    trainer.test(module, DataLoader([0]), verbose=False)
    out = dict(module.result)
    out["device"] = str(module.device)
    return out
