"""Every CPU-capable backend computes forward, grad_input and grad_values as dense_mask does,
on random shapes with empty rows/columns, nnz = 0, batch 1, batch tiles with remainders, the
parallel path, and non-contiguous inputs; plus the registry's errors."""

from __future__ import annotations

import pytest
import torch

from sparsebench.kernels import BACKENDS, BackendUnavailableError, get_backend
from tests.kernels.conftest import cpu_backend_params, make_case, tolerances

# (out, in, batch, density, empty rows, empty cols)
SHAPES = [
    pytest.param(13, 17, 5, 0.3, (2, 7), (3,), id="empty-rows-cols"),
    pytest.param(8, 8, 1, 0.5, (), (), id="batch1"),
    pytest.param(6, 10, 4, 0.0, (), (), id="nnz0"),
    pytest.param(1, 1, 3, 1.0, (), (), id="1x1"),
    pytest.param(40, 70, 130, 0.1, (0,), (69,), id="batch-tiles-130"),
    pytest.param(20, 300, 37, 0.2, (), (), id="long-rows-batch37"),
    pytest.param(256, 512, 64, 0.1, (5,), (9,), id="parallel"),
]


def _random_shapes(n: int, seed: int = 7) -> list:
    """n seeded random (out, in, batch, density) cells, each with one empty row and column:
    shapes the hand-picked list does not think of, reproducible run to run."""
    g = torch.Generator().manual_seed(seed)
    out = []
    for i in range(n):
        n_out, n_in = (int(v) for v in torch.randint(2, 200, (2,), generator=g))
        batch = int(torch.randint(1, 80, (1,), generator=g))
        density = float(torch.rand(1, generator=g)) * 0.5
        out.append(pytest.param(n_out, n_in, batch, density, (n_out - 1,), (0,), id=f"random{i}"))
    return out


SHAPES += _random_shapes(4)
DTYPES = [pytest.param(torch.float32, id="f32"), pytest.param(torch.float64, id="f64")]


@pytest.mark.parametrize("backend", cpu_backend_params())
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize(("n_out", "n_in", "batch", "density", "rows", "cols"), SHAPES)
def test_products_match_dense(backend, dtype, n_out, n_in, batch, density, rows, cols) -> None:
    c = make_case(n_out, n_in, batch, density, dtype, empty_rows=rows, empty_cols=cols)
    be, tol = get_backend(backend), tolerances(dtype)
    y = be.forward(c.x, c.values, c.pattern, c.bias)
    torch.testing.assert_close(y, c.x @ c.weight.t() + c.bias, **tol)
    torch.testing.assert_close(be.forward(c.x, c.values, c.pattern), c.x @ c.weight.t(), **tol)
    torch.testing.assert_close(
        be.grad_input(c.grad_y, c.values, c.pattern), c.grad_y @ c.weight, **tol
    )
    expected = (c.grad_y.t() @ c.x).reshape(-1)[c.pattern.flat_index]
    torch.testing.assert_close(be.grad_values(c.grad_y, c.x, c.pattern), expected, **tol)
    assert y.shape == (batch, n_out) and y.dtype == dtype


@pytest.mark.parametrize("backend", cpu_backend_params())
def test_non_contiguous_inputs(backend) -> None:
    c = make_case(24, 33, 9, 0.25, torch.float64, seed=3, empty_rows=(1,), empty_cols=(2,))
    be = get_backend(backend)
    x_t = c.x.t().contiguous().t()  # (B, in) view with strides (1, B)
    gy_t = c.grad_y.t().contiguous().t()
    values = torch.stack([c.values, torch.zeros_like(c.values)], 1)[:, 0]  # stride 2
    bias = torch.stack([c.bias, c.bias], 1)[:, 1]
    assert not (x_t.is_contiguous() or gy_t.is_contiguous() or values.is_contiguous())
    torch.testing.assert_close(
        be.forward(x_t, values, c.pattern, bias), c.x @ c.weight.t() + c.bias
    )
    torch.testing.assert_close(be.grad_input(gy_t, values, c.pattern), c.grad_y @ c.weight)
    expected = (c.grad_y.t() @ c.x).reshape(-1)[c.pattern.flat_index]
    torch.testing.assert_close(be.grad_values(gy_t, x_t, c.pattern), expected)
    # an expanded gradient (stride 0), as sum().backward() produces
    ones = torch.ones(1, 24, dtype=torch.float64).expand(9, 24)
    torch.testing.assert_close(
        be.grad_values(ones, c.x, c.pattern), (ones.t() @ c.x).reshape(-1)[c.pattern.flat_index]
    )


@pytest.mark.parametrize("backend", cpu_backend_params())
def test_empty_batch(backend) -> None:
    c = make_case(5, 6, 0, 0.5, torch.float32)
    be = get_backend(backend)
    assert be.forward(c.x, c.values, c.pattern, c.bias).shape == (0, 5)
    assert be.grad_input(c.grad_y, c.values, c.pattern).shape == (0, 6)
    torch.testing.assert_close(be.grad_values(c.grad_y, c.x, c.pattern), torch.zeros(c.pattern.nnz))


def test_shape_dtype_checks_name_the_problem() -> None:
    c = make_case(5, 6, 2, 0.5, torch.float32)
    be = get_backend("dense_mask")
    with pytest.raises(ValueError, match=r"x must have shape \(B, 6\)"):
        be.forward(c.x[:, :5], c.values, c.pattern)
    with pytest.raises(ValueError, match="values must have shape"):
        be.forward(c.x, c.values[:-1], c.pattern)
    with pytest.raises(ValueError, match="dtype"):
        be.forward(c.x.double(), c.values, c.pattern)
    with pytest.raises(ValueError, match="bias"):
        be.forward(c.x, c.values, c.pattern, c.bias[:3])
    with pytest.raises(ValueError, match="rows"):
        be.grad_values(c.grad_y, c.x[:1], c.pattern)


def test_unknown_backend_lists_allowed_names() -> None:
    with pytest.raises(ValueError) as err:
        get_backend("sparse_magic")
    assert "sparse_magic" in str(err.value)
    for name in BACKENDS:
        assert name in str(err.value)


@pytest.mark.skipif(torch.cuda.is_available(), reason="a GPU is present: semi_structured may run")
def test_unavailable_backend_raises_runtime_error_with_reason() -> None:
    with pytest.raises(RuntimeError, match="semi_structured.*needs a CUDA GPU") as err:
        get_backend("semi_structured")
    assert isinstance(err.value, BackendUnavailableError)
    assert get_backend("semi_structured", require_available=False).name == "semi_structured"


def test_cpu_backend_rejects_other_dtypes() -> None:
    if not BACKENDS["cpu"].available()[0]:
        pytest.skip(BACKENDS["cpu"].available()[1])
    c = make_case(4, 4, 2, 0.5, torch.float32)
    with pytest.raises(ValueError, match="float32 and float64"):
        get_backend("cpu").forward(c.x.half(), c.values.half(), c.pattern)
