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
from torch import nn

from sparsebench.suite.method import Method


@dataclass
class SAEOutput:
    """One forward pass.

    Attributes:
        x_hat: reconstruction, shape (n, d).
        z: latent activations, shape (n, m) (signed for a signed SAE).
        loss: scalar training loss (differentiable).
        parts: its named terms (``mse``, ``sparsity``, ``aux``...), detached scalars.
        fired: boolean (m,) of the latents active on some token of the batch, where the
            architecture has it cheaper than from z (TopK: from the kept indices); None: the
            training loop reads it from z.
    """

    x_hat: torch.Tensor
    z: torch.Tensor
    loss: torch.Tensor
    parts: dict[str, torch.Tensor] = field(default_factory=dict)
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
