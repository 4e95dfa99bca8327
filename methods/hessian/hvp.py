"""Hessians from Hessian-vector products: compressed (colored) and dense.

Forward-over-reverse HVPs, ``jvp(grad(E))``, with ``torch.func``, vmapped over a chunk of
tangent vectors at a time to bound memory. A star coloring of the pattern (Gebremedhin, Manne,
Pothen 2005) groups structurally orthogonal columns, so ``B = H S`` with the coloring's seed
matrix S (3N × C) needs C HVPs instead of 3N, and every nonzero of H is read directly from B.

Prepare once, evaluate many times (the split of asdex and DifferentiationInterface): a
:class:`ColoredHessian` holds pattern, coloring, seeds and recovery indices for one topology and
evaluates the Hessian at any positions of that topology.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp
import torch
from torch.func import grad, jvp, vmap

from sparsebench.methods.hessian.coloring import (
    check_star_coloring,
    lift_coloring,
    seed_matrix,
    star_coloring,
    star_recovery,
)
from sparsebench.methods.hessian.pattern import HessianPattern

EnergyFn = Callable[[torch.Tensor], torch.Tensor]  # positions (N, 3) -> energy ()


class PatternError(RuntimeError):
    """A sparsity pattern misses nonzeros of the true Hessian (found by random probes)."""


# Atom-HVPs per vmapped call of the automatic chunk: keeps one call's intermediates (chunk × N
# rows of per-atom and per-pair features) cache-sized. Measured for SchNet on water with 1
# thread (ms per HVP, chunk 1/2/4/8/16): 3,000 atoms 70/47/42/52/63, 6,000 atoms
# 87/70/85/122/134, 9,000 atoms 128/92/155/195/213: the best chunk is ceil(12,000 / N), while
# a fixed chunk 8 costs 17 -> 22 µs per atom and HVP from 3,000 to 9,000 atoms.
AUTO_CHUNK_ATOM_HVPS = 12_000
MAX_AUTO_CHUNK = 64


def auto_chunk(n_atoms: int) -> int:
    """HVPs per vmapped call for ``n_atoms`` atoms: ceil(12,000 / N), between 1 and 64."""
    return max(1, min(MAX_AUTO_CHUNK, math.ceil(AUTO_CHUNK_ATOM_HVPS / max(n_atoms, 1))))


def hvps(
    energy_fn: EnergyFn,
    positions: torch.Tensor,
    tangents: torch.Tensor,
    chunk: int | None = None,
) -> torch.Tensor:
    """Hessian-vector products H v for each row v of ``tangents``.

    Args:
        energy_fn: positions (N, 3) -> scalar energy.
        positions: (N, 3), the point where H is taken.
        tangents: (k, 3N), one tangent per row, same dtype/device as ``positions``.
        chunk: tangents per vmapped call (bounds memory: one call holds ``chunk`` HVPs);
            None = :func:`auto_chunk` of N.
    Returns: (k, 3N) tensor, row r = H @ tangents[r].
    Raises: ValueError if ``chunk`` < 1.
    """
    n = positions.shape[0]
    chunk = auto_chunk(n) if chunk is None else int(chunk)
    if chunk < 1:
        raise ValueError(f"chunk must be >= 1 HVP per vmapped call (or None for auto), got {chunk}")

    def flat_energy(x: torch.Tensor) -> torch.Tensor:
        return energy_fn(x.view(n, 3))

    x = positions.reshape(-1).detach()
    g = grad(flat_energy)

    def one(v: torch.Tensor) -> torch.Tensor:
        return jvp(g, (x,), (v,))[1]

    out = [vmap(one)(tangents[s : s + chunk]) for s in range(0, tangents.shape[0], chunk)]
    return torch.cat(out) if out else tangents.new_zeros((0, x.numel()))


def dense_hessian(
    energy_fn: EnergyFn, positions: torch.Tensor, chunk: int | None = None
) -> torch.Tensor:
    """The dense (3N × 3N) Hessian by vmapped HVPs against the identity, in chunks: the honest
    fast dense path (same precision and threads as the colored one)."""
    m = positions.numel()
    eye = torch.eye(m, dtype=positions.dtype, device=positions.device)
    return hvps(energy_fn, positions, eye, chunk)


@dataclass
class ColoredHessian:
    """Everything needed to evaluate a Hessian of one topology with C compressed HVPs.

    Attributes:
        pattern: the Hessian's sparsity pattern (maybe truncated).
        atom_colors: star coloring of the atom pattern, (N,).
        colors: lifted coloring of the 3N coordinates, (3N,), color(3a+d) = 3c(a)+d.
        seeds: (3N, C) 0/1 seed matrix.
        recovery: (rows, cols, src_rows, src_colors): H[rows, cols] = B[src_rows, src_colors].
        order: vertex order of the greedy coloring.
    """

    pattern: HessianPattern
    atom_colors: np.ndarray
    colors: np.ndarray
    seeds: np.ndarray
    recovery: tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]
    order: str

    @classmethod
    def prepare(cls, pattern: HessianPattern, order: str = "smallest_last") -> ColoredHessian:
        """Star-color the atom pattern, lift it to coordinates, validate it (no AD needed) and
        precompute the direct-recovery indices. Raises ColoringError on an invalid coloring."""
        atom_colors = star_coloring(pattern.atom, order)
        colors = lift_coloring(atom_colors, 3)
        check_star_coloring(pattern.coords, colors)
        recovery = star_recovery(pattern.coords, colors)
        return cls(pattern, atom_colors, colors, seed_matrix(colors), recovery, order)

    @property
    def n_colors(self) -> int:
        """Colors of the coordinate coloring = HVPs per Hessian (3 × atom colors)."""
        return int(self.seeds.shape[1])

    def compressed(
        self, energy_fn: EnergyFn, positions: torch.Tensor, chunk: int | None = None
    ) -> torch.Tensor:
        """B = H S, (3N × C), from C HVPs. Raises ValueError unless positions is (N, 3) with
        the pattern's N."""
        n = self.pattern.n_atoms
        if tuple(positions.shape) != (n, 3):
            raise ValueError(
                f"positions must be (N, 3) = ({n}, 3) for this pattern, "
                f"got {tuple(positions.shape)}"
            )
        s = torch.as_tensor(self.seeds.T, dtype=positions.dtype, device=positions.device)
        return hvps(energy_fn, positions, s, chunk).T

    def decompress(self, b: torch.Tensor | np.ndarray) -> sp.csr_array:
        """The (3N × 3N) sparse Hessian read directly from B = H S (star-coloring recovery)."""
        b = b.detach().cpu().numpy() if torch.is_tensor(b) else np.asarray(b)
        rows, cols, src_r, src_c = self.recovery
        n = self.pattern.coords.shape[0]
        return sp.csr_array((b[src_r, src_c], (rows, cols)), shape=(n, n))

    def decompress_torch(self, b: torch.Tensor) -> torch.Tensor:
        """The (3N × 3N) Hessian as a ``torch.sparse_csr_tensor`` on ``b``'s device and dtype."""
        rows, cols, src_r, src_c = self.recovery
        dev = b.device
        vals = b[torch.as_tensor(src_r, device=dev), torch.as_tensor(src_c, device=dev)]
        n = self.pattern.coords.shape[0]
        coo = torch.sparse_coo_tensor(
            torch.as_tensor(np.stack([rows, cols]), device=dev), vals, (n, n)
        )
        return coo.coalesce().to_sparse_csr()

    def __call__(
        self, energy_fn: EnergyFn, positions: torch.Tensor, chunk: int | None = None
    ) -> sp.csr_array:
        return self.decompress(self.compressed(energy_fn, positions, chunk))


def sparse_hessian(
    energy_fn: EnergyFn,
    positions: torch.Tensor,
    pattern: HessianPattern | ColoredHessian,
    order: str = "smallest_last",
    chunk: int | None = None,
) -> sp.csr_array:
    """Exact sparse Hessian of ``energy_fn`` at ``positions`` given its sparsity ``pattern``.

    Args:
        energy_fn: positions (N, 3) in Å -> energy () in eV (any consistent units).
        positions: (N, 3) tensor, float64 recommended.
        pattern: a :class:`HessianPattern` (colored here) or a prepared :class:`ColoredHessian`
            (reuse it for many configurations of one topology).
        order: vertex order of the star coloring when ``pattern`` is not yet colored.
        chunk: HVPs per vmapped call; None = :func:`auto_chunk` of N.
    Returns: ``scipy.sparse.csr_array`` (3N × 3N), entries in energy / length².
    Raises: ColoringError if the coloring is not a star coloring. A pattern that misses
        nonzeros gives a wrong Hessian: check it with :func:`probe_check`.
    """
    colored = (
        pattern if isinstance(pattern, ColoredHessian) else ColoredHessian.prepare(pattern, order)
    )
    return colored(energy_fn, positions, chunk)


def probe_check(
    energy_fn: EnergyFn,
    positions: torch.Tensor,
    h: sp.csr_array,
    n_probes: int = 4,
    seed: int = 0,
    rtol: float = 1e-8,
) -> float:
    """Check a sparse Hessian against true HVPs on random probe vectors (asdex's "matvec"
    check): if the pattern behind ``h`` missed a nonzero, ``h @ v`` differs from ``H v``.

    Returns the largest relative error ‖h v − H v‖ / ‖H v‖ over the probes.
    Raises: PatternError when it exceeds ``rtol``, naming the error.
    """
    gen = torch.Generator().manual_seed(seed)
    v = torch.randn(n_probes, positions.numel(), generator=gen, dtype=positions.dtype)
    true = hvps(energy_fn, positions, v.to(positions.device)).cpu().numpy()
    approx = (h @ v.numpy().T).T
    err = float(
        np.max(
            np.linalg.norm(approx - true, axis=1) / np.maximum(np.linalg.norm(true, axis=1), 1e-300)
        )
    )
    if err > rtol:
        raise PatternError(
            f"sparse Hessian disagrees with true HVPs on random probes: relative error "
            f"{err:.3e} > {rtol:.1e}; the sparsity pattern misses nonzeros (too few hops?)"
        )
    return err
