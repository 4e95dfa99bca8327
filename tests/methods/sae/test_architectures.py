"""Each SAE architecture on hand-checkable cases and its invariants (methods/sae/*.py)."""

import math

import pytest
import torch

from sparsebench.methods.sae.base import SparseLatents, TrainState
from sparsebench.methods.sae.batchtopk import BatchTopK, batch_topk, calibrated_threshold
from sparsebench.methods.sae.gated import Gated
from sparsebench.methods.sae.jumprelu import JumpReLU, JumpReLUFn, StepFn
from sparsebench.methods.sae.matryoshka_batchtopk import MatryoshkaBatchTopK, prefix_sizes
from sparsebench.methods.sae.relu_l1 import ReluL1
from sparsebench.methods.sae.sign_aware_gated import SignAwareGated, bi_jump_relu
from sparsebench.methods.sae.topk import TopK, auxk_loss, normalized_mse
from sparsebench.suite import registry

D, M = 8, 32


def _x(n=64, seed=0):
    return torch.randn(n, D, generator=torch.Generator().manual_seed(seed))


def test_topk_has_exactly_k_active_latents_per_token():
    sae = TopK(D, M, TopK.Params(k=5))
    with torch.no_grad():
        sae.b_enc.fill_(10.0)  # every pre-activation positive: exactly k survive the ReLU
        z = sae.encode(_x())
    assert ((z != 0).sum(1) == 5).all()
    pre = sae.pre_acts(_x())
    assert torch.equal(z.nonzero()[:, 1].reshape(-1, 5).sort(1).values,
                       pre.topk(5, dim=1).indices.sort(1).values)  # fmt: skip


def test_batchtopk_keeps_k_per_token_on_average_and_thresholds_at_inference():
    pre = torch.tensor([[5.0, 4.0, 0.1, 0.2], [0.3, 0.4, 0.5, 0.6]])
    z = batch_topk(pre, k=2)  # the 4 largest of the batch: 5, 4 on row 0 and 0.6, 0.5 on row 1
    assert (z != 0).sum().item() == 4
    assert (z[0] != 0).tolist() == [True, True, False, False]
    assert (z[1] != 0).tolist() == [False, False, True, True]
    sae = BatchTopK(D, M, BatchTopK.Params(k=4, threshold_decay=0.0, threshold_rule="ema"))
    with torch.no_grad():
        sae.b_enc.fill_(1.0)
        sae.train()
        z = sae(_x(), TrainState()).z
        assert (z != 0).sum().item() == 4 * 64
        theta = float(sae.threshold)
        assert theta == pytest.approx(float(z[z > 0].min()))
        sae.eval()
        pre = sae.pre_acts(_x(seed=1))
        z_inf = sae.encode(_x(seed=1))
    assert torch.equal(z_inf != 0, pre > theta)  # one global threshold, batch-independent


def test_calibrated_threshold_keeps_k_per_token_on_the_given_tokens():
    pre = torch.tensor([[5.0, 4.0, 0.1, 0.2], [0.3, 0.4, 0.5, 0.6]])
    # k = 2 on 2 tokens: the 4 largest are 5, 4, 0.6, 0.5; the next is 0.4 -> halfway 0.45
    assert calibrated_threshold(pre, 2) == pytest.approx(0.45)
    assert calibrated_threshold(pre, 1) == pytest.approx((4.0 + 0.6) / 2)
    # k = 4 asks for all 8 entries, all positive: everything passes
    assert calibrated_threshold(pre, 4) == 0.0
    assert calibrated_threshold(-pre, 1) == 0.0  # nothing positive


def _tiny_topk() -> TopK:
    """d = 2, m = 3, k = k_aux = 1, α = 1, latent 2 the one dead latent (worked out below)."""
    sae = TopK(2, 3, TopK.Params(k=1, k_aux=1, aux_coeff=1.0))
    with torch.no_grad():
        sae.W_enc.copy_(torch.tensor([[1.0, 0.0, 0.5], [0.0, 1.0, 0.0]]))
        sae.W_dec.copy_(torch.tensor([[0.8, 0.6], [0.0, 1.0], [1.0, 0.0]]))
        sae.b_enc.zero_()
        sae.b_dec.fill_(5.0)  # a large bias: added twice (sparsify #132) AuxK would explode
    return sae


def test_auxk_and_the_topk_loss_by_hand():
    """x − b_dec = [[2, 0], [0, 1]] -> pre = [[2, 0, 1], [0, 1, 0]]; k = 1 keeps 2 on latent 0
    and 1 on latent 1: x̂ − b_dec = [[1.6, 1.2], [0, 1]], e = x − x̂ = [[0.4, −1.2], [0, 0]],
    ‖x − x̂‖² mean (1.6 + 0) / 2 = 0.8. AuxK: dead latent 2's pre-activations [1, 0] decode
    (without b_dec) to [[1, 0], [0, 0]]; ‖e − ê‖² mean (0.36 + 1.44) / 2 = 0.9 over e's
    variance (rows ±[0.2, −0.6] about the mean: 0.4) = 2.25. Var(x) = mean of 1.25, 1.25 =
    1.25, so L = 0.8 + α · 1.25 · 2.25 = 3.6125 (α = 1)."""
    sae = _tiny_topk()
    x = torch.tensor([[7.0, 5.0], [5.0, 6.0]])
    dead = torch.tensor([False, False, True])
    out = sae(x, TrainState(dead=dead))
    assert out.z.tolist() == [[2.0, 0.0, 0.0], [0.0, 1.0, 0.0]]
    assert float(out.parts["mse"]) == pytest.approx(0.8)
    assert float(out.parts["aux"]) == pytest.approx(2.25)
    assert float(out.loss) == pytest.approx(0.8 + 1.25 * 2.25)
    pre = sae.pre_acts(x)
    assert float(auxk_loss(sae, pre, x, out.x_hat, dead, k_aux=1)) == pytest.approx(2.25)
    assert auxk_loss(sae, pre, x, out.x_hat, torch.zeros(3, dtype=torch.bool), 1) == 0
    assert float(sae(x, TrainState()).loss) == pytest.approx(0.8)  # nothing dead: no AuxK


def test_normalized_mse_by_hand():
    # target rows [0, 0], [2, 0]: mean [1, 0], variance 1; pred 0: error (0 + 4) / 2 = 2
    target = torch.tensor([[0.0, 0.0], [2.0, 0.0]])
    assert float(normalized_mse(target, torch.zeros(2, 2))) == pytest.approx(2.0)


def test_jumprelu_counts_each_latent_once_and_its_pseudo_gradients():
    sae = JumpReLU(D, M, JumpReLU.Params(threshold_init=0.3, sparsity_coeff=1.0, bandwidth=0.5))
    x = _x()
    out = sae(x, TrainState(frac=1.0))
    pre = sae.pre_acts(x)
    active = (pre > 0.3).float()
    assert float(out.parts["sparsity"]) == pytest.approx(float(active.sum(1).mean()))
    assert torch.equal(out.z != 0, pre > 0.3)  # threshold applied once, in one place
    # ∂L0/∂θ = −(1/ε) Σ K((pre − θ)/ε) with K the rectangle of width 1 (Eq. 12)
    pre = torch.tensor([[0.1, 0.3, 0.9]])
    theta = torch.tensor([0.2, 0.2, 0.2], requires_grad=True)
    StepFn.apply(pre, theta, 0.4).sum().backward()
    assert theta.grad.tolist() == pytest.approx([-2.5, -2.5, 0.0])  # |0.1−0.2|,|0.3−0.2| < 0.2
    theta.grad = None
    JumpReLUFn.apply(pre, theta, 0.4).sum().backward()  # −(θ/ε) K(...)
    assert theta.grad.tolist() == pytest.approx([-0.5, -0.5, 0.0])


def test_bi_jump_relu_passes_both_signs_and_zeroes_the_band():
    u = torch.tensor([-2.0, -0.6, -0.4, 0.0, 0.2, 0.31, 3.0])
    out = bi_jump_relu(u, torch.tensor(0.3), torch.tensor(0.5))
    assert out.tolist() == pytest.approx([-2.0, -0.6, 0.0, 0.0, 0.0, 0.31, 3.0])


def test_sign_aware_latents_take_both_signs_and_l0_counts_them():
    sae = SignAwareGated(D, M, SignAwareGated.Params(threshold_init=0.05))
    z = sae.encode(_x(256))
    assert (z > 0).any() and (z < 0).any()
    asym = SignAwareGated(D, M, SignAwareGated.Params(magnitude="asymmetric"))
    assert {"r_neg", "b_neg"} <= {n for n, _ in asym.named_parameters()}


def _rec_grad_of_w_dec(x, z, x_hat):
    """∂/∂W_dec of mean_n ‖x − z W_dec − b_dec‖² = −(2/n) zᵀ (x − x̂), the reconstruction
    term alone: a frozen decoder in the auxiliary term adds nothing to it."""
    return -2.0 / x.shape[0] * z.T @ (x - x_hat)


def test_sign_aware_loss_by_hand_and_its_aux_term_leaves_the_decoder_alone():
    """W_enc = I, θ± = 0.5, r_mag = log 2: x = [1, −0.8] gives π = [1, −0.8], latent 0 open
    positive (1 > 0.5), latent 1 open negative (0.8 > 0.5), μ = 2|π| -> z = [2, −1.6].
    x̂ = 2·[0.6, 0.8] − 1.6·[0, 1] = [1.2, 0]: ‖x − x̂‖² = 0.04 + 0.64 = 0.68; L0 = 2; the
    gate's own output [1, −0.8] decodes to [0.6, 0]: aux = 0.16 + 0.64 = 0.8."""
    sae = SignAwareGated(2, 2, SignAwareGated.Params(threshold_init=0.5))
    with torch.no_grad():
        sae.W_enc.copy_(torch.eye(2))
        sae.W_dec.copy_(torch.tensor([[0.6, 0.8], [0.0, 1.0]]))
        sae.r_mag.fill_(math.log(2.0))
    x = torch.tensor([[1.0, -0.8]])
    out = sae(x, TrainState(frac=1.0))
    torch.testing.assert_close(out.z, torch.tensor([[2.0, -1.6]]))
    torch.testing.assert_close(out.x_hat, torch.tensor([[1.2, 0.0]]))
    assert float(out.parts["mse"]) == pytest.approx(0.68)
    assert float(out.parts["sparsity"]) == pytest.approx(2.0)
    assert float(out.parts["aux"]) == pytest.approx(0.8)
    assert float(out.loss) == pytest.approx(0.68 + 1.0 * 2.0 + 0.8)
    out.loss.backward()
    # (0.8, 3.2), (−0.64, −2.56); a trainable decoder in aux would add (−0.8, 1.6), (0.64, −1.28)
    torch.testing.assert_close(sae.W_dec.grad, torch.tensor([[0.8, 3.2], [-0.64, -2.56]]))
    torch.testing.assert_close(sae.W_dec.grad, _rec_grad_of_w_dec(x, out.z, out.x_hat).detach())
    # inside the band nothing fires: π = 0.3 < θ⁺ on latent 0, −0.2 > −θ⁻ on latent 1
    assert sae.encode(torch.tensor([[0.3, -0.2]])).tolist() == [[0.0, 0.0]]


def test_gated_loss_by_hand_and_its_aux_term_leaves_the_decoder_alone():
    """W_enc = I, b_enc = [0, −0.5], r_mag = log 2: x = [1, 0.2] gives π = [1, −0.3] (latent
    1's gate shut), f_mag = ReLU(2 x) = [2, 0.4], z = [2, 0]. x̂ = 2·[0.6, 0.8] = [1.2, 1.6]:
    ‖x − x̂‖² = 0.04 + 1.96 = 2; L1 of ReLU(π) = 1; aux decodes ReLU(π) = [1, 0] with the
    frozen decoder to [0.6, 0.8]: 0.16 + 0.36 = 0.52. L = 2 + 1 + 0.52 (λ = 1, warmed up)."""
    sae = Gated(2, 2, Gated.Params())
    with torch.no_grad():
        sae.W_enc.copy_(torch.eye(2))
        sae.b_enc.copy_(torch.tensor([0.0, -0.5]))
        sae.W_dec.copy_(torch.tensor([[0.6, 0.8], [1.0, 0.0]]))
        sae.r_mag.fill_(math.log(2.0))
    x = torch.tensor([[1.0, 0.2]])
    torch.testing.assert_close(sae.encode(x), torch.tensor([[2.0, 0.0]]))
    out = sae(x, TrainState(frac=1.0))
    torch.testing.assert_close(out.x_hat, torch.tensor([[1.2, 1.6]]))
    assert float(out.parts["mse"]) == pytest.approx(2.0)
    assert float(out.parts["sparsity"]) == pytest.approx(1.0)
    assert float(out.parts["aux"]) == pytest.approx(0.52)
    assert float(out.loss) == pytest.approx(3.52)
    out.loss.backward()
    # −2 zᵀ(x − x̂): row 0 = −4·(−0.2, −1.4); a trainable decoder in aux would add (−0.8, 1.2)
    torch.testing.assert_close(sae.W_dec.grad, torch.tensor([[0.8, 5.6], [0.0, 0.0]]))
    torch.testing.assert_close(sae.W_dec.grad, _rec_grad_of_w_dec(x, out.z, out.x_hat).detach())


def test_relu_l1_weights_the_l1_by_decoder_norm():
    sae = ReluL1(D, M, ReluL1.Params(l1_coeff=2.0, l1_warmup_frac=0.5))
    x = _x()
    z = torch.relu(x @ sae.W_enc + sae.b_enc)
    assert float(sae(x).parts["sparsity"]) == pytest.approx(
        float((z * sae.W_dec.norm(dim=1)).sum(1).mean())
    )
    half = sae(x, TrainState(frac=0.25))  # λ at half of its warm-up
    torch.testing.assert_close(half.loss, half.parts["mse"] + 1.0 * half.parts["sparsity"])
    assert float(sae.W_dec.norm(dim=1).mean()) == pytest.approx(0.1)  # the update's init


def test_matryoshka_prefixes_reconstruct_from_their_own_latents_only():
    assert prefix_sizes(32, (1 / 16, 1 / 8, 1 / 4, 1 / 2, 1.0)) == [2, 4, 8, 16, 32]
    sae = MatryoshkaBatchTopK(D, M, MatryoshkaBatchTopK.Params(k=4))
    z = torch.rand(5, M)
    recs = sae.prefix_reconstructions(z)
    z2 = z.clone()
    z2[:, 8:] = 99.0  # latents beyond the third prefix
    recs2 = sae.prefix_reconstructions(z2)
    for i, m in enumerate(sae.prefixes):
        same = torch.allclose(recs[i], recs2[i])
        assert same == (m <= 8), m


def test_matryoshka_loss_is_the_mean_of_its_prefix_losses_by_hand():
    """m = 4, prefixes [2, 4]; latents 0 and 2 decode to [1, 0]. z = [1, 0, 2, 0] and
    x = [3, 0]: the first prefix reconstructs [1, 0] (error 4), the whole [3, 0] (error 0);
    the mean over the two prefixes is 2 (their sum would be 4)."""
    sae = MatryoshkaBatchTopK(2, 4, MatryoshkaBatchTopK.Params(k=1, prefix_fractions=(0.5, 1.0)))
    assert sae.prefixes == [2, 4]
    with torch.no_grad():
        sae.W_dec.copy_(torch.tensor([[1.0, 0.0], [0.0, 1.0], [1.0, 0.0], [0.0, 1.0]]))
    x = torch.tensor([[3.0, 0.0]])
    z = torch.tensor([[1.0, 0.0, 2.0, 0.0]])
    x_hat, loss, parts = sae.reconstruction(x, SparseLatents.from_dense(z), z)
    assert x_hat.tolist() == [[3.0, 0.0]]
    assert float(loss) == pytest.approx(2.0)
    assert float(parts["prefix_mse"]) == pytest.approx(2.0)


@pytest.mark.parametrize("name", list(registry.all_methods(("sae",))))
def test_every_architecture_shapes_loss_and_gradients(name):
    info = registry.all_methods(("sae",))[name]
    sae = info.cls(D, M, info.params_cls(), seed=1)
    x = _x()
    out = sae(x, TrainState(frac=0.5, dead=torch.ones(M, dtype=torch.bool)))
    assert out.x_hat.shape == (64, D) and out.z.shape == (64, M)
    assert torch.isfinite(out.loss)
    out.loss.backward()
    assert sae.W_dec.grad is not None and torch.isfinite(sae.W_dec.grad).all()
    sae.eval()
    with torch.no_grad():
        assert sae.encode(x).shape == (64, M)
        assert sae.decode(sae.encode(x)).shape == (64, D)
    assert bool((sae.encode(x) < 0).any()) == sae.signed  # only signed SAEs go negative


def test_k_larger_than_the_width_is_refused():
    with pytest.raises(ValueError, match="exceeds the width"):
        TopK(D, 4, TopK.Params(k=8))


def test_sign_aware_thresholds_learn_from_the_reconstruction():
    """Without the L0 penalty the thresholds still get a gradient (through the gated
    magnitude's pseudo-derivative), from both polarities."""
    sae = SignAwareGated(D, M, SignAwareGated.Params(sparsity_coeff=0.0, bandwidth=1.0))
    sae(_x(256), TrainState()).loss.backward()
    assert sae.theta_pos.grad.abs().sum() > 0 and sae.theta_neg.grad.abs().sum() > 0


def test_gated_magnitude_pseudo_gradient_by_hand():
    from sparsebench.methods.sae.sign_aware_gated import GatedMagnitudeFn

    u = torch.tensor([[0.1, 0.3, 0.9]])
    theta = torch.tensor([0.2, 0.2, 0.2], requires_grad=True)
    mu = torch.tensor([[2.0, 3.0, 4.0]], requires_grad=True)
    out = GatedMagnitudeFn.apply(u, theta, mu, 0.4)
    assert out.tolist() == [[0.0, 3.0, 4.0]]
    out.sum().backward()
    assert theta.grad.tolist() == pytest.approx([-5.0, -7.5, 0.0])  # −(μ/ε)·1[|u−θ| < ε/2]
    assert mu.grad.tolist() == [[0.0, 1.0, 1.0]]


def test_gated_by_hand_with_a_decoder_bias_two_tokens_and_the_warm_up():
    """The case above shifted by b_dec = [1, −1] (x − b_dec and x − x̂ unchanged, so every
    number is the same), on two copies of the token, at half of λ's warm-up:
    L = 2 + 0.5 · 1 + 0.52 = 3.02."""
    sae = Gated(2, 2, Gated.Params(l1_warmup_frac=0.05))
    b = torch.tensor([1.0, -1.0])
    with torch.no_grad():
        sae.W_enc.copy_(torch.eye(2))
        sae.b_enc.copy_(torch.tensor([0.0, -0.5]))
        sae.W_dec.copy_(torch.tensor([[0.6, 0.8], [1.0, 0.0]]))
        sae.r_mag.fill_(math.log(2.0))
        sae.b_dec.copy_(b)
    x = torch.tensor([[1.0, 0.2], [1.0, 0.2]]) + b
    out = sae(x, TrainState(frac=0.025))
    torch.testing.assert_close(out.z, torch.tensor([[2.0, 0.0], [2.0, 0.0]]))
    assert float(out.parts["sparsity"]) == pytest.approx(1.0)
    assert float(out.parts["aux"]) == pytest.approx(0.52)
    assert float(out.loss) == pytest.approx(2.0 + 0.5 * 1.0 + 0.52)
    # the gate opens strictly above 0: π = 0 on latent 1 stays shut
    assert sae.encode(torch.tensor([[1.0, 0.5]]) + b)[0, 1] == 0.0


def test_sign_aware_by_hand_with_biases_two_tokens_and_the_warm_up():
    """b_enc = [0.1, 0], b_mag = 0.5, b_dec = [1, −1] (x shifted by it), two copies of
    x − b_dec = [1, −0.8], λ at half of its warm-up. π = [1.1, −0.8]: both open (latent 1
    negative); μ = ReLU(±2 x̃ + 0.5) = [2.5, 2.1] -> z = [2.5, −2.1]; x̂ − b_dec = 2.5·[0.6,
    0.8] − 2.1·[0, 1] = [1.5, −0.1]: ‖x − x̂‖² = 0.25 + 0.49 = 0.74. The gate's output
    [1.1, −0.8] decodes to [0.66, 0.08]: aux = 0.34² + 0.88² = 0.89. L = 0.74 + 0.5·2 + 0.89."""
    b = torch.tensor([1.0, -1.0])

    def build(**kw):
        sae = SignAwareGated(2, 2, SignAwareGated.Params(threshold_init=0.5, **kw))
        with torch.no_grad():
            sae.W_enc.copy_(torch.eye(2))
            sae.W_dec.copy_(torch.tensor([[0.6, 0.8], [0.0, 1.0]]))
            sae.b_enc.copy_(torch.tensor([0.1, 0.0]))
            sae.r_mag.fill_(math.log(2.0))
            sae.b_mag.fill_(0.5)
            sae.b_dec.copy_(b)
        return sae

    sae = build(sparsity_warmup_frac=0.1)
    x = torch.tensor([[1.0, -0.8], [1.0, -0.8]]) + b
    out = sae(x, TrainState(frac=0.05))
    torch.testing.assert_close(out.z, torch.tensor([[2.5, -2.1], [2.5, -2.1]]))
    assert float(out.parts["mse"]) == pytest.approx(0.74)
    assert float(out.parts["sparsity"]) == pytest.approx(2.0)
    assert float(out.parts["aux"]) == pytest.approx(0.89)
    assert float(out.loss) == pytest.approx(0.74 + 0.5 * 2.0 + 0.89)
    out.loss.backward()
    # −(2/n) zᵀ(x − x̂) with e = [−0.5, −0.7] on both tokens
    torch.testing.assert_close(sae.W_dec.grad, torch.tensor([[2.5, 3.5], [-2.1, -2.94]]))
    # asymmetric: the negative polarity reads its own path, μ₋ = ReLU(−3 x̃ + 0.2) = 2.6
    asym = build(magnitude="asymmetric")
    with torch.no_grad():
        asym.r_neg.fill_(math.log(3.0))
        asym.b_neg.fill_(0.2)
    torch.testing.assert_close(asym.encode(x[:1]), torch.tensor([[2.5, -2.6]]))


def test_jumprelu_loss_by_hand_with_the_warm_up():
    """W_enc = I, b_enc = [0, 0.1], θ = 0.3, b_dec = [1, −1] (JumpReLU does not subtract it
    from x). Tokens [1, 0.1] and [1, 0.5]: pre = [1, 0.2] (latent 1 under θ) and [1, 0.6];
    x̂ = [0.6, 0.8] + b_dec = [1.6, −0.2] and + 0.6·[1, 0] = [2.2, −0.2]; errors 0.36 + 0.09
    and 1.44 + 0.49: MSE (0.45 + 1.93) / 2 = 1.19, L0 (1 + 2) / 2 = 1.5; λ = 0.5 at half of
    its warm-up: L = 1.19 + 0.75."""
    sae = JumpReLU(2, 2, JumpReLU.Params(threshold_init=0.3, sparsity_warmup_frac=0.1))
    with torch.no_grad():
        sae.W_enc.copy_(torch.eye(2))
        sae.b_enc.copy_(torch.tensor([0.0, 0.1]))
        sae.W_dec.copy_(torch.tensor([[0.6, 0.8], [1.0, 0.0]]))
        sae.b_dec.copy_(torch.tensor([1.0, -1.0]))
    x = torch.tensor([[1.0, 0.1], [1.0, 0.5]])
    out = sae(x, TrainState(frac=0.05))
    torch.testing.assert_close(out.z, torch.tensor([[1.0, 0.0], [1.0, 0.6]]))
    torch.testing.assert_close(sae.encode(x), out.z)
    assert float(out.parts["mse"]) == pytest.approx(1.19)
    assert float(out.parts["sparsity"]) == pytest.approx(1.5)
    assert float(out.loss) == pytest.approx(1.19 + 0.5 * 1.5)


def test_every_threshold_is_strict_at_equality():
    """A pre-activation exactly at its threshold does not fire (0.25, 0.5: exact in binary)."""
    pre = torch.tensor([[0.25, 0.5]])
    theta = torch.tensor([0.25, 0.25])
    assert JumpReLUFn.apply(pre, theta, 0.5).tolist() == [[0.0, 0.5]]
    assert StepFn.apply(pre, theta, 0.5).tolist() == [[0.0, 1.0]]
    jr = JumpReLU(2, 2, JumpReLU.Params(threshold_init=0.25))
    with torch.no_grad():
        jr.W_enc.copy_(torch.eye(2))
    assert jr.encode(pre).tolist() == [[0.0, 0.5]]
    u = torch.tensor([-0.5, -0.25, 0.25, 0.5])
    assert bi_jump_relu(u, torch.tensor(0.25), torch.tensor(0.25)).tolist() == [-0.5, 0, 0, 0.5]
    from sparsebench.methods.sae.sign_aware_gated import GatedMagnitudeFn

    mu = torch.tensor([[2.0, 3.0]])
    assert GatedMagnitudeFn.apply(pre, theta, mu, 0.5).tolist() == [[0.0, 3.0]]
    g = Gated(2, 2, Gated.Params())
    with torch.no_grad():
        g.W_enc.copy_(torch.eye(2))
        g.b_enc.copy_(torch.tensor([0.0, -0.5]))
    out = g(pre)  # π = [0.25, 0]: latent 1's gate exactly at 0 stays shut in training too
    assert out.z[0, 1] == 0.0 and out.z[0, 0] > 0
    b = BatchTopK(2, 2, BatchTopK.Params(k=1))
    with torch.no_grad():
        b.W_enc.copy_(torch.eye(2))
        b.threshold.fill_(0.25)
    b.eval()
    assert b.encode(pre).tolist() == [[0.0, 0.5]]


def test_pseudo_gradients_at_the_kernel_edges_and_with_an_upstream_weight():
    """ε = 0.5: the rectangle covers |pre − θ| < 0.25. pre − θ = 0.25 (its edge: outside),
    0.1875 (inside, though outside ε/3) and 0 (inside, and where the gate is shut), with an
    upstream gradient of 2."""
    pre = torch.tensor([[0.5, 0.4375, 0.25]], requires_grad=True)
    theta = torch.tensor([0.25, 0.25, 0.25], requires_grad=True)
    (2 * StepFn.apply(pre, theta, 0.5)).sum().backward()
    assert theta.grad.tolist() == pytest.approx([0.0, -4.0, -4.0])  # −(2/ε)·K
    theta.grad = None
    (2 * JumpReLUFn.apply(pre, theta, 0.5)).sum().backward()
    assert theta.grad.tolist() == pytest.approx([0.0, -1.0, -1.0])  # −(θ/ε)·K·2
    assert pre.grad.tolist() == [[2.0, 2.0, 0.0]]  # H(pre > θ)·2: nothing at equality
    from sparsebench.methods.sae.sign_aware_gated import GatedMagnitudeFn

    mu = torch.tensor([[1.0, 3.0, 5.0]], requires_grad=True)
    theta.grad = None
    (2 * GatedMagnitudeFn.apply(pre.detach(), theta, mu, 0.5)).sum().backward()
    assert theta.grad.tolist() == pytest.approx([0.0, -12.0, -20.0])  # −(μ/ε)·K·2
    assert mu.grad.tolist() == [[2.0, 2.0, 0.0]]


def test_every_architecture_starts_from_its_seed():
    for name, info in registry.all_methods(("sae",)).items():
        a = info.cls(D, M, info.params_cls(), seed=3).W_dec.detach()
        unit = a / a.norm(dim=1, keepdim=True)
        ref = TopK(D, M, TopK.Params(k=1), seed=3).W_dec.detach()
        torch.testing.assert_close(unit, ref, msg=name)
        default = info.cls(D, M, info.params_cls()).W_dec.detach()
        assert not torch.equal(a, default), name
        assert torch.equal(default, info.cls(D, M, info.params_cls(), seed=0).W_dec), name


def test_biases_enter_with_their_sign():
    relu = ReluL1(2, 2, ReluL1.Params())
    with torch.no_grad():
        relu.W_enc.copy_(torch.eye(2))
        relu.b_enc.copy_(torch.tensor([0.5, -0.5]))
    assert relu.encode(torch.tensor([[1.0, 1.0]])).tolist() == [[1.5, 0.5]]
    g = Gated(2, 2, Gated.Params())
    with torch.no_grad():
        g.W_enc.copy_(torch.eye(2))
        g.b_mag.copy_(torch.tensor([0.5, -0.5]))
    assert g.paths(torch.tensor([[1.0, 1.0]]))[1].tolist() == [[1.5, 0.5]]
    m = MatryoshkaBatchTopK(2, 4, MatryoshkaBatchTopK.Params(k=1, prefix_fractions=(0.5, 1.0)))
    with torch.no_grad():
        m.W_dec.copy_(torch.tensor([[1.0, 0.0], [0.0, 1.0], [1.0, 0.0], [0.0, 1.0]]))
        m.b_dec.copy_(torch.tensor([1.0, -1.0]))
    recs = m.prefix_reconstructions(torch.tensor([[1.0, 0.0, 2.0, 0.0]]))
    assert [r.tolist() for r in recs] == [[[2.0, -1.0]], [[4.0, -1.0]]]


def test_prefix_sizes_by_hand():
    # width 4: 0.1 -> round(0.4) = 0 -> at least 1; 0.2 -> 1 again (skipped); 0.5 -> 2; + 4
    assert prefix_sizes(4, (0.1, 0.2, 0.5)) == [1, 2, 4]
    assert prefix_sizes(4, (0.25, 0.25, 0.75)) == [1, 3, 4]
    assert prefix_sizes(8, (1.0,)) == [8]
    assert prefix_sizes(8, (0.5, 1.0)) == [4, 8]


def test_batchtopk_without_a_threshold_yet_encodes_by_the_batch_rule():
    sae = BatchTopK(D, M, BatchTopK.Params(k=3))
    sae.eval()  # no threshold fixed yet (NaN): the batch top-k, k per token on average
    with torch.no_grad():
        sae.b_enc.fill_(10.0)
        z = sae.encode(_x())
    assert (z != 0).sum().item() == 3 * 64
