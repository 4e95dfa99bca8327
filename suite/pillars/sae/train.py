"""Training the SAE pillar's source models through one Lightning ``Trainer`` each: the byte-level
LM on the stdlib corpus (next-byte cross-entropy) and LeNet-300-100 on its image dataset."""

from __future__ import annotations

import math
import time
from collections.abc import Callable

import lightning.pytorch as pl
import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import DataLoader, Dataset, TensorDataset

from sparsebench.suite.data import batch_loader
from sparsebench.suite.record import Diverged

from .models import HookedLeNet300100, ImageConfig, LMConfig, TinyLM


class _Module(pl.LightningModule):
    """A model, its loss on a batch, and an optimiser factory (the two recipes differ only
    there)."""

    def __init__(self, model: nn.Module, loss: Callable, optimizers: Callable):
        super().__init__()
        self.model, self._loss, self._opt = model, loss, optimizers
        self.last_loss = math.nan

    def training_step(self, batch, batch_idx):
        loss = self._loss(self.model, batch)
        if not torch.isfinite(loss):
            raise Diverged(f"training loss is {float(loss)} at step {self.global_step}")
        self.last_loss = float(loss.detach())
        return loss

    def configure_optimizers(self):
        return self._opt(self.model)


def _fit(module: _Module, loader: DataLoader, **limits) -> float:
    from sparsebench.suite.lightning import quiet_trainer

    trainer = quiet_trainer(
        accelerator="cpu",
        gradient_clip_val=1.0,
        **limits,
    )
    t0 = time.perf_counter()
    trainer.fit(module, loader)
    return time.perf_counter() - t0


class Windows(Dataset):
    """Windows of ctx + 1 bytes of a corpus at given offsets: (input, next-byte targets)."""

    def __init__(self, data: torch.Tensor, offsets: torch.Tensor, ctx: int):
        self.data, self.offsets, self.ctx = data, offsets, ctx

    def __len__(self) -> int:
        return len(self.offsets)

    def __getitem__(self, i: int) -> torch.Tensor:
        o = int(self.offsets[i])
        return self.data[o : o + self.ctx + 1]


def random_offsets(n_bytes: int, ctx: int, count: int, seed: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(int(seed))
    return torch.randint(0, n_bytes - ctx, (count,), generator=g)  # windows of ctx + 1 bytes


def lm_loss(model: nn.Module, batch: torch.Tensor) -> torch.Tensor:
    logits = model(batch[:, :-1])
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), batch[:, 1:].reshape(-1))


def train_lm(cfg: LMConfig, data: torch.Tensor) -> tuple[TinyLM, dict]:
    """Train a :class:`TinyLM` on the byte tensor ``data`` (n,) int64. Returns the model (eval
    mode) and its training facts. Raises Diverged on a non-finite loss."""
    pl.seed_everything(cfg.seed, workers=True, verbose=False)
    model = TinyLM(cfg)
    offsets = random_offsets(len(data), cfg.ctx, cfg.steps * cfg.batch_size, cfg.seed)
    loader = DataLoader(Windows(data, offsets, cfg.ctx), batch_size=cfg.batch_size)

    def opt(m: nn.Module):
        decay = [p for n, p in m.named_parameters() if p.dim() >= 2]
        rest = [p for n, p in m.named_parameters() if p.dim() < 2]
        o = torch.optim.AdamW(
            [{"params": decay, "weight_decay": cfg.weight_decay}, {"params": rest}],
            lr=cfg.lr, betas=(0.9, 0.95), weight_decay=0.0,
        )  # fmt: skip

        def factor(step: int) -> float:
            if step < cfg.warmup:
                return (step + 1) / cfg.warmup
            prog = min(1.0, (step - cfg.warmup) / max(1, cfg.steps - cfg.warmup))
            return 0.1 + 0.9 * 0.5 * (1.0 + math.cos(math.pi * prog))

        sched = torch.optim.lr_scheduler.LambdaLR(o, factor)
        return [o], [{"scheduler": sched, "interval": "step"}]

    module = _Module(model, lm_loss, opt)
    train_s = _fit(module, loader, max_steps=cfg.steps, max_epochs=-1)
    return model.eval(), {"train_s": train_s, "final_loss": module.last_loss}


def image_loss(model: nn.Module, batch) -> torch.Tensor:
    x, y = batch
    return F.cross_entropy(model(x), y)


def train_image(cfg: ImageConfig, train: TensorDataset, num_classes: int):
    """Train a :class:`HookedLeNet300100` on ``train``. Returns (model in eval mode, facts)."""
    pl.seed_everything(cfg.seed, workers=True, verbose=False)
    x, _ = train.tensors
    model = HookedLeNet300100(x[0].numel(), num_classes)
    g = torch.Generator().manual_seed(cfg.seed)
    loader = batch_loader(train, cfg.batch_size, g)
    total = cfg.epochs * len(loader)

    def opt(m: nn.Module):
        o = torch.optim.SGD(m.parameters(), lr=cfg.lr, momentum=0.9, weight_decay=cfg.weight_decay)
        sched = torch.optim.lr_scheduler.CosineAnnealingLR(o, T_max=total)
        return [o], [{"scheduler": sched, "interval": "step"}]

    module = _Module(model, image_loss, opt)
    train_s = _fit(module, loader, max_epochs=cfg.epochs)
    return model.eval(), {"train_s": train_s, "final_loss": module.last_loss}
