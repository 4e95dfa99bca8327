"""The merging pillar's configuration dataclasses (no torch import: the pillar registers, and
the Snakefile plans, without loading torch)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class TrunkConfig:
    """Architecture of a trunk (the spec's ``merging.models.<name>``).

    Attributes:
        kind: ``"vit"`` or ``"mlp"``.
        width: ViT embedding width D, or MLP hidden width.
        depth: ViT blocks, or MLP hidden layers.
        heads: ViT attention heads per block (D must be divisible by it).
        mlp_ratio: ViT FFN hidden width ÷ D.
        patch: ViT patch side in pixels (28 must be divisible by it).
    """

    kind: str
    width: int
    depth: int
    heads: int = 4
    mlp_ratio: int = 2
    patch: int = 7

    def validate(self) -> None:
        if self.kind not in ("vit", "mlp"):
            raise ValueError(f"kind must be 'vit' or 'mlp', got {self.kind!r}")
        if self.kind == "vit":
            if self.width % self.heads:
                raise ValueError(f"width {self.width} is not divisible by heads {self.heads}")
            if 28 % self.patch:
                raise ValueError(f"patch {self.patch} does not divide the 28-pixel side")


@dataclass(frozen=True)
class Recipe:
    """One training phase (the spec's ``merging.pretrain`` / ``merging.finetune``).

    AdamW with decoupled weight decay and a cosine schedule after a linear warm-up, as Ilharco
    et al. 2023 fine-tune (their App. B: AdamW, weight decay 0.1, cosine, warm-up), at our
    scale."""

    epochs: int
    lr: float
    batch_size: int = 64
    weight_decay: float = 0.1
    warmup_frac: float = 0.1  # fraction of the steps with linear warm-up
