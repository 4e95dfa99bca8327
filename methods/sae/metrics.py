"""SAE metrics, each defined next to its code with its source. Inputs x (n, d), x̂ (n, d),
latents z (n, m); every quantity is over tokens (rows).

Known published bugs these definitions avoid: explained variance about zero instead of about
the mean (SAELens issue #659: a constant offset in x inflates EV, e.g. 0.78 -> 0.98); the
JumpReLU threshold applied twice in the L0 term (dictionary_learning #55; see jumprelu.py);
the decoder bias added twice in AuxK (sparsify #132; see topk.py).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import torch


@dataclass
class ReconstructionStats:
    """Streaming sums for MSE, explained variance and FVU over batches of tokens.

    EV = 1 − E‖x − x̂‖² / E‖x − E[x]‖², numerator and denominator each averaged over all
    tokens before the ratio (not a mean of per-token or per-batch ratios), E[x] the mean
    token of the evaluated set (the variance about the mean, not about zero: SAELens #659).
    FVU = 1 − EV (fraction of variance unexplained). MSE = E‖x − x̂‖² (summed over d).
    """

    n: int = 0
    sq_err: float = 0.0  # Σ ‖x − x̂‖²
    sq_norm: float = 0.0  # Σ ‖x‖²
    total: torch.Tensor | None = None  # Σ x, (d,) float64

    def update(self, x: torch.Tensor, x_hat: torch.Tensor) -> None:
        x64, xh = x.detach().double(), x_hat.detach().double()
        self.n += x.shape[0]
        self.sq_err += float((x64 - xh).pow(2).sum())
        self.sq_norm += float(x64.pow(2).sum())
        s = x64.sum(0).cpu()
        self.total = s if self.total is None else self.total + s

    @property
    def mse(self) -> float:
        return self.sq_err / self.n if self.n else float("nan")

    @property
    def variance(self) -> float:
        """E‖x − E[x]‖² = E‖x‖² − ‖E[x]‖²."""
        if not self.n:
            return float("nan")
        mean = self.total / self.n
        return self.sq_norm / self.n - float(mean.pow(2).sum())

    @property
    def explained_variance(self) -> float:
        var = self.variance
        return 1.0 - self.mse / var if var > 0 else float("nan")

    @property
    def fvu(self) -> float:
        return 1.0 - self.explained_variance


def explained_variance(x: torch.Tensor, x_hat: torch.Tensor) -> float:
    """EV of one batch (see :class:`ReconstructionStats`)."""
    s = ReconstructionStats()
    s.update(x, x_hat)
    return s.explained_variance


def l0(z: torch.Tensor) -> float:
    """Mean over tokens of the number of nonzero latents (negative ones count: signed SAEs)."""
    return float((z != 0).sum(-1).double().mean())


@dataclass
class FiringStats:
    """Per-latent firing counts over evaluated tokens, and the training loop's dead window.

    ``update(z)`` counts, per latent, tokens where z ≠ 0 (and, for signed SAEs, where z > 0
    and z < 0 apart)."""

    width: int
    n: int = 0
    fires: torch.Tensor = field(init=False)
    pos: torch.Tensor = field(init=False)
    neg: torch.Tensor = field(init=False)

    def __post_init__(self) -> None:
        self.fires = torch.zeros(self.width, dtype=torch.long)
        self.pos = torch.zeros(self.width, dtype=torch.long)
        self.neg = torch.zeros(self.width, dtype=torch.long)

    def update(self, z: torch.Tensor) -> None:
        z = z.detach().cpu()
        self.n += z.shape[0]
        self.fires += (z != 0).sum(0)
        self.pos += (z > 0).sum(0)
        self.neg += (z < 0).sum(0)

    def frequency(self) -> torch.Tensor:
        """Fraction of tokens on which each latent fires, (m,)."""
        return self.fires.double() / max(1, self.n)

    def dense_fraction(self, above: float) -> float:
        """Fraction of latents firing on more than ``above`` of the tokens (0.01, 0.1: the
        dense latents of Gao et al. 2024 and SAEBench)."""
        return float((self.frequency() > above).double().mean())

    def bipolar_fraction(self, min_share: float = 0.1) -> float:
        """Among latents that fire, the fraction whose positive and negative activations each
        make up at least ``min_share`` of their firings (ours: 10 %); 0 for unsigned SAEs."""
        alive = self.fires > 0
        if not bool(alive.any()):
            return 0.0
        share = torch.minimum(self.pos, self.neg).double() / self.fires.clamp_min(1).double()
        return float((share[alive] >= min_share).double().mean())


def dead_fraction(tokens_since_fire: torch.Tensor, window: int) -> float:
    """Fraction of latents that have not fired on any of the last ``window`` training tokens:
    ``tokens_since_fire`` (m,) counts, per latent, the training tokens seen since it last fired
    (the training loop keeps it). Gao et al. 2024 use a 10M-token window; ours is in
    docs/sae.md."""
    return float((tokens_since_fire >= window).double().mean())


def shrinkage(x: torch.Tensor, x_hat: torch.Tensor) -> float:
    """Relative reconstruction bias γ = E‖x̂‖² / E⟨x̂, x⟩ (Rajamanoharan et al. 2024a, Sec. 5.1:
    the γ minimising E‖x̂/γ − x‖²): 1 for an unbiased SAE, below 1 when an L1 penalty shrinks
    the activations."""
    xh, x64 = x_hat.detach().double(), x.detach().double()
    return float(xh.pow(2).sum(-1).mean() / (xh * x64).sum(-1).mean())


def loss_recovered(ce_clean: float, ce_sae: float, ce_zero: float) -> float | None:
    """(CE_zero-ablation − CE_SAE) / (CE_zero-ablation − CE_clean): 1 when splicing x̂ into the
    forward pass costs nothing, 0 when it is as bad as zeroing the hookpoint (Bricken et al.
    2023; SAEBench's "CE loss score"); None when zero-ablation costs nothing (undefined)."""
    den = ce_zero - ce_clean
    return (ce_zero - ce_sae) / den if den != 0 else None


def kl_recovered(kl_sae: float, kl_zero: float) -> float | None:
    """(KL_zero − KL_SAE) / KL_zero, with KL the mean over tokens of KL(p_clean ‖ p_spliced) of
    the next-token distributions (SAEBench's "KL divergence score"); None when KL_zero = 0."""
    return (kl_zero - kl_sae) / kl_zero if kl_zero != 0 else None


def _unit_rows(w: torch.Tensor) -> torch.Tensor:
    w = w.detach().double().cpu()
    return w / w.norm(dim=1, keepdim=True).clamp_min(1e-12)


def dictionary_match(decoder: torch.Tensor, true_dict: torch.Tensor) -> np.ndarray:
    """|cos| between each true feature (n, d) and its latent (rows of W_dec, (m, d)) under the
    one-to-one assignment maximising the summed |cos| (Hungarian algorithm, scipy's
    ``linear_sum_assignment``), shape (n,); a true feature left without a latent (m < n) gets
    0. |cos| because a signed latent may represent a feature with either sign."""
    from scipy.optimize import linear_sum_assignment

    cos = (_unit_rows(true_dict) @ _unit_rows(decoder).T).abs().numpy()  # (n, m)
    rows, cols = linear_sum_assignment(-cos)
    out = np.zeros(cos.shape[0])
    out[rows] = cos[rows, cols]
    return out


def mcc(decoder: torch.Tensor, true_dict: torch.Tensor) -> float:
    """Mean correlation coefficient of the dictionary: the mean over true features of their
    matched |cos| (:func:`dictionary_match`), in [0, 1]; 1 when every true direction is a
    latent's (Sharkey et al. 2022's mean max cosine similarity, with a one-to-one matching)."""
    return float(dictionary_match(decoder, true_dict).mean())


def recovery_rate(decoder: torch.Tensor, true_dict: torch.Tensor, threshold: float = 0.9) -> float:
    """Fraction of true features whose matched latent has |cos| ≥ ``threshold`` (ours: 0.9)."""
    return float((dictionary_match(decoder, true_dict) >= threshold).mean())


def _pair_scores(
    decoder: torch.Tensor,
    true_dict: torch.Tensor,
    z: torch.Tensor,
    codes: torch.Tensor,
    n_pairs: int,
    threshold: float,
    min_share: float,
) -> tuple[np.ndarray, np.ndarray]:
    """(matched, signed), bool per scored pair (:func:`pair_recovery`)."""
    cos = (_unit_rows(true_dict[:n_pairs]) @ _unit_rows(decoder).T).numpy()  # (pairs, m)
    z, codes = z.detach().double().cpu(), codes.detach().double().cpu()
    matched, signed = [], []
    for i in range(n_pairs):
        pos, neg = codes[:, i] > 0, codes[:, i] < 0
        if not bool(pos.any()) or not bool(neg.any()):
            continue  # both signs must occur among the tokens to be tested
        cands = np.flatnonzero(np.abs(cos[i]) >= threshold)
        ok = False
        for j in cands:
            s = z[:, j] * float(np.sign(cos[i, j]))  # the latent's sign along the pair direction
            up = float((s[pos] > 0).double().mean())
            down = float((s[neg] < 0).double().mean())
            ok = ok or (up >= min_share and down >= min_share)
        matched.append(cands.size > 0)
        signed.append(ok)
    return np.array(matched, dtype=bool), np.array(signed, dtype=bool)


def pair_recovery(
    decoder: torch.Tensor,
    true_dict: torch.Tensor,
    z: torch.Tensor,
    codes: torch.Tensor,
    n_pairs: int,
    threshold: float = 0.9,
    min_share: float = 0.5,
) -> float | None:
    """Fraction of the true anticorrelated pairs that one latent recovers with its sign.

    A pair is a true feature used with both signs (the first ``n_pairs`` rows of
    ``true_dict``, (n, d); methods/sae/synthetic.py: one direction D_i, active as +D_i or
    −D_i, never both). ``z`` (N, m) are the SAE's latents and ``codes`` (N, n) the true signed
    codes of the same tokens; ``decoder`` (m, d). Pair i is recovered when some latent j

    * is matched: |cos(W_dec[j], D_i)| ≥ ``threshold`` (the pillar passes the recovery rate's,
      0.9; any latent, not only the one the one-to-one matching assigns, so a duplicate latent
      cannot hide a signed one), and
    * fires with the pair's sign: with σ = sign(cos(W_dec[j], D_i)), σ z_j > 0 on at least
      ``min_share`` of the tokens where the pair is active with + (codes_i > 0) and σ z_j < 0
      on at least ``min_share`` of those where it is active with − (ours: a majority, 0.5).

    One latent only: an SAE whose latents are non-negative (ReLU, TopK, BatchTopK, JumpReLU,
    Gated, Matryoshka) scores 0 by construction; it can represent a pair only by two latents,
    d and −d, which :func:`pair_recovery_any` counts. Pairs without tokens of both signs are
    left out; None when no pair is left (e.g. a source without pairs). All choices: ours."""
    _, signed = _pair_scores(decoder, true_dict, z, codes, n_pairs, threshold, min_share)
    return float(signed.mean()) if signed.size else None


def pair_recovery_any(
    decoder: torch.Tensor,
    true_dict: torch.Tensor,
    z: torch.Tensor,
    codes: torch.Tensor,
    n_pairs: int,
    threshold: float = 0.9,
) -> float | None:
    """The matched part of :func:`pair_recovery` alone: the fraction of the same pairs with
    some latent at |cos| ≥ ``threshold``, whatever its signs (the same pairs: those with tokens
    of both signs; so that a pair recovery of 0
    tells a direction never learned from one learned without its sign)."""
    matched, _ = _pair_scores(decoder, true_dict, z, codes, n_pairs, threshold, 0.5)
    return float(matched.mean()) if matched.size else None


def top_latents(z: torch.Tensor, y: torch.Tensor, k: int) -> torch.Tensor:
    """Indices of the k latents whose mean activation differs most between the two classes
    of the binary labels y (n,) (Gurnee et al. 2023's selection, as SAEBench's sparse probing)."""
    z = z.detach().double()
    y = y.bool()
    if bool(y.all()) or not bool(y.any()):
        raise ValueError("sparse probing needs both classes in the training labels")
    diff = (z[y].mean(0) - z[~y].mean(0)).abs()
    return torch.topk(diff, min(k, z.shape[1])).indices


def sparse_probe_accuracy(
    z_train: torch.Tensor,
    y_train: torch.Tensor,
    z_test: torch.Tensor,
    y_test: torch.Tensor,
    k: int,
    seed: int = 0,
) -> float:
    """Balanced test accuracy (the mean of the two classes' recalls; chance is 0.5 at any class
    ratio) of a logistic-regression probe (scikit-learn, L2, C = 1, class-balanced weights) on
    the k latents :func:`top_latents` picks on the training tokens (k ∈ {1, 2, 5} in the
    board). SAEBench balances its probing datasets and reports accuracy; our token-level tasks
    are imbalanced (a comment covers ~15 % of the bytes), so we balance in the loss and the
    score instead (ours)."""
    from sklearn.linear_model import LogisticRegression
    from sklearn.metrics import balanced_accuracy_score

    idx = top_latents(z_train, y_train, k)
    clf = LogisticRegression(max_iter=1000, random_state=seed, class_weight="balanced")
    clf.fit(z_train[:, idx].double().cpu().numpy(), y_train.cpu().numpy())
    pred = clf.predict(z_test[:, idx].double().cpu().numpy())
    return float(balanced_accuracy_score(y_test.cpu().numpy(), pred))
