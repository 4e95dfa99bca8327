"""The trunks the merging pillar merges: a small ViT (real attention heads and FFN neurons) and
an MLP, each mapping a (1, 28, 28) image to a feature vector; every task reads the features
with its own frozen linear head. Their :func:`groups` list the structured units (heads,
neurons) that structured merging methods select.

Trunk parameter names (``state_dict`` keys) are the merging methods' keys; the heads are never
part of them.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from sparsebench.methods.merging.base import Group
from sparsebench.suite.models import ViTTrunk

from .config import TrunkConfig

__all__ = ["ViTTrunk"]  # the ViT lives in the spine's model registry (suite/models.py)


class MLPTrunk(nn.Module):
    """ReLU MLP on the flattened image: 784 -> width (x depth); feature shape (B, width)."""

    def __init__(self, cfg: TrunkConfig):
        super().__init__()
        self.cfg = cfg
        dims = [784] + [cfg.width] * cfg.depth
        self.layers = nn.ModuleList(nn.Linear(a, b) for a, b in zip(dims[:-1], dims[1:]))
        self.out_dim = cfg.width

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = x.flatten(1)
        for layer in self.layers:
            h = F.relu(layer(h))
        return h


def build_trunk(cfg: TrunkConfig) -> nn.Module:
    cfg.validate()
    return ViTTrunk(cfg) if cfg.kind == "vit" else MLPTrunk(cfg)


def groups(cfg: TrunkConfig) -> list[Group]:
    """The trunk's structured units, disjoint:

    * ViT head h of block i: rows [h·dh, (h+1)·dh) of W_q, W_k, W_v and their biases, and the
      same columns of W_o (dh = D / heads);
    * ViT FFN neuron j of block i: row j of fc1's weight and bias, column j of fc2's weight;
    * MLP hidden neuron j of layer l: row j of its weight and its bias (its outgoing weights
      are the next layer's neurons' incoming ones).

    Entries in no group (patch embedding, positions, class token, LayerNorms, W_o's and fc2's
    biases) are "ungrouped"."""
    out: list[Group] = []
    if cfg.kind == "mlp":
        for li in range(cfg.depth):
            pre = f"layers.{li}"
            for j in range(cfg.width):
                sl = ((f"{pre}.weight", 0, j, j + 1), (f"{pre}.bias", 0, j, j + 1))
                out.append(Group("neuron", pre, j, sl))
        return out
    dh = cfg.width // cfg.heads
    hidden = cfg.width * cfg.mlp_ratio
    for bi in range(cfg.depth):
        att = f"blocks.{bi}.attn"
        for h in range(cfg.heads):
            a, b = h * dh, (h + 1) * dh
            sl = tuple((f"{att}.{p}.{w}", 0, a, b) for p in "qkv" for w in ("weight", "bias"))
            out.append(Group("head", att, h, sl + ((f"{att}.o.weight", 1, a, b),)))
        mlp = f"blocks.{bi}.mlp"
        for j in range(hidden):
            sl = (
                (f"{mlp}.fc1.weight", 0, j, j + 1),
                (f"{mlp}.fc1.bias", 0, j, j + 1),
                (f"{mlp}.fc2.weight", 1, j, j + 1),
            )
            out.append(Group("neuron", mlp, j, sl))
    return out


def linear_modules(trunk: nn.Module) -> dict[str, nn.Linear]:
    """Weight key -> ``nn.Linear`` module of every linear layer of the trunk."""
    return {f"{n}.weight": m for n, m in trunk.named_modules() if isinstance(m, nn.Linear)}


def forward_flops(cfg: TrunkConfig) -> int:
    """Multiply-accumulates x 2 of one trunk forward pass per example (linear layers and
    attention products; norms and activations ignored)."""
    if cfg.kind == "mlp":
        dims = [784] + [cfg.width] * cfg.depth
        return 2 * sum(a * b for a, b in zip(dims[:-1], dims[1:]))
    d, n = cfg.width, (28 // cfg.patch) ** 2 + 1
    per_block = n * (4 * d * d + 2 * d * d * cfg.mlp_ratio) + 2 * n * n * d
    return 2 * ((n - 1) * cfg.patch**2 * d + cfg.depth * per_block)


def trunk_params(trunk: nn.Module) -> dict[str, torch.Tensor]:
    """The trunk's parameters as a detached state dict (float32, contiguous)."""
    return {k: v.detach().clone().contiguous() for k, v in trunk.state_dict().items()}


def head_logits(features: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
    return F.linear(features, weight, bias)
