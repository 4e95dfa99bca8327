"""Triton kernels under the interpreter, tiny shapes. Not collected by default (no ``test_``
prefix): ``test_triton.py`` runs this file in a subprocess with ``TRITON_INTERPRET=1``, since
Triton fixes the mode of its standard library at ``import triton``. To run it directly:
``TRITON_INTERPRET=1 python -m pytest tests/kernels/triton_interpret_cases.py``.
"""

from __future__ import annotations

import os

import pytest
import torch

from sparsebench.kernels import get_backend, sparse_linear
from tests.kernels.conftest import make_case, tolerances

if os.environ.get("TRITON_INTERPRET") != "1":
    pytest.skip("needs TRITON_INTERPRET=1 set before triton is imported", allow_module_level=True)
pytest.importorskip("triton")


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=["f32", "f64"])
@pytest.mark.parametrize(
    ("n_out", "n_in", "batch", "density", "rows", "cols"),
    [
        pytest.param(7, 9, 5, 0.4, (2,), (3,), id="empty-rows-cols"),
        pytest.param(5, 40, 1, 0.9, (), (), id="batch1-long-rows"),
        pytest.param(4, 6, 3, 0.0, (), (), id="nnz0"),
        pytest.param(3, 4, 20, 0.5, (), (), id="two-batch-tiles"),
    ],
)
def test_triton_matches_dense(dtype, n_out, n_in, batch, density, rows, cols) -> None:
    c = make_case(n_out, n_in, batch, density, dtype, empty_rows=rows, empty_cols=cols)
    be, tol = get_backend("triton"), tolerances(dtype)
    y = be.forward(c.x, c.values, c.pattern, c.bias)
    torch.testing.assert_close(y, c.x @ c.weight.t() + c.bias, **tol)
    gx = be.grad_input(c.grad_y, c.values, c.pattern)
    torch.testing.assert_close(gx, c.grad_y @ c.weight, **tol)
    expected = (c.grad_y.t() @ c.x).reshape(-1)[c.pattern.flat_index]
    torch.testing.assert_close(be.grad_values(c.grad_y, c.x, c.pattern), expected, **tol)


def test_triton_non_contiguous_inputs() -> None:
    c = make_case(6, 8, 3, 0.5, torch.float64, seed=2)
    be = get_backend("triton")
    x_t = c.x.t().contiguous().t()
    gy_t = c.grad_y.t().contiguous().t()
    torch.testing.assert_close(be.forward(x_t, c.values, c.pattern), c.x @ c.weight.t())
    torch.testing.assert_close(be.grad_input(gy_t, c.values, c.pattern), c.grad_y @ c.weight)


def test_triton_gradcheck() -> None:
    c = make_case(4, 5, 2, 0.5, torch.float64, seed=1)
    x = c.x.clone().requires_grad_()
    v = c.values.clone().requires_grad_()
    b = c.bias.clone().requires_grad_()
    assert torch.autograd.gradcheck(
        lambda x, v, b: sparse_linear(x, v, c.pattern, b, "triton"), (x, v, b)
    )
