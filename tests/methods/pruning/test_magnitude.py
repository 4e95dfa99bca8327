import pytest
import torch
from torch import nn

from sparsebench.methods.pruning.magnitude import MagnitudeOneShot
from sparsebench.suite.pillars.classification.masks import MaskStore
from tests.methods.conftest import MaskWatcher


def test_oneshot_prunes_once_at_half_budget(tiny_fit):
    watcher = MaskWatcher()
    module, method = tiny_fit("magnitude_oneshot", 0.75, epochs=4, extra_callbacks=[watcher])
    assert method.prune_epoch == 2
    # Dense for epochs 0-1 (10 batches each), sparse and fixed afterwards.
    assert all(m["0"] is None for m in watcher.masks[:20])
    assert all(torch.equal(watcher.masks[20]["0"], m["0"]) for m in watcher.masks[20:])
    assert module.masks.sparsity() == pytest.approx(0.75, abs=0.005)


def _prune(weights: list[list[float]], distribution: str) -> list[list[bool]]:
    """Two 1x4 Linear layers with hand-set weights, pruned to density 0.5 at epoch 2 of 4."""
    model = nn.Sequential(nn.Linear(4, 1, bias=False), nn.Linear(4, 1, bias=False))
    with torch.no_grad():
        for layer, w in zip(model, weights):
            layer.weight.copy_(torch.tensor([w]))
    store = MaskStore(model)
    ctx = type("C", (), {"epochs": 4})()
    m = MagnitudeOneShot(MagnitudeOneShot.Params(distribution=distribution), 0.5, ctx)
    m.on_train_epoch_start(type("T", (), {"current_epoch": 2})(), type("M", (), {"masks": store})())
    return [
        [True] * 4 if store.masks[n] is None else store.masks[n][0].tolist() for n in ("0", "1")
    ]


def test_global_ranking_keeps_the_largest_magnitudes_across_layers():
    # |w| over both layers: 6, 4, 3, 2 are the 4 largest of 8 (density 0.5); signs must not
    # matter. Layer 0 keeps only its -6; layer 1 keeps -4, 3, 2 (its 1 goes).
    weights = [[0.1, 0.2, -0.3, -6.0], [1.0, 2.0, 3.0, -4.0]]
    assert _prune(weights, "global") == [[False, False, False, True], [False, True, True, True]]


def test_layerwise_ranking_differs_from_global():
    # uniform: each layer keeps its own 2 largest |w|: layer 0 keeps -0.3 and -6.0 although
    # both of layer 1's dropped weights (1, 2) are larger than -0.3.
    weights = [[0.1, 0.2, -0.3, -6.0], [1.0, 2.0, 3.0, -4.0]]
    assert _prune(weights, "uniform") == [[False, False, True, True], [False, False, True, True]]


def test_dense_first_layer_keeps_the_first_layer_whole():
    model = nn.Sequential(nn.Linear(4, 1, bias=False), nn.Linear(4, 1, bias=False))
    with torch.no_grad():
        model[0].weight.copy_(torch.tensor([[0.1, 0.2, -0.3, -6.0]]))
        model[1].weight.copy_(torch.tensor([[1.0, 2.0, 3.0, -4.0]]))
    store = MaskStore(model)
    ctx = type("C", (), {"epochs": 4})()
    params = MagnitudeOneShot.Params(distribution="uniform", dense_first_layer=True)
    m = MagnitudeOneShot(params, 0.5, ctx)
    m.on_train_epoch_start(type("T", (), {"current_epoch": 2})(), type("M", (), {"masks": store})())
    first = store.masks["0"]
    assert first is None or bool(first.all())  # its 0.1, 0.2 would go without the option


@pytest.mark.parametrize("method", ["magnitude_oneshot", "random_oneshot", "gmp", "snip",
                                    "grasp", "synflow", "progressive_magnitude"])  # fmt: skip
def test_a_dense_first_layer_with_a_global_ranking_is_refused_at_validation(method):
    from sparsebench.suite.registry import get_method

    params = get_method(method, ["pruning"]).params_cls
    with pytest.raises(ValueError, match="dense_first_layer needs distribution erk or uniform"):
        params(distribution="global", dense_first_layer=True).validate()
    params(distribution="uniform", dense_first_layer=True).validate()
