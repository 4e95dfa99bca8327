"""The quiet Trainer: no logger, checkpoints, progress bar or model summary; overrides pass."""

from __future__ import annotations

import logging
import os
import subprocess
import sys

import lightning.pytorch as pl
import torch
from lightning.pytorch.callbacks import ModelCheckpoint, ModelSummary, ProgressBar
from torch.utils.data import DataLoader, TensorDataset

from sparsebench.suite.lightning import quiet_trainer


def _kinds(trainer: pl.Trainer) -> set[type]:
    return {base for cb in trainer.callbacks for base in type(cb).__mro__}


def test_quiet_flags():
    trainer = quiet_trainer(accelerator="cpu")
    assert trainer.logger is None
    assert trainer.checkpoint_callback is None
    assert trainer.progress_bar_callback is None
    assert not {ModelCheckpoint, ModelSummary, ProgressBar} & _kinds(trainer)
    assert logging.getLogger("lightning.pytorch").level == logging.ERROR


def test_call_site_settings_pass_through_and_may_override_a_quiet_flag():
    trainer = quiet_trainer(
        accelerator="cpu", max_epochs=3, deterministic=True, enable_progress_bar=True
    )
    assert trainer.max_epochs == 3
    assert torch.are_deterministic_algorithms_enabled()
    assert trainer.progress_bar_callback is not None
    torch.use_deterministic_algorithms(False)  # the flag is process-wide; leave it as found


class _Tiny(pl.LightningModule):
    def __init__(self) -> None:
        super().__init__()
        self.layer = torch.nn.Linear(2, 1)

    def training_step(self, batch, batch_idx):
        (x,) = batch
        return self.layer(x).pow(2).mean()

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.1)


def test_a_fit_leaves_no_files_behind(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    loader = DataLoader(TensorDataset(torch.ones(4, 2)), batch_size=2)
    quiet_trainer(accelerator="cpu", max_epochs=1).fit(_Tiny(), loader)
    assert os.listdir(tmp_path) == []  # no lightning_logs/, no checkpoints


def test_importing_the_module_does_not_import_lightning():
    code = "import sys, sparsebench.suite.lightning; print('lightning' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"
