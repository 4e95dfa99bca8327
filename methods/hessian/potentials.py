"""Local interatomic potentials in torch, written for exact sparse Hessians.

Every potential is *local*: all interactions go through a smooth cutoff ``rc`` and a neighbour
pair list that is computed ONCE, at construction, on a reference geometry. ``energy`` is then a
pure function of the positions, so ``torch.func.hessian``, ``torch.func.grad``,
``torch.func.jvp`` and ``torch.func.vmap`` all apply, in particular the batched
Hessian-vector product ``vmap(lambda v: jvp(grad(energy), (x,), (v,))[1])(V)`` used by the
compressed (star-coloured) Hessian.

Sparsity contract. Let G be the *cutoff graph* whose edges are ``pairs`` (atoms closer than
``cutoff + skin`` at the reference geometry, each pair once, i < j). For any positions at which
no atom has moved more than ``skin / 2`` from the reference, the energy equals the energy with a
freshly built pair list, and the 3×3 Hessian block H[a, b] is zero whenever the hop distance of
a and b in G exceeds ``hops`` (K). ``hops`` is tight: the tests check a nonzero block at exactly
K hops. Units: positions in Å, energies in eV (the SchNet energy is in arbitrary units since
its weights are random).

Potentials:

- :class:`PairPotential` — Morse pair potential times the cutoff envelope, K = 1.
- :class:`SchNetPotential` — SchNet (Schütt et al. 2018) with random weights, K = 2L.

``build_potential(kind, atoms, **params)`` builds the potential registered under ``kind`` in
the :data:`POTENTIALS` catalog.
"""

from __future__ import annotations

import math
import typing
from dataclasses import dataclass, fields
from typing import Any, ClassVar

import ase
import numpy as np
import torch
from torch import Tensor

from sparsebench.suite.catalog import Catalog
from sparsebench.suite.registry import describe_type, type_ok

__all__ = [
    "POTENTIALS",
    "LocalPotential",
    "PairParams",
    "PairPotential",
    "SchNetParams",
    "SchNetPotential",
    "build_potential",
    "pair_list",
    "smooth_cutoff",
]


def smooth_cutoff(r: Tensor, rc: float, p: int = 6) -> Tensor:
    """Polynomial cutoff envelope, C² at ``rc`` and exactly 0 beyond.

    u(x) = 1 − (p+1)(p+2)/2 · x^p + p(p+2) · x^(p+1) − p(p+1)/2 · x^(p+2),  x = r / rc,

    for r < rc and 0 for r ≥ rc. u(0) = 1 and u, u', u'' vanish at x = 1, so energies, forces
    and Hessians are continuous when a pair crosses the cutoff (a cosine cutoff is only C¹).
    Source: Gasteiger (Klicpera), Groß, Günnemann 2020, "Directional Message Passing for
    Molecular Graphs" (DimeNet), ICLR, Eq. 8; p = 6 is the default of NequIP
    (``PolynomialCutoff``, Batzner et al. 2022) and MACE.

    Args:
        r: distances, any shape, in Å.
        rc: cutoff radius in Å.
        p: envelope exponent (default 6, as in NequIP and MACE).

    Returns:
        Tensor of the shape of ``r``, values in [0, 1].
    """
    x = r / rc
    xp = x**p
    u = 1.0 - 0.5 * (p + 1) * (p + 2) * xp + p * (p + 2) * xp * x - 0.5 * p * (p + 1) * xp * x * x
    return torch.where(x < 1.0, u, torch.zeros_like(u))


def _check_cutoff(cutoff: Any) -> float:
    if cutoff is None:
        raise ValueError(
            "a local potential needs a finite cutoff radius (Å); got None — potentials "
            "without a finite cutoff have dense Hessians and are not supported"
        )
    try:
        rc = float(cutoff)
    except (TypeError, ValueError) as err:
        raise ValueError(f"cutoff must be a finite number of Å > 0, got {cutoff!r}") from err
    if not math.isfinite(rc) or rc <= 0.0:
        raise ValueError(
            f"cutoff must be a finite number of Å > 0, got {cutoff!r} — potentials without a "
            "finite cutoff have dense Hessians and are not supported"
        )
    return rc


def pair_list(atoms: ase.Atoms, cutoff: float) -> np.ndarray:
    """Pairs of atoms at most ``cutoff`` Å apart, each once with i < j: int64 array (2, P),
    sorted by (i, j).

    Uses :meth:`scipy.spatial.cKDTree.query_pairs` (O(N) memory; ase's ``neighbor_list`` on a
    non-periodic 3,000-atom cluster peaked at 1.9 GB). A pair at exactly the cutoff contributes
    nothing: the envelope and its first two derivatives vanish there. Periodic images are not
    supported (the potentials index atoms, not images).
    """
    if np.any(atoms.pbc):
        raise ValueError("periodic systems are not supported; use a non-periodic ase.Atoms")
    from scipy.spatial import cKDTree

    pairs = cKDTree(atoms.positions).query_pairs(cutoff, output_type="ndarray").astype(np.int64)
    pairs = np.sort(pairs, axis=1).T  # (2, P) with i < j
    order = np.lexsort((pairs[1], pairs[0]))
    return np.ascontiguousarray(pairs[:, order])


class LocalPotential:
    """Base class: a potential with a fixed pair list and a finite interaction range.

    Subclasses define ``Params`` (a dataclass with at least ``cutoff`` and ``skin``), set
    ``self.hops`` and implement :meth:`energy`; they are registered in :data:`POTENTIALS`.
    A subclass whose ``Params`` has a ``seed`` (random weights) sets ``seeded = True``: a job
    then fills it from its section's ``seed`` unless the spec sets it.

    Attributes:
        params: the parameter dataclass.
        cutoff: cutoff radius rc in Å (float).
        skin: extra radius of the pair list in Å; the list holds pairs closer than rc + skin.
        hops: K, the Hessian's reach in hops of the cutoff graph (int).
        pairs: LongTensor (2, P), i < j, each pair of the cutoff graph once.
        numbers: LongTensor (N,), atomic numbers.
        positions0: Tensor (N, 3), the reference positions in Å (``dtype``).
        dtype, device: of all floating tensors (float64 by default).
    """

    Params: ClassVar[type]
    seeded: ClassVar[bool] = False
    hops: int

    def __init__(
        self,
        atoms: ase.Atoms,
        params: Any = None,
        *,
        dtype: torch.dtype = torch.float64,
        device: torch.device | str | None = None,
    ) -> None:
        if params is None:
            params = self.Params()
        if not isinstance(params, self.Params):
            raise TypeError(f"params must be {self.Params.__name__}, got {type(params).__name__}")
        self.params = params
        self.cutoff = _check_cutoff(params.cutoff)
        self.skin = float(params.skin)
        if not math.isfinite(self.skin) or self.skin < 0.0:
            raise ValueError(f"skin must be a finite number of Å >= 0, got {params.skin!r}")
        self.dtype = dtype
        self.device = torch.device(device) if device is not None else torch.device("cpu")
        self.num_atoms = len(atoms)
        self.pairs = torch.as_tensor(
            pair_list(atoms, self.cutoff + self.skin), dtype=torch.long, device=self.device
        )
        self.numbers = torch.as_tensor(atoms.numbers, dtype=torch.long, device=self.device)
        self.positions0 = torch.as_tensor(atoms.positions, dtype=dtype, device=self.device)

    @property
    def num_pairs(self) -> int:
        """P, the number of edges of the cutoff graph."""
        return int(self.pairs.shape[1])

    @property
    def mean_degree(self) -> float:
        """Mean number of neighbours per atom in the cutoff graph, 2P / N."""
        return 2.0 * self.num_pairs / max(self.num_atoms, 1)

    def distances(self, positions: Tensor) -> Tensor:
        """Pair distances r_ij (P,) in Å for positions (N, 3); vmap/jvp friendly."""
        ri = positions.index_select(0, self.pairs[0])
        rj = positions.index_select(0, self.pairs[1])
        return torch.linalg.vector_norm(rj - ri, dim=-1)

    def energy(self, positions: Tensor) -> Tensor:
        """Total energy, a 0-d tensor in eV, of positions (N, 3) in Å."""
        raise NotImplementedError

    def __call__(self, positions: Tensor) -> Tensor:
        return self.energy(positions)

    def to(self, device: torch.device | str | None = None, dtype: torch.dtype | None = None):
        """Move, in place, every tensor attribute (also inside dicts / lists of dicts) to
        ``device``, and the floating ones to ``dtype``; returns ``self``."""
        device = torch.device(device) if device is not None else self.device
        dtype = dtype or self.dtype

        def move(value: Any) -> Any:
            if isinstance(value, Tensor):
                if value.is_floating_point():
                    return value.to(device=device, dtype=dtype)
                return value.to(device=device)
            if isinstance(value, dict):
                return {k: move(v) for k, v in value.items()}
            if isinstance(value, list):
                return [move(v) for v in value]
            return value

        for name, value in list(vars(self).items()):
            setattr(self, name, move(value))
        self.device, self.dtype = device, dtype
        return self

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(N={self.num_atoms}, P={self.num_pairs}, "
            f"cutoff={self.cutoff}, hops={self.hops}, params={self.params})"
        )


# The potentials a spec's ``hessian.potentials`` may name, in registration order.
POTENTIALS: Catalog[type[LocalPotential]] = Catalog("potential")


# --- Morse pair potential ---------------------------------------------------------------------


@dataclass(frozen=True)
class PairParams:
    """Morse parameters, shared by all element pairs (a generic benchmark, not a force field).

    ``D`` (eV) well depth, ``a`` (1/Å) stiffness, ``r0`` (Å) equilibrium distance, ``cutoff``
    rc (Å), ``skin`` (Å) extra pair-list radius, ``p`` envelope exponent. With rc = 3 Å the
    cutoff graph has mean degree 11.2 for alkanes (n = 100) and 7.0 for liquid-density water
    (m = 200), i.e. 12 and 8 atoms per Hessian block row.
    """

    D: float = 1.0
    a: float = 1.5
    r0: float = 1.2
    cutoff: float = 3.0
    skin: float = 0.0
    p: int = 6


@POTENTIALS.register("pair")
class PairPotential(LocalPotential):
    """Morse pair potential with a smooth cutoff; the Hessian reaches K = 1 hop.

    E = Σ_{i<j} u(r_ij / rc) · D [exp(−2a(r_ij − r0)) − 2 exp(−a(r_ij − r0))]

    over the fixed pair list, u the C² envelope of :func:`smooth_cutoff`. Each term depends on
    two atoms only, so H[a, b] ≠ 0 only if a = b or (a, b) is an edge: ``hops = 1``.
    Source: Morse 1929, Phys. Rev. 34, 57.
    """

    Params = PairParams

    def __init__(
        self,
        atoms: ase.Atoms,
        params: PairParams | None = None,
        *,
        dtype: torch.dtype = torch.float64,
        device: torch.device | str | None = None,
    ) -> None:
        super().__init__(atoms, params, dtype=dtype, device=device)
        self.hops = 1

    def energy(self, positions: Tensor) -> Tensor:
        """Total Morse energy in eV (0-d tensor) of positions (N, 3) in Å."""
        p = self.params
        r = self.distances(positions)
        e = torch.exp(-p.a * (r - p.r0))
        return (smooth_cutoff(r, self.cutoff, p.p) * p.D * (e * e - 2.0 * e)).sum()


# --- SchNet -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class SchNetParams:
    """SchNet hyper-parameters (small, so evaluation is cheap).

    ``n_interactions`` L, ``n_features`` F (atom-feature width, also the filter width),
    ``n_rbf`` Gaussians with centres evenly spaced on [0, rc] and γ = 1 / (2Δ²) (Δ the centre
    spacing), ``cutoff`` rc (Å), ``skin`` (Å), ``p`` envelope exponent, ``seed`` of the random
    weights, ``elements`` the atomic numbers with an embedding (default H, C, O).

    Default L = 1 (K = 2): at rc = 3 Å an atom's Hessian block row then holds ~27 atoms
    (alkane n = 100: 26.4; water m = 1000: 28.3), while L = 2 (K = 4) holds ~50 for alkanes
    and ~105–141 for water clusters (m = 200–1000), i.e. 17 % of a 200-water cluster's
    Hessian: too dense for the moderate sizes of the benchmark. L = 2 remains available.
    """

    n_interactions: int = 1
    n_features: int = 32
    n_rbf: int = 16
    cutoff: float = 3.0
    skin: float = 0.0
    p: int = 6
    seed: int = 0
    elements: tuple[int, ...] = (1, 6, 8)


def _ssp(x: Tensor) -> Tensor:
    """Shifted softplus ssp(x) = ln(0.5 e^x + 0.5) = softplus(x) − ln 2 (Schütt et al. 2018)."""
    return torch.nn.functional.softplus(x) - math.log(2.0)


@POTENTIALS.register("schnet")
class SchNetPotential(LocalPotential):
    """SchNet with randomly initialised weights; the Hessian reaches K = 2L hops.

    Architecture (Schütt, Sauceda, Kindermans, Tkatchenko, Müller 2018, "SchNet – A deep
    learning architecture for molecules and materials", J. Chem. Phys. 148, 241722, Fig. 2 and
    Sec. II; layer layout as in schnetpack):

    - embedding x_i⁰ = A[Z_i] ∈ R^F (one row per element of ``elements``);
    - L interaction blocks, each: y = x W_in (atom-wise, no bias);
      filter W(r_ij) = ssp(e(r_ij) W_f1 + b_f1) W_f2 + b_f2, times u(r_ij / rc), with the
      Gaussian expansion e_k(r) = exp(−γ (r − μ_k)²); continuous-filter convolution
      c_i = Σ_{j ∈ N(i)} y_j ⊙ W(r_ij) over the pair list in both directions;
      v_i = ssp(c_i W_o1 + b_o1) W_o2 + b_o2; residual x_i ← x_i + v_i;
    - readout E = Σ_i [ssp(x_i W_r1 + b_r1) W_r2 + b_r2] (F → F/2 → 1, atom-wise, summed).

    Weights are drawn once from ``torch.Generator().manual_seed(seed)`` (Glorot-uniform
    weights and zero biases, as schnetpack initializes them; embedding N(0, 1)). Trained weights
    are not needed: the timing of a Hessian depends only on the architecture and the sparsity
    pattern, and its correctness is checked against the dense Hessian of the same function,
    whatever the weights.

    Locality: x_i after block l depends on the positions of atoms within l hops of i in the
    cutoff graph (block 1 reads r_ij of i's neighbours; block l reads x_j^(l-1) of neighbours).
    With an atom-wise readout E_i depends on the atoms within L hops of i, and a Hessian block
    H[a, b] = Σ_i ∂²E_i/∂a∂b is nonzero only if a and b are both within L hops of some i, i.e.
    at most 2L hops apart: ``hops = 2L``. (The envelope makes every filter vanish, with two
    derivatives, at rc, so no contribution leaks through pairs that leave the cutoff.)
    """

    Params = SchNetParams
    seeded = True  # the section's seed draws the weights unless the spec sets ``seed``

    def __init__(
        self,
        atoms: ase.Atoms,
        params: SchNetParams | None = None,
        *,
        dtype: torch.dtype = torch.float64,
        device: torch.device | str | None = None,
    ) -> None:
        super().__init__(atoms, params, dtype=dtype, device=device)
        p = self.params
        if p.n_interactions < 1 or p.n_features < 2 or p.n_rbf < 2:
            raise ValueError(
                "SchNet needs n_interactions >= 1, n_features >= 2, n_rbf >= 2; got "
                f"{p.n_interactions}, {p.n_features}, {p.n_rbf}"
            )
        self.hops = 2 * p.n_interactions

        lookup = torch.full((max(max(p.elements), 0) + 1,), -1, dtype=torch.long)
        lookup[list(p.elements)] = torch.arange(len(p.elements))
        numbers = atoms.numbers
        if np.any(numbers >= len(lookup)) or np.any(lookup[numbers].numpy() < 0):
            missing = sorted(set(numbers.tolist()) - set(p.elements))
            raise ValueError(f"no embedding for atomic numbers {missing}; elements={p.elements}")
        self.species = lookup[torch.as_tensor(numbers)].to(self.device)
        # Both directions of every pair: messages go j -> i along (src[e], dst[e]).
        self.dst = torch.cat([self.pairs[0], self.pairs[1]])
        self.src = torch.cat([self.pairs[1], self.pairs[0]])

        F, R = p.n_features, p.n_rbf
        gen = torch.Generator().manual_seed(p.seed)

        def linear(n_in: int, n_out: int, bias: bool = True) -> dict[str, Tensor]:
            # schnetpack's Dense init: Xavier/Glorot-uniform weights, zero biases.
            bound = math.sqrt(6.0 / (n_in + n_out))
            w = (torch.rand(n_in, n_out, generator=gen, dtype=torch.float64) * 2 - 1) * bound
            out = {"w": w}
            if bias:
                out["b"] = torch.zeros(n_out, dtype=torch.float64)
            return out

        self.embedding = torch.randn(len(p.elements), F, generator=gen, dtype=torch.float64)
        self.layers: list[dict[str, Tensor]] = []
        for _ in range(p.n_interactions):
            layer: dict[str, Tensor] = {}
            for name, (n_in, n_out, bias) in {
                "in": (F, F, False),
                "f1": (R, F, True),
                "f2": (F, F, True),
                "o1": (F, F, True),
                "o2": (F, F, True),
            }.items():
                for k, v in linear(n_in, n_out, bias).items():
                    layer[f"{name}_{k}"] = v
            self.layers.append(layer)
        r1, r2 = linear(F, F // 2), linear(F // 2, 1)
        self.readout = {"r1_w": r1["w"], "r1_b": r1["b"], "r2_w": r2["w"], "r2_b": r2["b"]}
        self.rbf_centers = torch.linspace(0.0, self.cutoff, R, dtype=torch.float64)
        spacing = self.cutoff / (R - 1)
        self.rbf_gamma = 0.5 / spacing**2
        self.to(self.device, dtype)

    def energy(self, positions: Tensor) -> Tensor:
        """Total SchNet energy (arbitrary units, 0-d tensor) of positions (N, 3) in Å."""
        # Filters depend on r_ij = r_ji only: compute them once per pair, then use them for
        # both directions (dst, src) = (i, j) and (j, i).
        r = self.distances(positions)  # (P,)
        rbf = torch.exp(-self.rbf_gamma * (r[:, None] - self.rbf_centers) ** 2)  # (P, R)
        envelope = smooth_cutoff(r, self.cutoff, self.params.p)[:, None]  # (P, 1)
        x = self.embedding.index_select(0, self.species)  # (N, F)
        for layer in self.layers:
            w = _ssp(rbf @ layer["f1_w"] + layer["f1_b"]) @ layer["f2_w"] + layer["f2_b"]
            y = x @ layer["in_w"]
            w = w * envelope
            msg = y.index_select(0, self.src) * torch.cat([w, w])  # (2P, F)
            conv = torch.zeros_like(y).index_add(0, self.dst, msg)  # (N, F)
            v = _ssp(conv @ layer["o1_w"] + layer["o1_b"]) @ layer["o2_w"] + layer["o2_b"]
            x = x + v
        ro = self.readout
        per_atom = _ssp(x @ ro["r1_w"] + ro["r1_b"]) @ ro["r2_w"] + ro["r2_b"]  # (N, 1)
        return per_atom.sum()


def build_potential(
    kind: str,
    atoms: ase.Atoms,
    *,
    dtype: torch.dtype = torch.float64,
    device: torch.device | str | None = None,
    **params: Any,
) -> LocalPotential:
    """Build ``POTENTIALS[kind]`` on ``atoms`` with its ``Params(**params)``.

    Unknown ``kind`` or parameter names raise ValueError listing the allowed ones.
    """
    cls = POTENTIALS.get(kind)  # CatalogError (a ValueError) naming the allowed ones
    names = {f.name for f in fields(cls.Params)}
    unknown = sorted(set(params) - names)
    if unknown:
        raise ValueError(
            f"unknown parameters {unknown} for potential {kind!r}; allowed: {sorted(names)}"
        )
    if "elements" in params:
        params["elements"] = tuple(params["elements"])
    # Same type rules as method parameters in specs (the registry's checker).
    hints = typing.get_type_hints(cls.Params)
    for name, value in params.items():
        if not type_ok(value, hints[name]):
            raise ValueError(
                f"parameter {name!r} of potential {kind!r} has value {value!r} "
                f"({type(value).__name__}); expected {describe_type(hints[name])}"
            )
    return cls(atoms, cls.Params(**params), dtype=dtype, device=device)
