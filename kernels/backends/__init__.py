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

# isort: off
# Registration order is listing order (and the "allowed:" order of error messages): the
# reference, the library, ours, GPU-only, as in the table above.
from . import dense_mask, torch_csr, cpu, triton_csr, semi_structured  # noqa: F401 - register

# isort: on
from sparsebench.suite.registry import registered

from .base import Backend, BackendUnavailableError

# One instance per backend registered in the ``kernels`` method family (third-party backends
# registered before this import follow the built-ins), in registration order.
BACKENDS: dict[str, Backend] = {name: info.cls() for name, info in registered("kernels").items()}


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
            backend = BACKENDS[name]
        except (KeyError, TypeError):
            raise ValueError(
                f"unknown sparse backend {name!r}; allowed: {', '.join(BACKENDS)}"
            ) from None
    if require_available:
        backend.require()
    return backend


def available_backends() -> dict[str, tuple[bool, str]]:
    """``name -> (available, reason)`` for every registered backend."""
    return {name: b.available() for name, b in BACKENDS.items()}


__all__ = ["BACKENDS", "Backend", "BackendUnavailableError", "available_backends", "get_backend"]
