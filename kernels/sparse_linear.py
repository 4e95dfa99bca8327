"""Sparse linear layer y = x Wᵀ + b with W (out, in) on a fixed sparsity pattern.

* :func:`sparse_linear` is the differentiable functional form (a ``torch.autograd.Function``
  whose backward returns grad_x = grad_y W, grad_values = (grad_yᵀ x) on the pattern and
  grad_b = Σ grad_y, each from the chosen backend);
* :class:`SparseLinear` is the ``nn.Module`` (values as an (nnz,) Parameter, pattern as buffers);
* :func:`convert_model` swaps chosen ``nn.Linear`` layers of a model for ``SparseLinear``.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping

import torch
from torch import Tensor, nn
from torch.autograd.function import once_differentiable

from .backends import Backend, get_backend
from .pattern import TENSOR_FIELDS, SparsityPattern


class _SparseLinearFunction(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, values, bias, pattern, backend, observer):  # type: ignore[override]
        ctx.save_for_backward(x, values)
        ctx.pattern, ctx.backend, ctx.has_bias = pattern, backend, bias is not None
        ctx.observer = observer
        return backend.forward(x, values, pattern, bias)

    @staticmethod
    @once_differentiable
    def backward(ctx, grad_y):  # type: ignore[override]
        x, values = ctx.saved_tensors
        backend: Backend = ctx.backend
        if ctx.observer is not None:  # e.g. RigL's growth scores, from the operands at hand
            ctx.observer(grad_y, x)
        grad_x = grad_values = grad_bias = None
        if ctx.needs_input_grad[0]:
            grad_x = backend.grad_input(grad_y, values, ctx.pattern)
        if ctx.needs_input_grad[1]:
            grad_values = backend.grad_values(grad_y, x, ctx.pattern)
        if ctx.has_bias and ctx.needs_input_grad[2]:
            grad_bias = grad_y.sum(0)
        return grad_x, grad_values, grad_bias, None, None, None


def sparse_linear(
    x: Tensor,
    values: Tensor,
    pattern: SparsityPattern,
    bias: Tensor | None = None,
    backend: str | Backend = "dense_mask",
    observer: Callable[[Tensor, Tensor], None] | None = None,
) -> Tensor:
    """y = x Wᵀ + bias, W (out, in) holding ``values`` on ``pattern``; differentiable in x,
    values and bias (first order).

    Args:
        x: (..., in) activations; leading dims are flattened into one batch dim and restored.
        values: (nnz,) nonzeros of W in CSR order (``pattern.gather(weight)``).
        pattern: the sparsity pattern of W.
        bias: (out,) or None.
        backend: a name in ``BACKENDS`` or a :class:`Backend`.
        observer: called in the backward pass as ``observer(grad_y, x)`` (both 2-D: the
            batch flattened), e.g. to score connections from the dense gradient grad_yᵀ x
            without forming it.

    Returns:
        (..., out), the dtype and device of x.

    Raises:
        ValueError: unknown backend name, or shapes / dtypes / devices that do not match.
        BackendUnavailableError (RuntimeError): the backend cannot run on this machine.
    """
    be = get_backend(backend)
    if x.dim() == 0 or x.shape[-1] != pattern.in_features:
        raise ValueError(f"x must have shape (..., {pattern.in_features}), got {tuple(x.shape)}")
    lead = x.shape[:-1]
    x2 = x.reshape(-1, pattern.in_features)
    y = _SparseLinearFunction.apply(x2, values, bias, pattern, be, observer)
    return y.reshape(*lead, pattern.out_features)


class SparseLinear(nn.Module):
    """Linear layer y = x Wᵀ + b storing only the nnz weights of a fixed pattern.

    Args:
        mask: bool (out_features, in_features) tensor (True = weight kept) or a
            :class:`SparsityPattern`.
        bias: learn an additive bias (out_features,).
        backend: name of the backend computing the products (see ``BACKENDS``).
        device, dtype: of the parameters (the pattern's index buffers follow ``device``).

    Attributes:
        values: Parameter (nnz,), the kept weights in CSR order (row-major order of the mask).
        bias: Parameter (out_features,) or None.
        backend: backend name; assigning it checks the name, availability and pattern.
        backward_observer: None, or a callable given (grad_y, x) in every backward pass (a
            topology update's growth scores; :mod:`.topology`).

    Initialization matches ``nn.Linear`` (U(-1/√in, 1/√in) for weights and bias). The pattern's
    index tensors are buffers, so ``.to()`` moves them and ``state_dict`` saves them; loading a
    state dict takes its pattern and nnz, whatever the module was built with (checked as the
    pattern is rebuilt). An optimizer built before such a load holds the old values Parameter.

    Raises (constructor and ``backend`` assignment):
        ValueError: unknown backend, or a pattern the backend cannot use (e.g. not 2:4).
        BackendUnavailableError (RuntimeError): the backend cannot run on this machine.
    """

    def __init__(
        self,
        mask: Tensor | SparsityPattern,
        bias: bool = True,
        backend: str = "dense_mask",
        *,
        device: torch.device | str | None = None,
        dtype: torch.dtype | None = None,
    ) -> None:
        super().__init__()
        pattern = mask if isinstance(mask, SparsityPattern) else SparsityPattern.from_mask(mask)
        if device is not None:
            pattern = pattern.to(device)
        self.out_features, self.in_features = pattern.shape
        for name, t in pattern.tensors().items():
            self.register_buffer(name, t)
        self._pattern_key: tuple | None = None
        self.backward_observer: Callable[[Tensor, Tensor], None] | None = None
        self._pattern: SparsityPattern | None = None
        factory = {"device": pattern.device, "dtype": dtype}
        self.values = nn.Parameter(torch.empty(pattern.nnz, **factory))
        self.bias = nn.Parameter(torch.empty(self.out_features, **factory)) if bias else None
        self._backend = ""
        self.backend = backend
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """nn.Linear's default: U(-1/√in, 1/√in) (kaiming_uniform with a=√5), bias alike."""
        bound = 1.0 / math.sqrt(self.in_features) if self.in_features else 0.0
        with torch.no_grad():
            self.values.uniform_(-bound, bound)
            if self.bias is not None:
                self.bias.uniform_(-bound, bound)

    @property
    def pattern(self) -> SparsityPattern:
        """The :class:`SparsityPattern` over the current buffers (rebuilt, with fresh backend
        caches, only when a buffer was moved or overwritten)."""
        tensors = {k: getattr(self, k) for k in TENSOR_FIELDS}
        key = tuple((t.data_ptr(), t._version, t.device) for t in tensors.values())
        if self._pattern is None or key != self._pattern_key:
            self._pattern = SparsityPattern.from_tensors(
                (self.out_features, self.in_features), tensors
            )
            self._pattern_key = key
        return self._pattern

    @property
    def backend(self) -> str:
        return self._backend

    @backend.setter
    def backend(self, name: str) -> None:
        be = get_backend(name, require_available=False)
        be.check_pattern(self.pattern)
        be.require()
        self._backend = be.name

    @property
    def nnz(self) -> int:
        return self.values.numel()

    @property
    def density(self) -> float:
        """nnz / (out_features · in_features)."""
        return self.pattern.density

    def forward(self, x: Tensor) -> Tensor:
        """(..., in_features) -> (..., out_features)."""
        return sparse_linear(
            x, self.values, self.pattern, self.bias, self._backend, self.backward_observer
        )

    def dense_weight(self) -> Tensor:
        """W (out_features, in_features), zeros off the pattern (differentiable in values)."""
        return self.pattern.scatter(self.values)

    @classmethod
    def from_dense(
        cls, linear: nn.Linear, mask: Tensor | None = None, backend: str = "dense_mask"
    ) -> SparseLinear:
        """A SparseLinear with ``linear``'s weights on ``mask`` (its bias, dtype and device).

        Args:
            linear: the dense layer (not modified).
            mask: bool (out, in); None keeps the nonzeros of ``linear.weight``.
            backend: backend name.

        Raises:
            TypeError: ``linear`` is not an ``nn.Linear``.
            ValueError: ``mask`` does not have the weight's shape; bad backend / pattern.
            BackendUnavailableError (RuntimeError): the backend cannot run here.
        """
        if not isinstance(linear, nn.Linear):
            raise TypeError(f"from_dense takes an nn.Linear, got {type(linear).__name__}")
        w = linear.weight.detach()
        if mask is None:
            mask = w != 0
        elif tuple(mask.shape) != tuple(w.shape):
            raise ValueError(f"mask shape {tuple(mask.shape)} != weight shape {tuple(w.shape)}")
        layer = cls(
            mask.to(w.device),
            bias=linear.bias is not None,
            backend=backend,
            device=w.device,
            dtype=w.dtype,
        )
        with torch.no_grad():
            layer.values.copy_(layer.pattern.gather(w))
            if linear.bias is not None:
                layer.bias.copy_(linear.bias.detach())
        return layer

    def _load_from_state_dict(
        self, state_dict, prefix, local_metadata, strict, missing_keys, unexpected_keys, errors
    ):
        """Take a checkpoint's pattern whatever its nnz (a topology update may have changed
        it since this module was built): the values and the index buffers are resized to the
        checkpoint's before the usual copy, and the pattern is checked as it is rebuilt."""
        stored = {k: state_dict.get(prefix + k) for k in (*TENSOR_FIELDS, "values")}
        if all(isinstance(t, Tensor) for t in stored.values()):
            shape = (self.out_features, self.in_features)
            _check_stored_pattern(shape, stored, prefix)
            for name in TENSOR_FIELDS:
                if getattr(self, name).shape != stored[name].shape:
                    setattr(self, name, torch.empty_like(stored[name], device=self.row_ptr.device))
            if self.values.shape != stored["values"].shape:
                self.values = nn.Parameter(
                    self.values.new_empty(stored["values"].shape),
                    requires_grad=self.values.requires_grad,
                )
        super()._load_from_state_dict(
            state_dict, prefix, local_metadata, strict, missing_keys, unexpected_keys, errors
        )

    def to_dense(self) -> nn.Linear:
        """An ``nn.Linear`` with W (zeros off the pattern) and the bias; same dtype/device."""
        linear = nn.Linear(
            self.in_features,
            self.out_features,
            bias=self.bias is not None,
            device=self.values.device,
            dtype=self.values.dtype,
        )
        with torch.no_grad():
            linear.weight.copy_(self.dense_weight())
            if self.bias is not None:
                linear.bias.copy_(self.bias)
        return linear

    def __getstate__(self) -> dict:
        # The cached pattern holds backend caches (e.g. compressed GPU weights): rebuild it.
        state = super().__getstate__()
        state = dict(state)
        state["_pattern"], state["_pattern_key"] = None, None
        return state

    def extra_repr(self) -> str:
        return (
            f"in_features={self.in_features}, out_features={self.out_features}, "
            f"nnz={self.nnz}, density={self.density:.4f}, bias={self.bias is not None}, "
            f"backend={self._backend}"
        )


def _check_stored_pattern(shape: tuple[int, int], stored: dict[str, Tensor], prefix: str) -> None:
    """Raise ValueError unless a checkpoint's pattern buffers are exactly what its flat indices
    define (dtype included) and its values are one float per connection: the kernels index
    without bounds checks, so a corrupt or hand-edited buffer must not reach them. O(nnz log
    nnz), at load only."""
    flat = stored["flat_index"]
    try:
        ref = SparsityPattern.from_flat(shape, flat)
    except ValueError as e:
        raise ValueError(f"checkpoint {prefix}flat_index: {e}") from None
    for name, t in ref.tensors().items():
        got = stored[name]
        if got.dtype != t.dtype or not torch.equal(got.to(t.device), t):
            raise ValueError(
                f"checkpoint {prefix}{name} ({got.dtype}, {tuple(got.shape)}) is not the one "
                f"its flat_index defines ({t.dtype}, {tuple(t.shape)}): a corrupt or edited "
                "pattern is refused"
            )
    values = stored["values"]
    if values.dim() != 1 or values.numel() != ref.nnz or not values.dtype.is_floating_point:
        raise ValueError(
            f"checkpoint {prefix}values must be a float vector of the pattern's nnz "
            f"({ref.nnz},), got {values.dtype} {tuple(values.shape)}"
        )


def convert_model(
    model: nn.Module, masks: Mapping[str, Tensor | None], backend: str = "dense_mask"
) -> nn.Module:
    """Replace, in place, each ``nn.Linear`` named in ``masks`` by ``SparseLinear.from_dense``
    with that mask; layers whose mask is None stay ``nn.Linear``. Returns ``model``.

    Args:
        model: the model; names are those of ``model.named_modules()`` (e.g. ``"fc1"``,
            ``"encoder.0.proj"``).
        masks: name -> bool mask of the layer's weight shape (True = kept), or None.
        backend: backend name for every converted layer.

    Raises:
        ValueError: a name is not a submodule of ``model`` (the message lists the Linear
            layers), or a mask has the wrong shape; bad backend name / pattern.
        TypeError: a named submodule is not an ``nn.Linear``.
        BackendUnavailableError (RuntimeError): the backend cannot run here.
    """
    get_backend(backend)  # fail before touching the model
    modules = dict(model.named_modules())
    new: dict[str, SparseLinear] = {}
    for name, mask in masks.items():  # build every layer first: an error leaves model intact
        if name not in modules or name == "":
            linears = [n for n, m in modules.items() if isinstance(m, nn.Linear)]
            raise ValueError(f"model has no submodule {name!r}; its nn.Linear layers: {linears}")
        module = modules[name]
        if not isinstance(module, nn.Linear):
            raise TypeError(f"{name!r} is a {type(module).__name__}, not an nn.Linear")
        if mask is not None:
            new[name] = SparseLinear.from_dense(module, mask, backend)
    for name, layer in new.items():
        parent_name, _, attr = name.rpartition(".")
        parent = model.get_submodule(parent_name) if parent_name else model
        setattr(parent, attr, layer)
    return model


__all__ = ["SparseLinear", "convert_model", "sparse_linear"]
