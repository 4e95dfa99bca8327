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


def test_scores_sum_over_steps_and_evaluation_forwards_add_nothing():
    model, store, method, _ = _setup(3)
    expected = {n: torch.zeros_like(method.scores[n]) for n in store.layers}
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for _ in range(4):
        x = torch.randn(4, 6)
        with torch.no_grad():
            store.forward(x)  # validation: no score moves, no hook stays
        with torch.inference_mode():
            store.forward(x)
        w = {n: store.weight(n).detach().clone() for n in store.layers}
        # the gradient of the used weight, by an independent forward on plain tensors
        w0, w2 = (w[n].clone().requires_grad_() for n in ("0", "2"))
        (((torch.relu(x @ w0.T) @ w2.T) ** 2).sum()).backward()
        expected["0"] -= w0.grad * w["0"]
        expected["2"] -= w2.grad * w["2"]
        opt.zero_grad()
        (store.forward(x) ** 2).sum().backward()
        opt.step()
    for n in store.layers:
        assert torch.allclose(method.scores[n], expected[n], atol=1e-5), n
    assert len(model[0].weight._backward_hooks) == 1  # the store's own: no hook piles up


def test_the_mask_still_follows_the_scores_after_the_schedule():
    model, store, method, module = _setup(4)
    t0, t_end, dt, n = method.schedule(method.params, method.ctx.total_steps)
    after = t0 + n * dt + 3
    assert method.sparsity_at(after) is None
    method.scores["0"].copy_(torch.arange(30.0).view(5, 6))
    method.on_train_batch_start(type("T", (), {"global_step": after})(), module, None, 0)
    first = store.masks["0"].clone()
    assert int(first.sum()) == n_keep(30, 0.4)
    method.scores["0"].copy_(-torch.arange(30.0).view(5, 6))
    method.on_train_batch_start(type("T", (), {"global_step": after + 1})(), module, None, 0)
    assert not torch.equal(first, store.masks["0"])


def test_a_masked_layer_passes_the_masked_gradient_to_its_weights():
    model, store, method, module = _setup(5)
    mask = torch.rand(5, 6) > 0.5
    store.set_mask("0", mask)
    x = torch.randn(4, 6)
    w0, w2 = model[0].weight.detach().clone(), model[2].weight.detach().clone()
    (store.forward(x) ** 2).sum().backward()
    u = (w0 * mask).requires_grad_()
    ((torch.relu(x @ u.T) @ w2.T) ** 2).sum().backward()
    assert torch.allclose(model[0].weight.grad, u.grad * mask, atol=1e-6)
