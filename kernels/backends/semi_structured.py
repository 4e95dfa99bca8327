"""``semi_structured``: 2:4 sparse tensor cores through ``torch.sparse.to_sparse_semi_structured``.

2:4 ("semi-structured", Mishra et al. 2021, "Accelerating Sparse Deep Neural Networks",
arXiv:2104.08378): in every group of 4 consecutive weights along the input dimension at most 2
are nonzero. NVIDIA GPUs of compute capability >= 8.0 (Ampere and later) multiply such a
compressed weight at up to 2× the dense tensor-core rate, through cuSPARSELt (float16,
bfloat16) or CUTLASS (selected by ``SparseSemiStructuredTensor._FORCE_CUTLASS``).

* forward: ``F.linear(x, to_sparse_semi_structured(W), b)``; the compressed weight is cached per
  version of ``values``, so inference compresses once and training once per step.
* grad_input = grad_y W contracts over the *output* dimension, along which the mask need not
  be 2:4 (that would need a transposable mask, Hubara et al. 2021, NeurIPS), and grad_values is
  a dense product gathered on the pattern: both run dense on the GPU.

float16 / bfloat16 only (float32 through CUTLASS needs 1:2 sparsity), and both dimensions must
be multiples of the library's tile (e.g. 16 × 16 with cuSPARSELt); the errors say which. Not
runnable without a GPU: ``available()`` says why, and :func:`check_two_four` (the mask check)
runs anywhere.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor

from sparsebench.suite.registry import register

from ..pattern import SparsityPattern
from . import dense_mask
from .base import Backend

SUPPORTED_DTYPES = (torch.float16, torch.bfloat16)


def check_two_four(mask_or_pattern: Tensor | SparsityPattern) -> None:
    """Raise ValueError unless the pattern is 2:4 along the input dimension: ``in_features``
    divisible by 4 and at most 2 nonzeros in each group ``W[o, 4j:4j+4]``. Needs no GPU.

    Args:
        mask_or_pattern: a bool mask (out, in) or a :class:`SparsityPattern`.
    """
    pattern = (
        mask_or_pattern
        if isinstance(mask_or_pattern, SparsityPattern)
        else SparsityPattern.from_mask(mask_or_pattern)
    )
    n_out, n_in = pattern.shape
    if n_in % 4:
        raise ValueError(
            f"2:4 sparsity needs in_features divisible by 4, got {n_in} (shape {pattern.shape})"
        )
    if pattern.nnz == 0:
        return
    groups = torch.bincount(pattern.flat_index // 4, minlength=n_out * n_in // 4)
    bad = (groups > 2).nonzero()
    if bad.numel():
        g = int(bad[0])
        o, j = divmod(g, n_in // 4)
        raise ValueError(
            f"mask is not 2:4 along the input dimension: {bad.numel()} group(s) of 4 hold more "
            f"than 2 nonzeros, first at row {o}, columns {4 * j}..{4 * j + 3} "
            f"({int(groups[g])} nonzeros)"
        )


def available() -> tuple[bool, str]:
    if not torch.cuda.is_available():
        return False, "2:4 semi-structured sparsity needs a CUDA GPU (none found)"
    major, minor = torch.cuda.get_device_capability()
    if major < 8:
        return False, (
            f"2:4 semi-structured sparsity needs compute capability >= 8.0, "
            f"this GPU has {major}.{minor}"
        )
    return True, ""


def _check_supported(x: Tensor, pattern: SparsityPattern) -> None:
    if x.device.type != "cuda":
        raise ValueError(f"the semi_structured backend needs CUDA tensors, got {x.device}")
    if x.dtype not in SUPPORTED_DTYPES:
        raise ValueError(
            f"the semi_structured backend supports float16 and bfloat16, got {x.dtype} "
            "(convert the layer with .half() / .bfloat16(), or use another backend)"
        )
    from torch.sparse import SparseSemiStructuredTensor as S

    cls = (
        torch.sparse.SparseSemiStructuredTensorCUTLASS
        if S._FORCE_CUTLASS
        else torch.sparse.SparseSemiStructuredTensorCUSPARSELT
    )
    c = cls._DTYPE_SHAPE_CONSTRAINTS[x.dtype]
    n_out, n_in = pattern.shape
    if n_out % c.sparse_min_rows or n_in % c.sparse_min_cols or not (n_out and n_in):
        raise ValueError(
            f"{cls.__name__} needs a weight shape that is a positive multiple of "
            f"({c.sparse_min_rows}, {c.sparse_min_cols}) for {x.dtype}, got {pattern.shape}"
        )


def _compressed(values: Tensor, pattern: SparsityPattern) -> Tensor:
    # Compression costs a pass over the dense weight: redo it only when values changed.
    key = (values.data_ptr(), values._version, values.dtype)
    cached = pattern.cache.get("semi_structured")
    if cached is None or cached[0] != key:
        from torch.sparse import to_sparse_semi_structured

        w = to_sparse_semi_structured(pattern.scatter(values.detach()).contiguous())
        cached = pattern.cache["semi_structured"] = (key, w)
    return cached[1]


def forward(x: Tensor, values: Tensor, pattern: SparsityPattern, bias: Tensor | None) -> Tensor:
    _check_supported(x, pattern)
    if not pattern.cache.get("two_four_checked"):
        check_two_four(pattern)
        pattern.cache["two_four_checked"] = True
    return F.linear(x, _compressed(values, pattern), bias)


@register("semi_structured", family="kernels")
class SemiStructuredBackend(Backend):
    """2:4 semi-structured sparsity on sparse tensor cores
    (``torch.sparse.to_sparse_semi_structured``), float16/bfloat16 on GPUs with sm >= 80.

    Source: Mishra et al. 2021, "Accelerating Sparse Deep Neural Networks", arXiv:2104.08378
    (NVIDIA Ampere 2:4); PyTorch's semi-structured sparse tensors.
    """

    description = "2:4 sparse tensor cores (torch.sparse.to_sparse_semi_structured), GPU sm >= 80"
    needs_gpu = True
    unstructured = False
    forward_impl = staticmethod(forward)
    # The mask is 2:4 along the inputs only, not along the outputs that grad_input contracts
    # over, and grad_values is a dense product: both run as the dense_mask reference does.
    grad_input_impl = staticmethod(dense_mask.grad_input)
    grad_values_impl = staticmethod(dense_mask.grad_values)
    available = staticmethod(available)
    check_pattern = staticmethod(check_two_four)
