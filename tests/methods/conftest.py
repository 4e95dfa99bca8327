"""A tiny Lightning fit on synthetic data, to test methods as they run in a real job."""

from __future__ import annotations

import lightning.pytorch as pl
import pytest
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from sparsebench.suite import registry
from sparsebench.suite.lightning import quiet_trainer
from sparsebench.suite.pillars.classification.execution import use_backend
from sparsebench.suite.pillars.classification.flops import TrainFlopsCounter, layer_flops
from sparsebench.suite.pillars.classification.lit import (
    ClassificationModule,
    RunContext,
    run_callbacks,
)
from tests.methods.mask_methods import FAMILIES

RECIPE = {
    "optimizer": "sgd",
    "lr": 0.05,
    "momentum": 0.9,
    "weight_decay": 5e-4,
    "schedule": "cosine",
    "batch_size": 16,
}


def make_ctx(model, total_steps=100, steps_per_epoch=10, data=None, seed=0, input_shape=(12,)):
    flops = TrainFlopsCounter(layer_flops(model, input_shape))
    return RunContext(
        total_steps=total_steps,
        steps_per_epoch=steps_per_epoch,
        epochs=total_steps // steps_per_epoch,
        batch_size=16,
        seed=seed,
        generator=torch.Generator().manual_seed(seed),
        flops=flops,
        train_data=data,
    )


def run_tiny_fit(
    method: str,
    sparsity: float,
    params: dict | None = None,
    epochs: int = 4,
    extra_callbacks=(),
    execution: str = "dense_mask",
    data: TensorDataset | None = None,
):
    """A real Lightning fit of ``method`` on an MLP 12-32-16-C, C the classes of ``data``
    (default: 160 synthetic examples of 3 classes), with the job's callbacks -> (module,
    method)."""
    pl.seed_everything(0, verbose=False)
    if data is None:
        g = torch.Generator().manual_seed(0)
        x = torch.randn(160, 12, generator=g)
        y = (x[:, :3].sum(1) > 0).long() + (x[:, 3] > 1).long()
        data = TensorDataset(x, y)
    n_classes = int(data.tensors[1].max()) + 1
    model = nn.Sequential(
        nn.Linear(12, 32), nn.ReLU(), nn.Linear(32, 16), nn.ReLU(), nn.Linear(16, n_classes)
    )
    loader = DataLoader(
        data, batch_size=16, shuffle=True, generator=torch.Generator().manual_seed(0)
    )
    total = len(loader) * epochs
    ctx = make_ctx(model, total, len(loader), data)
    info = registry.get_method(method, FAMILIES)
    m = info.cls(registry.build_params(method, params or {}, families=FAMILIES), sparsity, ctx)
    module = ClassificationModule(model, n_classes, RECIPE, total)
    use_backend(module.model, module.masks, execution)
    trainer = quiet_trainer(
        max_epochs=epochs,
        accelerator="cpu",
        num_sanity_val_steps=0,
        callbacks=[*run_callbacks(m, ctx, (12,), execution)[0], *extra_callbacks],
    )
    trainer.fit(module, loader)
    return module, m


@pytest.fixture
def tiny_fit():
    """:func:`run_tiny_fit` on the default 3-class data."""
    return run_tiny_fit


class MaskWatcher(pl.Callback):
    """Records per-layer nonzero counts and checks masked weights are zero after every step."""

    def __init__(self):
        self.nnz: list[dict[str, int]] = []
        self.masks: list[dict[str, torch.Tensor]] = []

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
        store = pl_module.masks
        for name, mask in store.masks.items():
            if mask is not None:
                assert torch.all(store.weight(name)[~mask] == 0), name
        self.nnz.append({n: store.nnz(n) for n in store.layers})
        self.masks.append({n: None if m is None else m.clone() for n, m in store.masks.items()})
