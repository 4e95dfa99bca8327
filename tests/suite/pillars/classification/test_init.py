"""The init axis on hand-made masks: each rule against its formula written out here."""

import math

import pytest
import torch
from torch import nn

from sparsebench.suite.pillars.classification.init import apply_init
from sparsebench.suite.pillars.classification.masks import MaskStore


def _store():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(400, 50), nn.ReLU(), nn.Linear(50, 10))
    store = MaskStore(model)
    mask = torch.zeros(50, 400, dtype=torch.bool)
    mask[:40, :100] = True  # 40 active outputs with 100 links each: density 0.2
    store.set_mask("0", mask)
    return model, store, mask


def test_default_leaves_the_weights():
    model, store, _ = _store()
    before = [p.clone() for p in model.parameters()]
    apply_init(store, "default", torch.Generator().manual_seed(0))
    assert all(torch.equal(a, b) for a, b in zip(before, model.parameters()))


def test_scaled_divides_the_masked_layers_by_the_root_of_their_density():
    model, store, mask = _store()
    w0, w2 = model[0].weight.clone(), model[2].weight.clone()
    apply_init(store, "scaled", torch.Generator().manual_seed(0))
    assert torch.allclose(model[0].weight, w0 * mask / math.sqrt(4000 / 20000))
    assert torch.equal(model[2].weight, w2)  # dense layer untouched


def test_swi_draws_from_the_sparse_fan_in():
    model, store, mask = _store()
    w2 = model[2].weight.clone()
    apply_init(store, "swi", torch.Generator().manual_seed(0))
    w = model[0].weight
    assert torch.all(w[~mask] == 0)
    # 4000 draws of N(0, 2 / 100): the mean fan-in of the 40 active outputs is 100.
    assert float(w[mask].std()) == pytest.approx(math.sqrt(2 / 100), rel=0.05)
    assert abs(float(w[mask].mean())) < 0.01
    assert torch.equal(model[2].weight, w2)


def test_an_unknown_rule_is_refused():
    _, store, _ = _store()
    with pytest.raises(ValueError, match="allowed: default, swi, scaled"):
        apply_init(store, "xavier", torch.Generator())
