"""Benchmark systems: alkanes, water clusters, small molecules."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy.spatial.distance import pdist, squareform

from sparsebench.methods.hessian.systems import (
    SYSTEMS,
    alkane,
    build_system,
    small_molecule,
    water_cluster,
)

TETRA = math.degrees(math.acos(-1.0 / 3.0))


@pytest.mark.parametrize("n", [1, 2, 3, 10, 400])
def test_alkane_formula_size_and_min_distance(n):
    atoms = alkane(n)
    assert len(atoms) == 3 * n + 2
    counts = {s: atoms.get_chemical_symbols().count(s) for s in "CH"}
    assert counts == {"C": n, "H": 2 * n + 2}
    assert not atoms.pbc.any()
    assert pdist(atoms.positions).min() > 1.0


def test_alkane_1_is_methane():
    atoms = alkane(1)
    assert atoms.get_chemical_formula() == "CH4"
    d = atoms.get_distances(0, [1, 2, 3, 4])
    np.testing.assert_allclose(d, 1.09, atol=1e-12)
    for a, b in [(1, 2), (1, 3), (1, 4), (2, 3), (2, 4), (3, 4)]:
        assert atoms.get_angle(a, 0, b) == pytest.approx(TETRA, abs=1e-9)


def test_alkane_bonds_and_angles():
    n = 6
    atoms = alkane(n)
    d = squareform(pdist(atoms.positions))
    sym = np.array(atoms.get_chemical_symbols())
    carbons, hydrogens = np.flatnonzero(sym == "C"), np.flatnonzero(sym == "H")
    # C–C chain bonds, C–C–C angles.
    for k in range(n - 1):
        assert d[k, k + 1] == pytest.approx(1.54, abs=1e-12)
    for k in range(1, n - 1):
        assert atoms.get_angle(k - 1, k, k + 1) == pytest.approx(TETRA, abs=1e-9)
    # Every hydrogen has exactly one carbon at 1.09 Å, and every carbon has four bonds.
    ch = d[np.ix_(hydrogens, carbons)]
    assert np.all(np.isclose(ch, 1.09, atol=1e-9).sum(axis=1) == 1)
    bonded = np.isclose(d, 1.54, atol=1e-9) | np.isclose(d, 1.09, atol=1e-9)
    assert np.all(bonded[carbons].sum(axis=1) == 4)
    # All angles at every carbon are tetrahedral.
    for c in carbons:
        nb = np.flatnonzero(bonded[c])
        for a in range(4):
            for b in range(a + 1, 4):
                assert atoms.get_angle(nb[a], c, nb[b]) == pytest.approx(TETRA, abs=1e-9)


@pytest.mark.parametrize("bad", [0, -3, 2.5])
def test_alkane_refuses_bad_n(bad):
    with pytest.raises(ValueError):
        alkane(bad)


def _water_checks(atoms, m, min_oo):
    assert len(atoms) == 3 * m
    assert atoms.get_chemical_symbols() == ["O", "H", "H"] * m
    pos = atoms.positions.reshape(m, 3, 3)
    oh = np.linalg.norm(pos[:, 1:] - pos[:, :1], axis=-1)
    np.testing.assert_allclose(oh, 0.9572, atol=1e-9)
    v1, v2 = pos[:, 1] - pos[:, 0], pos[:, 2] - pos[:, 0]
    cos = (v1 * v2).sum(-1) / (0.9572**2)
    np.testing.assert_allclose(np.degrees(np.arccos(cos)), 104.52, atol=1e-6)
    assert pdist(pos[:, 0]).min() >= min_oo
    d = squareform(pdist(atoms.positions))
    mol = np.arange(3 * m) // 3
    assert d[mol[:, None] != mol[None, :]].min() >= 1.4 - 1e-9


def test_water_cluster_geometry_and_min_oo():
    m = 200
    atoms = water_cluster(m, seed=0)
    _water_checks(atoms, m, 2.7)
    # Liquid-like density: the oxygens lie in a ball of volume m · 29.9 Å^3.
    radius = (3 * m * 29.9 / (4 * math.pi)) ** (1 / 3)
    assert np.linalg.norm(atoms.positions[::3], axis=1).max() <= radius + 1e-9
    atoms = water_cluster(50, seed=3, min_oo=2.5)
    _water_checks(atoms, 50, 2.5)


def test_water_cluster_deterministic():
    a, b = water_cluster(100, seed=7), water_cluster(100, seed=7)
    np.testing.assert_array_equal(a.positions, b.positions)
    c = water_cluster(100, seed=8)
    assert not np.allclose(a.positions, c.positions)


def test_water_cluster_single_and_bad_args():
    one = water_cluster(1)
    assert one.get_chemical_formula() == "H2O"
    with pytest.raises(ValueError):
        water_cluster(0)
    with pytest.raises(ValueError):
        water_cluster(5, min_oo=0.0)


def test_water_cluster_1000():
    atoms = water_cluster(1000, seed=1)
    assert len(atoms) == 3000
    assert pdist(atoms.positions[::3]).min() >= 2.7


def test_water_lattice_geometry_and_bounded_neighbourhood():
    m = 400
    atoms = water_cluster(m, seed=0, packing="lattice")
    _water_checks(atoms, m, 2.7)
    oxygens = atoms.positions[::3]
    # Same density as the random packing: nearest lattice spacing 29.9^(1/3) Å, jitter 0.2 Å.
    d = squareform(pdist(oxygens))
    np.fill_diagonal(d, np.inf)
    assert abs(np.median(d.min(axis=1)) - 29.9 ** (1 / 3)) < 0.3
    # Bounded neighbourhood: at most the 6 nearest lattice sites within 3.5 Å (the next shell
    # is at 3.103·√2 − 0.57 = 3.82 Å), whatever the cluster size.
    assert (d < 3.5).sum(axis=1).max() <= 6
    a, b = (
        water_cluster(50, seed=4, packing="lattice"),
        water_cluster(50, seed=4, packing="lattice"),
    )
    np.testing.assert_array_equal(a.positions, b.positions)
    assert not np.allclose(a.positions, water_cluster(50, seed=5, packing="lattice").positions)
    with pytest.raises(ValueError, match="random, lattice"):
        water_cluster(5, packing="hexagonal")


@pytest.mark.parametrize("name,formula", [("CH4", "CH4"), ("C2H6", "C2H6"), ("H2O", "H2O")])
def test_small_molecules(name, formula):
    atoms = small_molecule(name)
    assert atoms.get_chemical_formula() == formula
    with pytest.raises(ValueError, match="allowed"):
        small_molecule("C6H6")


def test_build_system():
    assert set(SYSTEMS) == {"alkane", "water", "water_lattice"}
    np.testing.assert_array_equal(build_system("alkane", 5).positions, alkane(5).positions)
    np.testing.assert_array_equal(
        build_system("water", 20, seed=2).positions, water_cluster(20, seed=2).positions
    )
    np.testing.assert_array_equal(
        build_system("water_lattice", 20, seed=2).positions,
        water_cluster(20, seed=2, packing="lattice").positions,
    )
    with pytest.raises(ValueError, match="alkane, water, water_lattice"):
        build_system("benzene", 3)
