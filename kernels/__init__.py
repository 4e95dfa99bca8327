"""Sparse compute kernels (issue 4). For now sparse layers run as dense x mask (``dense_mask``),
which is what :mod:`sparsebench.suite.masks` enforces."""
