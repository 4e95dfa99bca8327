"""Sparse execution of dst / pruning jobs: the spec's ``execution`` key.

With ``execution: dense_mask`` (the default) masked layers run as dense weight × mask, which is
what :class:`~.masks.MaskStore` enforces. With a kernel backend (``cpu``,
``torch_csr``, ``triton``) every masked ``nn.Linear`` is swapped for a :class:`KernelLinear`
that computes ``y = x Wᵀ + b`` on the backend from the weight's values on the current mask, so
training and inference wall-clock measure real sparse speed.

The swap keeps everything the methods rely on: the new module shares the original ``weight``
and ``bias`` Parameters (optimizer state, MaskStore hooks and re-masking are unchanged), and it
re-reads the mask from the store at every call, so DST updates (SET, RigL) and pruning steps
are seen at the next forward (the CSR pattern is rebuilt only when the mask changes). Two
cases run the dense product instead, because they need it: a layer without a mask (dense),
and a step where the store captures dense gradients (RigL's regrowth criterion needs the
gradient at masked positions, which a sparse backward does not compute). Conv2d layers always
run dense × mask.

With ``execution: sparse`` the masked ``nn.Linear`` layers become values-only
:class:`~sparsebench.kernels.SparseLinear` layers on the ``cpu`` kernels once the method has
drawn its first masks (:func:`to_values_only`, at fit start): the nnz values are the only
Parameter, the optimizer updates them alone, and a method's topology updates rewrite them in
O(nnz) (:mod:`sparsebench.kernels.topology`). Only methods with such an update (their class
says ``values_only``) run this way; validation refuses the others.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from sparsebench.suite.pillars.classification.masks import MaskStore

DENSE_MASK = "dense_mask"
VALUES_ONLY = "sparse"  # execution: sparse
VALUES_ONLY_BACKEND = "cpu"  # the kernels a values-only layer runs on


class KernelLinear(nn.Linear):
    """An ``nn.Linear`` whose masked weight runs on a sparse-kernel backend.

    Build it with :meth:`wrap`; ``forward`` maps (..., in_features) to (..., out_features).
    Gradients reach ``weight`` only on the mask (zero elsewhere), like dense × mask.
    """

    backend: str
    _mask_of: Callable[[], Tensor | None]
    _dense_now: Callable[[], bool]

    @classmethod
    def wrap(
        cls,
        linear: nn.Linear,
        mask_of: Callable[[], Tensor | None],
        backend: str,
        dense_now: Callable[[], bool] = lambda: False,
    ) -> KernelLinear:
        """A KernelLinear sharing ``linear``'s Parameters.

        Args:
            linear: the layer to run sparsely (its Parameters are reused, not copied).
            mask_of: returns the layer's current bool mask (out, in), or None when dense.
            backend: a kernel backend name (see :data:`sparsebench.kernels.BACKENDS`).
            dense_now: returns True on calls that must use the dense product.

        Raises:
            ValueError: unknown backend (the message lists the allowed names).
            BackendUnavailableError (RuntimeError): the backend cannot run here.
        """
        from sparsebench.kernels import get_backend

        get_backend(backend)
        layer = cls.__new__(cls)
        nn.Module.__init__(layer)
        layer.in_features, layer.out_features = linear.in_features, linear.out_features
        layer.weight = linear.weight
        layer.bias = linear.bias
        layer.backend = backend
        layer._mask_of = mask_of
        layer._dense_now = dense_now
        layer._mask_ref: Tensor | None = None
        layer._mask_version = -1
        layer._pattern = None
        return layer

    def _pattern_for(self, mask: Tensor):
        from sparsebench.kernels import SparsityPattern

        # Holding the mask object (not its address) makes a recycled address impossible.
        if mask is not self._mask_ref or mask._version != self._mask_version:
            # A first call under validation's inference mode would make inference tensors,
            # which training's backward may not save.
            with torch.inference_mode(False):
                self._pattern = SparsityPattern.from_mask(mask)
            self._mask_ref, self._mask_version = mask, mask._version
        return self._pattern

    def forward(self, x: Tensor) -> Tensor:
        from sparsebench.kernels import sparse_linear

        mask = self._mask_of()
        if mask is None or self._dense_now():
            return F.linear(x, self.weight, self.bias)
        pattern = self._pattern_for(mask)
        return sparse_linear(x, pattern.gather(self.weight), pattern, self.bias, self.backend)

    def extra_repr(self) -> str:
        return f"{super().extra_repr()}, backend={self.backend}"


def use_backend(model: nn.Module, store: MaskStore, backend: str) -> list[str]:
    """Swap, in place, every ``nn.Linear`` of ``store`` for a :class:`KernelLinear` on
    ``backend``; ``dense_mask`` changes nothing. Returns the swapped layer names.

    Raises ValueError (unknown backend) or BackendUnavailableError (cannot run here)."""
    from sparsebench.kernels import get_backend

    if backend == VALUES_ONLY:  # converted at fit start (to_values_only)
        get_backend(VALUES_ONLY_BACKEND).require()
        return []
    get_backend(backend)
    if backend == DENSE_MASK:
        return []
    swapped = []
    for name, layer in store.layers.items():
        if type(layer) is not nn.Linear:
            continue
        parent_name, _, child = name.rpartition(".")
        parent = model.get_submodule(parent_name) if parent_name else model
        new = KernelLinear.wrap(
            layer,
            mask_of=lambda n=name: store.masks[n],
            backend=backend,
            dense_now=lambda: store.capture_dense_grads,
        )
        setattr(parent, child, new)
        swapped.append(name)
    return swapped


def to_values_only(store: MaskStore) -> list[str]:
    """Make every masked ``nn.Linear`` of ``store`` values-only on :data:`VALUES_ONLY_BACKEND`
    (:meth:`MaskStore.to_values_only`: model, optimizer and bookkeeping swapped in place);
    dense layers and convolutions stay as they are. Returns the converted layer names."""
    names = [
        n
        for n, layer in store.layers.items()
        if type(layer) is nn.Linear and store.masks.stored(n) is not None
    ]
    for name in names:
        store.to_values_only(name, VALUES_ONLY_BACKEND)
    return names
