"""The columns of the kernels pillar's runs table: plain data, so that the pillar and its
jobs import them without pandera and polars (only validation needs those)."""

from __future__ import annotations

OPS = ("forward", "backward", "fwd_bwd")


STATUSES = ("ok", "skipped", "failed")


# Columns of the kernels table besides the common ones: one row per (backend, op) of a cell
# (the record holds them as its ``rows``); units in the names.
KERNEL_COLUMNS: dict[str, type] = {
    "backend": str,  # dense (nn.Linear) | dense_mask | torch_csr | cpu | triton | semi_structured
    "op": str,  # forward | backward | fwd_bwd
    "batch": int,
    "in_features": int,
    "out_features": int,
    "sparsity": float,  # target fraction of zeros in W
    "pattern": str,  # sparsity pattern of W (patterns.PATTERNS): random | haste
    "nnz": int,  # nonzeros of W actually kept
    "dtype": str,
    "trial": int,  # which of the section's trials (independent jobs of the same cell): 0, 1, ...
    "ms_median": float,
    "ms_p10": float,
    "ms_p90": float,
    "repeats": int,
    "dense_ms": float,  # median of dense nn.Linear, same op, same rounds
    "dense_mask_ms": float,
    "torch_csr_ms": float,  # null when torch_csr was not measured
    "speedup_vs_dense": float,  # dense_ms / ms_median
    "speedup_vs_dense_mask": float,
    "speedup_vs_torch_csr": float,
    "useful_flops": float,  # 2·nnz·B per product: 1 product forward, 2 backward, 3 fwd_bwd
    "gflops_effective": float,  # useful_flops / ms_median / 1e6 (GFLOP/s)
    "max_abs_err": float,  # vs dense_mask: forward y; backward grad_x and grad_W on pattern
}
