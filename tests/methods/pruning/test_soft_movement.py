"""Soft movement pruning: the scores' Adam step on the straight-through gradient plus the L1
penalty on σ(S) (an independent Adam as the reference), λ's cubic ramp, one threshold across
matrices at the schedule's density, and each matrix's floor."""

import pytest
import torch
from torch import nn

from sparsebench.methods.pruning.soft_movement import SoftMovement, floor_count
from sparsebench.suite.pillars.classification.masks import MaskStore, n_keep


class _Flops:
    def add(self, flops):
        pass

    def dense_grad_extra(self, densities, batch_size):
        return 0.0


def _setup(seed=0, sizes=(6, 5, 3), sparsity=0.6):
    torch.manual_seed(seed)
    a, b, c = sizes
    model = nn.Sequential(nn.Linear(a, b, bias=False), nn.ReLU(), nn.Linear(b, c, bias=False))
    store = MaskStore(model)
    ctx = type("C", (), {"total_steps": 100, "flops": _Flops()})()
    method = SoftMovement(SoftMovement.Params(), sparsity, ctx)
    module = type("M", (), {"masks": store, "model": model})()
    method.on_fit_start(None, module)
    return model, store, method, module


def _trainer(step):
    return type("T", (), {"global_step": step})()


def test_floor_count_is_the_binarizers():
    assert floor_count(1000) == 6 and floor_count(30) == 1 and floor_count(235200) == 1177


def test_lambda_ramps_cubically_over_the_window():
    _, _, method, _ = _setup()  # window 10 .. 80 of 100 steps
    assert method.ramp(5) == 0.0 and method.ramp(10) == 0.0 and method.ramp(90) == 1.0
    assert method.ramp(45) == pytest.approx(1 - 0.5**3)


def test_scores_take_adam_steps_on_the_movement_gradient_plus_the_penalty():
    model, store, method, module = _setup(1)
    step = 45
    x = torch.randn(4, 6)
    w = {n: store.weight(n).detach().clone() for n in store.layers}
    (store.forward(x) ** 2).sum().backward()
    grads = {n: store.weight(n).grad.detach().clone() for n in store.layers}
    ref = {n: torch.zeros_like(w[n], requires_grad=True) for n in store.layers}
    opt = torch.optim.Adam(list(ref.values()), lr=1e-2)
    lam = 400.0 * (1 - 0.5**3)
    for n in store.layers:  # σ'(0) = 1/4, two matrices; ∂L/∂S = +(∂L/∂W') ⊙ W
        ref[n].grad = grads[n] * w[n] + lam * 0.25 / (w[n].numel() * 2)
    opt.step()
    method.on_train_batch_end(_trainer(step), module, None, (x,), 0)
    for n in store.layers:
        # the gradient itself (σ(1 - σ), λ, 1/n and 1/L all show in it), then Adam's step
        assert torch.allclose(method.scores[n].grad, ref[n].grad, atol=1e-9), n
        assert torch.allclose(method.scores[n].detach(), ref[n].detach(), atol=1e-7), n
        assert bool((method.score_grads[n] == 0).all())  # the buffer is spent
    # Adam's first step is -lr · sign(g) wherever g ≠ 0: a score moves by 0.01
    moved = method.scores["0"].detach().abs()
    assert torch.allclose(moved[moved > 0], torch.full_like(moved[moved > 0], 0.01), atol=1e-6)


def test_one_threshold_across_matrices_at_the_schedules_density():
    model, store, method, module = _setup(2)
    with torch.no_grad():
        method.scores["0"].copy_(torch.arange(30.0).view(5, 6))  # all high
        method.scores["2"].copy_(torch.arange(15.0).view(3, 5) - 100.0)  # all low
    method.on_train_batch_start(_trainer(90), module, None, 0)  # after the window: s_f
    keep = n_keep(45, 1 - 0.6)
    kept0, kept2 = int(store.masks["0"].sum()), int(store.masks["2"].sum())
    assert kept0 + kept2 == keep
    assert kept2 == floor_count(15) and bool(store.masks["2"].view(-1)[-1])  # only its floor
    assert kept0 == keep - 1 and bool(store.masks["0"].view(-1)[-(keep - 1) :].all())


def test_a_matrix_whose_scores_all_fall_keeps_half_a_percent():
    model, store, method, module = _setup(4, sizes=(40, 10, 3), sparsity=0.95)
    with torch.no_grad():
        method.scores["0"].copy_(torch.arange(400.0).view(10, 40) - 1000.0)  # all low
        method.scores["2"].copy_(torch.arange(30.0).view(3, 10))  # all high
    method.on_train_batch_start(_trainer(90), module, None, 0)
    keep = n_keep(430, 0.05)
    assert floor_count(400) == 3
    assert int(store.masks["0"].sum()) == 3 and bool(store.masks["0"].view(-1)[-3:].all())
    assert int(store.masks["2"].sum()) == keep - 3


def test_before_the_window_the_network_stays_dense_and_the_scores_still_move():
    model, store, method, module = _setup(3)
    method.on_train_batch_start(_trainer(0), module, None, 0)
    assert all(store.masks.get(n) is None for n in store.layers)
    (store.forward(torch.randn(2, 6)) ** 2).sum().backward()
    method.on_train_batch_end(_trainer(0), module, None, (torch.zeros(2, 6),), 0)
    assert float(method.scores["0"].detach().abs().sum()) > 0


def test_scores_that_overflow_end_the_cell_as_diverged():
    from sparsebench.suite.pillars.classification.lit import DivergedError

    model, store, method, module = _setup(5)
    method.params.scores_lr = 3e38  # Adam's step size lr / (1 − β1) overflows float32
    for group in method.score_opt.param_groups:
        group["lr"] = 3e38
    with pytest.raises(DivergedError, match="scores_lr 3e"):
        method.on_train_batch_end(_trainer(90), module, None, (torch.zeros(2, 6),), 0)
    method = _setup(6)[2]
    with torch.no_grad():
        method.scores["0"][0, 0] = torch.inf  # a score that is no longer finite
    with pytest.raises(DivergedError, match="no longer finite at step 3"):
        method.on_train_batch_end(_trainer(3), module, None, (torch.zeros(2, 6),), 0)


@pytest.mark.parametrize(
    ("kw", "match"),
    [
        ({"final_lambda": 0.0}, "final_lambda"),
        ({"scores_lr": -1.0}, "scores_lr"),
        ({"scores_lr": 1e300}, "at most 3.4e"),
    ],
)
def test_bad_parameters_are_refused(kw, match):
    with pytest.raises(ValueError, match=match):
        SoftMovement.Params(**kw).validate()
