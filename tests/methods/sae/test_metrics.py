"""SAE metric definitions on hand-checkable cases (methods/sae/metrics.py)."""

import pytest
import torch

from sparsebench.methods.sae import metrics
from sparsebench.methods.sae.synthetic import SyntheticConfig, true_dictionary


def _x(n=200, d=8, seed=0):
    return torch.randn(n, d, generator=torch.Generator().manual_seed(seed))


def test_ev_of_the_mean_is_zero_and_of_x_is_one():
    x = _x()
    assert metrics.explained_variance(x, x.mean(0).expand_as(x)) == pytest.approx(0.0, abs=1e-12)
    assert metrics.explained_variance(x, x) == pytest.approx(1.0)
    s = metrics.ReconstructionStats()
    s.update(x, x)
    assert s.fvu == pytest.approx(0.0, abs=1e-12) and s.mse == 0.0


def test_ev_by_hand_and_streamed_numerator_and_denominator_apart():
    """x = [[1, 2], [3, 4], [5, 0]]: mean [3, 2], ‖x − x̄‖² = 4, 4, 8 (mean 16/3); x̂ off by
    [1, 0], [0, −1], [1, 1]: ‖x − x̂‖² = 1, 1, 2 (mean 4/3). EV = 1 − (4/3)/(16/3) = 0.75,
    MSE = 4/3. Streamed in batches of 2 and 1 the sums give the same 0.75, where a per-batch
    ratio would not (batch 1: variance 2, error 1 -> 0.5; batch 2: one token, no variance)."""
    x = torch.tensor([[1.0, 2.0], [3.0, 4.0], [5.0, 0.0]])
    x_hat = x + torch.tensor([[1.0, 0.0], [0.0, -1.0], [1.0, 1.0]])
    assert metrics.explained_variance(x, x_hat) == pytest.approx(0.75)
    s = metrics.ReconstructionStats()
    s.update(x[:2], x_hat[:2])
    s.update(x[2:], x_hat[2:])
    assert s.explained_variance == pytest.approx(0.75)
    assert s.fvu == pytest.approx(0.25)
    assert s.mse == pytest.approx(4 / 3)
    assert s.variance == pytest.approx(16 / 3)


def test_a_constant_offset_does_not_inflate_ev():
    """SAELens #659. The same x, x̂ as above shifted by +100 in both coordinates: about the
    mean EV stays 0.75; about zero it would be 1 − (4/3) / E‖x‖² with E‖x‖² ≈ 2·100² -> 0.99993."""
    x = torch.tensor([[1.0, 2.0], [3.0, 4.0], [5.0, 0.0]])
    x_hat = x + torch.tensor([[1.0, 0.0], [0.0, -1.0], [1.0, 1.0]])
    assert metrics.explained_variance(x + 100.0, x_hat + 100.0) == pytest.approx(0.75)


def test_l0_counts_negative_latents_and_firing_stats():
    z = torch.tensor([[0.0, -1.0, 2.0], [0.0, 0.0, 3.0], [0.0, 1.0, 0.0], [0.0, -2.0, 1.0]])
    assert metrics.l0(z) == pytest.approx((2 + 1 + 1 + 2) / 4)
    f = metrics.FiringStats(3)
    f.update(z)
    assert f.frequency().tolist() == [0.0, 0.75, 0.75]
    assert f.dense_fraction(0.5) == pytest.approx(2 / 3)
    # latent 1: 1 positive, 2 negative firings -> bipolar; latent 2 only positive
    assert f.bipolar_fraction(0.1) == pytest.approx(1 / 2)


def test_dead_fraction_counts_tokens_since_the_last_fire():
    since = torch.tensor([0, 99, 100, 5000])
    assert metrics.dead_fraction(since, window=100) == 0.5


def test_shrinkage_is_one_for_unbiased_and_below_for_shrunk_reconstructions():
    x = _x()
    assert metrics.shrinkage(x, x) == pytest.approx(1.0)
    assert metrics.shrinkage(x, 0.8 * x) == pytest.approx(0.8)


def test_loss_and_kl_recovered():
    assert metrics.loss_recovered(ce_clean=2.0, ce_sae=2.5, ce_zero=7.0) == pytest.approx(0.9)
    assert metrics.loss_recovered(2.0, 2.0, 7.0) == 1.0
    assert metrics.kl_recovered(kl_sae=0.5, kl_zero=2.0) == pytest.approx(0.75)
    assert metrics.loss_recovered(2.0, 2.5, 2.0) is None  # zero-ablation costs nothing
    assert metrics.kl_recovered(0.0, 0.0) is None


def test_mcc_of_the_true_dictionary_is_one_up_to_sign_and_order():
    cfg = SyntheticConfig(n_features=40, d=16, n_bipolar=8)
    d = true_dictionary(cfg, seed=3)
    perm = torch.randperm(40, generator=torch.Generator().manual_seed(0))
    signs = torch.where(torch.arange(40) % 2 == 0, 1.0, -1.0).unsqueeze(1)
    assert metrics.mcc(d[perm] * signs * 3.0, d) == pytest.approx(1.0)
    assert metrics.recovery_rate(d[perm], d) == 1.0
    # half the latents missing: those true features score 0
    assert metrics.mcc(d[:20], d) == pytest.approx(0.5)
    rand = true_dictionary(cfg, seed=4)
    assert metrics.mcc(rand, d) < 0.6


def test_sparse_probe_picks_the_informative_latent():
    g = torch.Generator().manual_seed(0)
    y = torch.randint(0, 2, (400,), generator=g)
    z = torch.rand(400, 10, generator=g)
    z[:, 7] = y.float() * 2.0 + 0.1 * torch.rand(400, generator=g)  # latent 7 is the label
    assert metrics.top_latents(z[:200], y[:200], 1).tolist() == [7]
    assert metrics.sparse_probe_accuracy(z[:200], y[:200], z[200:], y[200:], k=1) == 1.0
    with pytest.raises(ValueError, match="both classes"):
        metrics.top_latents(z, torch.ones(400), 1)


def _pairs_case():
    """Two pairs (true features 0 and 1 of three, in 2 dimensions) over four tokens; latent 0
    is −D_0 and fires with both signs, latent 1 fires with both signs at |cos| 0.8 with D_1,
    latent 2 is D_1 and fires only with +."""
    true = torch.tensor([[1.0, 0.0], [0.0, 1.0], [0.6, 0.8]])
    dec = torch.tensor([[-2.0, 0.0], [0.6, 0.8], [0.0, 3.0]])
    codes = torch.tensor(
        [[1.0, 0.0, 0.0], [-1.0, 1.0, 0.0], [1.0, -1.0, 0.5], [0.0, -1.0, 0.0]]
    )  # rows: tokens; pair 0: + on tokens 0, 2, − on 1; pair 1: + on 1, − on 2, 3
    z = torch.tensor([[-2.0, 0.0, 0.0], [3.0, 1.0, 1.0], [-1.0, -1.0, 0.0], [0.0, -1.0, 0.0]])
    return dec, true, z, codes


def test_pair_recovery_needs_a_matched_latent_that_fires_with_both_signs():
    dec, true, z, codes = _pairs_case()
    # pair 0: latent 0 has cos −1, so σ = −1: σz = 2, 1 on the + tokens, −3 on the − token
    # pair 1: latent 2 (cos 1) is 0 on both − tokens; latent 1 is signed but |cos| 0.8 < 0.9
    assert metrics.pair_recovery(dec, true, z, codes, n_pairs=2) == 0.5
    assert metrics.pair_recovery_any(dec, true, z, codes, n_pairs=2) == 1.0
    # at threshold 0.75 latent 1 is matched: +1 on token 1, −1 on tokens 2 and 3
    assert metrics.pair_recovery(dec, true, z, codes, n_pairs=2, threshold=0.75) == 1.0
    # latent 2 negative on one of pair 1's two − tokens: a share of 1/2 passes 0.5, not 0.6
    z2 = z.clone()
    z2[2, 2] = -1.0
    assert metrics.pair_recovery(dec, true, z2, codes, n_pairs=2) == 1.0
    assert metrics.pair_recovery(dec, true, z2, codes, n_pairs=2, min_share=0.6) == 0.5


def test_non_negative_latents_recover_no_pair_and_no_pairs_is_none():
    dec, true, z, codes = _pairs_case()
    relu = z.clamp_min(0.0)
    assert metrics.pair_recovery(dec, true, relu, codes, n_pairs=2) == 0.0
    assert metrics.pair_recovery_any(dec, true, relu, codes, n_pairs=2) == 1.0
    assert metrics.pair_recovery(dec, true, z, codes, n_pairs=0) is None
    # a pair with no − token among these is left out: pair 0 without token 1
    keep = torch.tensor([0, 2, 3])
    assert metrics.pair_recovery(dec, true, z[keep], codes[keep], n_pairs=2) is None
    assert metrics.pair_recovery(dec, true, z[[0, 1, 2, 3]], codes, n_pairs=1) == 1.0


def test_l0_bipolar_share_and_recovery_at_their_boundaries_by_hand():
    # 1, 3 and 2 nonzeros: L0 = 2; then 1 and 4 nonzeros: 2.5 (its zeros average 1.5)
    z = torch.tensor([[0.0, 1.0, 0.0, 0.0], [2.0, -1.0, 3.0, 0.0], [0.0, 0.0, -1.0, 4.0]])
    assert metrics.l0(z) == pytest.approx(2.0)
    assert metrics.l0(torch.tensor([[1.0, 0.0, 0.0, 0.0], [1.0, 2.0, -3.0, 4.0]])) == 2.5
    # latent 0 fires +,+,+,+,+,+,+,+,+,− : negative share exactly 0.1 = the default min_share
    f = metrics.FiringStats(2)
    f.update(torch.tensor([[1.0, 0.0]] * 9 + [[-1.0, 2.0]]))
    assert f.n == 10 and f.fires.tolist() == [10, 1] and f.neg.tolist() == [1, 0]
    assert f.bipolar_fraction() == pytest.approx(0.5)  # latent 0 of the two that fire
    assert f.bipolar_fraction(0.11) == 0.0
    assert metrics.FiringStats(3).bipolar_fraction() == 0.0  # nothing fired
    assert f.dense_fraction(0.1) == pytest.approx(0.5)  # latent 1 fires on 0.1: not above
    # a latent at cos 0.6 with its true feature: recovered at threshold 0.6, not above
    true = torch.tensor([[1.0, 0.0]])
    assert metrics.recovery_rate(torch.tensor([[0.6, 0.8]]), true, threshold=0.6) == 1.0
    assert metrics.recovery_rate(torch.tensor([[0.6, 0.8]]), true) == 0.0  # default 0.9
    assert metrics.mcc(torch.tensor([[0.6, 0.8]]), true) == pytest.approx(0.6)
    assert metrics.mcc(torch.tensor([[0.3, 0.4]]), true) == pytest.approx(0.6)  # not unit


def test_top_latents_rank_the_difference_of_class_means_and_shrinkage_by_hand():
    # class means: latent 0 [3, 3] (no difference), latent 1 [2, 1] (difference 1)
    z = torch.tensor([[3.0, 2.0], [3.0, 2.0], [3.0, 1.0], [3.0, 1.0]])
    y = torch.tensor([1, 1, 0, 0])
    assert metrics.top_latents(z, y, 1).tolist() == [1]
    with pytest.raises(ValueError, match="^sparse probing needs both classes in the training"):
        metrics.top_latents(z, torch.zeros(4), 1)
    # shrinkage γ = E‖x̂‖² / E⟨x̂, x⟩: tokens x = [1, 0], [0, 2], x̂ = [0.5, 0], [0, 1]:
    # (0.25 + 1) / 2 over (0.5 + 2) / 2 = 0.5
    x = torch.tensor([[1.0, 0.0], [0.0, 2.0]])
    assert metrics.shrinkage(x, torch.tensor([[0.5, 0.0], [0.0, 1.0]])) == pytest.approx(0.5)


def test_firing_stats_accumulate_over_batches():
    f = metrics.FiringStats(2)
    f.update(torch.tensor([[1.0, 0.0], [-1.0, 0.0]]))
    f.update(torch.tensor([[2.0, -3.0]]))
    assert f.n == 3
    assert f.fires.tolist() == [3, 1] and f.pos.tolist() == [2, 0] and f.neg.tolist() == [1, 1]
    assert f.frequency().tolist() == pytest.approx([1.0, 1 / 3])
    one = metrics.FiringStats(1)
    one.update(torch.tensor([[1.0]]))
    assert one.frequency().tolist() == [1.0]  # one token, fired once
