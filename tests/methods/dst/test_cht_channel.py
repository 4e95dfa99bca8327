import lightning.pytorch as pl
import pytest
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

import sparsebench.methods.dst.cht  # noqa: F401  (registers "cht")
import sparsebench.methods.dst.cht_channel  # noqa: F401  (registers "cht_channel")
from sparsebench.methods.dst.base import as_callback
from sparsebench.methods.dst.cht import ch3_l3_scores
from sparsebench.methods.dst.cht_channel import (
    CHTChannel,
    kernel_mask,
    kernel_norms,
    modulation_weights,
)
from sparsebench.suite import registry
from sparsebench.suite.lightning import quiet_trainer
from sparsebench.suite.pillars.classification.lit import ClassificationModule, FlopsCallback
from sparsebench.suite.pillars.classification.masks import n_keep, prunable_layers
from tests.methods.conftest import RECIPE, MaskWatcher, make_ctx
from tests.methods.mask_methods import FAMILIES

CONVS, LINEARS = ("0", "2"), ("6", "8")


def _cnn():
    return nn.Sequential(
        nn.Conv2d(1, 6, 3),
        nn.ReLU(),
        nn.Conv2d(6, 8, 3),
        nn.ReLU(),
        nn.AdaptiveAvgPool2d(2),
        nn.Flatten(),
        nn.Linear(32, 16),
        nn.ReLU(),
        nn.Linear(16, 3),
    )


def _cnn_fit(method, sparsity, params=None, epochs=4, extra_callbacks=()):
    """tiny_fit's pattern (tests/methods/conftest.py) on a tiny CNN over 1x8x8 inputs."""
    pl.seed_everything(0, verbose=False)
    g = torch.Generator().manual_seed(0)
    x = torch.randn(160, 1, 8, 8, generator=g)
    y = (x[:, 0, :4].sum((1, 2)) > 0).long() + (x[:, 0, 4:, :4].mean((1, 2)) > 0.3).long()
    data = TensorDataset(x, y)
    model = _cnn()
    shuffle = torch.Generator().manual_seed(0)
    loader = DataLoader(data, batch_size=16, shuffle=True, generator=shuffle)
    total = len(loader) * epochs
    ctx = make_ctx(model, total, len(loader), data, input_shape=(1, 8, 8))
    m = registry.get_method(method, FAMILIES).cls(
        registry.build_params(method, params or {}, families=FAMILIES), sparsity, ctx
    )
    module = ClassificationModule(model, 3, RECIPE, total)
    trainer = quiet_trainer(
        max_epochs=epochs,
        accelerator="cpu",
        num_sanity_val_steps=0,
        callbacks=[as_callback(m), FlopsCallback(ctx.flops), *extra_callbacks],
    )
    trainer.fit(module, loader)
    return module, m


def test_mlp_is_refused():
    mlp = nn.Sequential(nn.Linear(12, 32), nn.ReLU(), nn.Linear(32, 3))
    with pytest.raises(ValueError, match=r"cht_channel needs a CNN \(Conv2d layers\); use cht"):
        CHTChannel.check_model(CHTChannel.Params(), prunable_layers(mlp))
    CHTChannel.check_model(CHTChannel.Params(), prunable_layers(_cnn()))


def test_kernel_removal_drops_the_weakest_kernels():
    w = torch.zeros(2, 3, 2, 2)
    w[0, 0], w[0, 1], w[0, 2] = 1.0, 0.1, -2.0  # L1 norms 4, 0.4, 8
    w[1, 0], w[1, 1] = 0.3, -0.05  # L1 norms 1.2, 0.2; kernel (1, 2) inactive
    mask = w != 0
    assert torch.allclose(kernel_norms(w), torch.tensor([[4.0, 0.4, 8.0], [1.2, 0.2, 0.0]]))
    m = CHTChannel(CHTChannel.Params(zeta=0.4), 0.5, ctx=None)
    kept = m.remove("conv", w, mask)  # int(0.4 * 5) = 2 weakest kernels: (1, 1) and (0, 1)
    assert kernel_mask(kept).tolist() == [[True, False, True], [True, False, False]]
    assert torch.equal(kept, kernel_mask(kept)[:, :, None, None].expand_as(kept))


def test_modulation_is_neutral_for_equal_magnitudes_and_favours_strong_paths():
    # Channel graph with in-channels i0..i3 and out-channels o0..o2 (the hand-computed graph
    # of test_cht.py): (i0, o1) and (i3, o1) tie at 1.2071 without modulation.
    adj = torch.zeros(3, 4, dtype=torch.bool)
    for i, o in [(0, 0), (1, 0), (2, 0), (3, 0), (1, 1), (2, 1), (1, 2)]:
        adj[o, i] = True
    equal = modulation_weights(torch.full((3, 4), 2.5), adj)
    assert torch.allclose(ch3_l3_scores(adj, equal), ch3_l3_scores(adj))
    norms = torch.ones(3, 4)
    norms[0, 3] = 8.0  # the kernel i3 -> o0 is strong; every path from i3 goes through it
    mod = ch3_l3_scores(adj, modulation_weights(norms, adj))
    assert mod[1, 3] > mod[1, 0]
    # m = norm / mean(norms of the 7 links) = norm / 2; each path is weighted by the cube
    # root of its links' product: (i0, o1) by (1/2)^(3/3), (i3, o1) by (8/2 * 1/2 * 1/2)^(1/3).
    plain = ch3_l3_scores(adj)
    assert float(mod[1, 0]) == pytest.approx(0.5 * float(plain[1, 0]), rel=1e-5)
    assert float(mod[1, 3]) == pytest.approx(1.0 * float(plain[1, 3]), rel=1e-5)


def test_conv_topology_is_kernel_level_with_exact_counts():
    watcher = MaskWatcher()
    module, m = _cnn_fit("cht_channel", 0.8, {"early_stop": False}, extra_callbacks=[watcher])
    store = module.masks
    shapes = store.shapes
    # Uniform density 0.2: conv layers keep round(0.2 * out * in) kernels of kh * kw taps.
    expected = {
        "0": n_keep(6 * 1, 0.2) * 9,
        "2": n_keep(8 * 6, 0.2) * 9,
        "6": n_keep(16 * 32, 0.2),
        "8": n_keep(3 * 16, 0.2),
    }
    assert expected["2"] == 10 * 9
    for step_nnz, step_masks in zip(watcher.nnz, watcher.masks):
        assert step_nnz == expected
        for name in CONVS:
            mask = step_masks[name]
            assert torch.equal(mask, kernel_mask(mask)[:, :, None, None].expand(shapes[name]))
    per_epoch = watcher.masks[9::10]
    assert not torch.equal(per_epoch[0]["2"], per_epoch[1]["2"])  # kernels moved
    assert not torch.equal(per_epoch[0]["6"], per_epoch[1]["6"])  # linear links moved
    assert m.link_prediction_flops > 0


def test_regrowth_wall_clock_is_recorded_for_cht_and_cht_channel():
    """The measurement a benchmark compares: regrowth seconds of the same conv layer under
    element-level (cht) and kernel-level (cht_channel) CHT. Only checks they are recorded."""
    seconds = {}
    for method in ("cht", "cht_channel"):
        _, m = _cnn_fit(method, 0.8, {"early_stop": False}, epochs=3)
        assert len(m.regrowth_seconds) == 2  # updates after epochs 1 and 2
        assert all(s >= 0.0 for s in m.regrowth_seconds)
        assert m.regrowth_seconds_total == pytest.approx(sum(m.regrowth_seconds))
        assert set(m.regrowth_seconds_by_layer) == set(CONVS + LINEARS)
        seconds[method] = m.regrowth_seconds_by_layer["2"]
    print(f"conv '2' regrowth seconds: cht {seconds['cht']}, cht_channel {seconds['cht_channel']}")


def test_cht_channel_counts_link_prediction_flops():
    module, m = _cnn_fit("cht_channel", 0.8, {"early_stop": False}, epochs=3)
    flops = m.ctx.flops
    f_s = sum(f * d for f, d in zip(flops.dense_flops.values(), module.masks.densities().values()))
    assert flops.total == pytest.approx(3 * f_s * 160 * 3 + m.link_prediction_flops)


def test_too_short_run_is_refused():
    with pytest.raises(ValueError, match="cht_channel: no topology update would happen"):
        CHTChannel.check_budget(CHTChannel.Params(), total_steps=10, steps_per_epoch=10)


def test_l2_kernel_norms_by_hand():
    w = torch.tensor([3.0, 4.0, 6.0, -8.0]).reshape(2, 1, 1, 2)  # two kernels of 2 taps
    assert kernel_norms(w, "l2").tolist() == [[5.0], [10.0]]  # sqrt(9 + 16), sqrt(36 + 64)


def test_magnitude_modulation_counts_weighted_path_flops():
    m = CHTChannel(CHTChannel.Params(), 0.5, make_ctx(_cnn(), input_shape=(1, 8, 8)))
    kept_k = torch.tensor([[True, True], [False, True]])
    kept = kept_k[:, :, None, None].expand(2, 2, 1, 2).clone()
    mask = torch.ones(2, 2, 1, 2, dtype=torch.bool)
    grow = m.regrow("conv", torch.ones(2, 2, 1, 2), mask, kept)
    assert kernel_mask(grow).tolist() == [[False, False], [True, False]]  # the one free kernel
    m.count_pending()
    # Kernel graph deg_out = (2, 1), deg_in = (1, 2): co-neighbour work 4 + 1 + 1 + 4 = 10;
    # walks (2, 1) . (A deg_in) = (2, 1) . (3, 2) = 8; weighted paths cost 2 multiply-adds.
    assert m.link_prediction_flops == 2 * 10 + 4 * 8
