"""Backends on a CUDA GPU against dense_mask: our compiled Triton kernels, torch.sparse (cuSPARSE)
and the dense reference itself. Skipped without a GPU."""

from __future__ import annotations

import pytest
import torch

from sparsebench.kernels import SparseLinear, get_backend, sparse_linear
from tests.kernels.conftest import make_case

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")

GPU_BACKENDS = ["dense_mask", "torch_csr", "triton"]
TOL = {
    torch.float16: {"rtol": 2e-2, "atol": 2e-2},
    torch.float32: {"rtol": 1e-4, "atol": 1e-4},
    torch.float64: {"rtol": 1e-10, "atol": 1e-10},
}


@pytest.mark.parametrize("backend", GPU_BACKENDS)
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=["f32", "f64"])
@pytest.mark.parametrize(
    ("n_out", "n_in", "batch", "density"),
    [(13, 17, 5, 0.3), (8, 8, 1, 0.5), (6, 10, 4, 0.0), (300, 500, 130, 0.05)],
)
def test_gpu_products_match_dense(backend, dtype, n_out, n_in, batch, density) -> None:
    c = make_case(n_out, n_in, batch, density, dtype, empty_rows=(0,), empty_cols=(1,))
    dev = torch.device("cuda")
    w, x, gy, b = (t.to(dev) for t in (c.weight, c.x, c.grad_y, c.bias))
    p, v = c.pattern.to(dev), c.values.to(dev)
    be, tol = get_backend(backend), TOL[dtype]
    torch.testing.assert_close(be.forward(x, v, p, b), x @ w.t() + b, **tol)
    torch.testing.assert_close(be.grad_input(gy, v, p), gy @ w, **tol)
    expected = (gy.t() @ x).reshape(-1)[p.flat_index]
    torch.testing.assert_close(be.grad_values(gy, x, p), expected, **tol)


def test_triton_half_precision_and_gradcheck_on_gpu() -> None:
    c = make_case(64, 96, 32, 0.1, torch.float16, seed=3)
    dev = torch.device("cuda")
    w, x = c.weight.to(dev), c.x.to(dev)
    y = get_backend("triton").forward(x, c.values.to(dev), c.pattern.to(dev))
    torch.testing.assert_close(y, (x.float() @ w.float().t()).half(), **TOL[torch.float16])

    d = make_case(6, 7, 3, 0.4, torch.float64, seed=2)
    xs = d.x.to(dev).requires_grad_()
    vs = d.values.to(dev).requires_grad_()
    bs = d.bias.to(dev).requires_grad_()
    p = d.pattern.to(dev)
    assert torch.autograd.gradcheck(
        lambda a, v, b: sparse_linear(a, v, p, b, "triton"), (xs, vs, bs)
    )


def test_sparse_linear_module_on_gpu() -> None:
    torch.manual_seed(0)
    linear = torch.nn.Linear(64, 32).cuda()
    mask = torch.rand(32, 64, device="cuda") < 0.2
    for backend in GPU_BACKENDS:
        layer = SparseLinear.from_dense(linear, mask, backend)
        x = torch.randn(4, 64, device="cuda")
        torch.testing.assert_close(layer(x), layer.to_dense()(x), rtol=1e-4, atol=1e-4)
