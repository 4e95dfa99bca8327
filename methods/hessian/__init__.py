"""Sparse Hessians pillar: exact Hessians of local potentials by sparsity detection, star
coloring and compressed Hessian-vector products (issue 3, in progress)."""
