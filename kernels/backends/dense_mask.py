"""``dense_mask``: the reference. Scatter the values into a dense (out, in) weight (zeros off
the pattern) and use dense BLAS; gradients are dense products, gathered on the pattern.

This is what a masked dense layer costs today: O(out · in · B) work whatever the sparsity.
"""

from __future__ import annotations

import torch.nn.functional as F
from torch import Tensor

from ..pattern import SparsityPattern
from .base import Backend


def forward(x: Tensor, values: Tensor, pattern: SparsityPattern, bias: Tensor | None) -> Tensor:
    return F.linear(x, pattern.scatter(values), bias)


def grad_input(grad_y: Tensor, values: Tensor, pattern: SparsityPattern) -> Tensor:
    return grad_y @ pattern.scatter(values)


def grad_values(grad_y: Tensor, x: Tensor, pattern: SparsityPattern) -> Tensor:
    return (grad_y.t() @ x).reshape(-1).index_select(0, pattern.flat_index)


BACKEND = Backend(
    name="dense_mask",
    description="reference: dense weight with zeros off the pattern, dense BLAS",
    forward_impl=forward,
    grad_input_impl=grad_input,
    grad_values_impl=grad_values,
)
