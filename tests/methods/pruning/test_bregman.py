"""LinBreg and AdaBreg: the optimizer's steps by hand (soft thresholding of the subgradient
variable), plain descent for the unregularised group, λ changes that keep v."""

from __future__ import annotations

import pytest
import torch

from sparsebench.methods.pruning.bregman import BregmanMethod, BregmanOptimizer, shrink


def _opt(p, lam=0.1, adam=False, momentum=0.0, delta=1.0, lr=0.1, rest=None):
    groups = [{"params": [p], "lam": lam, "regularised": True}]
    if rest is not None:
        groups.append({"params": [rest]})
    return BregmanOptimizer(groups, lr=lr, delta=delta, adam=adam, momentum=momentum)


def test_shrink_is_soft_thresholding():
    v = torch.tensor([0.5, -0.05, 0.1, -0.3])
    assert torch.allclose(shrink(v, 0.1), torch.tensor([0.4, 0.0, 0.0, -0.2]))


def test_linbreg_step_by_hand():
    p = torch.nn.Parameter(torch.tensor([0.5, 0.0, -0.2]))
    p.grad = torch.tensor([1.0, -2.0, 0.5])
    _opt(p).step()
    # v0 = θ0/δ + λ sign θ0 = [0.6, 0, -0.3]; v = v0 - 0.1 g = [0.5, 0.2, -0.35]
    assert torch.allclose(p.detach(), torch.tensor([0.4, 0.1, -0.25]))
    # δ scales θ = δ shrink(v, λ): δ = 2 -> v0 = [0.35, 0, -0.2], v = [0.25, 0.2, -0.25]
    q = torch.nn.Parameter(torch.tensor([0.5, 0.0, -0.2]))
    q.grad = torch.tensor([1.0, -2.0, 0.5])
    _opt(q, delta=2.0).step()
    assert torch.allclose(q.detach(), torch.tensor([0.3, 0.2, -0.3]))


def test_momentum_and_adam_variants_by_hand():
    p = torch.nn.Parameter(torch.tensor([0.5]))
    p.grad = torch.tensor([1.0])
    _opt(p, momentum=0.9).step()  # buffer (1 - 0.9)·0.1·1 = 0.01: v = 0.6 - 0.01
    assert torch.allclose(p.detach(), torch.tensor([0.49]))
    a = torch.nn.Parameter(torch.tensor([0.5]))
    a.grad = torch.tensor([4.0])
    _opt(a, adam=True, lr=0.01).step()  # m = 0.4, √ŝ = 4: v = 0.6 - 0.01·0.4/4
    assert torch.allclose(a.detach(), torch.tensor([0.499]), atol=1e-7)


def test_the_unregularised_group_is_gradient_descent_and_lambda_changes_keep_v():
    p = torch.nn.Parameter(torch.tensor([0.5, 0.05]))
    b = torch.nn.Parameter(torch.tensor([0.3]))
    opt = _opt(p, rest=b)
    p.grad, b.grad = torch.tensor([0.0, 0.0]), torch.tensor([2.0])
    loss = opt.step(lambda: torch.tensor(7.0))
    assert loss.item() == 7.0  # the closure ran (Lightning's automatic optimization)
    assert torch.allclose(b.detach(), torch.tensor([0.1]))  # 0.3 - 0.1·2
    assert torch.allclose(p.detach(), torch.tensor([0.5, 0.05]))
    opt.set_lambda(0.2)  # v = [0.6, 0.15] kept: the larger λ removes the small weight
    p.grad = torch.tensor([0.0, 0.0])
    opt.step()
    assert torch.allclose(p.detach(), torch.tensor([0.4, 0.0]))
    assert opt.param_groups[1]["lam"] == 0.0


def test_parameters_are_checked():
    for bad, msg in [({"lam": 0.0}, r"lam \(λ\) must be > 0"),
                     ({"init_density": 0.0}, r"init_density must be in \(0, 1\]"),
                     ({"momentum": 1.0}, r"momentum must be in \[0, 1\)"),
                     ({"lr": -1.0}, r"lr must be > 0")]:  # fmt: skip
        with pytest.raises(ValueError, match=msg):
            BregmanMethod.Params(**bad).validate()
