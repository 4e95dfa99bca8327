"""Star coloring of symmetric sparsity patterns and direct recovery of Hessians.

The "prepare" half of the prepare/evaluate split (as in asdex and SparseMatrixColorings.jl): a
symmetric pattern P (n × n) is colored once, and every later Hessian H with that pattern is read
from the compressed product ``B = H @ seed_matrix(colors)`` (n × C, C HVPs instead of n).

References:
    [GMP05] A. H. Gebremedhin, F. Manne, A. Pothen, "What color is your Jacobian? Graph coloring
        for computing derivatives", SIAM Review 47(4), 629-705, 2005. Sec. 4: star coloring
        (distance-1 coloring in which every path on four vertices uses at least three colors)
        is the model of direct recovery of a symmetric matrix; greedy distance-2 coloring.
    [GTMP07] A. H. Gebremedhin, A. Tarafdar, F. Manne, A. Pothen, "New acyclic and star coloring
        algorithms with application to computing Hessians", SIAM J. Sci. Comput. 29(3),
        1042-1072, 2007. Algorithm 4.1: greedy star coloring that maintains the 2-colored stars
        and their hubs (the algorithm behind ColPack's STAR and SparseMatrixColorings.jl's
        ``star_coloring``).

Graph conventions: vertex i is row/column i of P; i and j (i != j) are adjacent iff P[i, j] is
stored and nonzero; the diagonal is ignored for adjacency (it is still recovered).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import networkx as nx
import numpy as np
import scipy.sparse as sp
from scipy.sparse.csgraph import connected_components

if TYPE_CHECKING:
    import torch

ORDERS = ("natural", "largest_first", "smallest_last")
ALGORITHMS = ("star", "distance2")


class ColoringError(ValueError):
    """A coloring is not a (valid) star coloring of the pattern it is used with."""


# --------------------------------------------------------------------------- pattern helpers


def _symmetric_pattern(pattern: sp.spmatrix | sp.sparray | np.ndarray) -> sp.csr_array:
    """Canonical boolean CSR (sorted, no duplicates, no explicit zeros) of a square symmetric
    pattern, diagonal kept. Raises ValueError if non-square or non-symmetric."""
    p = sp.csr_array(pattern if sp.issparse(pattern) else np.asarray(pattern)).astype(bool)
    if p.ndim != 2 or p.shape[0] != p.shape[1]:
        raise ValueError(f"pattern must be square, got shape {p.shape}")
    p.sum_duplicates()
    p.eliminate_zeros()  # a stored False/0 is not a structural nonzero
    if (p != p.T).nnz:
        raise ValueError("pattern must be structurally symmetric")
    p.sort_indices()
    return p


def _off_diagonal(p: sp.csr_array) -> sp.csr_array:
    """The adjacency graph of a canonical pattern: P without its diagonal (canonical CSR)."""
    a = p.copy()
    a.setdiag(False)
    a.eliminate_zeros()
    a.sort_indices()
    return a


def _mirror(adj: sp.csr_array) -> np.ndarray:
    """For each CSR slot of (i, j) in a symmetric canonical ``adj``, the slot of (j, i)."""
    slots = sp.csr_array(
        (np.arange(1, adj.nnz + 1), adj.indices, adj.indptr), shape=adj.shape
    )  # 1-based so that no slot id is a (droppable) zero
    t = slots.T.tocsr()
    t.sort_indices()
    return t.data.astype(np.int64) - 1  # same structure as adj since adj is symmetric


def _gather(indptr: np.ndarray, verts: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """CSR slots of all neighbours of ``verts`` (concatenated), and the index into ``verts``
    owning each slot: the vectorized form of "for w in verts: for x in N(w)"."""
    starts = indptr[verts]
    lens = indptr[verts + 1] - starts
    ends = np.cumsum(lens)
    slots = np.repeat(starts - (ends - lens), lens) + np.arange(ends[-1] if lens.size else 0)
    return slots, np.repeat(np.arange(verts.size), lens)


def _vertex_order(adj: sp.csr_array, order: str) -> np.ndarray:
    """Vertices in the order the greedy algorithm colors them (networkx's strategies)."""
    if order not in ORDERS:
        raise ValueError(f"unknown order {order!r}; allowed: {', '.join(ORDERS)}")
    n = adj.shape[0]
    if order == "natural":
        return np.arange(n, dtype=np.int64)
    g = nx.from_scipy_sparse_array(adj)  # adj has no diagonal: self-loops would inflate degrees
    strategy = {
        "largest_first": nx.algorithms.coloring.strategy_largest_first,
        "smallest_last": nx.algorithms.coloring.strategy_smallest_last,
    }[order]
    return np.fromiter(strategy(g, {}), dtype=np.int64, count=n)


def _first_free(forbidden: np.ndarray, v: int, n_used: int) -> int:
    """Smallest color c with forbidden[c] != v (colors above n_used are all free)."""
    return int(np.argmax(forbidden[: n_used + 1] != v))


def _check_colors(colors: np.ndarray, n: int) -> np.ndarray:
    colors = np.asarray(colors)
    if colors.shape != (n,) or not np.issubdtype(colors.dtype, np.integer):
        raise ValueError(
            f"colors must be an integer array of shape ({n},), got {colors.dtype} {colors.shape}"
        )
    if n and colors.min() < 0:
        raise ColoringError(f"vertex {int(np.argmin(colors))} is uncolored (negative color)")
    return colors.astype(np.int64, copy=False)


# --------------------------------------------------------------------------- colorings


def star_coloring(pattern: sp.spmatrix | sp.sparray, order: str = "natural") -> np.ndarray:
    """Greedy star coloring of a symmetric pattern, [GTMP07] Algorithm 4.1.

    Vertices are colored in ``order``, each with the smallest color that keeps the partial
    coloring a star coloring. Instead of searching all paths on four vertices, the algorithm
    keeps every edge between colored vertices in a 2-colored star (a bicolored connected
    component, which in a star coloring is a star) with its hub. Coloring v forbids:

    - the colors of its colored neighbours w (distance-1);
    - Case 1: if v has two neighbours w, q of the same color, v must become the hub of their
      star, so the colors of all colored neighbours of w and q are forbidden ("treat");
    - Case 2: if w is v's only neighbour of its color, the color of every neighbour x of w that
      is the hub of the star containing edge wx (else v-w-x-leaf would be a bicolored P4).

    Then the stars are updated ("updateStars"): v-w joins the star of w-x if some x != v adjacent
    to w has v's color (hub w), or the star of v-q if v has another neighbour q of w's color
    (hub v), or starts a new single-edge star with undefined hub. The forbidden set of one vertex
    does not depend on the order in which its neighbours are visited, so each vertex's step is
    vectorized over its neighbourhood (numpy) instead of looping over neighbours.

    Args:
        pattern: (n, n) square, structurally symmetric sparse pattern (stored nonzeros); the
            diagonal is ignored.
        order: one of ``ORDERS``: "natural" (0..n-1), "largest_first" or "smallest_last"
            (networkx's strategies on the adjacency graph).
    Returns: (n,) int64 colors, 0-based.
    Raises: ValueError if the pattern is not square/symmetric or ``order`` is unknown.
    """
    adj = _off_diagonal(_symmetric_pattern(pattern))
    return _star_coloring(adj, _vertex_order(adj, order))


def _star_coloring(adj: sp.csr_array, verts: np.ndarray) -> np.ndarray:
    n = adj.shape[0]
    indptr = adj.indptr.astype(np.int64)
    indices = adj.indices.astype(np.int64)
    mirror = _mirror(adj)
    color = np.full(n, -1, dtype=np.int64)
    star = np.full(indices.size, -1, dtype=np.int64)  # star id per CSR slot, both slots of an edge
    hub = np.full(indices.size // 2 + 1, -1, dtype=np.int64)  # <= one new star per edge; -1: none
    n_stars = 0
    forbidden = np.full(n + 1, -1, dtype=np.int64)  # forbidden[c] == v: c forbidden for v
    n_used = 0
    for v in verts:
        v = int(v)
        lo, hi = indptr[v], indptr[v + 1]
        nbrs = indices[lo:hi]
        is_colored = color[nbrs] >= 0
        w = nbrs[is_colored]
        if w.size == 0:
            color[v] = 0
            n_used = max(n_used, 1)
            continue
        slot_vw = np.arange(lo, hi)[is_colored]
        cw = color[w]
        forbidden[cw] = v
        _, cls, cnt = np.unique(cw, return_inverse=True, return_counts=True)
        repeated = cnt[cls] >= 2  # w shares its color with another neighbour of v: Case 1
        slots, owner = _gather(indptr, w)
        x = indices[slots]
        cx = color[x]
        live = (cx >= 0) & (x != v)
        case1 = live & repeated[owner]
        sid = star[slots]  # every edge between colored vertices already lies in a star
        case2 = live & ~repeated[owner] & (sid >= 0)
        case2[case2] = hub[sid[case2]] == x[case2]
        forbidden[cx[case1 | case2]] = v
        c = _first_free(forbidden, v, n_used)
        color[v] = c
        n_used = max(n_used, c + 1)

        # updateStars(v). A repeated-color w was "treated", so no x of color c hangs off it.
        has_x = np.flatnonzero(live & (cx == c))
        joined, first = np.unique(owner[has_x], return_index=True)
        if joined.size:  # v-w joins the star of w-x, whose hub becomes (or already is) w
            s = star[slots[has_x[first]]]
            hub[s] = w[joined]
            star[slot_vw[joined]] = s
            star[mirror[slot_vw[joined]]] = s
        rest = np.ones(w.size, dtype=bool)
        rest[joined] = False
        r = np.flatnonzero(rest)
        if r.size:
            # one star hubbed at v per repeated color; one single-edge star per other w
            key = np.where(repeated[r], cls[r], cls.max() + 1 + np.arange(r.size))
            ukey, new = np.unique(key, return_inverse=True)
            hub[n_stars : n_stars + ukey.size] = np.where(ukey <= cls.max(), v, -1)
            star[slot_vw[r]] = n_stars + new
            star[mirror[slot_vw[r]]] = n_stars + new
            n_stars += ukey.size
    return color


def distance2_coloring(pattern: sp.spmatrix | sp.sparray, order: str = "natural") -> np.ndarray:
    """Greedy distance-2 coloring ([GMP05] Algorithm 3.1): vertices at distance <= 2 get
    different colors. Every distance-2 coloring is a star coloring (a P4 a-b-c-d has a, b, c
    pairwise and b, c, d pairwise distinct), but usually with more colors: a reference point,
    and recovery from it never needs the symmetric fallback.

    Args / Raises: as :func:`star_coloring`. Returns: (n,) int64 colors, 0-based.
    """
    adj = _off_diagonal(_symmetric_pattern(pattern))
    indptr = adj.indptr.astype(np.int64)
    indices = adj.indices.astype(np.int64)
    n = adj.shape[0]
    color = np.full(n, -1, dtype=np.int64)
    forbidden = np.full(n + 1, -1, dtype=np.int64)
    n_used = 0
    for v in _vertex_order(adj, order):
        v = int(v)
        nbrs = indices[indptr[v] : indptr[v + 1]]
        slots, _ = _gather(indptr, nbrs)
        near = np.concatenate([color[nbrs], color[indices[slots]]])
        forbidden[near[near >= 0]] = v
        c = _first_free(forbidden, v, n_used)
        color[v] = c
        n_used = max(n_used, c + 1)
    return color


# --------------------------------------------------------------------------- validation


def check_star_coloring(pattern: sp.spmatrix | sp.sparray, colors: np.ndarray) -> None:
    """Check that ``colors`` is a star coloring of the pattern's graph, without any
    differentiation ([GMP05] Sec. 4 definition):

    1. distance-1: adjacent vertices have different colors;
    2. every path on four vertices uses at least 3 colors (no bicolored P4).

    (2) is checked per pair of colors: the subgraph of edges whose ends carry colors {a, b} is
    bipartite, so it has no bicolored P4 iff each of its connected components is a star (a tree
    in which one vertex touches every edge). All color pairs are handled in one
    connected-components call on copies (vertex, color pair) of the vertices: O(nnz log nnz).

    Args:
        pattern: (n, n) square symmetric sparse pattern; the diagonal is ignored.
        colors: (n,) integer colors, >= 0.
    Raises:
        ValueError: bad pattern, or ``colors`` of the wrong shape/dtype.
        ColoringError: a vertex is uncolored, two adjacent vertices share a color, or a path
            x-u-w-y is bicolored; the message names the vertices.
    """
    adj = sp.triu(_off_diagonal(_symmetric_pattern(pattern)), k=1, format="coo")
    n = adj.shape[0]
    colors = _check_colors(colors, n)
    i, j = adj.row.astype(np.int64), adj.col.astype(np.int64)
    ci, cj = colors[i], colors[j]
    clash = np.flatnonzero(ci == cj)
    if clash.size:
        e = clash[0]
        raise ColoringError(
            f"adjacent vertices {i[e]} and {j[e]} share color {ci[e]} ({clash.size} such edges)"
        )
    if i.size == 0:
        return
    k = int(colors.max()) + 1
    _, pair = np.unique(np.minimum(ci, cj) * k + np.maximum(ci, cj), return_inverse=True)
    # node copies: vertex u in the bicolored subgraph of pair p
    nodes, ends = np.unique(np.concatenate([pair * n + i, pair * n + j]), return_inverse=True)
    a, b = ends[: i.size], ends[i.size :]
    m = nodes.size
    g = sp.coo_array((np.ones(i.size, dtype=np.int8), (a, b)), shape=(m, m))
    n_comp, label = connected_components(g, directed=False)
    deg = np.bincount(ends, minlength=m)
    comp_nodes = np.bincount(label, minlength=n_comp)
    comp_edges = np.bincount(label[a], minlength=n_comp)
    comp_maxdeg = np.zeros(n_comp, dtype=np.int64)
    np.maximum.at(comp_maxdeg, label, deg)
    bad = np.flatnonzero((comp_edges != comp_nodes - 1) | (comp_maxdeg != comp_edges))
    if bad.size == 0:
        return
    # A non-star component has an edge u-w with both ends of degree >= 2 (on a cycle, or on the
    # path between two inner tree vertices); x-u-w-y is then a P4 (x != y: bipartite).
    in_bad = label[a] == bad[0]
    e = np.flatnonzero(in_bad & (deg[a] >= 2) & (deg[b] >= 2))[0]
    u, w = a[e], b[e]
    cand = np.flatnonzero(in_bad)
    nb_u = np.concatenate([b[cand][a[cand] == u], a[cand][b[cand] == u]])
    nb_w = np.concatenate([b[cand][a[cand] == w], a[cand][b[cand] == w]])
    x, y = nb_u[nb_u != w][0], nb_w[nb_w != u][0]
    path = [int(nodes[t] % n) for t in (x, u, w, y)]
    raise ColoringError(
        f"bicolored path {'-'.join(map(str, path))} with colors "
        f"{[int(colors[p]) for p in path]} ({bad.size} bicolored components are not stars)"
    )


# --------------------------------------------------------------------------- lift, seeds, recovery


def lift_coloring(atom_colors: np.ndarray, dim: int = 3) -> np.ndarray:
    """Coloring of the dim·N coordinates from a coloring of the N atoms:
    color(dim·a + d) = dim·c(a) + d.

    If ``atom_colors`` is a star coloring of an atom pattern P, the result is a star coloring of
    ``kron(P, ones((dim, dim)))``. Distance-1: coordinates of one atom differ in d, those of
    adjacent atoms in c(a). No bicolored P4: a bicolored path x1-x2-x3-x4 of coordinates has
    x1, x3 sharing (c, d) and x2, x4 sharing (c', d'). If x1, x2 belong to one atom then c = c'
    and every atom on the path equals that atom (adjacent atoms have distinct colors), so x1 and
    x3 would be the same coordinate. Otherwise c != c', consecutive atoms are distinct and
    adjacent, and atom(x1) != atom(x3), atom(x2) != atom(x4) (same atom and offset would be the
    same coordinate): a bicolored P4 of atoms, which the atom star coloring excludes.

    Args:
        atom_colors: (N,) int atom colors, 0-based.
        dim: coordinates per atom.
    Returns: (dim·N,) int64 coordinate colors (dim × the atom colors in number).
    Raises: ValueError if ``dim`` < 1.
    """
    if dim < 1:
        raise ValueError(f"dim must be >= 1, got {dim}")
    atom_colors = np.asarray(atom_colors, dtype=np.int64)
    return (dim * atom_colors[:, None] + np.arange(dim, dtype=np.int64)).reshape(-1)


def seed_matrix(colors: np.ndarray) -> np.ndarray:
    """Seed matrix S (n, C), C = max color + 1, float64 0/1: column c is the sum of the unit
    vectors of the vertices colored c, so ``H @ S`` costs C Hessian-vector products."""
    colors = np.asarray(colors, dtype=np.int64)
    s = np.zeros((colors.size, int(colors.max()) + 1 if colors.size else 0))
    s[np.arange(colors.size), colors] = 1.0
    return s


def star_recovery(
    pattern: sp.spmatrix | sp.sparray, colors: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Direct-recovery indices for a star coloring ([GMP05] Sec. 4): where to read every stored
    nonzero of H in B = H @ seed_matrix(colors) (n, C).

    B[i, c] is the sum of H[i, k] over stored k of color c. So H[i, j] = B[i, c(j)] if j is the
    only stored entry of row i with color c(j) (for the diagonal: no neighbour of i shares
    c(i)), else H[i, j] = H[j, i] = B[j, c(i)] if i is the only one of row j with color c(i).
    A star coloring guarantees one of the two for every edge (in a 2-colored star one end is a
    leaf or the hub of a single-edge star). Fully vectorized, O(nnz log nnz).

    Args:
        pattern: (n, n) square symmetric sparse pattern.
        colors: (n,) integer colors.
    Returns: ``(rows, cols, src_rows, src_colors)``, int64 arrays of length nnz(pattern) in
        canonical CSR order (both triangles and the stored diagonal):
        H[rows, cols] = B[src_rows, src_colors].
    Raises: ValueError for a bad pattern/colors shape; ColoringError naming (i, j) if neither
        read is possible (``colors`` is not a star coloring of the pattern).
    """
    p = _symmetric_pattern(pattern)
    n = p.shape[0]
    colors = _check_colors(colors, n)
    rows = np.repeat(np.arange(n, dtype=np.int64), np.diff(p.indptr))
    cols = p.indices.astype(np.int64)
    k = int(colors.max()) + 1 if n else 1
    key = rows * k + colors[cols]
    ukey, inv, cnt = np.unique(key, return_inverse=True, return_counts=True)
    alone = cnt[inv] == 1  # j alone in row i with its color: B[i, c(j)] = H[i, j]
    # (j, i) is stored, so its key is present: i alone in row j with c(i)?
    alone_t = cnt[np.searchsorted(ukey, cols * k + colors[rows])] == 1
    bad = np.flatnonzero(~alone & ((rows == cols) | ~alone_t))
    if bad.size:
        e = bad[0]
        raise ColoringError(
            f"entry ({rows[e]}, {cols[e]}) cannot be read from B: "
            + (
                "a neighbour of the vertex shares its color"
                if rows[e] == cols[e]
                else "neither vertex is the only one of its color among the other's neighbours"
            )
            + f" ({bad.size} such entries; not a star coloring)"
        )
    src_rows = np.where(alone, rows, cols)
    src_colors = np.where(alone, colors[cols], colors[rows])
    return rows, cols, src_rows, src_colors


# --------------------------------------------------------------------------- prepared coloring


@dataclass
class Coloring:
    """A validated coloring of one symmetric pattern with its recovery indices: prepare once,
    then ``decompress(H @ seed)`` for every Hessian with that pattern.

    Attributes:
        colors: (n,) int64 colors, 0-based.
        order: vertex order used by the greedy algorithm (one of ``ORDERS``).
        n_colors: C, columns of the seed matrix = HVPs per Hessian.
        rows, cols, src_rows, src_colors: (nnz,) int64, H[rows, cols] = B[src_rows, src_colors]
            (canonical CSR order of the pattern).
        algorithm: "star" ([GTMP07] Alg. 4.1) or "distance2" ([GMP05] Alg. 3.1).
    """

    colors: np.ndarray
    order: str
    n_colors: int
    rows: np.ndarray
    cols: np.ndarray
    src_rows: np.ndarray
    src_colors: np.ndarray
    algorithm: str = "star"

    @classmethod
    def prepare(
        cls, pattern: sp.spmatrix | sp.sparray, order: str = "natural", algorithm: str = "star"
    ) -> Coloring:
        """Color ``pattern`` (n, n), validate the coloring (no AD needed) and precompute the
        recovery indices.

        Raises: ValueError for a bad pattern, order or algorithm (one of ``ALGORITHMS``);
            ColoringError if the coloring is not a star coloring (a bug, never expected)."""
        if algorithm not in ALGORITHMS:
            raise ValueError(f"unknown algorithm {algorithm!r}; allowed: {', '.join(ALGORITHMS)}")
        color_fn = star_coloring if algorithm == "star" else distance2_coloring
        colors = color_fn(pattern, order)
        check_star_coloring(pattern, colors)
        rows, cols, src_rows, src_colors = star_recovery(pattern, colors)
        n_colors = int(colors.max()) + 1 if colors.size else 0
        return cls(colors, order, n_colors, rows, cols, src_rows, src_colors, algorithm)

    @property
    def n(self) -> int:
        return int(self.colors.size)

    @property
    def seed(self) -> np.ndarray:
        """(n, n_colors) seed matrix S of :func:`seed_matrix`."""
        return seed_matrix(self.colors)

    def decompress(self, b: np.ndarray | torch.Tensor) -> sp.csr_matrix:
        """The (n, n) sparse Hessian read directly from B = H @ seed, B of shape (n, n_colors)
        (numpy array or torch tensor, any device). Raises ValueError on a wrong shape."""
        if hasattr(b, "detach"):  # torch tensor, without importing torch here
            b = b.detach().cpu()
            b = (b.double() if str(b.dtype) == "torch.bfloat16" else b).numpy()
        b = np.asarray(b)
        if b.shape != (self.n, self.n_colors):
            raise ValueError(f"B must have shape ({self.n}, {self.n_colors}), got {b.shape}")
        indptr = np.concatenate([[0], np.cumsum(np.bincount(self.rows, minlength=self.n))])
        return sp.csr_matrix(
            (b[self.src_rows, self.src_colors], self.cols, indptr), shape=(self.n, self.n)
        )
