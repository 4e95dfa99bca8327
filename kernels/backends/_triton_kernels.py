"""Triton kernels of the ``triton`` backend; imported lazily by ``triton_csr``.

Triton reads ``TRITON_INTERPRET`` when ``@triton.jit`` decorates a function, i.e. when this
module is imported: ``INTERPRET`` records the mode it was built in, and ``triton_csr`` reloads
the module if the mode changed since (tests set the variable after other imports).
"""

from __future__ import annotations

import triton
import triton.language as tl
from triton import knobs

INTERPRET: bool = bool(knobs.runtime.interpret)


@triton.jit
def spmm_kernel(
    row_ptr,
    col_idx,
    values,
    x,  # dense operand, element (b, i) at x + b * stride_xb + i * stride_xi
    bias,
    y,  # output, element (b, o) at y + b * stride_yb + o * stride_yo
    B,
    stride_xb,
    stride_xi,
    stride_yb,
    stride_yo,
    HAS_BIAS: tl.constexpr,
    ACC_DTYPE: tl.constexpr,
    BLOCK_B: tl.constexpr,
    BLOCK_K: tl.constexpr,
):
    """CSR SpMM, one program per (output row o, batch tile): y[b, o] = sum_k val[k] x[b, col[k]]
    (+ bias[o]), looping over the row's nonzeros BLOCK_K at a time."""
    o = tl.program_id(0).to(tl.int64)  # o * stride_yo overflows int32 once out × B >= 2**31
    b = tl.program_id(1) * BLOCK_B + tl.arange(0, BLOCK_B)
    b_ok = b < B
    start = tl.load(row_ptr + o)
    end = tl.load(row_ptr + o + 1)
    acc = tl.zeros((BLOCK_B,), dtype=ACC_DTYPE)
    for k0 in range(start, end, BLOCK_K):
        k = k0 + tl.arange(0, BLOCK_K)
        k_ok = k < end
        c = tl.load(col_idx + k, mask=k_ok, other=0).to(tl.int64)
        v = tl.load(values + k, mask=k_ok, other=0.0).to(ACC_DTYPE)
        xt = tl.load(
            x + b[:, None] * stride_xb + c[None, :] * stride_xi,
            mask=b_ok[:, None] & k_ok[None, :],
            other=0.0,
        ).to(ACC_DTYPE)
        acc += tl.sum(xt * v[None, :], axis=1)
    if HAS_BIAS:
        acc += tl.load(bias + o).to(ACC_DTYPE)
    tl.store(y + b * stride_yb + o * stride_yo, acc.to(y.dtype.element_ty), mask=b_ok)


@triton.jit
def sddmm_kernel(
    row_of,
    col_idx,
    g,  # grad_y, element (b, o) at g + b * stride_gb + o * stride_go
    x,  # x, element (b, i) at x + b * stride_xb + i * stride_xi
    out,
    nnz,
    B,
    stride_gb,
    stride_go,
    stride_xb,
    stride_xi,
    ACC_DTYPE: tl.constexpr,
    BLOCK_NNZ: tl.constexpr,
    BLOCK_B: tl.constexpr,
):
    """SDDMM, one program per BLOCK_NNZ nonzeros (o, i): out[k] = sum_b g[b, o] x[b, i],
    looping over the batch BLOCK_B at a time."""
    k = tl.program_id(0).to(tl.int64) * BLOCK_NNZ + tl.arange(0, BLOCK_NNZ)
    k_ok = k < nnz
    r = tl.load(row_of + k, mask=k_ok, other=0).to(tl.int64)
    c = tl.load(col_idx + k, mask=k_ok, other=0).to(tl.int64)
    acc = tl.zeros((BLOCK_NNZ,), dtype=ACC_DTYPE)
    for b0 in range(0, B, BLOCK_B):
        b = b0 + tl.arange(0, BLOCK_B)
        m = (b < B)[:, None] & k_ok[None, :]
        gv = tl.load(g + b[:, None] * stride_gb + r[None, :] * stride_go, mask=m, other=0.0)
        xv = tl.load(x + b[:, None] * stride_xb + c[None, :] * stride_xi, mask=m, other=0.0)
        acc += tl.sum(gv.to(ACC_DTYPE) * xv.to(ACC_DTYPE), axis=0)
    tl.store(out + k, acc.to(out.dtype.element_ty), mask=k_ok)
