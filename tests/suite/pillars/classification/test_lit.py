"""The recipe's optimizer: SGD, Adam (coupled weight decay) and AdamW (decoupled), with the
recipe's weight decay, and a method's own optimizer taking precedence."""

import pytest
import torch
from torch import nn

from sparsebench.suite.pillars.classification.lit import ClassificationModule


@pytest.mark.parametrize(
    ("name", "cls"),
    [("sgd", torch.optim.SGD), ("adam", torch.optim.Adam), ("adamw", torch.optim.AdamW)],
)
def test_the_recipe_picks_the_optimizer(name, cls):
    recipe = {"optimizer": name, "lr": 0.01, "weight_decay": 0.05, "epochs": 1, "batch_size": 4}
    module = ClassificationModule(nn.Linear(3, 2), 2, recipe, total_steps=10)
    opt = module.configure_optimizers()["optimizer"]
    assert type(opt) is cls
    assert opt.defaults["weight_decay"] == 0.05 and opt.defaults["lr"] == 0.01


def test_a_method_optimizer_comes_first():
    recipe = {"optimizer": "adamw", "lr": 0.01, "epochs": 1, "batch_size": 4}
    module = ClassificationModule(nn.Linear(3, 2), 2, recipe, total_steps=10)
    own = torch.optim.SGD(module.parameters(), lr=0.5)
    module.optimizer_factory = lambda m: own
    assert module.configure_optimizers()["optimizer"] is own
