from types import SimpleNamespace

import lightning.pytorch as pl
import pytest
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

import sparsebench.methods.dst.topkast  # noqa: F401  (registers "topkast")
from sparsebench.methods.dst.base import as_callback
from sparsebench.methods.dst.topkast import TopKAST
from sparsebench.suite.lightning import quiet_trainer
from sparsebench.suite.pillars.classification.lit import ClassificationModule, FlopsCallback
from sparsebench.suite.pillars.classification.masks import MaskStore
from tests.methods.conftest import RECIPE, MaskWatcher, make_ctx


class _ReservoirWatcher(pl.Callback):
    """θ, A and B of every sparse layer before and after each step (after the method's hooks)."""

    def __init__(self):
        self.steps = []

    def on_fit_start(self, trainer, pl_module):
        self.method = next(c for c in trainer.callbacks if isinstance(c, TopKAST))

    def _snap(self, store):
        m = self.method
        return {
            n: (t.detach().clone(), store.masks[n].clone(), m.backward_masks[n].clone())
            for n, t in m.theta.items()
        }

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx):
        self._before = self._snap(pl_module.masks)

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
        self.steps.append((self._before, self._snap(pl_module.masks)))


def test_select_forward_is_top_d_and_backward_is_superset_of_size_d_plus_m():
    theta = torch.tensor([[0.3, -2.0, 0.1, 1.5], [-0.7, 0.0, 0.9, -0.2]])
    fwd, bwd = TopKAST.select(theta, 2, 4)
    assert fwd.tolist() == [[False, True, False, True], [False, False, False, False]]
    assert bwd.tolist() == [[False, True, False, True], [True, False, True, False]]
    assert bool((fwd & ~bwd).sum() == 0)
    # Ties: B is taken first and A inside it, so A ⊆ B whatever order topk breaks ties in.
    tied = torch.ones(3, 5)
    fwd, bwd = TopKAST.select(tied, 4, 7)
    assert int(fwd.sum()) == 4 and int(bwd.sum()) == 7 and not bool((fwd & ~bwd).any())
    with pytest.raises(ValueError, match="n_forward"):
        TopKAST.select(theta, 5, 4)


def test_exploration_penalty_on_a_hand_case():
    theta = torch.tensor([3.0, -2.0, 1.0, 0.5], requires_grad=True)
    fwd = torch.tensor([True, False, False, False])
    bwd = torch.tensor([True, True, False, False])
    # λ/2 (Σ_A θ² + Σ_{B\A} θ²/D) = 0.05 (9 + 4 / 0.25) = 1.25; θ = 1.0, 0.5 (set C) are free.
    value = TopKAST.exploration_penalty(theta, fwd, bwd, density=0.25, coeff=0.1)
    assert float(value) == pytest.approx(1.25)
    value.backward()
    grad = TopKAST.penalty_grad(theta.detach(), fwd, bwd, 0.25, 0.1)
    assert torch.allclose(grad, theta.grad)
    assert grad.tolist() == pytest.approx([0.3, -0.8, 0.0, 0.0])


def test_hand_checkable_update_step():
    """One step on a Linear(4, 2) at density 0.25 (|A| = 2, |B| = 4): SGD lr 0.1, momentum 0.9,
    weight decay 0.1 (the penalty's λ), the dense gradient set by hand."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 2))
    theta0 = torch.tensor([[1.0, -0.9, 0.5, 0.1], [0.05, -0.4, 0.3, 0.0]])
    with torch.no_grad():
        model[0].weight.copy_(theta0)
    store = MaskStore(model)
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9, weight_decay=0.1)
    store.attach(opt)
    ctx = make_ctx(model, total_steps=10, steps_per_epoch=10, input_shape=(4,))
    m = TopKAST(TopKAST.Params(), 0.75, ctx)  # D = 0.25, backward density 2D = 0.5
    module = SimpleNamespace(masks=store)
    trainer = SimpleNamespace(global_step=0)
    m.on_fit_start(trainer, module)
    w = model[0].weight
    # A0 = top-2 of |θ0|; B0 adds the next two (0.5 and -0.4).
    assert store.masks["0"].tolist() == [[True, True, False, False], [False] * 4]
    assert m.backward_masks["0"].tolist() == [
        [True, True, True, False],
        [False, True, False, False],
    ]
    assert torch.equal(w.detach(), theta0 * store.masks["0"])  # α = θ0 · A: 1.0, -0.9

    m.on_train_batch_start(trainer, module, (torch.zeros(3, 4), None), 0)
    assert store.capture_dense_grads
    g = torch.tensor([[2.0, 0.0, -6.0, 2.0], [0.0, -2.0, 5.0, -9.0]])
    store.dense_grads["0"] = g
    w.grad = g * store.masks["0"]
    m.on_before_optimizer_step(trainer, module, opt)

    # On B: θ -= lr (g + λ θ) on A and lr (g + λ θ / D) on B\A; first momentum step = gradient.
    # (0,0): 1 - 0.1 (2 + 0.1)      = 0.79      (0,1): -0.9 - 0.1 (0 - 0.09)    = -0.891
    # (0,2): 0.5 - 0.1 (-6 + 0.2)   = 1.08      (1,1): -0.4 - 0.1 (-2 - 0.16)   = -0.184
    # Outside B nothing moves, whatever its gradient: 0.1, 0.05, 0.3, 0.0.
    theta1 = [[0.79, -0.891, 1.08, 0.1], [0.05, -0.184, 0.3, 0.0]]
    theta = m.theta["0"].detach()
    assert torch.allclose(theta, torch.tensor(theta1))
    outside = ~torch.tensor([[True, True, True, False], [False, True, False, False]])
    assert torch.equal(theta[outside], theta0[outside])  # bit for bit
    # New A = top-2 of |θ1|: (0,0) is dropped (its value stays in θ), (0,2) grows with its
    # reservoir value 1.08, not zero. New B: (1,1) fell under 0.3, so (1,2) enters B.
    assert store.masks["0"].tolist() == [[False, True, True, False], [False] * 4]
    assert m.backward_masks["0"].tolist() == [
        [True, True, True, False],
        [False, False, True, False],
    ]
    assert torch.allclose(w.detach(), torch.tensor([[0.0, -0.891, 1.08, 0.0], [0.0] * 4]))
    # Optimizer state lives on B only: (1,1) left B and lost its momentum, (1,2) starts at 0;
    # (0,2) moved from B\A into A and keeps its momentum.
    buf = m._opt.state[m.theta["0"]]["momentum_buffer"]
    assert torch.allclose(buf, torch.tensor([[2.1, -0.09, -5.8, 0.0], [0.0, 0.0, 0.0, 0.0]]))
    # The trainer's optimizer skips the weight (it was stepped through θ), so it keeps no state.
    assert w.grad is None and opt.state.get(w) is None
    # FLOPs: Linear(4, 2) is 16 FLOPs; f_S(B) - f_S(A) = 8 - 4 = 4 per example, 3 examples.
    assert ctx.flops.total == pytest.approx(12.0)
    assert not store.dense_grads and not store.capture_dense_grads


def test_private_optimizer_follows_the_trainers_adam():
    model = nn.Sequential(nn.Linear(4, 2))
    store = MaskStore(model)
    opt = torch.optim.Adam(model.parameters(), lr=0.01, betas=(0.8, 0.9), weight_decay=0.1)
    store.attach(opt)
    m = TopKAST(TopKAST.Params(), 0.75, make_ctx(model, 10, 10, input_shape=(4,)))
    module, trainer = SimpleNamespace(masks=store), SimpleNamespace(global_step=0)
    m.on_fit_start(trainer, module)
    theta0, bwd = m.theta["0"].detach().clone(), m.backward_masks["0"].clone()
    m.on_train_batch_start(trainer, module, (torch.zeros(2, 4), None), 0)
    store.dense_grads["0"] = torch.ones(2, 4)
    opt.param_groups[0]["lr"] = 0.002  # as an lr schedule would
    m.on_before_optimizer_step(trainer, module, opt)
    group = m._opt.param_groups[0]
    assert isinstance(m._opt, torch.optim.Adam)
    assert (group["lr"], group["betas"], group["weight_decay"]) == (0.002, (0.8, 0.9), 0.0)
    assert m._coeff("0") == 0.1  # the trainer's weight decay is the penalty's λ
    theta1 = m.theta["0"].detach()
    assert torch.equal(theta1[~bwd], theta0[~bwd])
    # Adam's first step moves each coordinate of B by about lr (the gradient is positive).
    assert torch.allclose(theta0[bwd] - theta1[bwd], torch.full((4,), 0.002), rtol=1e-3)


def test_exact_density_after_every_step_topology_changes_and_flops(tiny_fit):
    watcher = MaskWatcher()
    module, m = tiny_fit("topkast", 0.8, epochs=2, extra_callbacks=[watcher])
    assert len(watcher.nnz) == 20
    assert all(n == watcher.nnz[0] for n in watcher.nnz)
    sizes = {n: w.numel() for n, w in m.theta.items()}
    assert watcher.nnz[0] == {n: round(0.2 * s) for n, s in sizes.items()}  # uniform, D = 0.2
    # The topology does change, in every layer (A moves as B \ A weights overtake A's).
    changes = {
        n: sum(not torch.equal(a[n], b[n]) for a, b in zip(watcher.masks, watcher.masks[1:]))
        for n in m.theta
    }
    assert all(c >= 1 for c in changes.values()) and sum(changes.values()) >= 10, changes
    assert module.masks.sparsity() == pytest.approx(0.8, abs=0.01)
    # The final (inference) model is α = θ·A, with A the top-D of the final reservoir.
    for name, theta in m.theta.items():
        fwd, bwd = TopKAST.select(theta.detach(), *m._n_keep[name])
        assert torch.equal(module.masks.masks[name], fwd)
        assert torch.equal(module.masks.weight(name).detach(), (theta * fwd).detach())
        assert int(bwd.sum()) == round(0.4 * theta.numel())  # backward density 2D
    # FLOPs: per example 2 f_S(D) (forward, activation gradients) + f_S(D + M) (weight
    # gradients on B): FlopsCallback's 3 f_S(D) plus the method's f_S(D + M) - f_S(D); |A| and
    # |B| are constant, 160 examples an epoch.
    flops = m.ctx.flops
    bwd_densities = m.backward_densities(module.masks)
    f_fwd = sum(f * module.masks.density(n) for n, f in flops.dense_flops.items())
    f_bwd = sum(f * bwd_densities[n] for n, f in flops.dense_flops.items())
    assert f_bwd == pytest.approx(2 * f_fwd, rel=0.01)
    assert flops.total == pytest.approx((2 * f_fwd + f_bwd) * 160 * 2)


# |A|, |B| of the 12-32-16-3 MLP at uniform density 0.2 (the default), B at twice A's
# density: |A| = round(0.2 x 384, 0.2 x 512, 0.2 x 48) = 77, 102, 10; |B| = 154, 205, 19.
SIZES_BY_HAND = {"0": (77, 154), "2": (102, 205), "4": (10, 19)}


def test_only_b_moves_and_b_minus_a_is_trained(tiny_fit):
    watch = _ReservoirWatcher()
    _, m = tiny_fit("topkast", 0.8, epochs=2, extra_callbacks=[watch])
    assert len(watch.steps) == 20
    moved_extra = n_extra = 0
    for before, after in watch.steps:
        for name, (t0, fwd, bwd) in before.items():
            t1, fwd1, bwd1 = after[name]
            assert torch.equal(t0[~bwd], t1[~bwd]), name  # outside B: not one bit changes
            extra = bwd & ~fwd
            moved_extra += int((t0[extra] != t1[extra]).sum())
            n_extra += int(extra.sum())
            assert int((t0[fwd] != t1[fwd]).sum()) > 0.9 * int(fwd.sum())
            # After the step A is the top-D of |θ|, and B ⊇ A has the backward size.
            assert (int(fwd1.sum()), int(bwd1.sum())) == SIZES_BY_HAND[name], name
            assert not bool((fwd1 & ~bwd1).any())
            assert bool((t1.abs()[~fwd1] <= t1.abs()[fwd1].min()).all())
    # B \ A is trained: it gets ∇_α L (and the penalty) although it is zero in the forward.
    assert moved_extra > 0.9 * n_extra


def test_topk_schedule_every_n_steps(tiny_fit):
    watcher = MaskWatcher()
    _, m = tiny_fit("topkast", 0.8, {"topk_interval": 3}, epochs=2, extra_callbacks=[watcher])
    assert [s for s in range(1, 13) if m.is_topk_step(s)] == [3, 6, 9, 12]
    # watcher.masks[i] is the forward mask after step i + 1: it may change only at steps 3k.
    changed_at = [
        i + 2
        for i, (a, b) in enumerate(zip(watcher.masks, watcher.masks[1:]))
        if any(not torch.equal(a[n], b[n]) for n in m.theta)
    ]
    assert changed_at and all(s % 3 == 0 for s in changed_at)
    assert all(n == watcher.nnz[0] for n in watcher.nnz)


def test_too_short_run_is_refused():
    with pytest.raises(ValueError, match="never be recomputed"):
        TopKAST.check_budget(TopKAST.Params(topk_interval=100), 100)
    TopKAST.check_budget(TopKAST.Params(topk_interval=100), 101)
    m = TopKAST(TopKAST.Params(topk_interval=5), 0.9, ctx=SimpleNamespace(total_steps=5))
    with pytest.raises(ValueError, match="topk_interval = 5 >= total_steps = 5"):
        m.on_fit_start(None, None)


def test_bad_params_are_refused():
    from tests.methods.mask_methods import RegistryError, build_params

    with pytest.raises(RegistryError, match="backward_density_ratio must be >= 1"):
        build_params("topkast", {"backward_density_ratio": 0.5})
    with pytest.raises(RegistryError, match="topk_interval must be >= 1"):
        build_params("topkast", {"topk_interval": 0})
    assert build_params("topkast", {"exploration_l2": None}).exploration_l2 is None


def test_conv2d_model_keeps_exact_density():
    pl.seed_everything(0, verbose=False)
    g = torch.Generator().manual_seed(0)
    x = torch.randn(40, 1, 6, 6, generator=g)
    y = (x.mean((1, 2, 3)) > 0).long()
    model = nn.Sequential(
        nn.Conv2d(1, 4, 3), nn.ReLU(), nn.Conv2d(4, 4, 3), nn.Flatten(), nn.Linear(16, 2)
    )
    loader = DataLoader(TensorDataset(x, y), batch_size=8)
    ctx = make_ctx(model, 10, 5, input_shape=(1, 6, 6))
    m = TopKAST(TopKAST.Params(), 0.75, ctx)
    module = ClassificationModule(model, 2, RECIPE, 10)
    watcher = MaskWatcher()
    trainer = quiet_trainer(
        max_epochs=2,
        accelerator="cpu",
        num_sanity_val_steps=0,
        callbacks=[as_callback(m), FlopsCallback(ctx.flops), watcher],
    )
    trainer.fit(module, loader)
    assert len(watcher.nnz) == 10
    assert all(n == watcher.nnz[0] for n in watcher.nnz)
    assert watcher.nnz[0]["0"] == 9 and watcher.nnz[0]["2"] == 36  # 0.25 of 36 and of 144
    assert m.theta["0"].shape == (4, 1, 3, 3)
    assert not torch.equal(watcher.masks[0]["2"], watcher.masks[-1]["2"])
    assert module.masks.sparsity() == pytest.approx(0.75, abs=0.01)


def _fit_started(ratio):
    model = nn.Sequential(nn.Linear(4, 2, bias=False))
    store = MaskStore(model)
    m = TopKAST(
        TopKAST.Params(backward_density_ratio=ratio),
        0.5,
        make_ctx(model, 100, 10, input_shape=(4,)),
    )
    m.on_fit_start(None, SimpleNamespace(masks=store))
    return model, store, m


def test_backward_set_is_capped_at_the_whole_layer():
    # D = 0.5 of 8 weights: |A| = 4; 3 x 0.5 > 1, so B is all 8 (min(1, 1.5) = 1).
    _, _, m = _fit_started(3.0)
    assert m._n_keep["0"] == (4, 8) and bool(m.backward_masks["0"].all())


def test_private_optimizer_unwraps_the_trainer_optimizer_and_keeps_decay_off():
    model, store, m = _fit_started(2.0)
    opt = torch.optim.AdamW(model.parameters(), lr=0.01, weight_decay=0.2)
    m._sync_optimizer(SimpleNamespace(optimizer=opt), store)  # as a LightningOptimizer wraps
    assert type(m._opt) is torch.optim.AdamW
    # AdamW's own default decay is 0.01: the group must say 0.0 explicitly; the trainer's
    # 0.2 goes to the exploration penalty instead.
    assert m._opt.param_groups[0]["weight_decay"] == 0.0 and m._decay == {"0": 0.2}


def test_a_weight_outside_the_optimizer_is_refused():
    opt = torch.optim.SGD([nn.Parameter(torch.zeros(2))], lr=0.1)
    with pytest.raises(ValueError, match="^topkast: a sparse layer's weight is not in"):
        TopKAST._hyper(opt, torch.zeros(2))
