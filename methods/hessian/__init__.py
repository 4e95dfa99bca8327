"""Sparse Hessians of local potentials: exact Hessians by sparsity detection, star coloring and
compressed Hessian-vector products. The methods (one file each, the contract in :mod:`.base`)
are found by the registry; potentials, systems, patterns, coloring and HVPs are the shared
machinery."""
