import pytest
import torch

from sparsebench.methods.merging.averaging import Averaging
from sparsebench.methods.merging.base import MergeInputs
from sparsebench.methods.merging.fisher import Fisher, diagonal_fisher, fisher_average
from tests.methods.merging.conftest import (
    FakeData,
    assert_state_close,
    assert_unchanged,
    make_inputs,
    snapshot,
)


def brute_force_fisher(data, trunk, task, x, y, kind):
    """(1/n) Σ_i [Σ_c p_c] (∂ log p / ∂θ)², one autograd call per example and class."""
    out = {k: torch.zeros_like(v) for k, v in trunk.items()}
    for i in range(x.shape[0]):
        params = {k: v.detach().clone().requires_grad_(True) for k, v in trunk.items()}
        logp = torch.log_softmax(data.logits(params, task, x[i : i + 1]), -1)[0]
        for c in range(logp.shape[0]) if kind == "exact" else [int(y[i])]:
            grads = torch.autograd.grad(logp[c], list(params.values()), retain_graph=True)
            w = float(logp[c].detach().exp()) if kind == "exact" else 1.0
            for k, g in zip(params, grads):
                out[k] += w * g**2
    return {k: v / x.shape[0] for k, v in out.items()}


@pytest.mark.parametrize("kind", ["exact", "empirical"])
def test_vmapped_fisher_matches_brute_force(kind):
    inputs = make_inputs()
    x, y = inputs.data.examples(1, "train", 12)
    got = diagonal_fisher(inputs.data, inputs.experts[1], 1, x, y, kind)
    exp = brute_force_fisher(inputs.data, inputs.experts[1], 1, x, y, kind)
    assert_state_close(got, exp, rtol=1e-4, atol=1e-7)


class NoVmapData(FakeData):
    """logits that torch.func.vmap cannot trace (a data-dependent Python branch)."""

    def logits(self, trunk, task, x):
        if float(x.sum()) > 1e9:
            raise AssertionError
        return super().logits(trunk, task, x)


def test_loop_fallback_gives_the_same_fisher():
    inputs = make_inputs()
    x, y = inputs.data.examples(0, "train", 6)
    data2 = NoVmapData(3, 0)
    a = diagonal_fisher(inputs.data, inputs.experts[0], 0, x, y, "exact")
    b = diagonal_fisher(data2, inputs.experts[0], 0, x, y, "exact")
    assert_state_close(a, b, rtol=1e-5, atol=1e-8)


def test_equal_fishers_give_the_average():
    inputs = make_inputs(data=False)
    f = {
        k: torch.rand(v.shape, generator=torch.Generator().manual_seed(0)) + 0.1
        for k, v in inputs.base.items()
    }
    got = fisher_average(inputs.experts, [f, f, f])
    avg = Averaging().merge(inputs, Averaging.Params()).state
    assert_state_close(got, avg, rtol=1e-5, atol=1e-6)


def test_zero_fishers_fall_back_to_the_average_and_weights_by_hand():
    experts = [{"w": torch.tensor([1.0, 1.0])}, {"w": torch.tensor([5.0, 3.0])}]
    zero = {"w": torch.zeros(2)}
    assert torch.allclose(fisher_average(experts, [zero, zero])["w"], torch.tensor([3.0, 2.0]))
    f1, f2 = {"w": torch.tensor([1.0, 0.0])}, {"w": torch.tensor([3.0, 2.0])}
    # entry 0: (1·1 + 3·5) / 4 = 4; entry 1: (1e-6·1 + 2·3) / (2 + 1e-6) ≈ 3
    got = fisher_average(experts, [f1, f2])["w"]
    assert torch.allclose(got, torch.tensor([4.0, 3.0]), atol=1e-5)


def test_merge_identical_experts_counts_examples_and_keeps_inputs():
    inputs = make_inputs()
    same = MergeInputs(inputs.base, [inputs.experts[0]] * 3, data=inputs.data)
    snap = snapshot(same)
    res = Fisher().merge(same, Fisher.Params(n_examples=10))
    assert_state_close(res.state, inputs.experts[0], rtol=1e-5, atol=1e-6)
    assert res.examples == 30 and inputs.data.read["train"] == 30
    assert len(res.info["fisher_mean"]) == 3
    assert_unchanged(same, snap)


def test_needs_data():
    with pytest.raises(ValueError, match="data"):
        Fisher().merge(make_inputs(data=False), Fisher.Params())


def test_fisher_average_by_hand_with_and_without_normalised_fishers():
    """F_1 = {w: [3, 0], b: [4]} (‖F_1‖ = 5), F_2 = {w: [1, 0], b: [0]} (‖F_2‖ = 1), zeros
    floored at 1e-6; θ_1 = {w: [0, 2], b: [0]}, θ_2 = {w: [4, 6], b: [8]}. Plain: w_0 =
    (3·0 + 1·4) / 4 = 1, w_1 = the plain mean 4 (both floored). Normalised (F_1 / 5): w_0 =
    (0.6·0 + 1·4) / 1.6 = 2.5, w_1 = (0.2e-6·2 + 1e-6·6) / 1.2e-6 = 16/3."""
    experts = [
        {"w": torch.tensor([0.0, 2.0]), "b": torch.tensor([0.0])},
        {"w": torch.tensor([4.0, 6.0]), "b": torch.tensor([8.0])},
    ]
    fishers = [
        {"w": torch.tensor([3.0, 0.0]), "b": torch.tensor([4.0])},
        {"w": torch.tensor([1.0, 0.0]), "b": torch.tensor([0.0])},
    ]
    plain = fisher_average(experts, fishers)
    assert plain["w"].tolist() == pytest.approx([1.0, 4.0])
    assert float(plain["b"]) == pytest.approx(8e-6 / 4, rel=1e-3)
    normed = fisher_average(experts, fishers, normalize=True)
    assert normed["w"].tolist() == pytest.approx([2.5, 16 / 3])
    assert float(normed["b"]) == pytest.approx(8e-6 / 0.8, rel=1e-3)


@pytest.mark.parametrize("kind", ["exact", "empirical"])
def test_vmap_path_needs_no_loop_and_sums_every_chunk(kind, monkeypatch):
    """The per-example vmap handles both kinds (the loop is only for a ``data.logits`` vmap
    cannot trace), and a Jacobian budget of one example per chunk sums every chunk."""
    from sparsebench.methods.merging import fisher as fisher_module

    def no_loop(*args):
        raise AssertionError("the vmap path fell back to the loop")

    monkeypatch.setattr(fisher_module, "_accumulate_loop", no_loop)
    monkeypatch.setattr(fisher_module, "_JACOBIAN_BUDGET", 1)  # chunks of one example
    inputs = make_inputs()
    x, y = inputs.data.examples(1, "train", 5)
    got = diagonal_fisher(inputs.data, inputs.experts[1], 1, x, y, kind)
    exp = brute_force_fisher(inputs.data, inputs.experts[1], 1, x, y, kind)
    assert_state_close(got, exp, rtol=1e-4, atol=1e-7)


class LoopOnlyLinearData:
    """logits = x @ wᵀ, with a Python branch on x that vmap cannot trace; the trunk's
    ``unused`` entry takes no part."""

    def logits(self, trunk, task, x):
        if float(x.sum()) > 1e9:
            raise AssertionError
        return x @ trunk["w"].T


@pytest.mark.parametrize("kind", ["exact", "empirical"])
def test_loop_fallback_by_hand_with_an_unused_parameter(kind):
    """x = (1, 0), w = 0: p = (1/2, 1/2), ∂ log p_c / ∂w_j = (δ_cj − p_j) xᵀ, so every class
    gives squared rows (1/4, 0) for j = 0, 1. Exact: Σ_c p_c · that = (1/4, 0) per row;
    empirical (label 0): the same. ``unused`` has no gradient: Fisher 0."""
    trunk = {"w": torch.zeros(2, 2), "unused": torch.ones(3)}
    x, y = torch.tensor([[1.0, 0.0]]), torch.tensor([0])
    got = diagonal_fisher(LoopOnlyLinearData(), trunk, 0, x, y, kind)
    torch.testing.assert_close(got["w"], torch.tensor([[0.25, 0.0], [0.25, 0.0]]))
    assert got["unused"].tolist() == [0.0, 0.0, 0.0]


def test_normalised_fishers_below_unit_norm_by_hand():
    """F_1 = [0.3, 0.4] (‖F_1‖ = 0.5) -> F_1 / 0.5 = [0.6, 0.8]; F_2 = [4, 0] (‖F_2‖ = 4) ->
    [1, 1e-6 / 4]; θ_1 = [0, 0], θ_2 = [1, 1]: w_0 = (0.6 · 0 + 1 · 1) / 1.6 = 0.625,
    w_1 = 2.5e-7 / (0.8 + 2.5e-7) ≈ 3.125e-7."""
    experts = [{"w": torch.tensor([0.0, 0.0])}, {"w": torch.tensor([1.0, 1.0])}]
    fishers = [{"w": torch.tensor([0.3, 0.4])}, {"w": torch.tensor([4.0, 0.0])}]
    got = fisher_average(experts, fishers, normalize=True)["w"].tolist()
    assert got == pytest.approx([0.625, 3.125e-7], rel=1e-4)


@pytest.mark.parametrize("kind", ["exact", "empirical"])
def test_merge_by_hand_from_brute_force_fishers(kind):
    """θ* = Σ_t F̃_t θ_t / Σ_t F̃_t with F̃_t = max(F_t, 1e-6) / ‖F_t‖ (normalize), F_t the
    brute-force Fisher of expert t on its first 6 train examples; info's fisher_mean is the
    mean entry of each F_t."""
    inputs = make_inputs()
    fishers = []
    for t, e in enumerate(inputs.experts):
        x, y = inputs.data.splits[(t, "train")]
        fishers.append(brute_force_fisher(inputs.data, e, t, x[:6], y[:6], kind))
    res = Fisher().merge(inputs, Fisher.Params(n_examples=6, fisher=kind, normalize=True))
    norms = [sum(float((f**2).sum()) for f in fi.values()) ** 0.5 for fi in fishers]
    for k in inputs.base:
        w = [fi[k].clamp(min=1e-6) / n for fi, n in zip(fishers, norms)]
        expected = sum(wi * e[k] for wi, e in zip(w, inputs.experts)) / sum(w)
        torch.testing.assert_close(res.state[k], expected, rtol=1e-4, atol=1e-6)
    means = [
        sum(float(f.sum()) for f in fi.values()) / sum(f.numel() for f in fi.values())
        for fi in fishers
    ]
    assert res.info["fisher_mean"] == pytest.approx(means, rel=1e-4)
