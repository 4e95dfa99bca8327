"""Deterministic, offline atomic systems for the sparse-Hessian benchmarks.

Every builder returns a non-periodic :class:`ase.Atoms` (zero cell, ``pbc=False``) with
positions in Å. Nothing is downloaded and nothing depends on global random state: the only
randomness is a :func:`numpy.random.default_rng` seeded by the caller.

- :func:`alkane` — linear alkane CnH(2n+2) in the ideal all-trans zig-zag conformation: a chain
  graph of any length, the "1-D" local system.
- :func:`water_cluster` — m randomly oriented rigid waters packed at liquid density, either by
  seeded random sequential insertion (``packing="random"``, system ``water``) or on a jittered
  simple-cubic lattice (``packing="lattice"``, system ``water_lattice``): the "3-D" local
  systems. The random packing's densest neighbourhood keeps growing (slowly) with m; the
  lattice packing bounds it, which is what keeps the number of colors constant.
- :func:`small_molecule` — ase's own reference geometries for CH4, C2H6, H2O (tiny cases for
  tests).

``build_system(kind, size, seed)`` dispatches on ``SYSTEMS``.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable

import ase
import numpy as np
from ase.build import molecule as _ase_molecule

# --- alkane geometry --------------------------------------------------------------------------

CC_BOND = 1.54  # Å, C–C single bond
CH_BOND = 1.09  # Å, C–H bond
TETRAHEDRAL = math.degrees(math.acos(-1.0 / 3.0))  # 109.4712...°


def alkane(n: int) -> ase.Atoms:
    """Linear alkane CnH(2n+2) (3n + 2 atoms) in the ideal all-trans zig-zag conformation.

    Geometry (exact, no optimisation): every carbon is an ideal sp3 centre with all bond angles
    tetrahedral, θ = arccos(-1/3) = 109.47°; C–C = 1.54 Å, C–H = 1.09 Å.

    - Carbon k (k = 0 … n-1) sits in the xy plane at
      ``(k · 1.54 sin(θ/2), ±0.5 · 1.54 cos(θ/2), 0)`` (sign alternating, ``+`` for even k):
      a planar zig-zag with C–C–C = θ and C–C projected along x by 1.2574 Å.
    - Each carbon gets two "out-of-plane" hydrogens along ``cos(θ/2) u ± sin(θ/2) z``, where
      ``u`` is the unit bisector pointing away from its two (real or virtual) carbon neighbours
      and ``z`` the chain-plane normal; then H–C–H = θ and both H–C–C = θ.
    - The two chain ends get one more hydrogen each, in the plane, where the next carbon of the
      zig-zag would be (the "virtual" carbons k = -1 and k = n), i.e. trans to the chain.

    The carbons are listed first (C0 … Cn-1), then the hydrogens carbon by carbon. ``n = 1``
    gives a regular tetrahedral methane (both virtual neighbours become hydrogens). The
    closest non-bonded contact is the geminal H···H, 2 · 1.09 sin(θ/2) = 1.78 Å.

    Args:
        n: number of carbons, ``n >= 1`` (any size; n = 400 has 1202 atoms).

    Returns:
        ``ase.Atoms`` with symbols ``"C" * n + "H" * (2n + 2)``, positions (3n + 2, 3) in Å,
        centred at the origin.
    """
    if not isinstance(n, int | np.integer) or n < 1:
        raise ValueError(f"alkane needs an integer n >= 1 carbons, got {n!r}")
    n = int(n)
    half = math.radians(TETRAHEDRAL) / 2.0
    dx = CC_BOND * math.sin(half)
    dy = 0.5 * CC_BOND * math.cos(half)

    # Carbons k = -1 … n (the two ends are virtual, used to place the terminal hydrogens).
    k = np.arange(-1, n + 1)
    backbone = np.stack([k * dx, np.where(k % 2 == 0, dy, -dy), np.zeros_like(k, float)], 1)
    carbons = backbone[1:-1]
    prev, nxt = backbone[:-2], backbone[2:]

    to_prev = (prev - carbons) / CC_BOND
    to_next = (nxt - carbons) / CC_BOND
    u = -(to_prev + to_next)
    u /= np.linalg.norm(u, axis=1, keepdims=True)
    z = np.array([0.0, 0.0, 1.0])
    h_up = carbons + CH_BOND * (math.cos(half) * u + math.sin(half) * z)
    h_down = carbons + CH_BOND * (math.cos(half) * u - math.sin(half) * z)
    h_first = carbons[0] + CH_BOND * to_prev[0]
    h_last = carbons[-1] + CH_BOND * to_next[-1]

    hydrogens = [h_first]
    for c in range(n):
        hydrogens += [h_up[c], h_down[c]]
    hydrogens.append(h_last)
    positions = np.concatenate([carbons, np.asarray(hydrogens)], axis=0)
    positions -= positions.mean(axis=0)
    return ase.Atoms("C" * n + "H" * (2 * n + 2), positions=positions)


# --- water cluster ----------------------------------------------------------------------------

OH_BOND = 0.9572  # Å, TIP3P O–H
HOH_ANGLE = 104.52  # degrees, TIP3P H–O–H
VOLUME_PER_WATER = 29.9  # Å^3: 18.015 g/mol / (N_A · 1 g/cm³) = 29.91 Å^3
MIN_INTERMOLECULAR_H = 1.4  # Å, minimum distance between atoms of different molecules when H
LATTICE_JITTER = 0.2  # Å, uniform per coordinate: nearest O–O >= a - 2·0.2 = 2.70 Å
PACKINGS = ("random", "lattice")
_ORIENT_ROUNDS = 200
_BATCH = 2048
_MAX_ATTEMPTS_PER_WATER = 20_000


def _random_rotations(rng: np.random.Generator, k: int) -> np.ndarray:
    """(k, 3, 3) rotation matrices uniform on SO(3) (normalised Gaussian quaternions)."""
    q = rng.standard_normal((k, 4))
    q /= np.linalg.norm(q, axis=1, keepdims=True)
    w, x, y, z = q.T
    return np.stack(
        [
            np.stack([1 - 2 * (y * y + z * z), 2 * (x * y - z * w), 2 * (x * z + y * w)], 1),
            np.stack([2 * (x * y + z * w), 1 - 2 * (x * x + z * z), 2 * (y * z - x * w)], 1),
            np.stack([2 * (x * z - y * w), 2 * (y * z + x * w), 1 - 2 * (x * x + y * y)], 1),
        ],
        1,
    )


def _insert_oxygens(m: int, radius: float, min_oo: float, rng: np.random.Generator) -> np.ndarray:
    """Random sequential insertion of m points in a ball, all pairwise distances >= min_oo.

    Candidates are drawn uniformly in the ball in fixed-size batches; each is tested against
    the accepted points through a uniform grid (cell-list) whose cell edge min_oo/√3 holds at
    most one accepted point, so a test reads the 5³ cells around the candidate. Candidates of
    one batch are accepted in order, so the result depends only on the seed.
    """
    cell = min_oo / math.sqrt(3.0)
    reach = math.ceil(min_oo / cell)  # = 2
    shape = int(math.ceil(2.0 * radius / cell)) + 1 + 2 * reach
    grid = np.full((shape, shape, shape), -1, dtype=np.int64)
    offsets = np.stack(np.meshgrid(*[np.arange(-reach, reach + 1)] * 3, indexing="ij"), -1).reshape(
        -1, 3
    )
    points = np.zeros((m, 3))
    count = 0
    attempts = 0
    min_oo2 = min_oo * min_oo
    while count < m:
        if attempts > _MAX_ATTEMPTS_PER_WATER * m:
            raise RuntimeError(
                f"water_cluster: random sequential insertion placed only {count} of {m} "
                f"molecules with min_oo={min_oo} Å at {VOLUME_PER_WATER} Å^3/molecule; "
                "use a smaller min_oo"
            )
        cand = rng.uniform(-radius, radius, size=(_BATCH, 3))
        attempts += _BATCH
        cand = cand[np.einsum("ij,ij->i", cand, cand) <= radius * radius]
        idx = np.floor((cand + radius) / cell).astype(np.int64) + reach
        neigh = grid[tuple((idx[:, None, :] + offsets[None]).transpose(2, 0, 1))]  # (B, 125)
        safe = np.where(neigh >= 0, neigh, 0)
        d2 = ((points[safe] - cand[:, None, :]) ** 2).sum(-1)
        ok = ~np.any((neigh >= 0) & (d2 < min_oo2), axis=1)
        batch_start = count
        for b in np.flatnonzero(ok):
            if count == m:
                break
            p = cand[b]
            if count > batch_start:
                new = points[batch_start:count]
                if np.any(((new - p) ** 2).sum(-1) < min_oo2):
                    continue
            points[count] = p
            grid[tuple(idx[b])] = count
            count += 1
    return points


def _lattice_oxygens(m: int, jitter: float, rng: np.random.Generator) -> np.ndarray:
    """The m sites of a simple-cubic lattice (spacing 29.9^(1/3) = 3.103 Å) closest to the
    origin, in lexicographic (x, y, z) order, each moved by a uniform jitter in [-jitter,
    jitter]³. Distance ties are broken by a fixed tiny offset so the cluster is deterministic."""
    a = VOLUME_PER_WATER ** (1.0 / 3.0)
    r = int(math.ceil((3.0 * m / (4.0 * math.pi)) ** (1.0 / 3.0))) + 2
    g = np.arange(-r, r + 1, dtype=float)
    sites = np.stack(np.meshgrid(g, g, g, indexing="ij"), -1).reshape(-1, 3)
    dist = np.linalg.norm(sites + np.array([1e-6, 2e-6, 3e-6]), axis=1)
    sites = sites[np.argsort(dist, kind="stable")[:m]]
    sites = sites[np.lexsort((sites[:, 2], sites[:, 1], sites[:, 0]))]
    return sites * a + rng.uniform(-jitter, jitter, size=sites.shape)


def water_cluster(m: int, seed: int = 0, min_oo: float = 2.7, packing: str = "random") -> ase.Atoms:
    """Cluster of m rigid, randomly oriented water molecules at liquid density (~1 g/cm³).

    Geometry: TIP3P-like rigid water, O–H = 0.9572 Å, H–O–H = 104.52° (Jorgensen et al. 1983,
    J. Chem. Phys. 79, 926). Oxygens, ``packing="random"``: placed in a ball of volume
    m · 29.9 Å^3 (the
    volume per molecule of liquid water at 1 g/cm³) by random sequential insertion: uniform
    candidates in the ball, rejected if closer than ``min_oo`` to an accepted oxygen (a grid
    cell-list makes each test O(1); m = 1000 builds in about half a second). With the default
    2.7 Å the hard-sphere packing fraction is π/6 · 2.7³ / 29.9 = 0.34, below the random
    sequential adsorption jamming limit of ~0.38 (Torquato et al. 2006, Phys. Rev. E 74,
    061308), so insertion terminates. ``packing="lattice"``: the m sites of a simple-cubic
    lattice of spacing 29.9^(1/3) = 3.103 Å (same density) closest to the origin, each jittered
    uniformly by ±0.2 Å per coordinate, so the nearest O–O distance is >= 2.70 Å and no
    neighbourhood is denser than the lattice's (``min_oo`` is then implied and unused). In a
    random packing the densest neighbourhood of the cluster keeps growing slowly with m
    (extreme-value statistics of local density, bounded only by the packing limit); with the
    lattice it is bounded. Each molecule then gets a uniformly random orientation
    about its oxygen; orientations are redrawn, for up to 200 rounds, for molecules whose
    hydrogens come closer than 1.4 Å to an atom of another molecule (the physical H-bond
    H···O distance is ~1.8 Å), so no unphysical H···H / H···O overlaps remain in practice.

    Deterministic: all randomness comes from ``numpy.random.default_rng(seed)``; the same seed
    gives identical positions, different seeds give different clusters.

    Args:
        m: number of molecules, ``m >= 1``.
        seed: seed of the random generator.
        min_oo: minimum O–O distance in Å (> 0) of the random packing.
        packing: ``"random"`` (random sequential insertion) or ``"lattice"`` (jittered cubic).

    Raises:
        ValueError: m < 1, min_oo <= 0 or an unknown packing.

    Returns:
        ``ase.Atoms`` with symbols ``"OHH" * m`` (molecule w is atoms 3w, 3w+1, 3w+2),
        positions (3m, 3) in Å, centred near the origin.
    """
    if not isinstance(m, int | np.integer) or m < 1:
        raise ValueError(f"water_cluster needs an integer m >= 1 molecules, got {m!r}")
    if not min_oo > 0:
        raise ValueError(f"min_oo must be > 0 Å, got {min_oo}")
    if packing not in PACKINGS:
        raise ValueError(f"unknown packing {packing!r}; allowed: {', '.join(PACKINGS)}")
    m = int(m)
    rng = np.random.default_rng(seed)
    if packing == "lattice":
        oxygens = _lattice_oxygens(m, LATTICE_JITTER, rng)
    else:
        radius = (3.0 * m * VOLUME_PER_WATER / (4.0 * math.pi)) ** (1.0 / 3.0)
        oxygens = _insert_oxygens(m, radius, float(min_oo), rng)

    half = math.radians(HOH_ANGLE) / 2.0
    local_h = OH_BOND * np.array(
        [[math.sin(half), math.cos(half), 0.0], [-math.sin(half), math.cos(half), 0.0]]
    )
    rot = _random_rotations(rng, m)
    hydrogens = oxygens[:, None, :] + np.einsum("mij,hj->mhi", rot, local_h)  # (m, 2, 3)

    if m > 1:
        from scipy.spatial import cKDTree

        for _ in range(_ORIENT_ROUNDS):
            pos = np.concatenate([oxygens[:, None], hydrogens], axis=1).reshape(-1, 3)
            pairs = cKDTree(pos).query_pairs(MIN_INTERMOLECULAR_H, output_type="ndarray")
            mol = pairs // 3
            inter = mol[:, 0] != mol[:, 1]
            # O···O pairs are already >= min_oo; any remaining close pair involves a hydrogen.
            bad = pairs[inter]
            if len(bad) == 0:
                break
            redo = np.unique(bad.max(axis=1) // 3)  # re-orient the later molecule of each pair
            rot = _random_rotations(rng, len(redo))
            hydrogens[redo] = oxygens[redo, None, :] + np.einsum("mij,hj->mhi", rot, local_h)

    positions = np.concatenate([oxygens[:, None], hydrogens], axis=1).reshape(-1, 3)
    return ase.Atoms("OHH" * m, positions=positions)


# --- small molecules and registry -------------------------------------------------------------

SMALL_MOLECULES = ("CH4", "C2H6", "H2O")


def small_molecule(name: str) -> ase.Atoms:
    """ase's reference geometry (:func:`ase.build.molecule`, G2 set) for CH4, C2H6 or H2O."""
    if name not in SMALL_MOLECULES:
        raise ValueError(f"unknown small molecule {name!r}; allowed: {', '.join(SMALL_MOLECULES)}")
    return _ase_molecule(name)


SYSTEMS: dict[str, Callable[..., ase.Atoms]] = {
    "alkane": alkane,
    "water": water_cluster,
    "water_lattice": functools.partial(water_cluster, packing="lattice"),
}


def n_atoms(kind: str, size: int) -> int:
    """Atoms of ``build_system(kind, size)`` without building it: alkane 3n + 2, water 3m."""
    counts = {
        "alkane": lambda n: 3 * n + 2,
        "water": lambda m: 3 * m,
        "water_lattice": lambda m: 3 * m,
    }
    if kind not in counts:
        raise ValueError(f"unknown system {kind!r}; allowed: {', '.join(sorted(counts))}")
    return counts[kind](size)


def build_system(kind: str, size: int, seed: int = 0) -> ase.Atoms:
    """Build a benchmark system: ``alkane(size)`` (seed unused, the geometry is fixed),
    ``water_cluster(size, seed)`` or ``water_cluster(size, seed, packing="lattice")``.
    Unknown ``kind`` raises ValueError listing the allowed ones.
    """
    if kind not in SYSTEMS:
        raise ValueError(f"unknown system kind {kind!r}; allowed: {', '.join(sorted(SYSTEMS))}")
    if kind == "alkane":
        return alkane(size)
    return SYSTEMS[kind](size, seed=seed)
