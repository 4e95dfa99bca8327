"""Training of the merging pillar's artefacts, each through one Lightning ``Trainer``:

* θ0: the trunk pre-trained on the label-free rotation task (:func:`train` with trainable heads);
* a task head: a linear probe (scikit-learn's multinomial logistic regression) on θ0's
  features of a few labelled examples per class of the task's train split (the section's
  ``head_shots``), frozen from then on (:func:`fit_head`), the role of CLIP's zero-shot heads
  in Ilharco et al. 2023, which never see the task's training set;
* an expert: the whole trunk fine-tuned from θ0 on one task under its frozen head
  (:func:`train`), optionally with its update confined to a mask (a method's masked
  fine-tune, through ``ArtefactContext.finetune``);
* the multi-task reference: the trunk fine-tuned from θ0 on the union of the tasks, each
  example through its own frozen head (:func:`train` with several tasks).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

import lightning.pytorch as pl
import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from sparsebench.suite.data import batch_loader
from sparsebench.suite.lightning import quiet_trainer
from sparsebench.suite.record import Diverged

from .config import Recipe, TrunkConfig
from .models import build_trunk


class TrunkModule(pl.LightningModule):
    """Trunk + one linear head per task; batches are (x, y, task index).

    ``heads`` trainable only for pre-training; ``grad_masks`` (trunk key -> bool tensor)
    zeroes the gradient of every entry outside the mask before each step and resets those
    entries to their starting value after it (weight decay would move them)."""

    def __init__(
        self,
        cfg: TrunkConfig,
        trunk_state: Mapping[str, torch.Tensor] | None,
        heads: Sequence[tuple[torch.Tensor, torch.Tensor]],
        recipe: Recipe,
        total_steps: int,
        train_heads: bool = False,
        grad_masks: Mapping[str, torch.Tensor] | None = None,
    ):
        super().__init__()
        self.trunk = build_trunk(cfg)
        if trunk_state is not None:
            self.trunk.load_state_dict(dict(trunk_state))
        self.heads = nn.ModuleList()
        for w, b in heads:
            head = nn.Linear(w.shape[1], w.shape[0])
            head.weight.data.copy_(w)
            head.bias.data.copy_(b)
            head.requires_grad_(train_heads)
            self.heads.append(head)
        self.recipe = recipe
        self.total_steps = total_steps
        self.grad_masks = {k: v.float() for k, v in (grad_masks or {}).items()}
        # θ0 of the masked entries: AdamW's decoupled weight decay moves every weight, so
        # zeroed gradients alone would leave a dense task vector (-lr·wd·θ0 per step).
        self.anchor = (
            {k: v.detach().clone() for k, v in self.trunk.state_dict().items()}
            if self.grad_masks
            else {}
        )
        self.last_loss = math.nan

    def forward(self, x: torch.Tensor, task: int) -> torch.Tensor:
        return self.heads[task](self.trunk(x))

    def training_step(self, batch, batch_idx):
        x, y, t = batch
        feats = self.trunk(x)
        loss = x.new_zeros(())
        for task in t.unique().tolist():  # each example through its own head
            sel = t == task
            loss = loss + F.cross_entropy(self.heads[task](feats[sel]), y[sel], reduction="sum")
        loss = loss / x.shape[0]
        if not torch.isfinite(loss):
            raise Diverged(f"training loss is {loss.item()} at step {self.global_step}")
        self.last_loss = float(loss.detach())
        return loss

    def on_after_backward(self) -> None:
        if not self.grad_masks:
            return
        for name, p in self.trunk.named_parameters():
            if p.grad is not None and name in self.grad_masks:
                p.grad.mul_(self.grad_masks[name])

    def on_train_batch_end(self, outputs, batch, batch_idx) -> None:
        """Entries outside the mask are reset to θ0 after every step, so the masked
        expert's task vector is exactly zero there (p <- θ0 + m ∘ (p − θ0))."""
        if not self.grad_masks:
            return
        with torch.no_grad():
            for name, p in self.trunk.named_parameters():
                if name in self.grad_masks:
                    a = self.anchor[name].to(p.device)
                    p.copy_(a + self.grad_masks[name].to(p.device) * (p - a))

    def configure_optimizers(self):
        r = self.recipe
        params = [p for p in self.parameters() if p.requires_grad]
        opt = torch.optim.AdamW(params, lr=r.lr, weight_decay=r.weight_decay)
        warm = max(1, int(r.warmup_frac * self.total_steps))

        def factor(step: int) -> float:
            if step < warm:
                return (step + 1) / warm
            progress = (step - warm) / max(1, self.total_steps - warm)
            return 0.5 * (1.0 + math.cos(math.pi * min(1.0, progress)))

        sched = torch.optim.lr_scheduler.LambdaLR(opt, factor)
        return [opt], [{"scheduler": sched, "interval": "step"}]


def _loader(sets: Sequence[TensorDataset], batch_size: int, seed: int) -> DataLoader:
    xs, ys, ts = [], [], []
    for i, ds in enumerate(sets):
        x, y = ds.tensors
        xs.append(x)
        ys.append(y)
        ts.append(torch.full_like(y, i))
    data = TensorDataset(torch.cat(xs), torch.cat(ys), torch.cat(ts))
    g = torch.Generator().manual_seed(seed)
    return batch_loader(data, batch_size, g)


def _fit(module: TrunkModule, loader: DataLoader, epochs: int) -> None:
    trainer = quiet_trainer(
        max_epochs=epochs,
        accelerator="auto",  # a GPU when there is one; the module comes back to the CPU
    )
    trainer.fit(module, loader)


def train(
    cfg: TrunkConfig,
    trunk_state: Mapping[str, torch.Tensor] | None,
    heads: Sequence[tuple[torch.Tensor, torch.Tensor]],
    sets: Sequence[TensorDataset],
    recipe: Recipe,
    seed: int,
    train_heads: bool = False,
    grad_masks: Mapping[str, torch.Tensor] | None = None,
) -> TrunkModule:
    """Train the trunk (from ``trunk_state``, or a fresh init seeded by ``seed``) on ``sets``
    (task i through head i). Raises :class:`Diverged` on a non-finite loss."""
    pl.seed_everything(seed, workers=True, verbose=False)
    loader = _loader(sets, recipe.batch_size, seed)
    module = TrunkModule(
        cfg, trunk_state, heads, recipe, recipe.epochs * len(loader), train_heads, grad_masks
    )
    _fit(module, loader, recipe.epochs)
    return module.cpu().eval()


@torch.no_grad()
def features(trunk: nn.Module, x: torch.Tensor, batch: int = 512) -> torch.Tensor:
    """Trunk features of ``x`` (n, 1, 28, 28) -> (n, feature dim), in eval mode."""
    trunk.eval()
    return torch.cat([trunk(x[i : i + batch]) for i in range(0, x.shape[0], batch)])


def few_shot(y: torch.Tensor, shots: int | None, seed: int) -> torch.Tensor:
    """Indices of ``shots`` examples of every class of ``y`` (all of a class that has fewer),
    drawn by a permutation seeded with ``seed``, in ascending order; every index when
    ``shots`` is None."""
    if shots is None:
        return torch.arange(len(y))
    order = torch.randperm(len(y), generator=torch.Generator().manual_seed(seed))
    picked = [order[y[order] == c][:shots] for c in torch.unique(y).tolist()]
    return torch.cat(picked).sort().values


def fit_head(
    trunk: nn.Module, data: TensorDataset, seed: int, shots: int | None = None
) -> tuple[torch.Tensor, torch.Tensor]:
    """Linear probe on the trunk's features of ``shots`` examples per class of ``data``
    (:func:`few_shot`; None: all of them): multinomial logistic regression (L2, C = 1,
    L-BFGS, scikit-learn's defaults, features standardised inside the fit and folded back
    into the weights). Returns (weight (classes, dim), bias (classes,)); a two-class task gets
    two rows (±½ of the binary logit) so every head is a softmax over its classes."""
    from sklearn.linear_model import LogisticRegression

    x, y = data.tensors
    keep = few_shot(y, shots, seed)
    x, y = x[keep], y[keep]
    f = features(trunk, x).double()
    mu, sd = f.mean(0), f.std(0).clamp_min(1e-6)
    clf = LogisticRegression(max_iter=2000, random_state=seed)
    clf.fit(((f - mu) / sd).numpy(), y.numpy())
    w = torch.from_numpy(clf.coef_) / sd
    b = torch.from_numpy(clf.intercept_) - (w * mu).sum(1)
    if w.shape[0] == 1:  # binary: logit z -> softmax over (-z/2, z/2)
        w, b = torch.cat([-w / 2, w / 2]), torch.cat([-b / 2, b / 2])
    return w.float().contiguous(), b.float().contiguous()


@torch.no_grad()
def evaluate(
    trunk: nn.Module, head: tuple[torch.Tensor, torch.Tensor], data: TensorDataset
) -> tuple[float, float]:
    """(accuracy, mean cross-entropy) of trunk + head on ``data``."""
    x, y = data.tensors
    logits = F.linear(features(trunk, x), *head)
    return float((logits.argmax(1) == y).float().mean()), float(F.cross_entropy(logits, y))
