import pytest
import torch
from torch import nn

from sparsebench.methods.pruning.nm_magnitude import NMMagnitude
from sparsebench.methods.pruning.sr_ste import SRSTE
from sparsebench.suite.pillars.classification.masks import MaskStore
from sparsebench.suite.pillars.classification.nm import (
    SparseRefinedSTE,
    nm_groups_ok,
    nm_mask,
    sr_ste_forward,
)


def test_nm_mask_of_a_hand_checkable_row():
    s = torch.tensor([[0.1, 0.9, 0.3, 0.2, 5.0, 4.0, 0.0, 6.0]])
    assert nm_mask(s, 2, 4).tolist() == [[False, True, True, False, True, False, False, True]]
    assert nm_mask(s, 1, 4).tolist() == [[False, True, False, False, False, False, False, True]]
    assert nm_mask(s, 4, 8).tolist() == [[False, True, False, False, True, True, False, True]]


def test_conv_groups_run_along_the_input_channels():
    # (out=1, in=4, kh=1, kw=2): the groups are the 4 input channels at each kernel position
    s = torch.tensor([[[[1.0, 8.0]], [[2.0, 7.0]], [[3.0, 6.0]], [[4.0, 5.0]]]])
    mask = nm_mask(s, 2, 4)
    assert mask[0, :, 0, 0].tolist() == [False, False, True, True]  # 3, 4 of 1..4
    assert mask[0, :, 0, 1].tolist() == [True, True, False, False]  # 8, 7 of 8..5


@pytest.mark.parametrize("n,m", [(2, 4), (4, 8), (1, 4)])
@pytest.mark.parametrize("shape", [(30, 40), (16, 6, 5, 5), (8, 12)])
def test_exactly_n_nonzeros_in_every_group_of_m(n, m, shape):
    torch.manual_seed(0)
    mask = nm_mask(torch.randn(shape).abs(), n, m)
    assert mask is not None and mask.shape == shape and nm_groups_ok(mask, n, m)
    assert int(mask.sum()) == mask.numel() * n // m


def test_a_weight_that_is_not_a_multiple_of_m_stays_dense():
    assert nm_mask(torch.ones(6, 1, 5, 5), 2, 4) is None  # 150 weights
    with pytest.raises(ValueError, match="0 < N < M"):
        nm_mask(torch.ones(4, 4), 4, 4)


def test_sr_ste_gradient_is_the_straight_through_one_plus_the_refining_decay():
    w = torch.tensor([0.5, -2.0, 3.0, -0.1], requires_grad=True)
    mask = torch.tensor([False, True, True, False])
    out = SparseRefinedSTE.apply(w, mask, 0.1)
    assert out.tolist() == [0.0, -2.0, 3.0, 0.0]
    g = torch.tensor([1.0, 2.0, 3.0, 4.0])
    out.backward(g)
    # dL/dW = g + λ (1 - M) ⊙ W: pruned weights get g and the pull to zero
    assert torch.allclose(w.grad, torch.tensor([1.0 + 0.05, 2.0, 3.0, 4.0 - 0.01]))


def _store(seed=0):
    torch.manual_seed(seed)
    model = nn.Sequential(nn.Linear(8, 4, bias=False), nn.ReLU(), nn.Linear(4, 2, bias=False))
    return model, MaskStore(model)


def test_a_straight_through_layer_keeps_dense_weights_and_masks_only_its_forward():
    model, store = _store()
    w0 = model[0].weight.detach().clone()
    store.set_straight_through("0", sr_ste_forward(0.0))
    mask = nm_mask(w0.abs(), 2, 4)
    store.set_mask("0", mask)
    assert torch.equal(model[0].weight.detach(), w0)  # not zeroed
    x = torch.randn(3, 8)
    expected = torch.relu(x @ (w0 * mask).T) @ model[2].weight.detach().T
    out = store.forward(x)
    assert torch.allclose(out, expected)
    out.sum().backward()
    assert bool((model[0].weight.grad[~mask] != 0).any())  # the dense (straight-through) gradient
    store.end_straight_through()
    assert torch.equal(model[0].weight.detach(), w0 * mask) and not store.straight_through
    assert torch.allclose(store.forward(x), expected)


class _Ctx:
    epochs = 4
    flops = None


def test_nm_methods_state_their_pattern_and_sparsity():
    for cls, p in ((SRSTE, SRSTE.Params(pattern="4:8")), (NMMagnitude, NMMagnitude.Params())):
        assert cls.fixed_sparsity(p) == 0.5
    assert SRSTE.pattern(SRSTE.Params(pattern="1:4")) == "1:4"
    assert NMMagnitude.pattern(NMMagnitude.Params()) == "2:4"
    for bad in ("4:4", "2", "a:4", "0:4", "-1:4", "2:4:8", "2:04", "02:4", "²:4", " 2:4"):
        with pytest.raises(ValueError, match="pattern must be 'N:M' with 0 < N < M"):
            SRSTE.Params(pattern=bad).validate()
    with pytest.raises(
        ValueError,
        match=r"pattern with M = 8 leaves most of this model dense.*\(c \(6, 1, 5, 5\)\)",
    ):
        SRSTE.check_model(SRSTE.Params(pattern="4:8"), {"c": nn.Conv2d(1, 6, 5)})


def test_one_shot_nm_prunes_the_trained_weights_by_magnitude_at_its_epoch():
    model, store = _store(1)
    m = NMMagnitude(NMMagnitude.Params(), 0.5, _Ctx())
    before = {n: store.weight(n).detach().clone() for n in store.layers}
    trainer = type("T", (), {"current_epoch": m.prune_epoch})()
    m.on_train_epoch_start(trainer, type("M", (), {"masks": store})())
    for n in store.layers:
        assert torch.equal(store.masks[n], nm_mask(before[n].abs(), 2, 4))
        assert nm_groups_ok(store.masks[n], 2, 4)
        assert torch.equal(store.weight(n).detach(), before[n] * store.masks[n])


def test_sr_ste_trains_dense_weights_moves_the_mask_and_ends_n_m_sparse():
    from sparsebench.suite.pillars.classification.flops import TrainFlopsCounter, layer_flops

    model, store = _store(2)
    counter = TrainFlopsCounter(layer_flops(model, (8,)))
    ctx = type("C", (), {"epochs": 1, "flops": counter})()
    method = SRSTE(SRSTE.Params(decay=2e-4), 0.5, ctx)
    module = type("M", (), {"masks": store})()
    opt = torch.optim.SGD(model.parameters(), lr=0.5)
    store.attach(opt)
    method.on_fit_start(None, module)
    assert set(store.straight_through) == {"0", "2"}
    first = {n: store.masks[n].clone() for n in store.layers}
    torch.manual_seed(0)
    x, y = torch.randn(16, 8), torch.randint(0, 2, (16,))
    for step in range(30):
        method.on_train_batch_start(type("T", (), {"global_step": step})(), module, None, 0)
        counter.step(16, store.densities())
        opt.zero_grad()
        torch.nn.functional.cross_entropy(store.forward(x), y).backward()
        opt.step()
        method.on_train_batch_end(None, module, None, (x, y), 0)
        # the weights stay dense while training: pruned ones are trained too
        assert all(bool((store.weight(n) != 0).all()) for n in store.layers)
    assert any(not torch.equal(first[n], store.masks[n]) for n in store.layers)
    method.on_train_end(None, module)
    for n in store.layers:
        w = store.weight(n).detach()
        assert nm_groups_ok(store.masks[n], 2, 4) and torch.equal(store.masks[n], w != 0)
        assert torch.equal(store.masks[n], nm_mask(w.abs(), 2, 4))
    # 2 f_S + f_D per example: the sparse forward and activation gradient, the dense W gradient
    f_d = counter.f_dense
    assert counter.total == pytest.approx(30 * 16 * (2 * 0.5 * f_d + f_d))


def test_sr_ste_keeps_the_optimizer_state_of_weights_that_leave_the_mask():
    model, store = _store(4)
    store.set_straight_through("0", sr_ste_forward(2e-4))
    store.set_mask("0", nm_mask(model[0].weight.detach().abs(), 2, 4))
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    store.attach(opt)
    (store.forward(torch.randn(5, 8)) ** 2).sum().backward()
    opt.step()
    buf = opt.state[model[0].weight]["momentum_buffer"].clone()
    flipped = ~store.masks["0"]  # every weight changes side
    store.set_mask("0", flipped)
    assert torch.equal(opt.state[model[0].weight]["momentum_buffer"], buf)


def test_one_shot_pruning_needs_two_epochs():
    from sparsebench.methods.pruning.magnitude import MagnitudeOneShot

    for cls in (NMMagnitude, MagnitudeOneShot):
        with pytest.raises(ValueError, match="at least 2 epochs"):
            cls.check_budget(cls.Params(), 20, 20)
        cls.check_budget(cls.Params(), 40, 20)


def test_a_pattern_that_leaves_most_weights_dense_is_refused():
    layers = {"fc1": nn.Linear(784, 300), "fc2": nn.Linear(300, 100), "fc3": nn.Linear(100, 10)}
    with pytest.raises(ValueError, match=r"fc1 \(300, 784\).*MIN_NM_COVERAGE.*M = 4, 8, 2, 16 fit"):
        SRSTE.check_model(SRSTE.Params(pattern="1:1000"), layers)
    SRSTE.check_model(SRSTE.Params(pattern="4:8"), layers)  # fc2, fc3 whole-tensor multiples
