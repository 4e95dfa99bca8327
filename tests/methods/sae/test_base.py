"""The shared SAE pieces and the synthetic generator on hand-checkable cases (methods/sae/base.py,
synthetic.py, topk.py's helpers): the fast unit tests these had only through training runs."""

import math

import pytest
import torch

from sparsebench.methods.sae.base import check_params, section_widths, warmup
from sparsebench.methods.sae.jumprelu import JumpReLU
from sparsebench.methods.sae.synthetic import SyntheticConfig, frequencies, sample, true_dictionary
from sparsebench.methods.sae.topk import TopK, default_k_aux


def test_init_is_unit_rows_tied_encoder_zero_biases_and_a_function_of_the_seed():
    a = TopK(3, 5, TopK.Params(k=1), seed=7)
    torch.testing.assert_close(a.W_dec.norm(dim=1), torch.ones(5))
    assert torch.equal(a.W_enc, a.W_dec.T)
    assert a.b_enc.tolist() == [0.0] * 5 and a.b_dec.tolist() == [0.0] * 3
    assert torch.equal(a.W_dec, TopK(3, 5, TopK.Params(k=1), seed=7).W_dec)
    assert not torch.equal(a.W_dec, TopK(3, 5, TopK.Params(k=1)).W_dec)  # default seed 0
    torch.manual_seed(0)
    first = TopK(3, 5, TopK.Params(k=1), seed=3).W_dec.clone()
    torch.manual_seed(1)  # the global generator plays no part
    assert torch.equal(first, TopK(3, 5, TopK.Params(k=1), seed=3).W_dec)
    TopK(1, 1, TopK.Params(k=1))  # the smallest SAE
    for d_in, width in ((0, 4), (4, 0)):
        with pytest.raises(ValueError, match=f"d_in and width must be >= 1, got {d_in}, {width}"):
            TopK(d_in, width, TopK.Params(k=1))


def test_param_groups_put_thresholds_at_their_scaled_lr():
    one = JumpReLU(4, 6, JumpReLU.Params())
    groups = one.param_groups(0.5)
    assert len(groups) == 1 and groups[0]["lr"] == 0.5
    assert [id(p) for p in groups[0]["params"]] == [id(p) for p in one.parameters()]
    two = JumpReLU(4, 6, JumpReLU.Params(threshold_lr_scale=10.0))
    rest, thr = two.param_groups(0.5)
    assert rest["lr"] == 0.5 and thr["lr"] == pytest.approx(5.0)
    assert [id(p) for p in thr["params"]] == [id(two.threshold)]
    assert {id(p) for p in rest["params"]} == {id(p) for p in two.parameters()} - {
        id(two.threshold)
    }
    plain = TopK(4, 6, TopK.Params(k=2))  # no thresholds: one group whatever the params say
    assert len(plain.param_groups(1.0)) == 1


def test_check_params_names_the_first_bad_field():
    p = JumpReLU.Params(bandwidth=0.0)
    with pytest.raises(ValueError, match=r"^bandwidth must be > 0, got 0.0$"):
        check_params(p, ("bandwidth",))
    with pytest.raises(ValueError, match=r"^sparsity_coeff must be >= 0, got -1$"):
        check_params(JumpReLU.Params(sparsity_coeff=-1), (), ("sparsity_coeff",))
    check_params(JumpReLU.Params(sparsity_coeff=0.0), ("lr",), ("sparsity_coeff",))  # 0 is >= 0
    check_params(TopK.Params(k=1, lr=None), ("lr",))  # None: chosen elsewhere, skipped


def test_section_widths_and_the_k_check():
    section = {"widths": [4], "sources": {"a": {"widths": [8, 16]}, "b": {}}}
    assert section_widths(section) == [8, 16, 4]
    TopK.check(TopK.Params(k=4), section)  # k = the smallest width is allowed
    with pytest.raises(ValueError, match=r"k = 5 exceeds the width 4; allowed: 1 to the smallest"):
        TopK.check(TopK.Params(k=5), section)


def test_learning_rate_follows_the_width_rule():
    # 2e-4 · (m / 2^14)^(−1/2): m = 2^14 -> 2e-4, m = 2^16 -> 1e-4
    assert TopK(2, 2**14, TopK.Params(k=1)).learning_rate() == pytest.approx(2e-4)
    assert TopK(2, 2**16, TopK.Params(k=1)).learning_rate() == pytest.approx(1e-4)
    assert TopK(2, 4, TopK.Params(k=1, lr=0.3)).learning_rate() == 0.3


def test_warmup_and_k_aux_and_the_topk_code_by_hand():
    assert (warmup(0.05, 0.1), warmup(0.1, 0.1), warmup(0.5, 0.1), warmup(0.0, 0.0)) == (
        pytest.approx(0.5), 1.0, 1.0, 1.0,
    )  # fmt: skip
    # a power of two near d/2: d = 64 -> 32, d = 12 -> 2^round(log2 6) = 8, d = 1 -> 1
    assert [default_k_aux(d) for d in (64, 12, 1, 3)] == [32, 8, 1, 2]
    assert TopK(12, 16, TopK.Params(k=1)).k_aux() == 8
    assert TopK(12, 16, TopK.Params(k=1, k_aux=3)).k_aux() == 3
    pre = torch.tensor([[0.5, 3.0, -1.0, 2.0], [5.0, 4.0, 6.0, -2.0]])
    code = TopK(2, 4, TopK.Params(k=2)).sparse_code(pre)  # the 2 largest of each row, ReLU'd
    assert code.dense().tolist() == [[0.0, 3.0, 0.0, 2.0], [5.0, 0.0, 6.0, 0.0]]
    assert code.fired().tolist() == [True, True, True, True]
    wide = TopK(2, 4, TopK.Params(k=4)).sparse_code(pre)  # all: the negative ones kept at 0
    assert wide.dense().tolist() == [[0.5, 3.0, 0.0, 2.0], [5.0, 4.0, 6.0, 0.0]]


def test_synthetic_frequencies_and_validation_by_hand():
    cfg = SyntheticConfig(n_features=4, d=2, p_max=0.5, freq_exponent=1.0, n_bipolar=0)
    assert frequencies(cfg).tolist() == pytest.approx([0.5, 0.25, 0.5 / 3, 0.125])
    SyntheticConfig(n_features=1, d=1, p_max=1.0, n_bipolar=1, noise=0.0).validate()  # bounds
    bad = [
        (dict(d=0), "d must be >= 1, got 0"),
        (dict(n_features=0, n_bipolar=0), "n_features must be >= 1, got 0"),
        (dict(p_max=0.0), r"p_max must be in \(0, 1\], got 0.0"),
        (dict(p_max=1.5), r"p_max must be in \(0, 1\], got 1.5"),
        (dict(n_bipolar=-1), r"n_bipolar must be in \[0, n_features\], got -1"),
        (dict(n_features=4, n_bipolar=5), r"n_bipolar must be in \[0, n_features\], got 5"),
        (dict(noise=-0.1), "noise must be >= 0, got -0.1"),
    ]
    for kw, msg in bad:
        with pytest.raises(ValueError, match=f"^{msg}$"):
            SyntheticConfig(**kw).validate()


def test_synthetic_tokens_are_their_codes_through_the_dictionary():
    # p_max = 1 with α = 0: every feature fires on every token; β = 1: c = 1, 1/2, 1/3
    cfg = SyntheticConfig(n_features=3, d=2, p_max=1.0, freq_exponent=0.0, mag_exponent=1.0,
                          n_bipolar=1)  # fmt: skip
    dic = torch.tensor([[1.0, 0.0], [0.0, 1.0], [0.6, 0.8]])
    x, codes = sample(cfg, 400, seed=0, dictionary=dic)
    assert x.shape == (400, 2) and codes.shape == (400, 3)
    mag = codes.abs()
    for i, c in enumerate((1.0, 0.5, 1 / 3)):  # c_i · U(0.5, 1.5)
        assert bool((mag[:, i] >= 0.5 * c).all()) and bool((mag[:, i] < 1.5 * c).all())
    assert 0.4 < float((codes[:, 0] < 0).float().mean()) < 0.6  # bipolar: ± with prob. ½
    assert bool((codes[:, 1:] > 0).all())  # the others only positive
    # x = Σ_i codes_i D_i, written out per coordinate
    torch.testing.assert_close(x[:, 0], codes[:, 0] + 0.6 * codes[:, 2])
    torch.testing.assert_close(x[:, 1], codes[:, 1] + 0.8 * codes[:, 2])
    again, _ = sample(cfg, 400, seed=0, dictionary=dic)
    assert torch.equal(x, again) and not torch.equal(x, sample(cfg, 400, seed=1, dictionary=dic)[0])


def test_synthetic_firing_rates_noise_and_default_dictionary():
    cfg = SyntheticConfig(n_features=4, d=3, p_max=0.5, freq_exponent=1.0, n_bipolar=0)
    x, codes = sample(cfg, 20000, seed=2)
    rates = (codes != 0).float().mean(0).tolist()
    assert rates == pytest.approx([0.5, 0.25, 0.5 / 3, 0.125], abs=0.015)
    torch.testing.assert_close(x, codes @ true_dictionary(cfg, seed=2))
    noisy = SyntheticConfig(n_features=4, d=3, p_max=0.5, freq_exponent=1.0, n_bipolar=0,
                            noise=0.1)  # fmt: skip
    xn, cn = sample(noisy, 20000, seed=2)
    resid = xn - cn @ true_dictionary(noisy, seed=2)
    assert float(resid.std()) == pytest.approx(0.1, rel=0.05)
    d = true_dictionary(cfg, seed=2)
    torch.testing.assert_close(d.norm(dim=1), torch.ones(4))
    assert not torch.equal(d, true_dictionary(cfg, seed=3))
    assert math.isclose(float(codes.abs().max()), 1.5, rel_tol=0.01)  # c_0 = 1, u < 1.5


def test_normalized_mse_averages_over_tokens_by_hand():
    # 3 tokens in 2 dims: target [0, 0], [2, 0], [4, 0], mean [2, 0], variance (4 + 0 + 4) / 3;
    # pred 0: error (0 + 4 + 16) / 3 -> ratio 20/8 = 2.5
    from sparsebench.methods.sae.topk import normalized_mse

    target = torch.tensor([[0.0, 0.0], [2.0, 0.0], [4.0, 0.0]])
    assert float(normalized_mse(target, torch.zeros(3, 2))) == pytest.approx(2.5)
    assert float(normalized_mse(target, target + 1.0)) == pytest.approx(2 / (8 / 3))


def test_synthetic_tokens_are_a_function_of_the_seed_with_noise():
    cfg = SyntheticConfig(n_features=6, d=3, p_max=0.5, n_bipolar=2, noise=0.1)
    x, codes = sample(cfg, 50, seed=4)
    x2, codes2 = sample(cfg, 50, seed=4)
    assert torch.equal(x, x2) and torch.equal(codes, codes2)
