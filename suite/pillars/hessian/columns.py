"""The columns of the hessian pillar's runs table: plain data, so that the pillar and its
jobs import them without pandera and polars (only validation needs those)."""

from __future__ import annotations

# Columns of a hessian record besides the common ones; units in the names.
HESSIAN_COLUMNS: dict[str, type] = {
    "system": str,
    "size": int,  # alkane carbons / water molecules
    "n_atoms": int,
    "potential": str,
    "potential_params_json": str,  # the potential's parameters, JSON with sorted keys
    "K": int,  # the potential's Hessian reach in hops of the cutoff graph
    "pattern_hops": int,  # hops of the pattern the method used (K for one without a pattern)
    "order": str,
    "trial": int,  # which of the section's trials (independent jobs of the same cell): 0, 1, ...
    "chunk": int,  # HVPs per vmapped call used (auto: about 12,000 / n_atoms)
    "n_colors": int,  # coordinate colors (3 x atom colors); 3N for dense
    "max_row_atoms": int,  # atoms in the densest block row of the pattern; N for dense
    "n_hvps": int,
    "nnz": int,  # structural nonzeros of the pattern (dense: 9N^2)
    "fill": float,  # nnz / (3N)^2
    "t_pattern_s": float,
    "t_coloring_s": float,
    "t_hvp_s": float,  # median over repeats
    "t_decompress_s": float,
    "wall_s": float,  # pattern + coloring + HVPs + decompression (dense: the HVPs)
    "dense_wall_s": float,  # dense Hessian in the same process, when n_atoms <= dense_max_atoms
    "speedup_vs_dense": float,
    "max_abs_err": float,  # vs dense where computed, else null
    "rel_err": float,  # Frobenius vs dense, else max relative error on random-probe HVPs
    "err_reference": str,  # "dense" | "probes" | "self"
    "peak_mem_mb": float,  # peak resident memory (MiB) of the process during this cell (reset
    # when the cell starts: cells of a batch share a process), read after this method and
    # before any dense reference
}
