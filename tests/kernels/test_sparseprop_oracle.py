"""Cross-check against SparseProp (Nikdan et al., ICML 2023; PyPI ``sparseprop`` 0.1.14, the
``oracles`` extra): the same CSR weights, bias and inputs give the same output and the same
gradients of input, nonzero values and bias under each CPU backend of ours.

Definitional differences: none in the maths. SparseProp builds its pattern from the nonzeros
of a dense weight (scipy's CSR, row-major like ours), so the weights here are nonzero on the
whole mask; it computes in float32 only, so the comparison is in float32.
"""

from __future__ import annotations

import pytest
import torch

from sparsebench.kernels import SparseLinear
from tests.kernels.conftest import cpu_backend_params, make_case
from tests.oracle import peer

sparseprop_modules = peer("sparseprop.modules")


def _theirs(case):
    bias = torch.nn.Parameter(case.bias.clone())
    return sparseprop_modules.SparseLinear(case.weight.clone(), bias=bias)


# Batch and sizes multiples of SparseProp's transpose block (its blocked-transpose path) and not.
@pytest.mark.parametrize("shape", [(48, 64, 32), (13, 29, 7)], ids=["blocked", "ragged"])
@pytest.mark.parametrize("backend", cpu_backend_params())
def test_forward_and_gradients_match_sparseprop(backend, shape):
    n_out, n_in, batch = shape
    case = make_case(n_out, n_in, batch, density=0.2, dtype=torch.float32, seed=4)
    assert (case.values != 0).all()  # SparseProp's pattern is the nonzeros of the weight

    ours = SparseLinear(case.pattern, bias=True, backend=backend)
    with torch.no_grad():
        ours.values.copy_(case.values)
        ours.bias.copy_(case.bias)
    theirs = _theirs(case)
    assert theirs.W_val.numel() == case.pattern.nnz

    x_ours = case.x.clone().requires_grad_()
    x_theirs = case.x.clone().requires_grad_()
    y_ours, y_theirs = ours(x_ours), theirs(x_theirs)
    torch.testing.assert_close(y_ours, y_theirs, rtol=1e-5, atol=1e-5)

    y_ours.backward(case.grad_y)
    y_theirs.backward(case.grad_y)
    torch.testing.assert_close(x_ours.grad, x_theirs.grad, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(ours.values.grad, theirs.W_val.grad, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(ours.bias.grad, theirs.bias.grad, rtol=1e-5, atol=1e-5)
