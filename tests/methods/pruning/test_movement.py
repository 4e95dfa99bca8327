import torch
from torch import nn

from sparsebench.methods.pruning.movement import Movement
from sparsebench.suite.pillars.classification.masks import MaskStore, n_keep


def _setup(seed=0):
    torch.manual_seed(seed)
    model = nn.Sequential(nn.Linear(6, 5, bias=False), nn.ReLU(), nn.Linear(5, 3, bias=False))
    store = MaskStore(model)
    ctx = type("C", (), {"total_steps": 100, "flops": None})()
    method = Movement(Movement.Params(), 0.6, ctx)
    module = type("M", (), {"masks": store})()
    method.on_fit_start(None, module)
    return model, store, method, module


def test_scores_are_minus_the_gradient_of_the_used_weight_times_the_weight():
    model, store, method, _ = _setup()
    x, c = torch.randn(4, 6), torch.randn(4, 3)
    w0, w2 = model[0].weight.detach().clone(), model[2].weight.detach().clone()
    (store.forward(x) * c).sum().backward()
    # by hand: h = relu(x w0ᵀ), y = h w2ᵀ, L = Σ y ⊙ c
    h = torch.relu(x @ w0.T)
    g2 = c.T @ h  # ∂L/∂W2
    g0 = ((c @ w2) * (x @ w0.T > 0)).T @ x  # ∂L/∂W0
    assert torch.allclose(method.scores["2"], -g2 * w2, atol=1e-6)
    assert torch.allclose(method.scores["0"], -g0 * w0, atol=1e-6)


def test_the_mask_follows_the_scores_per_layer_keeps_weights_and_lets_them_come_back():
    model, store, method, module = _setup(1)
    t0 = method.t0 + method.dt  # a pruning step
    method.scores["0"].copy_(torch.arange(30.0).view(5, 6))
    method.on_train_batch_start(type("T", (), {"global_step": t0})(), module, None, 0)
    d = 1 - method.sparsity_at(t0)
    keep = n_keep(30, d)
    assert int(store.masks["0"].sum()) == keep
    assert bool(store.masks["0"].view(-1)[-keep:].all())  # the largest scores
    assert bool((model[0].weight != 0).all())  # masked weights keep their values
    method.scores["0"].copy_(-torch.arange(30.0).view(5, 6))  # movement reverses
    method.on_train_batch_start(type("T", (), {"global_step": t0 + 1})(), module, None, 0)
    assert bool(store.masks["0"].view(-1)[: int(store.masks["0"].sum())].all())  # back
    w = model[0].weight.detach().clone()
    method.on_train_end(None, module)
    assert torch.equal(model[0].weight.detach(), w * store.masks["0"])
    assert not store.straight_through


def test_masked_weights_get_no_gradient_but_their_scores_move():
    model, store, method, module = _setup(2)
    mask = torch.zeros(5, 6, dtype=torch.bool)
    mask[:, :3] = True
    store.set_mask("0", mask)
    (store.forward(torch.randn(4, 6)) ** 2).sum().backward()
    assert bool((model[0].weight.grad[~mask] == 0).all())
    assert bool((method.scores["0"][~mask] != 0).any())


def test_defaults_are_the_authors_schedule():
    p = Movement.Params()
    assert (p.begin_fraction, p.end_fraction, p.pruning_frequency, p.distribution) == (
        0.1, 0.8, 1, "uniform"
    )  # fmt: skip


def test_the_score_hook_leaves_the_weights_gradient_as_it_is():
    model, store, method, _ = _setup(3)
    x = torch.randn(4, 6)
    (store.forward(x) ** 2).sum().backward()
    got = model[0].weight.grad.clone()
    model.zero_grad()
    (model(x) ** 2).sum().backward()  # no mask yet: the plain model's gradient
    assert torch.allclose(got, model[0].weight.grad)
