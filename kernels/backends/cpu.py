"""``cpu``: our C++ CSR SpMM / SDDMM kernels (``csrc/sparse_linear.cpp``), JIT-compiled once.

Layouts: the gathered operand is transposed so that each nonzero touches one contiguous row of
B values (xT (in, B) for the forward and SDDMM, grad_yT (out, B) for grad_input); the outputs
are written straight into the usual row-major (B, out) / (B, in) tensors. For ``grad_input``
the same SpMM kernel runs on the CSR of Wᵀ, reading ``values[perm[k]]``. float32 and float64;
any batch size; CPU tensors only. See docs/kernels.md for the loop order and numbers.
"""

from __future__ import annotations

import torch
from torch import Tensor

from sparsebench.suite.registry import register

from ..pattern import SparsityPattern
from . import _cpu_build
from .base import Backend

_SUPPORTED = (torch.float32, torch.float64)


def _check(t: Tensor) -> None:
    if t.device.type != "cpu":
        raise ValueError(f"the cpu backend takes CPU tensors, got a tensor on {t.device}")
    if t.dtype not in _SUPPORTED:
        raise ValueError(f"the cpu backend supports float32 and float64, got {t.dtype}")


def _transposed(t: Tensor) -> Tensor:
    # (B, n) -> contiguous (n, B); free when t is already a transposed view of such a buffer.
    return t.t().contiguous()


def forward(x: Tensor, values: Tensor, pattern: SparsityPattern, bias: Tensor | None) -> Tensor:
    _check(x)
    ext = _cpu_build.load_extension()
    b = None if bias is None else bias.contiguous()
    return ext.spmm(pattern.row_ptr, pattern.col_idx, values.contiguous(), _transposed(x), b)


def grad_input(grad_y: Tensor, values: Tensor, pattern: SparsityPattern) -> Tensor:
    _check(grad_y)
    ext = _cpu_build.load_extension()
    # Wᵀ in CSR is (col_ptr, row_idx) with values[perm]; the kernel applies perm as it reads.
    return ext.spmm(
        pattern.col_ptr,
        pattern.row_idx,
        values.contiguous(),
        _transposed(grad_y),
        None,
        pattern.perm,
    )


def grad_values(grad_y: Tensor, x: Tensor, pattern: SparsityPattern) -> Tensor:
    _check(x)
    ext = _cpu_build.load_extension()
    return ext.sddmm(pattern.row_ptr, pattern.col_idx, grad_y, _transposed(x))


def available() -> tuple[bool, str]:
    if _cpu_build.is_loaded():  # checked on every call: skip the PATH lookups once built
        return True, ""
    problem = _cpu_build.toolchain_problem()
    return (problem is None, problem or "")


@register("cpu", family="kernels")
class CPUBackend(Backend):
    """Our C++/OpenMP CSR SpMM and SDDMM over transposed activations, JIT-compiled once.

    Source: ours (kernels/csrc/sparse_linear.cpp); the SDDMM as defined by Nisa et al. 2018,
    HiPC, "Sampled Dense Matrix Multiplication for High-Performance Machine Learning".
    """

    description = "our C++/OpenMP CSR SpMM + SDDMM over transposed activations (JIT-compiled)"
    forward_impl = staticmethod(forward)
    grad_input_impl = staticmethod(grad_input)
    grad_values_impl = staticmethod(grad_values)
    available = staticmethod(available)
