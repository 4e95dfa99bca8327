"""Hessian sparsity patterns of local potentials, in closed form from the cutoff graph.

For a potential whose Hessian couples atoms up to K hops apart in its cutoff graph (adjacency
A, N × N), the atom-level pattern is the nonzero structure of (I + A)^K, and the pattern of the
3N × 3N Cartesian Hessian is its Kronecker lift ``kron((I + A)^K, ones(3, 3))``: coordinates of
coupled atoms form full 3 × 3 blocks. (Closed form of the pattern that sparsity detection would
find, as in asdex's and SparseConnectivityTracer's "local" detectors; checked against the truth
without a dense Hessian by :func:`sparsebench.methods.hessian.hvp.probe_check`.)
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp


def adjacency(pairs: np.ndarray, n_atoms: int) -> sp.csr_array:
    """Symmetric boolean adjacency (N × N, no diagonal) of the cutoff graph.

    Args:
        pairs: int array (2, P) of interacting atom pairs (each pair once or twice).
        n_atoms: N.
    """
    pairs = np.asarray(pairs)
    i, j = np.concatenate([pairs[0], pairs[1]]), np.concatenate([pairs[1], pairs[0]])
    a = sp.csr_array((np.ones(i.size, dtype=bool), (i, j)), shape=(n_atoms, n_atoms))
    a.setdiag(False)
    a.eliminate_zeros()
    return a


def atom_pattern(pairs: np.ndarray, n_atoms: int, hops: int) -> sp.csr_array:
    """Boolean nonzero structure of (I + A)^hops (N × N): atoms at most ``hops`` apart.

    Raises ValueError if ``hops`` < 1."""
    if hops < 1:
        raise ValueError(f"hops must be >= 1, got {hops}")
    step = (adjacency(pairs, n_atoms) + sp.eye_array(n_atoms, dtype=bool, format="csr")).astype(
        np.int8
    )
    p = step
    for _ in range(hops - 1):
        p = (p @ step).astype(bool).astype(np.int8)  # keep entries 0/1: no integer overflow
    return p.astype(bool).tocsr()


def lift(p: sp.csr_array, dim: int = 3) -> sp.csr_array:
    """Kronecker lift of an atom pattern to coordinates: (dim·N × dim·N) boolean."""
    return sp.kron(p, np.ones((dim, dim), dtype=bool), format="csr").astype(bool)


@dataclass
class HessianPattern:
    """Sparsity pattern of a local potential's Hessian, prepared once per topology.

    Attributes:
        atom: (N × N) boolean atom-level pattern (I + A)^hops.
        coords: (3N × 3N) boolean pattern of the Cartesian Hessian.
        hops: K, the Hessian's reach in hops of the cutoff graph.
    """

    atom: sp.csr_array
    coords: sp.csr_array
    hops: int

    @classmethod
    def from_pairs(cls, pairs: np.ndarray, n_atoms: int, hops: int) -> HessianPattern:
        p = atom_pattern(pairs, n_atoms, hops)
        return cls(atom=p, coords=lift(p), hops=hops)

    @classmethod
    def of_potential(cls, potential, n_atoms: int, hops: int | None = None) -> HessianPattern:
        """The pattern of ``potential`` (its cutoff-graph ``pairs`` and reach ``hops``).
        ``hops`` below the potential's reach gives a truncated pattern: an explicit
        approximation, never the default."""
        pairs = potential.pairs.cpu().numpy()
        return cls.from_pairs(pairs, n_atoms, potential.hops if hops is None else hops)

    @property
    def n_atoms(self) -> int:
        return self.atom.shape[0]

    @property
    def nnz(self) -> int:
        """Structural nonzeros of the 3N × 3N Hessian."""
        return int(self.coords.nnz)

    @property
    def max_row_atoms(self) -> int:
        """Atoms in the densest block row of the pattern (max row count of ``atom``): the
        densest neighbourhood. A direct column partition (Curtis–Powell–Reid) needs at least
        this many atom colors; star coloring may use fewer by exploiting symmetry, and in
        practice its count follows this number."""
        return int(np.diff(self.atom.indptr).max()) if self.n_atoms else 0

    @property
    def fill(self) -> float:
        """nnz / (3N)², the fraction of the dense Hessian that is structurally nonzero."""
        n = self.coords.shape[0]
        return self.nnz / float(n * n)
