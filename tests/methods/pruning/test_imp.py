import math

import pytest
import torch
from torch import nn

from sparsebench.methods.pruning.imp import IMP, levels_to
from sparsebench.suite.pillars.classification.masks import MaskStore, n_keep


def test_levels_compound_twenty_percent_until_the_target():
    assert [levels_to(s, 0.2) for s in (0.2, 0.5, 0.8, 0.9, 0.95, 0.98)] == [1, 4, 8, 11, 14, 18]
    for s in (0.5, 0.8, 0.98):  # L levels reach it, L - 1 do not
        n = levels_to(s, 0.2)
        assert 1 - 0.8**n >= s > 1 - 0.8 ** (n - 1)


def test_the_run_is_t_plus_l_rounds_of_t_minus_k_and_the_lr_resumes_at_k():
    p = IMP.Params(rewind_fraction=0.1)
    assert IMP.training_steps(p, 0.5, 100) == 100 + 4 * 90
    pos = IMP.schedule_position(p, 0.5, 100)
    assert [pos(s) for s in (0, 99, 100, 101, 189, 190, 279, 280)] == [
        0, 99, 10, 11, 99, 10, 99, 10
    ]  # fmt: skip
    assert IMP.schedule_position(IMP.Params(), 0.5, 100)(150) == 50  # k = 0: from the start


class _Trainer:
    def __init__(self, step, opt):
        self.global_step, self.optimizers = step, [opt]


def _run(reinit=False, rewind_fraction=0.0, sparsity=0.6, seed=0):
    torch.manual_seed(seed)
    model = nn.Sequential(nn.Linear(10, 20), nn.ReLU(), nn.Linear(20, 20), nn.Linear(20, 3))
    store = MaskStore(model)
    new_model = lambda: nn.Sequential(  # noqa: E731
        nn.Linear(10, 20), nn.ReLU(), nn.Linear(20, 20), nn.Linear(20, 3)
    )
    ctx = type(
        "C",
        (),
        {"steps_per_epoch": 5, "epochs": 2, "seed": 0, "new_model": staticmethod(new_model)},
    )
    method = IMP(IMP.Params(reinit=reinit, rewind_fraction=rewind_fraction), sparsity, ctx())
    module = type("M", (), {"masks": store, "model": model})()
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    store.attach(opt)
    method.on_fit_start(None, module)
    seen, rewound = {}, None
    total = IMP.training_steps(method.params, sparsity, 10)
    g = torch.Generator().manual_seed(1)
    for step in range(total):
        method.on_train_batch_start(_Trainer(step, opt), module, None, 0)
        if step == IMP.rewind_step(method.params, 10):
            rewound = {k: v.clone() for k, v in model.state_dict().items()}
        level = method.level_starting_at(step)
        if level:
            seen[level] = (
                {n: store.masks[n] for n in store.layers},
                {k: v.clone() for k, v in model.state_dict().items()},
                len(opt.state),
            )
        with torch.no_grad():  # "training": every weight moves, the masked ones stay zero
            for p in model.parameters():
                p.add_(0.05 * torch.randn(p.shape, generator=g))
            opt.state[model[0].weight] = {"momentum_buffer": torch.ones(20, 10)}
        store.apply()
    return method, store, seen, rewound


def test_each_level_keeps_the_compounded_density_and_rewinds_to_the_stored_weights():
    method, store, seen, theta0 = _run()
    assert sorted(seen) == list(range(1, method.levels + 1)) == [1, 2, 3, 4, 5]
    total = store.total
    previous = None
    for level, (masks, state, n_state) in sorted(seen.items()):
        density = 0.4 if level == 5 else 0.8**level
        assert sum(int(m.sum()) if m is not None else 60 for m in masks.values()) == n_keep(
            total, density
        )
        assert masks["3"] is None  # the output layer stays dense
        for name in ("0", "2"):  # rewound: θ_0 on the surviving weights, zero elsewhere
            w = state[f"{name}.weight"]
            assert torch.equal(w, theta0[f"{name}.weight"] * masks[name])
            if previous is not None:  # removed weights never come back
                assert not bool((masks[name] & ~previous[name]).any())
        assert torch.equal(state["3.weight"], theta0["3.weight"])
        assert n_state == 0  # a fresh optimizer every level
        previous = masks
    assert math.isclose(store.sparsity(), 0.6, abs_tol=1 / total)


def test_late_rewinding_restores_step_k_and_the_control_reinitialises_the_same_mask():
    _, _, seen, theta_k = _run(rewind_fraction=0.2)
    assert torch.equal(seen[1][1]["0.weight"], theta_k["0.weight"] * seen[1][0]["0"])
    _, _, control, theta0 = _run(reinit=True)
    _, _, ticket, _ = _run()
    last = max(ticket)
    assert all(torch.equal(ticket[last][0][n], control[last][0][n]) for n in ("0", "2"))
    w = control[last][1]["0.weight"]
    assert not torch.equal(w, theta0["0.weight"] * control[last][0]["0"])
    assert bool((w[~control[last][0]["0"]] == 0).all())  # fresh weights, the same mask
    assert torch.equal(control[last - 1][1]["0.weight"], ticket[last - 1][1]["0.weight"])


def test_a_target_the_dense_output_layer_alone_exceeds_is_refused():
    layers = {"a": nn.Linear(10, 10), "out": nn.Linear(10, 10)}
    with pytest.raises(ValueError, match="prune_output_layer: true"):
        IMP.check_sparsity(IMP.Params(), 0.6, layers)
    IMP.check_sparsity(IMP.Params(prune_output_layer=True), 0.6, layers)
    IMP.check_sparsity(IMP.Params(), 0.4, layers)


def test_every_level_resumes_the_recipes_learning_rate_at_k():
    from sparsebench.suite.pillars.classification.lit import ClassificationModule, lr_lambda

    recipe = {"lr": 0.1, "schedule": "cosine"}
    p = IMP.Params(rewind_fraction=0.2)
    model = nn.Sequential(nn.Linear(4, 3))
    module = ClassificationModule(model, 3, recipe, 100, IMP.schedule_position(p, 0.5, 100))
    sched = module.configure_optimizers()["lr_scheduler"]["scheduler"]
    factor, base = sched.lr_lambdas[0], lr_lambda(recipe, 100)
    assert factor(99) == base(99) and factor(100) == base(20) and factor(179) == base(99)
    assert factor(180) == base(20)  # the next level


def test_late_rewinding_and_endless_levels_are_refused():
    with pytest.raises(ValueError, match=r"rewind_fraction must be in \[0, 0.5\], got 0.99"):
        IMP.Params(rewind_fraction=0.99).validate()
    layers = {"a": nn.Linear(10, 100), "out": nn.Linear(100, 2)}
    with pytest.raises(ValueError, match="needs 1609 levels .* MAX_LEVELS = 40"):
        IMP.check_sparsity(IMP.Params(pruning_fraction=0.001), 0.8, layers)
    IMP.check_sparsity(IMP.Params(), 0.8, layers)
