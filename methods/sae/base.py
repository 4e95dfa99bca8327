"""What every sparse-autoencoder architecture shares: its parameters, the pinned conventions
of this suite, and what one forward pass returns.

An SAE maps activations x (n, d) to latents z (n, m) and back, x̂ = z W_dec + b_dec (n, d).
Every architecture is an ``nn.Module`` subclass of :class:`SparseAutoencoder` with
``encode(x) -> z``, ``decode(z) -> x̂`` and ``forward(x, state) -> SAEOutput`` (the training
loss and its named parts); the shared training loop is :mod:`.training`.

Pinned conventions (one for every architecture, docs/sae.md lists where libraries differ):

* **input scaling**: activations are multiplied by one scalar fitted on the training set so
  that E‖x‖₂ = √d (Anthropic, "Circuits Updates, April 2024"; SAELens' ``normalize_activations
  = expected_average_only_in``); metrics are computed in the scaled space, where they are
  invariant to the scale anyway (EV, FVU, L0, dead fraction) or stated so (MSE);
* **decoder**: latent i's direction is row i of W_dec (m, d); initialised as random unit
  directions times ``dec_init_norm`` and W_enc = W_decᵀ (Gao et al. 2024, Sec. A.1; Anthropic's
  April 2024 update); b_enc = 0; b_dec = 0 here, moved to the geometric median of the
  training tokens by the training loop before the first step (Gao et al. 2024, Sec. A.1;
  ``TrainConfig.b_dec_init``);
* **unit-norm decoder** for the architectures whose papers constrain it (TopK, BatchTopK,
  Matryoshka, Gated, JumpReLU, sign-aware): rows renormalised after every optimiser step and
  the gradient component parallel to each row removed before it (Bricken et al. 2023); ReLU+L1
  leaves the norm free and weights its L1 by it (the April 2024 update);
* **dead latent**: a latent that has not fired (z ≠ 0) on any of the last ``dead_window``
  training tokens (Gao et al. 2024 use 10M tokens; we count in tokens too, default in
  :mod:`.training`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar

import torch
import torch.nn.functional as F
from torch import nn

from sparsebench.suite.method import Method


@dataclass
class SparseLatents:
    """The active latents of n tokens as (values, latent indices) instead of a dense (n, m) z:
    either k per token, ``values`` and ``indices`` (n, k), or any number per token, flat
    (nnz,) with ``rows`` (nnz,) the token of each entry in ascending order. A value may be 0
    (a kept pre-activation ≤ 0 through the ReLU): it decodes to nothing and has not fired.

    ``values`` carry the gradient: decoding from them gives the decoder a gradient on the
    active rows only and the encoder one through the kept values, as the dense z would."""

    values: torch.Tensor
    indices: torch.Tensor
    n: int
    width: int
    rows: torch.Tensor | None = None

    def dense(self) -> torch.Tensor:
        """z, shape (n, m): the values scattered into zeros (differentiable)."""
        if self.rows is None:
            return self.values.new_zeros(self.n, self.width).scatter(-1, self.indices, self.values)
        flat = self.rows * self.width + self.indices
        return (
            self.values.new_zeros(self.n * self.width)
            .scatter(0, flat, self.values)
            .view(self.n, self.width)
        )

    def decode(self, w_dec: torch.Tensor, weights: torch.Tensor | None = None) -> torch.Tensor:
        """Σ_active value · w_dec[index] per token, shape (n, d), without a bias, gathering the
        active rows of w_dec (``embedding_bag``); ``weights`` (as ``values``) scale each entry
        (a Matryoshka prefix: 0 outside it)."""
        v = self.values if weights is None else self.values * weights
        if self.rows is None:
            return F.embedding_bag(self.indices, w_dec, per_sample_weights=v, mode="sum")
        offsets = torch.searchsorted(self.rows, torch.arange(self.n, device=self.rows.device))
        return F.embedding_bag(self.indices, w_dec, offsets, per_sample_weights=v, mode="sum")

    def fired(self) -> torch.Tensor:
        """Boolean (m,): the latents with a non-zero value on some token (no host sync: the
        zero entries are sent to a spare slot)."""
        idx = torch.where(self.values != 0, self.indices, self.width).reshape(-1)
        out = torch.zeros(self.width + 1, dtype=torch.bool, device=idx.device)
        return out.index_fill_(0, idx, True)[: self.width]

    @classmethod
    def from_dense(cls, z: torch.Tensor) -> SparseLatents:
        """The non-zero entries of z (n, m), flat."""
        rows, cols = z.nonzero(as_tuple=True)
        return cls(z[rows, cols], cols, z.shape[0], z.shape[1], rows)


def sparse_decode_pays(d: int, width: int, active: float) -> bool:
    """Whether decoding ``active`` latents per token by gathering decoder rows beats the
    dense z W_dec (forward and backward, float32, CPU, one thread; ours, measured at n = 256
    to 1024 tokens): a gather costs about 0.06 + 0.0004·d µs per active entry, the matmul
    about 0.1·d ns per latent, so the gather wins for m > k·(4 + 600/d); we take it from 1.5
    times that, and never below 2¹⁶ decoder weights, where both take well under a millisecond
    (the suite's own sizes, whose results thus stay those of the dense formula bit for bit).
    E.g. d = 512, m = 2048: k = 32 decodes in 9 ms instead of 76, AuxK's k = 256 in 82
    instead of 103 (top-k included)."""
    return width * d >= 2**16 and width >= 1.5 * active * (4 + 600 / d)


@dataclass
class SAEOutput:
    """One forward pass.

    Attributes:
        x_hat: reconstruction, shape (n, d).
        z: latent activations, shape (n, m) (signed for a signed SAE); None where the
            architecture decoded from ``code`` without forming z (``code.dense()`` gives it).
        loss: scalar training loss (differentiable).
        parts: its named terms (``mse``, ``sparsity``, ``aux``...), detached scalars.
        code: the latents as :class:`SparseLatents` (the TopK family), or None.
        fired: boolean (m,) of the latents active on some token of the batch, where the
            architecture has it cheaper than from z (from ``code``); None: the training loop
            reads it from z.
    """

    x_hat: torch.Tensor
    z: torch.Tensor | None
    loss: torch.Tensor
    parts: dict[str, torch.Tensor] = field(default_factory=dict)
    code: SparseLatents | None = None
    fired: torch.Tensor | None = None


@dataclass
class TrainState:
    """What the training loop tells an architecture at each step.

    Attributes:
        frac: fraction of training done, in [0, 1] (warm-ups of sparsity coefficients).
        dead: boolean (m,) mask of the latents dead over the window (AuxK), or None.
    """

    frac: float = 1.0
    dead: torch.Tensor | None = None


class SparseAutoencoder(nn.Module, Method):
    """Base of every SAE architecture (register subclasses with ``register(name, family="sae")``).

    Parameters: ``W_enc`` (d, m), ``b_enc`` (m,), ``W_dec`` (m, d), ``b_dec`` (d,).

    Class attributes:
        signed: latents may be negative (L0 counts z ≠ 0, not z > 0).
        unit_norm_decoder: rows of W_dec are kept at norm 1 by the training loop.

    Spec-time checks (:meth:`check`) read the widths of the section by :func:`section_widths`.
    """

    signed: ClassVar[bool] = False
    unit_norm_decoder: ClassVar[bool] = True
    method_name: ClassVar[str] = ""

    def __init__(self, d_in: int, width: int, params: Any, seed: int = 0):
        super().__init__()
        if d_in < 1 or width < 1:
            raise ValueError(f"d_in and width must be >= 1, got {d_in}, {width}")
        self.d_in, self.width, self.params = d_in, width, params
        g = torch.Generator().manual_seed(int(seed))
        w = torch.randn(width, d_in, generator=g)
        w = w / w.norm(dim=1, keepdim=True) * float(getattr(params, "dec_init_norm", 1.0))
        self.W_dec = nn.Parameter(w)
        self.W_enc = nn.Parameter(w.T.clone())
        self.b_enc = nn.Parameter(torch.zeros(width))
        self.b_dec = nn.Parameter(torch.zeros(d_in))

    # ------------------------------------------------------------------ shared pieces
    def learning_rate(self) -> float:
        """Adam's learning rate (default: ``params.lr``)."""
        return float(self.params.lr)

    def threshold_parameters(self) -> list[nn.Parameter]:
        """Learned thresholds that train at ``params.threshold_lr_scale`` × the lr (default
        none: one lr for every parameter)."""
        return []

    def param_groups(self, lr: float) -> list[dict[str, Any]]:
        """Adam's parameter groups at base lr ``lr``: the thresholds of
        :meth:`threshold_parameters` at ``lr · params.threshold_lr_scale``, the rest at lr."""
        thresholds = self.threshold_parameters()
        if not thresholds or float(self.params.threshold_lr_scale) == 1.0:
            # one group, in the module's parameter order: bit for bit the one-lr optimizer
            return [{"params": list(self.parameters()), "lr": lr}]
        ids = {id(t) for t in thresholds}
        rest = [q for q in self.parameters() if id(q) not in ids]
        scale = float(self.params.threshold_lr_scale)
        return [{"params": rest, "lr": lr}, {"params": thresholds, "lr": lr * scale}]

    def pre_acts(self, x: torch.Tensor) -> torch.Tensor:
        """(x − b_dec) W_enc + b_enc, shape (n, m)."""
        return (x - self.b_dec) @ self.W_enc + self.b_enc

    def decode(self, z: torch.Tensor) -> torch.Tensor:
        """x̂ = z W_dec + b_dec, shape (n, d)."""
        return z @ self.W_dec + self.b_dec

    def encode(self, x: torch.Tensor) -> torch.Tensor:  # (n, d) -> (n, m)
        raise NotImplementedError

    def forward(self, x: torch.Tensor, state: TrainState | None = None) -> SAEOutput:
        raise NotImplementedError

    def finish_training(self, x: torch.Tensor) -> None:
        """Called once when training ends, on the (scaled) training tokens; default nothing
        (BatchTopK fixes its inference threshold here)."""

    @torch.no_grad()
    def normalize_decoder(self) -> None:
        """Rows of W_dec to unit norm (after an optimiser step)."""
        self.W_dec.div_(self.W_dec.norm(dim=1, keepdim=True).clamp_min(1e-12))

    @torch.no_grad()
    def remove_parallel_grad(self) -> None:
        """Remove from W_dec's gradient its component along each row (before a step), so that
        the step moves rows along the unit sphere (Bricken et al. 2023)."""
        if self.W_dec.grad is None:
            return
        w = self.W_dec / self.W_dec.norm(dim=1, keepdim=True).clamp_min(1e-12)
        self.W_dec.grad.sub_((self.W_dec.grad * w).sum(1, keepdim=True) * w)


def section_widths(section: Mapping[str, Any]) -> list[int]:
    """Every SAE width the spec's ``sae`` section trains (defaults filled in): each source's
    own ``widths``, or ``sae.widths`` for a source without them."""
    return [
        w for raw in section["sources"].values() for w in (raw.get("widths") or section["widths"])
    ]


def check_params(
    params: Any, positive: tuple[str, ...] = (), non_negative: tuple[str, ...] = ()
) -> None:
    """ValueError naming the first field of ``params`` that is not > 0 (``positive``) or not
    >= 0 (``non_negative``); fields whose value is None are skipped (chosen elsewhere)."""
    for names, ok, rule in (
        (positive, lambda v: v > 0, "> 0"),
        (non_negative, lambda v: v >= 0, ">= 0"),
    ):
        for name in names:
            value = getattr(params, name)
            if value is not None and not ok(value):
                raise ValueError(f"{name} must be {rule}, got {value}")


def mse(x: torch.Tensor, x_hat: torch.Tensor) -> torch.Tensor:
    """Mean over tokens of ‖x − x̂‖₂² (summed over the d dimensions), scalar."""
    return (x - x_hat).pow(2).sum(-1).mean()


def warmup(frac: float, warmup_frac: float) -> float:
    """Linear warm-up factor in [0, 1]: frac / warmup_frac, 1 after (0 warm-up: always 1)."""
    return 1.0 if warmup_frac <= 0 else min(1.0, frac / warmup_frac)
