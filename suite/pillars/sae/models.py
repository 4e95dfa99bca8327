"""The models whose activations the SAE pillar reads, each with named hookpoints (TransformerLens
names, as SAELens users know them) where an activation can be read or replaced:

* :class:`TinyLM`, a byte-level decoder-only transformer trained by the suite on the stdlib
  corpus (:mod:`.corpus`); hookpoints ``blocks.{b}.hook_resid_post`` (the residual stream after
  block b), ``blocks.{b}.hook_mlp_out`` and ``blocks.{b}.hook_attn_out``, each (batch, ctx,
  d_model);
* :class:`HookedLeNet300100`, the classification pillar's LeNet-300-100 with hookpoints
  ``fc1.hook_post`` (300) and ``fc2.hook_post`` (100), the hidden layers after their ReLU.

``forward(x, hooks)`` takes ``hooks``: hookpoint -> function of the activation that returns the
activation to continue with (the identity to read it, an SAE's reconstruction to splice it).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from sparsebench.suite.models import LeNet300100

from .corpus import VOCAB

Hooks = Mapping[str, Callable[[torch.Tensor], torch.Tensor]]


def _apply(hooks: Hooks | None, name: str, t: torch.Tensor) -> torch.Tensor:
    fn = hooks.get(name) if hooks else None
    return fn(t) if fn is not None else t


@dataclass(frozen=True)
class LMConfig:
    """The suite's small language model and its training (ours: CPU-sized; a few minutes on 2
    cores at the defaults).

    Attributes:
        d_model, n_blocks, n_heads: width, depth and attention heads (d_model % n_heads == 0).
        ctx: context length in bytes.
        steps, batch_size, lr, weight_decay, warmup: AdamW (β = (0.9, 0.95)), linear warm-up
            then cosine decay to 10 % of lr, batch_size windows of ctx + 1 bytes per step.
        corpus_bytes: bytes of the train split the model and the SAEs' training tokens read.
        seed: initialisation and window order.
    """

    d_model: int = 64
    n_blocks: int = 2
    n_heads: int = 4
    ctx: int = 64
    steps: int = 1500
    batch_size: int = 32
    lr: float = 3e-3
    weight_decay: float = 0.1
    warmup: int = 100
    corpus_bytes: int = 2_000_000
    seed: int = 0

    def validate(self) -> None:
        for name in ("d_model", "n_blocks", "n_heads", "ctx", "steps", "batch_size"):
            if getattr(self, name) < 1:
                raise ValueError(f"model.{name} must be >= 1, got {getattr(self, name)}")
        if self.d_model % self.n_heads:
            raise ValueError(
                f"model.d_model ({self.d_model}) must be a multiple of model.n_heads "
                f"({self.n_heads})"
            )
        if self.lr <= 0:
            raise ValueError(f"model.lr must be > 0, got {self.lr}")
        for name in ("weight_decay", "warmup"):
            if getattr(self, name) < 0:
                raise ValueError(f"model.{name} must be >= 0, got {getattr(self, name)}")
        if self.corpus_bytes <= self.ctx + 1:
            raise ValueError(f"model.corpus_bytes must exceed ctx + 1, got {self.corpus_bytes}")

    def hookpoints(self) -> dict[str, int]:
        """hookpoint -> activation dimension."""
        return {
            f"blocks.{b}.hook_{n}": self.d_model
            for b in range(self.n_blocks)
            for n in ("resid_post", "mlp_out", "attn_out")
        }


class _Block(nn.Module):
    """Pre-LayerNorm transformer block: causal multi-head self-attention, then a GELU MLP of
    width 4·d_model, each added to the residual stream."""

    def __init__(self, d: int, heads: int, index: int):
        super().__init__()
        self.heads, self.index = heads, index
        self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.qkv, self.proj = nn.Linear(d, 3 * d), nn.Linear(d, d)
        self.fc, self.out = nn.Linear(d, 4 * d), nn.Linear(4 * d, d)

    def forward(self, x: torch.Tensor, hooks: Hooks | None) -> torch.Tensor:
        b, t, d = x.shape
        q, k, v = self.qkv(self.ln1(x)).view(b, t, 3, self.heads, d // self.heads).unbind(2)
        a = F.scaled_dot_product_attention(
            q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), is_causal=True
        )
        p = f"blocks.{self.index}."
        x = x + _apply(hooks, p + "hook_attn_out", self.proj(a.transpose(1, 2).reshape(b, t, d)))
        x = x + _apply(hooks, p + "hook_mlp_out", self.out(F.gelu(self.fc(self.ln2(x)))))
        return _apply(hooks, p + "hook_resid_post", x)


class TinyLM(nn.Module):
    """Byte-level decoder-only transformer: token + learned position embeddings, ``n_blocks``
    pre-LN blocks, final LayerNorm, untied unembedding.

    Input (batch, t ≤ ctx) int64 bytes in [0, 128); output logits (batch, t, 128)."""

    def __init__(self, cfg: LMConfig):
        super().__init__()
        self.cfg = cfg
        self.tok = nn.Embedding(VOCAB, cfg.d_model)
        self.pos = nn.Embedding(cfg.ctx, cfg.d_model)
        blocks = (_Block(cfg.d_model, cfg.n_heads, i) for i in range(cfg.n_blocks))
        self.blocks = nn.ModuleList(blocks)
        self.ln_f = nn.LayerNorm(cfg.d_model)
        self.unembed = nn.Linear(cfg.d_model, VOCAB)
        for m in self.modules():  # GPT-2's initialisation
            if isinstance(m, (nn.Linear, nn.Embedding)):
                nn.init.normal_(m.weight, std=0.02)
        for blk in self.blocks:  # residual projections scaled by 1/√(2·n_blocks)
            for m in (blk.proj, blk.out):
                nn.init.normal_(m.weight, std=0.02 / math.sqrt(2 * cfg.n_blocks))

    def forward(self, tokens: torch.Tensor, hooks: Hooks | None = None) -> torch.Tensor:
        t = tokens.shape[1]
        x = self.tok(tokens) + self.pos(torch.arange(t, device=tokens.device))
        for blk in self.blocks:
            x = blk(x, hooks)
        return self.unembed(self.ln_f(x))


@dataclass(frozen=True)
class ImageConfig:
    """The image model: LeNet-300-100 trained on ``dataset`` (SGD, momentum 0.9, cosine; the
    default benchmark's recipe for it).

    Attributes:
        dataset: a dataset of suite/data.py with 28×28 inputs (mnist5k ships offline).
        epochs, batch_size, lr, weight_decay: the recipe.
        seed: initialisation and batch order.
    """

    dataset: str = "mnist5k"
    epochs: int = 20
    batch_size: int = 64
    lr: float = 0.05
    weight_decay: float = 5e-4
    seed: int = 0

    def validate(self) -> None:
        from sparsebench.suite.data import DATASETS

        if self.dataset not in DATASETS:
            raise ValueError(f"model.dataset: {DATASETS.unknown(self.dataset)}")
        ok = sorted(n for n, d in DATASETS.items() if d.input_shape == (1, 28, 28))
        if self.dataset not in ok:
            raise ValueError(
                f"model.dataset: {self.dataset!r} is not 1×28×28 (LeNet-300-100); allowed: "
                f"{', '.join(ok)}"
            )
        for name in ("epochs", "batch_size"):
            if getattr(self, name) < 1:
                raise ValueError(f"model.{name} must be >= 1, got {getattr(self, name)}")
        if self.lr <= 0:
            raise ValueError(f"model.lr must be > 0, got {self.lr}")

    def hookpoints(self) -> dict[str, int]:
        return {"fc1.hook_post": 300, "fc2.hook_post": 100}


class HookedLeNet300100(LeNet300100):
    """LeNet-300-100 (suite/models.py) with hookpoints on its hidden layers after the ReLU.
    Input (N, 1, 28, 28), output logits (N, classes)."""

    def forward(self, x: torch.Tensor, hooks: Hooks | None = None) -> torch.Tensor:
        h1 = _apply(hooks, "fc1.hook_post", F.relu(self.fc1(torch.flatten(x, 1))))
        return self.fc3(_apply(hooks, "fc2.hook_post", F.relu(self.fc2(h1))))


def capture(model: nn.Module, x: torch.Tensor, hookpoint: str) -> torch.Tensor:
    """The activation at ``hookpoint`` for inputs ``x`` (no grad), flattened to (tokens, d)."""
    seen: list[torch.Tensor] = []

    def keep(t: torch.Tensor) -> torch.Tensor:
        seen.append(t.detach())
        return t

    with torch.no_grad():
        model(x, {hookpoint: keep})
    return seen[0].reshape(-1, seen[0].shape[-1])
