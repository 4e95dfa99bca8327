"""The backend interface: three products of a sparse linear layer y = x Wᵀ + b.

W (out, in) has a fixed :class:`~sparsebench.kernels.pattern.SparsityPattern`; its nonzeros are
``values`` (nnz,) in CSR order. Every backend computes, for a batch of B rows:

* ``forward(x (B, in), values, pattern, bias (out,) | None) -> y (B, out)`` = x Wᵀ + b
  (an SpMM: sparse × dense matrix product);
* ``grad_input(grad_y (B, out), values, pattern) -> (B, in)`` = grad_y W (SpMM with Wᵀ);
* ``grad_values(grad_y (B, out), x (B, in), pattern) -> (nnz,)`` = (grad_yᵀ x) sampled on the
  pattern, CSR order (an SDDMM, "sampled dense-dense matrix multiplication", Nisa et al. 2018,
  HiPC).

A :class:`Backend` subclass bundles one implementation of each with
``available() -> (ok, reason)`` and an optional pattern check; its public methods validate
shapes, dtypes and devices once, so the implementations can assume 2-D inputs of matching
dtype on the pattern's device.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import Tensor

from sparsebench.suite.method import Method, NoParams

from ..pattern import SparsityPattern, check_values

ForwardFn = Callable[[Tensor, Tensor, SparsityPattern, Tensor | None], Tensor]
GradInputFn = Callable[[Tensor, Tensor, SparsityPattern], Tensor]
GradValuesFn = Callable[[Tensor, Tensor, SparsityPattern], Tensor]


class BackendUnavailableError(RuntimeError):
    """A backend cannot run here (no GPU, no compiler, ...); the message says why."""


def on_device(pattern: SparsityPattern, device: torch.device) -> SparsityPattern:
    """``pattern`` on ``device``, the moved copy cached on the pattern (moved once)."""
    if pattern.device == device:
        return pattern
    key = f"on_device:{device}"
    moved = pattern.cache.get(key)
    if moved is None:
        moved = pattern.cache[key] = pattern.to(device)
    return moved


def _check_dense(name: str, t: Tensor, cols: int, values: Tensor) -> None:
    if not isinstance(t, Tensor) or t.dim() != 2 or t.shape[1] != cols:
        shape = tuple(t.shape) if isinstance(t, Tensor) else type(t).__name__
        raise ValueError(f"{name} must have shape (B, {cols}), got {shape}")
    if t.dtype != values.dtype:
        raise ValueError(f"{name} dtype {t.dtype} != values dtype {values.dtype}")
    if t.device != values.device:
        raise ValueError(f"{name} is on {t.device} but values are on {values.device}")


class Backend(Method):
    """One implementation of the three products; see the module docstring.

    A backend is a subclass registered in the ``kernels`` method family
    (``@register(name, family="kernels")``, with ``Params = NoParams``), so that specs, schema
    enums and listings take its name from the one registry. Class attributes:

    Attributes:
        description: one line for listings and docs.
        unstructured: whether any sparsity pattern works (False for 2:4 only); only such
            backends can run the changing masks of a dst/pruning job (the ``execution`` key).
        needs_gpu: whether it runs only on a CUDA GPU (a cell using it asks a cluster for one).
        forward_impl, grad_input_impl, grad_values_impl: the three products (static).
    """

    Params = NoParams
    description: str = ""
    unstructured: bool = True
    needs_gpu: bool = False
    forward_impl: ForwardFn
    grad_input_impl: GradInputFn
    grad_values_impl: GradValuesFn

    @property
    def name(self) -> str:
        return type(self).method_name

    @staticmethod
    def available() -> tuple[bool, str]:
        """``(ok, reason)``: whether the backend can run here; ``reason`` says why not."""
        return True, ""

    @staticmethod
    def check_pattern(pattern: SparsityPattern) -> None:
        """Raise ValueError if the backend cannot use ``pattern`` (e.g. not 2:4)."""
        return None

    def __repr__(self) -> str:
        return f"<sparse backend {self.name!r}>"

    def require(self) -> None:
        """Raise :class:`BackendUnavailableError` (a RuntimeError) with the reason if this
        backend cannot run here."""
        ok, reason = self.available()
        if not ok:
            raise BackendUnavailableError(f"backend {self.name!r} is unavailable: {reason}")

    def forward(
        self, x: Tensor, values: Tensor, pattern: SparsityPattern, bias: Tensor | None = None
    ) -> Tensor:
        """y (B, out) = x (B, in) Wᵀ + bias, W = pattern filled with ``values`` (nnz,).

        Raises:
            ValueError: shapes, dtypes or devices do not match.
            BackendUnavailableError: the backend cannot run here.
        """
        check_values(values, pattern)
        _check_dense("x", x, pattern.in_features, values)
        if bias is not None and (bias.shape != (pattern.out_features,) or bias.dtype != x.dtype):
            raise ValueError(
                f"bias must have shape ({pattern.out_features},) and dtype {x.dtype}, "
                f"got {tuple(bias.shape)} {bias.dtype}"
            )
        self.require()
        return self.forward_impl(x, values, on_device(pattern, x.device), bias)

    def grad_input(self, grad_y: Tensor, values: Tensor, pattern: SparsityPattern) -> Tensor:
        """grad_x (B, in) = grad_y (B, out) W.

        Raises:
            ValueError: shapes, dtypes or devices do not match.
            BackendUnavailableError: the backend cannot run here.
        """
        check_values(values, pattern)
        _check_dense("grad_y", grad_y, pattern.out_features, values)
        self.require()
        return self.grad_input_impl(grad_y, values, on_device(pattern, grad_y.device))

    def grad_values(self, grad_y: Tensor, x: Tensor, pattern: SparsityPattern) -> Tensor:
        """grad_values (nnz,) = (grad_yᵀ x)[o, i] for each nonzero (o, i), CSR order.

        Raises:
            ValueError: shapes, dtypes or devices do not match.
            BackendUnavailableError: the backend cannot run here.
        """
        _check_dense("x", x, pattern.in_features, grad_y)
        _check_dense("grad_y", grad_y, pattern.out_features, x)
        if grad_y.shape[0] != x.shape[0]:
            raise ValueError(f"grad_y has {grad_y.shape[0]} rows but x has {x.shape[0]}")
        self.require()
        return self.grad_values_impl(grad_y, x, on_device(pattern, x.device))


__all__ = ["Backend", "BackendUnavailableError", "on_device"]
