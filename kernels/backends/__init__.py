"""Backends of the sparse linear layer, by name (see :mod:`.base` for the interface).

=================  ==========================================================================
name               what runs
=================  ==========================================================================
dense_mask         reference: dense weight with zeros off the pattern (what users have today)
torch_csr          torch.sparse CSR kernels (MKL / cuSPARSE), sampled_addmm for the SDDMM
cpu                our C++/OpenMP CSR SpMM + SDDMM, JIT-compiled once (CPU)
triton             our Triton CSR SpMM + SDDMM (CUDA GPU, or TRITON_INTERPRET=1 on CPU)
semi_structured    2:4 sparse tensor cores, torch.sparse.to_sparse_semi_structured (GPU)
=================  ==========================================================================
"""

from __future__ import annotations

from typing import Any

from .base import Backend, BackendUnavailableError

_BACKENDS: dict[str, Backend] = {}


def _backends() -> dict[str, Backend]:
    """One instance per backend of the ``kernels`` family: the reference (``dense_mask``)
    first, then the registry's order (file names, then third-party ones); built on first use,
    since the registry discovers this package's modules."""
    if not _BACKENDS:
        from sparsebench.suite.registry import all_methods

        infos = all_methods(("kernels",))
        order = sorted(infos, key=lambda n: n != "dense_mask")
        _BACKENDS.update({name: infos[name].cls() for name in order})
    return _BACKENDS


def __getattr__(name: str) -> Any:
    if name == "BACKENDS":  # name -> Backend, filled on first use (PEP 562)
        return _backends()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def get_backend(name: str | Backend, require_available: bool = True) -> Backend:
    """The backend registered as ``name`` (a :class:`Backend` is returned as is).

    Raises:
        ValueError: unknown name; the message lists the allowed names.
        BackendUnavailableError (a RuntimeError): ``require_available`` and the backend cannot
            run here; the message says why (no GPU, no compiler, ...).
    """
    if isinstance(name, Backend):
        backend = name
    else:
        try:
            backend = _backends()[name]
        except (KeyError, TypeError):
            raise ValueError(
                f"unknown sparse backend {name!r}; allowed: {', '.join(_backends())}"
            ) from None
    if require_available:
        backend.require()
    return backend


def available_backends() -> dict[str, tuple[bool, str]]:
    """``name -> (available, reason)`` for every registered backend."""
    return {name: b.available() for name, b in _backends().items()}


__all__ = ["BACKENDS", "Backend", "BackendUnavailableError", "available_backends", "get_backend"]
