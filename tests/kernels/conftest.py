"""Shared helpers of the kernel tests: random patterns with empty rows/columns, and the list of
backends that run on this machine's CPU."""

from __future__ import annotations

from dataclasses import dataclass

import pytest
import torch

from sparsebench.kernels import BACKENDS, SparsityPattern

# Backends that run on CPU tensors without special setup (triton needs TRITON_INTERPRET=1 and
# has its own tests; semi_structured needs a GPU).
CPU_BACKENDS = ("dense_mask", "torch_csr", "cpu")


def cpu_backend_params() -> list:
    """pytest params for CPU_BACKENDS, skipping those unavailable here (with the reason)."""
    params = []
    for name in CPU_BACKENDS:
        ok, reason = BACKENDS[name].available()
        marks = [] if ok else [pytest.mark.skip(reason=f"{name} unavailable: {reason}")]
        params.append(pytest.param(name, marks=marks, id=name))
    return params


@dataclass
class Case:
    """A random sparse layer and inputs: W = pattern ⊙ dense values."""

    pattern: SparsityPattern
    weight: torch.Tensor  # (out, in), zeros off the pattern
    values: torch.Tensor  # (nnz,)
    x: torch.Tensor  # (B, in)
    grad_y: torch.Tensor  # (B, out)
    bias: torch.Tensor  # (out,)


def make_case(
    n_out: int,
    n_in: int,
    batch: int,
    density: float,
    dtype: torch.dtype = torch.float64,
    seed: int = 0,
    empty_rows: tuple[int, ...] = (),
    empty_cols: tuple[int, ...] = (),
) -> Case:
    g = torch.Generator().manual_seed(seed)
    mask = torch.rand(n_out, n_in, generator=g) < density
    for r in empty_rows:
        mask[r] = False
    for c in empty_cols:
        mask[:, c] = False
    pattern = SparsityPattern.from_mask(mask)
    weight = torch.randn(n_out, n_in, generator=g, dtype=dtype) * mask
    return Case(
        pattern=pattern,
        weight=weight,
        values=pattern.gather(weight),
        x=torch.randn(batch, n_in, generator=g, dtype=dtype),
        grad_y=torch.randn(batch, n_out, generator=g, dtype=dtype),
        bias=torch.randn(n_out, generator=g, dtype=dtype),
    )


def tolerances(dtype: torch.dtype) -> dict[str, float]:
    return (
        {"rtol": 1e-4, "atol": 1e-4} if dtype == torch.float32 else {"rtol": 1e-10, "atol": 1e-10}
    )
