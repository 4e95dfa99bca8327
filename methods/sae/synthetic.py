"""Synthetic activations with a known dictionary: n true features in d < n dimensions
(superposition, Elhage et al. 2022), sparse, with power-law frequencies and magnitudes, and
bipolar features (one direction used with both signs, i.e. an anticorrelated pair of
features ±f that never fire together), so that an SAE's decoder can be scored against the
truth (MCC, recovery rate) and so can the pairs it recovers with one signed latent
(metrics.pair_recovery).

Generation (ours, in the spirit of SAELens' synthetic-data module and Elhage et al. 2022):

* dictionary D (n, d): rows i.i.d. uniform on the unit sphere (Gaussian, normalised);
* feature i fires on a token independently with probability p_i = p_max · (i + 1)^(−α);
* when it fires its magnitude is c_i · u, u ~ Uniform(0.5, 1.5), c_i = (i + 1)^(−β);
* the first ``n_bipolar`` features are bipolar: their sign is ±1 with probability ½ each
  (the others are positive);
* x = Σ_i s_i c_i u_i D_i + σ ε, ε ~ N(0, I_d).

Everything is a function of the seed (CPU ``torch.Generator``s seeded by offsets of it, so
that an SAE initialised with the same seed does not start on the true dictionary).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

DICT_SEED, TOKEN_SEED = 1_000_003, 2_000_003  # offsets of the seed (see the module docstring)


@dataclass(frozen=True)
class SyntheticConfig:
    """Parameters of the generator (defaults: ours, a CPU-sized superposition problem).

    Attributes:
        n_features: true features n.
        d: activation dimension (d < n: superposition).
        p_max: firing probability of the most frequent feature.
        freq_exponent: α of p_i ∝ (i + 1)^(−α).
        mag_exponent: β of c_i = (i + 1)^(−β).
        n_bipolar: features used with both signs (the first ones).
        noise: σ of the isotropic Gaussian noise.
    """

    n_features: int = 512
    d: int = 64
    p_max: float = 0.05
    freq_exponent: float = 0.5
    mag_exponent: float = 0.25
    n_bipolar: int = 64
    noise: float = 0.0

    def validate(self) -> None:
        if not 1 <= self.d:
            raise ValueError(f"d must be >= 1, got {self.d}")
        if self.n_features < 1:
            raise ValueError(f"n_features must be >= 1, got {self.n_features}")
        if not 0 < self.p_max <= 1:
            raise ValueError(f"p_max must be in (0, 1], got {self.p_max}")
        if not 0 <= self.n_bipolar <= self.n_features:
            raise ValueError(f"n_bipolar must be in [0, n_features], got {self.n_bipolar}")
        if self.noise < 0:
            raise ValueError(f"noise must be >= 0, got {self.noise}")


def true_dictionary(cfg: SyntheticConfig, seed: int) -> torch.Tensor:
    """D, shape (n_features, d), unit-norm rows."""
    cfg.validate()
    g = torch.Generator().manual_seed(DICT_SEED + int(seed))
    w = torch.randn(cfg.n_features, cfg.d, generator=g)
    return w / w.norm(dim=1, keepdim=True)


def frequencies(cfg: SyntheticConfig) -> torch.Tensor:
    """p_i, shape (n_features,)."""
    i = torch.arange(cfg.n_features, dtype=torch.float64)
    return (cfg.p_max * (i + 1) ** (-cfg.freq_exponent)).float()


def sample(
    cfg: SyntheticConfig, n_tokens: int, seed: int, dictionary: torch.Tensor | None = None
) -> tuple[torch.Tensor, torch.Tensor]:
    """(x (n_tokens, d), codes (n_tokens, n_features)): tokens and their true signed feature
    activations s_i c_i u_i (zero where a feature does not fire). ``dictionary`` defaults to
    :func:`true_dictionary` of the same seed; the tokens use their own generator."""
    cfg.validate()
    d = true_dictionary(cfg, seed) if dictionary is None else dictionary
    g = torch.Generator().manual_seed(TOKEN_SEED + int(seed))
    n = cfg.n_features
    fires = torch.rand(n_tokens, n, generator=g) < frequencies(cfg)
    mag = (torch.rand(n_tokens, n, generator=g) + 0.5) * (
        torch.arange(1, n + 1, dtype=torch.float32) ** (-cfg.mag_exponent)
    )
    sign = torch.ones(n_tokens, n)
    if cfg.n_bipolar:
        flip = torch.rand(n_tokens, cfg.n_bipolar, generator=g) < 0.5
        sign[:, : cfg.n_bipolar] = torch.where(flip, -1.0, 1.0)
    codes = fires * mag * sign
    x = codes @ d
    if cfg.noise:
        x = x + cfg.noise * torch.randn(n_tokens, cfg.d, generator=g)
    return x, codes
