"""Sparse compute kernels: a linear layer y = x Wᵀ + b whose weight W (out, in) has a fixed
sparsity pattern, with interchangeable backends (see docs/kernels.md).

Public API:

* :class:`SparsityPattern` — CSR / CSC index structure of W, built once from a bool mask;
* :func:`sparse_linear` — differentiable functional form;
* :class:`SparseLinear` — the ``nn.Module`` (``from_dense`` / ``to_dense``);
* :func:`convert_model` — swap a model's chosen ``nn.Linear`` layers for ``SparseLinear``;
* :data:`BACKENDS`, :func:`get_backend`, :func:`available_backends`, :class:`Backend`,
  :class:`BackendUnavailableError` — the backend registry: ``dense_mask`` (reference),
  ``torch_csr``, ``cpu`` (our C++ kernels), ``triton`` (our Triton kernels),
  ``semi_structured`` (2:4 on sparse tensor cores).
"""

from . import backends
from .backends import (
    Backend,
    BackendUnavailableError,
    available_backends,
    get_backend,
)
from .backends.semi_structured import check_two_four
from .pattern import SparsityPattern
from .sparse_linear import SparseLinear, convert_model, sparse_linear


def __getattr__(name: str):
    if name == "BACKENDS":  # the registry's backends, built on first use
        return backends.BACKENDS
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = [
    "BACKENDS",
    "Backend",
    "BackendUnavailableError",
    "SparseLinear",
    "SparsityPattern",
    "available_backends",
    "check_two_four",
    "convert_model",
    "get_backend",
    "sparse_linear",
]
