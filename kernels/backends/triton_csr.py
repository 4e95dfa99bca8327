"""``triton``: our Triton kernels, a row-wise CSR SpMM (forward and grad_input) and an SDDMM
over blocks of nonzeros (grad_values); the kernels are in ``_triton_kernels``.

Runs on a CUDA GPU, or on CPU tensors under Triton's interpreter (``TRITON_INTERPRET=1``, for
correctness tests only: it executes every program in Python/NumPy). Triton reads that variable
when ``@triton.jit`` decorates a function, and decorates its own standard library (``tl.sum``,
...) at ``import triton``: the variable must therefore be set before the first ``import
triton`` of the process (the tests run the interpreter in a subprocess). Our kernel module is
imported on first use and reloaded if the mode changed; a mode that disagrees with triton's
already-imported library is a RuntimeError saying so.

Layout: activations and output gradients are passed transposed ((n, B) contiguous), so a
program's BLOCK_B batch lanes read consecutive addresses for each nonzero (coalesced on a GPU);
outputs are written transposed and copied back to (B, n).
"""

from __future__ import annotations

import contextlib
import functools
import importlib
import importlib.util
import os
from types import ModuleType

import torch
from torch import Tensor

from sparsebench.suite.registry import register

from ..pattern import SparsityPattern
from .base import Backend

BLOCK_K = 32  # nonzeros of a row per loop step
BLOCK_NNZ = 64  # nonzeros per SDDMM program
MAX_BLOCK_B = 64


def _interpret_requested() -> bool:
    # Parsed like Triton's own getenv_bool, without importing triton (importing it fixes the
    # mode of its standard library, see _kernels).
    return os.environ.get("TRITON_INTERPRET", "0").strip().lower() in ("1", "true", "on", "yes")


@functools.cache
def _triton_installed() -> bool:
    return importlib.util.find_spec("triton") is not None


def available() -> tuple[bool, str]:
    if not _triton_installed():
        return False, "triton is not installed"
    if torch.cuda.is_available() or _interpret_requested():
        return True, ""
    return False, "triton needs a CUDA GPU (or TRITON_INTERPRET=1 for correctness tests)"


def _stdlib_interpreted() -> bool | None:
    """Whether triton's own @jit library functions were built for the interpreter (None if
    this Triton version does not let us tell)."""
    try:
        import triton.language.standard as std
        from triton.runtime.interpreter import InterpretedFunction
    except ImportError:  # pragma: no cover - other Triton layouts
        return None
    return isinstance(getattr(std, "sum", None), InterpretedFunction)


def _kernels() -> ModuleType:
    interpret = _interpret_requested()
    stdlib = _stdlib_interpreted()
    if stdlib is not None and stdlib != interpret:
        # Triton decorates its standard library (tl.sum, ...) once, at `import triton`; our
        # kernels could be rebuilt but would call library functions of the other mode.
        raise RuntimeError(
            f"TRITON_INTERPRET is {'set' if interpret else 'unset'} now but was "
            f"{'set' if stdlib else 'unset'} when triton was first imported in this process; "
            "set TRITON_INTERPRET=1 before anything imports triton (e.g. in the environment "
            "of the process)"
        )
    mod = importlib.import_module(f"{__package__}._triton_kernels")
    from triton import knobs

    if mod.INTERPRET != bool(knobs.runtime.interpret):
        mod = importlib.reload(mod)
    return mod


def _check_device(t: Tensor) -> None:
    if _interpret_requested():
        if t.device.type != "cpu":
            raise ValueError(f"TRITON_INTERPRET=1 runs on CPU tensors, got one on {t.device}")
    elif t.device.type != "cuda":
        raise ValueError(
            f"the triton backend needs CUDA tensors, got one on {t.device} "
            "(or set TRITON_INTERPRET=1 to interpret on CPU)"
        )


def _acc_dtype(dtype: torch.dtype):
    import triton.language as tl

    return tl.float64 if dtype == torch.float64 else tl.float32


def _block_b(batch: int) -> int:
    return max(16, min(MAX_BLOCK_B, 1 << max(batch - 1, 0).bit_length()))


def _on(device: torch.device) -> contextlib.AbstractContextManager:
    # Triton launches on the current CUDA device: make it the tensors' device.
    return torch.cuda.device(device) if device.type == "cuda" else contextlib.nullcontext()


def _spmm(
    row_ptr: Tensor, col: Tensor, values: Tensor, dense: Tensor, bias: Tensor | None
) -> Tensor:
    """(B, n_rows) = dense (B, n_cols) Aᵀ (+ bias) for A = CSR(row_ptr, col, values)."""
    n_rows, batch = row_ptr.numel() - 1, dense.shape[0]
    dense_t = dense.t().contiguous()  # (n_cols, B): element (b, i) at b + i * B
    out_t = torch.empty(n_rows, batch, dtype=dense.dtype, device=dense.device)
    if n_rows and batch:
        block_b = _block_b(batch)
        grid = (n_rows, (batch + block_b - 1) // block_b)
        with _on(dense.device):
            _kernels().spmm_kernel[grid](
                row_ptr, col, values, dense_t, bias if bias is not None else values, out_t,
                batch, 1, batch, 1, batch,
                HAS_BIAS=bias is not None, ACC_DTYPE=_acc_dtype(dense.dtype),
                BLOCK_B=block_b, BLOCK_K=BLOCK_K,
            )  # fmt: skip
    return out_t.t().contiguous()


def forward(x: Tensor, values: Tensor, pattern: SparsityPattern, bias: Tensor | None) -> Tensor:
    _check_device(x)
    b = None if bias is None else bias.contiguous()
    return _spmm(pattern.row_ptr, pattern.col_idx, values.contiguous(), x, b)


def grad_input(grad_y: Tensor, values: Tensor, pattern: SparsityPattern) -> Tensor:
    _check_device(grad_y)
    return _spmm(
        pattern.col_ptr, pattern.row_idx, values.index_select(0, pattern.perm), grad_y, None
    )


def grad_values(grad_y: Tensor, x: Tensor, pattern: SparsityPattern) -> Tensor:
    _check_device(x)
    nnz, batch = pattern.nnz, x.shape[0]
    out = torch.zeros(nnz, dtype=x.dtype, device=x.device)
    if nnz and batch:
        g_t, x_t = grad_y.t().contiguous(), x.t().contiguous()
        block_b = _block_b(batch)
        grid = ((nnz + BLOCK_NNZ - 1) // BLOCK_NNZ,)
        with _on(x.device):
            _kernels().sddmm_kernel[grid](
                pattern.row_of, pattern.col_idx, g_t, x_t, out, nnz, batch,
                1, batch, 1, batch,
                ACC_DTYPE=_acc_dtype(x.dtype), BLOCK_NNZ=BLOCK_NNZ, BLOCK_B=block_b,
            )  # fmt: skip
    return out


@register("triton", family="kernels")
class TritonBackend(Backend):
    """Our Triton CSR SpMM (row × batch tile programs) and SDDMM, on a CUDA GPU or under
    ``TRITON_INTERPRET=1`` on the CPU (correctness tests only).

    Source: ours (kernels/backends/_triton_kernels.py); Tillet et al. 2019, "Triton: an
    intermediate language and compiler for tiled neural network computations", MAPL.
    """

    description = "our Triton CSR SpMM (row × batch tile programs) and SDDMM (GPU, or interpreter)"
    needs_gpu = True
    forward_impl = staticmethod(forward)
    grad_input_impl = staticmethod(grad_input)
    grad_values_impl = staticmethod(grad_values)
    available = staticmethod(available)
