import pytest
import torch
from torch import nn

from sparsebench.methods.pruning.random_oneshot import RandomOneShot
from sparsebench.suite.pillars.classification.masks import MaskStore, n_keep


def _prune(distribution: str, seed: int = 0, sizes=((40, 30), (10, 40)), weights_seed=3):
    torch.manual_seed(weights_seed)
    model = nn.Sequential(*[nn.Linear(i, o, bias=False) for i, o in sizes])
    store = MaskStore(model)
    ctx = type("C", (), {"epochs": 4, "generator": torch.Generator().manual_seed(seed)})()
    m = RandomOneShot(RandomOneShot.Params(distribution=distribution), 0.8, ctx)
    trainer = type("T", (), {"current_epoch": m.prune_epoch})()
    m.on_train_epoch_start(trainer, type("M", (), {"masks": store})())
    return model, store


def test_the_mask_ignores_the_weights_and_follows_the_seed():
    model, store = _prune("global")
    other_weights = _prune("global", weights_seed=5)[1]  # the same draw, other weights
    assert all(torch.equal(store.masks[n], other_weights.masks[n]) for n in store.layers)
    other_seed = _prune("global", seed=1)[1]
    assert not torch.equal(store.masks["0"], other_seed.masks["0"])
    # not the magnitude criterion: about as many small weights kept as large ones
    torch.manual_seed(3)  # not the draw's seed: kaiming_uniform_ would replay its numbers
    w = nn.Linear(40, 30, bias=False).weight.detach().abs()  # the weights before pruning
    assert torch.equal(w[store.masks["0"]], model[0].weight.detach().abs()[store.masks["0"]])
    kept = w[store.masks["0"]]
    assert 0.3 < float((kept < w.median()).float().mean()) < 0.7


def test_layerwise_keeps_exactly_the_density_per_layer_and_global_about_it():
    _, uniform = _prune("uniform")
    assert [uniform.nnz(n) for n in uniform.layers] == [n_keep(1200, 0.2), n_keep(400, 0.2)]
    _, glob = _prune("global")
    assert glob.total_nnz == n_keep(1600, 0.2)
    assert all(0.1 < glob.density(n) < 0.3 for n in glob.layers)
    assert RandomOneShot.Params().distribution == "global"


def test_the_schedule_is_one_shot_magnitudes(tiny_fit):
    module, method = tiny_fit("random_oneshot", 0.75, epochs=4)
    assert method.prune_epoch == 2
    assert module.masks.sparsity() == pytest.approx(0.75, abs=0.005)
