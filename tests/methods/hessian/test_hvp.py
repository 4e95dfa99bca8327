import numpy as np
import pytest
import scipy.sparse as sp
import torch

from sparsebench.methods.hessian.hvp import (
    ColoredHessian,
    PatternError,
    dense_hessian,
    probe_check,
    sparse_hessian,
)
from sparsebench.methods.hessian.pattern import HessianPattern, atom_pattern
from sparsebench.methods.hessian.potentials import build_potential
from sparsebench.methods.hessian.systems import build_system

CASES = [("alkane", 4), ("water", 6)]


def _setup(kind, size, potential):
    atoms = build_system(kind, size, seed=0)
    pot = build_potential(potential, atoms)
    x = torch.as_tensor(atoms.get_positions(), dtype=torch.float64)
    return atoms, pot, x


def test_atom_pattern_is_power_of_i_plus_a():
    # path 0-1-2-3: (I+A)^2 couples atoms at most 2 apart
    p = atom_pattern(np.array([[0, 1, 2], [1, 2, 3]]), 4, 2).toarray()
    expected = np.abs(np.subtract.outer(range(4), range(4))) <= 2
    assert (p == expected).all()
    with pytest.raises(ValueError, match="hops must be >= 1"):
        atom_pattern(np.array([[0], [1]]), 2, 0)


@pytest.mark.parametrize("potential", ["pair", "schnet"])
@pytest.mark.parametrize("kind, size", CASES)
def test_colored_equals_dense(kind, size, potential):
    _, pot, x = _setup(kind, size, potential)
    pattern = HessianPattern.of_potential(pot, len(x))
    dense = dense_hessian(pot.energy, x).numpy()
    # the closed-form pattern holds every nonzero of the true Hessian
    assert not np.any(dense[~pattern.coords.toarray()])
    h = sparse_hessian(pot.energy, x, pattern)
    rel = np.linalg.norm(h.toarray() - dense) / np.linalg.norm(dense)
    assert rel <= 1e-10
    assert probe_check(pot.energy, x, h) <= 1e-10


@pytest.mark.parametrize("potential", ["pair", "schnet"])
def test_truncated_pattern_is_flagged_by_the_probe_check(potential):
    _, pot, x = _setup("alkane", 4, potential)
    truncated = (
        HessianPattern.of_potential(pot, len(x), hops=pot.hops - 1) if pot.hops > 1 else None
    )
    if truncated is None:  # K = 1: drop the cutoff graph entirely, keep only the diagonal blocks
        n = len(x)
        eye = sp.eye_array(n, dtype=bool, format="csr")
        truncated = HessianPattern(
            atom=eye, coords=sp.kron(eye, np.ones((3, 3), bool), format="csr"), hops=0
        )
    h = sparse_hessian(pot.energy, x, truncated)
    with pytest.raises(PatternError, match="misses nonzeros"):
        probe_check(pot.energy, x, h)


def test_prepared_coloring_is_reused_across_configurations():
    atoms, pot, x = _setup("alkane", 5, "pair")
    colored = ColoredHessian.prepare(HessianPattern.of_potential(pot, len(x)))
    assert colored.n_colors == 3 * (colored.atom_colors.max() + 1)
    x2 = x + 0.01 * torch.randn(
        x.shape, generator=torch.Generator().manual_seed(1), dtype=torch.float64
    )
    for pos in (x, x2):
        dense = dense_hessian(pot.energy, pos).numpy()
        assert np.allclose(colored(pot.energy, pos).toarray(), dense, rtol=0, atol=1e-10)


def test_colors_stay_constant_as_the_chain_grows():
    counts = []
    for n in (12, 24, 48):  # small chains need fewer colors (ends); then it saturates
        _, pot, x = _setup("alkane", n, "pair")
        counts.append(ColoredHessian.prepare(HessianPattern.of_potential(pot, len(x))).n_colors)
    assert counts[0] == counts[1] == counts[2], counts


def test_torch_sparse_output_equals_scipy():
    _, pot, x = _setup("water", 4, "schnet")
    colored = ColoredHessian.prepare(HessianPattern.of_potential(pot, len(x)), "smallest_last")
    b = colored.compressed(pot.energy, x)
    t = colored.decompress_torch(b)
    assert t.layout == torch.sparse_csr
    assert np.array_equal(t.to_dense().numpy(), colored.decompress(b).toarray())
    assert np.allclose(
        t.to_dense().numpy(), dense_hessian(pot.energy, x).numpy(), atol=1e-10, rtol=0
    )


def test_colored_hessian_refuses_positions_of_another_shape():
    atoms, pot, x = _setup("alkane", 4, "pair")
    colored = ColoredHessian.prepare(HessianPattern.of_potential(pot, len(atoms)))
    with pytest.raises(ValueError, match=r"positions must be \(N, 3\) = \(14, 3\)"):
        colored(pot.energy, x[:-1])
