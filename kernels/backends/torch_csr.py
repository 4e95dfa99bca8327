"""``torch_csr``: PyTorch's own sparse CSR kernels (MKL sparse BLAS on x86 CPUs, cuSPARSE on
GPUs).

* forward: ``torch.addmm(b, W_csr, xᵀ)ᵀ``, W as a CSR tensor (out, in);
* grad_input: ``(Wᵀ_csr @ grad_yᵀ)ᵀ`` with the CSR of Wᵀ (values permuted by ``pattern.perm``);
* grad_values: ``torch.sparse.sampled_addmm`` (SDDMM) on a zero-valued CSR copy of the pattern.
  Measured on 4096×4096, B=64, 95% sparse, 1 thread: 4.3 ms, against 320 ms for a chunked
  gather-dot ``(grad_y[:, rows] * x[:, cols]).sum(0)`` and 56 ms for the dense product.

Outputs are contiguous (one transpose copy of y), as for every backend.
"""

from __future__ import annotations

import warnings

import torch
from torch import Tensor

from sparsebench.suite.registry import register

from ..pattern import SparsityPattern
from .base import Backend


def _indices(pattern: SparsityPattern) -> dict[str, Tensor]:
    # torch.sparse wants crow/col of one dtype; int64 is always valid. Built once per pattern.
    idx = pattern.cache.get("torch_csr")
    if idx is None:
        idx = pattern.cache["torch_csr"] = {
            "row_ptr": pattern.row_ptr,
            "col_idx": pattern.col_idx.long(),
            "col_ptr": pattern.col_ptr,
            "row_idx": pattern.row_idx.long(),
        }
    return idx


def _csr(crow: Tensor, col: Tensor, values: Tensor, size: tuple[int, int]) -> Tensor:
    with warnings.catch_warnings():  # "Sparse CSR tensor support is in beta state"
        warnings.simplefilter("ignore", UserWarning)
        return torch.sparse_csr_tensor(crow, col, values, size, check_invariants=False)


def weight_csr(values: Tensor, pattern: SparsityPattern) -> Tensor:
    """W (out, in) as a ``torch.sparse_csr`` tensor sharing ``values``."""
    idx = _indices(pattern)
    return _csr(idx["row_ptr"], idx["col_idx"], values, pattern.shape)


def weight_t_csr(values: Tensor, pattern: SparsityPattern) -> Tensor:
    """Wᵀ (in, out) as a ``torch.sparse_csr`` tensor (values copied into CSC order)."""
    idx = _indices(pattern)
    return _csr(
        idx["col_ptr"], idx["row_idx"], values.index_select(0, pattern.perm), pattern.shape[::-1]
    )


def forward(x: Tensor, values: Tensor, pattern: SparsityPattern, bias: Tensor | None) -> Tensor:
    w = weight_csr(values.contiguous(), pattern)
    if bias is not None and x.device.type == "cpu":  # MKL: bias fused, broadcast over B
        return torch.addmm(bias.unsqueeze(1), w, x.t()).t().contiguous()
    y = torch.mm(w, x.t()).t().contiguous()
    return y if bias is None else y.add_(bias)


def grad_input(grad_y: Tensor, values: Tensor, pattern: SparsityPattern) -> Tensor:
    return torch.mm(weight_t_csr(values.contiguous(), pattern), grad_y.t()).t().contiguous()


def grad_values(grad_y: Tensor, x: Tensor, pattern: SparsityPattern) -> Tensor:
    if pattern.nnz == 0:
        return x.new_zeros(0)
    key = f"torch_csr:zeros:{x.dtype}"
    zeros = pattern.cache.get(key)
    if zeros is None:
        zeros = pattern.cache[key] = weight_csr(x.new_zeros(pattern.nnz), pattern)
    return torch.sparse.sampled_addmm(zeros, grad_y.t(), x, beta=0.0).values()


@register("torch_csr", family="kernels")
class TorchCSRBackend(Backend):
    """torch.sparse CSR: ``addmm`` / ``mm`` for the SpMMs and ``sampled_addmm`` for the SDDMM
    (MKL on CPU, cuSPARSE on GPU): the library peer of our kernels.

    Source: PyTorch's torch.sparse CSR kernels (torch.sparse_csr_tensor,
    torch.sparse.sampled_addmm).
    """

    description = "torch.sparse CSR: addmm / mm (MKL or cuSPARSE), sampled_addmm for SDDMM"
    forward_impl = staticmethod(forward)
    grad_input_impl = staticmethod(grad_input)
    grad_values_impl = staticmethod(grad_values)
