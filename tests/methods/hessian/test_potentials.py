"""Local potentials: cutoff, pair list, energies, torch.func compatibility, Hessian reach."""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest
import scipy.sparse as sp
import torch
from scipy.sparse.csgraph import shortest_path
from scipy.spatial.distance import pdist, squareform
from torch.func import grad, hessian, jvp, vmap

from sparsebench.methods.hessian.potentials import (
    POTENTIALS,
    PairParams,
    PairPotential,
    SchNetParams,
    SchNetPotential,
    build_potential,
    smooth_cutoff,
)
from sparsebench.methods.hessian.systems import alkane, small_molecule, water_cluster


def hop_distances(pot) -> np.ndarray:
    """(N, N) hop distances in the cutoff graph of ``pot`` (inf if disconnected)."""
    n = pot.num_atoms
    p = pot.pairs.numpy()
    adj = sp.coo_array((np.ones(p.shape[1]), (p[0], p[1])), shape=(n, n))
    return shortest_path(adj, directed=False, unweighted=True)


def dense_hessian(pot, x: torch.Tensor) -> torch.Tensor:
    return hessian(pot.energy)(x).reshape(x.numel(), x.numel())


def test_smooth_cutoff_is_c2_and_zero_beyond():
    rc = 3.0
    r = torch.tensor([0.0, 1.0, 2.9, 3.0, 3.5, 10.0], dtype=torch.float64)
    u = smooth_cutoff(r, rc)
    assert u[0] == 1.0
    assert torch.all(u[3:] == 0.0)
    assert torch.all((u[:3] > 0) & (u[:3] <= 1))

    def d1(s):
        return torch.func.grad(lambda t: smooth_cutoff(t, rc))(s)

    def d2(s):
        return torch.func.grad(d1)(s)

    # Near rc, u ~ 56 (1 - x)^3 (p = 6): u, u', u'' vanish as eps^3, eps^2, eps.
    for eps in (1e-3, 1e-4):
        left = torch.tensor(rc * (1 - eps), dtype=torch.float64)
        assert abs(smooth_cutoff(left, rc)) < 100 * eps**3
        assert abs(d1(left)) < 100 * eps**2
        assert abs(d2(left)) < 100 * eps
    beyond = torch.tensor(rc * (1 + 1e-7), dtype=torch.float64)
    assert d1(beyond) == 0.0 and d2(beyond) == 0.0
    # Monotone decreasing on [0, rc].
    grid = torch.linspace(0, rc, 301, dtype=torch.float64)
    assert torch.all(torch.diff(smooth_cutoff(grid, rc)) <= 1e-15)


@pytest.mark.parametrize("kind", sorted(POTENTIALS))
def test_pair_list_matches_brute_force(kind):
    atoms = water_cluster(20, seed=0)
    pot = build_potential(kind, atoms)
    assert pot.pairs.dtype == torch.long and pot.pairs.shape[0] == 2
    i, j = pot.pairs.numpy()
    assert np.all(i < j)
    d = squareform(pdist(atoms.positions))
    expect = {(a, b) for a, b in zip(*np.nonzero(np.triu(d < 3.0, k=1)))}
    assert set(zip(i.tolist(), j.tolist())) == expect
    assert len(expect) == pot.num_pairs
    assert pot.cutoff == 3.0 and isinstance(pot.cutoff, float)
    assert pot.mean_degree == pytest.approx(2 * len(expect) / len(atoms))


@pytest.mark.parametrize("kind", sorted(POTENTIALS))
def test_energy_finite_float64_and_invariant(kind):
    atoms = alkane(4)
    pot = build_potential(kind, atoms)
    x = pot.positions0
    e = pot.energy(x)
    assert e.dtype == torch.float64 and e.shape == () and torch.isfinite(e)
    shift = torch.tensor([0.7, -1.3, 2.1], dtype=torch.float64)
    torch.testing.assert_close(pot.energy(x + shift), e, rtol=0, atol=1e-12)
    q, _ = torch.linalg.qr(
        torch.randn(3, 3, dtype=torch.float64, generator=torch.Generator().manual_seed(0))
    )
    torch.testing.assert_close(pot.energy(x @ q.T), e, rtol=0, atol=1e-11)
    assert pot(x) == e
    e32 = build_potential(kind, atoms, dtype=torch.float32).energy(x.float())
    assert e32.dtype == torch.float32
    assert float(e32) == pytest.approx(float(e), rel=1e-4, abs=1e-4)


def test_skin_keeps_energy_exact_for_small_displacements():
    """Pairs beyond rc contribute exactly 0, so a list with a skin gives the energy of a list
    rebuilt at the displaced geometry, as long as no atom moved more than skin / 2."""
    atoms = water_cluster(15, seed=2)
    g = torch.Generator().manual_seed(0)
    for kind in POTENTIALS:
        a = build_potential(kind, atoms)
        b = build_potential(kind, atoms, skin=1.0)
        assert b.num_pairs > a.num_pairs
        x0 = a.positions0
        torch.testing.assert_close(b.energy(x0), a.energy(x0), rtol=1e-13, atol=1e-12)
        step = torch.randn(x0.shape, generator=g, dtype=torch.float64)
        x = x0 + 0.4 * step / torch.linalg.vector_norm(step, dim=1, keepdim=True)  # 0.4 Å each
        moved = atoms.copy()
        moved.positions = x.numpy()
        fresh = build_potential(kind, moved)
        assert a.energy(x) != fresh.energy(x)  # the displacement does change the pair list
        torch.testing.assert_close(b.energy(x), fresh.energy(x), rtol=1e-13, atol=1e-12)


@pytest.mark.parametrize("kind", sorted(POTENTIALS))
def test_seeded_is_declared_exactly_by_the_potentials_with_a_seed(kind):
    # a job fills ``seed`` from its section only where the potential declares it takes one
    cls = POTENTIALS[kind]
    has_seed = "seed" in {f.name for f in dataclasses.fields(cls.Params)}
    assert cls.seeded == has_seed
    assert POTENTIALS["schnet"].seeded and not POTENTIALS["pair"].seeded


def test_schnet_seeded_weights():
    atoms = small_molecule("C2H6")
    x = torch.as_tensor(atoms.positions)
    e0 = build_potential("schnet", atoms, seed=0).energy(x)
    assert build_potential("schnet", atoms, seed=0).energy(x) == e0
    assert build_potential("schnet", atoms, seed=1).energy(x) != e0


@pytest.mark.parametrize(
    "kind,params",
    [("pair", {}), ("schnet", {}), ("schnet", {"n_interactions": 2, "n_features": 16})],
)
def test_vmap_jvp_grad_equals_dense_hessian_rows(kind, params):
    atoms = small_molecule("C2H6")
    pot = build_potential(kind, atoms, **params)
    g = torch.Generator().manual_seed(0)
    x = pot.positions0 + 0.02 * torch.randn(pot.positions0.shape, generator=g, dtype=torch.float64)
    h = dense_hessian(pot, x)
    torch.testing.assert_close(h, h.T, rtol=1e-10, atol=1e-10)
    tangents = torch.eye(x.numel(), dtype=torch.float64)[::2].reshape(-1, *x.shape)
    hvps = vmap(lambda v: jvp(grad(pot.energy), (x,), (v,))[1])(tangents)
    torch.testing.assert_close(hvps.reshape(len(tangents), -1), h[::2], rtol=1e-10, atol=1e-10)


@pytest.mark.parametrize(
    "kind,params,n,k",
    [
        ("pair", {"cutoff": 2.0}, 3, 1),
        ("schnet", {"cutoff": 2.0}, 3, 2),
        ("schnet", {"cutoff": 2.0, "n_interactions": 2, "n_features": 16}, 4, 4),
        ("pair", {}, 6, 1),
        ("schnet", {}, 6, 2),
    ],
)
def test_hessian_reach_is_exactly_k_hops(kind, params, n, k):
    """H[a, b] = 0 beyond K hops of the cutoff graph, and some block at exactly K hops is
    nonzero (K is tight). rc = 2 Å keeps the bonded graph plus geminal H···H, so small alkanes
    have hop diameters 4 (n = 3) and 5 (n = 4)."""
    pot = build_potential(kind, alkane(n), **params)
    assert pot.hops == k
    x = pot.positions0
    h = dense_hessian(pot, x).reshape(pot.num_atoms, 3, pot.num_atoms, 3)
    blocks = h.abs().amax(dim=(1, 3)).numpy()
    hops = hop_distances(pot)
    assert np.any(hops > k), "test system too small to see the reach"
    assert np.all(blocks[hops > k] == 0.0)
    assert blocks[hops == k].max() > 1e-9 * blocks.max()


@pytest.mark.parametrize("kind", sorted(POTENTIALS))
@pytest.mark.parametrize("bad", [None, math.inf, -math.inf, math.nan, 0.0, -1.0])
def test_bad_cutoff_refused(kind, bad):
    with pytest.raises(ValueError, match="cutoff"):
        build_potential(kind, small_molecule("H2O"), cutoff=bad)


def test_bad_arguments_refused():
    atoms = small_molecule("CH4")
    with pytest.raises(ValueError, match="pair, schnet"):
        build_potential("lj", atoms)
    with pytest.raises(ValueError, match="unknown potential 'schnnet'; did you mean 'schnet'"):
        build_potential("schnnet", atoms)
    with pytest.raises(ValueError, match="unknown parameters"):
        build_potential("pair", atoms, sigma=1.0)
    with pytest.raises(ValueError, match="skin"):
        build_potential("pair", atoms, skin=-0.1)
    with pytest.raises(TypeError):
        PairPotential(atoms, SchNetParams())
    with pytest.raises(ValueError, match="embedding"):
        SchNetPotential(small_molecule("C2H6"), SchNetParams(elements=(1, 8)))
    assert isinstance(PairPotential(atoms).params, PairParams)
