"""``dense_mask``: the reference. Scatter the values into a dense (out, in) weight (zeros off
the pattern) and use dense BLAS; gradients are dense products, gathered on the pattern.

This is what a masked dense layer costs today: O(out · in · B) work whatever the sparsity.
"""

from __future__ import annotations

import torch.nn.functional as F
from torch import Tensor

from sparsebench.suite.registry import register

from ..pattern import SparsityPattern
from .base import Backend


def forward(x: Tensor, values: Tensor, pattern: SparsityPattern, bias: Tensor | None) -> Tensor:
    return F.linear(x, pattern.scatter(values), bias)


def grad_input(grad_y: Tensor, values: Tensor, pattern: SparsityPattern) -> Tensor:
    return grad_y @ pattern.scatter(values)


def grad_values(grad_y: Tensor, x: Tensor, pattern: SparsityPattern) -> Tensor:
    return (grad_y.t() @ x).reshape(-1).index_select(0, pattern.flat_index)


@register("dense_mask", family="kernels")
class DenseMaskBackend(Backend):
    """Reference: scatter the values into a dense weight (zeros off the pattern) and use dense
    BLAS, as masked dense layers (jaxpruner, torch.nn.utils.prune) do today.

    Source: the dense × mask formulation of sparse training libraries (e.g. Evci et al. 2020's
    RigL code); O(out · in · B) work whatever the sparsity.
    """

    description = "reference: dense weight with zeros off the pattern, dense BLAS"
    forward_impl = staticmethod(forward)
    grad_input_impl = staticmethod(grad_input)
    grad_values_impl = staticmethod(grad_values)
