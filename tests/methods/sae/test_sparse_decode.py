"""The TopK family's sparse path (methods/sae/base.py SparseLatents, topk.py, batchtopk.py,
matryoshka_batchtopk.py) against the dense formula written out here: explicit top-k masks,
z = where(mask, ReLU(pre), 0), x̂ = z W_dec + b_dec, AuxK through z_aux W_dec; losses,
reconstructions, latents, gradients, one optimiser step and a short training run."""

import math

import pytest
import torch

from sparsebench.methods.sae import topk as topk_module
from sparsebench.methods.sae.base import SparseLatents, TrainState, sparse_decode_pays
from sparsebench.methods.sae.training import TrainConfig, train_sae
from sparsebench.suite import registry

FAMILY = ["topk", "batchtopk", "matryoshka_batchtopk"]


def make(name: str, d: int, m: int, k: int, aux_coeff: float, decoding: str, seed: int = 0):
    info = registry.all_methods(("sae",))[name]
    sae = info.cls(d, m, info.params_cls(k=k, aux_coeff=aux_coeff, k_aux=8), seed=seed)
    sae.decoding = decoding
    with torch.no_grad():  # biases away from 0, so that a misplaced one shows
        g = torch.Generator().manual_seed(seed + 1)
        sae.b_enc.copy_(0.1 * torch.randn(m, generator=g))
        sae.b_dec.copy_(0.5 * torch.randn(d, generator=g))
    return sae


def tokens(n: int, d: int, seed: int = 0) -> torch.Tensor:
    return torch.randn(n, d, generator=torch.Generator().manual_seed(seed))


def dense_z(name: str, pre: torch.Tensor, k: int) -> torch.Tensor:
    """TopK: the k largest of each row; BatchTopK: the k·n largest ReLU(pre) of the batch."""
    if name == "topk":
        keep = torch.zeros_like(pre, dtype=torch.bool)
        keep.scatter_(-1, pre.topk(k, dim=-1).indices, True)
        return torch.where(keep, torch.relu(pre), torch.zeros_like(pre))
    acts = torch.relu(pre).reshape(-1)
    keep = torch.zeros_like(acts, dtype=torch.bool)
    keep[acts.topk(k * pre.shape[0]).indices] = True
    return torch.where(keep, acts, torch.zeros_like(acts)).reshape(pre.shape)


def reference(sae, name: str, x: torch.Tensor, dead: torch.Tensor | None):
    """(loss, x̂, z, aux) of the dense formula, from sae's parameters."""
    p = sae.params
    pre = (x - sae.b_dec) @ sae.W_enc + sae.b_enc
    z = dense_z(name, pre, p.k)
    x_hat = z @ sae.W_dec + sae.b_dec
    if name == "matryoshka_batchtopk":
        recs = [z[:, :m] @ sae.W_dec[:m] + sae.b_dec for m in sae.prefixes]
        rec = torch.stack([(x - r).pow(2).sum(-1).mean() for r in recs]).mean()
    else:
        rec = (x - x_hat).pow(2).sum(-1).mean()
    aux = torch.zeros(())
    if dead is not None and dead.any():
        kk = min(p.k_aux, int(dead.sum()))
        masked = torch.where(dead, pre, torch.full_like(pre, -math.inf))
        keep = torch.zeros_like(pre, dtype=torch.bool)
        keep.scatter_(-1, masked.topk(kk, dim=-1).indices, True)
        z_aux = torch.where(keep, torch.relu(pre), torch.zeros_like(pre))
        e = (x - x_hat).detach()
        e_hat = z_aux @ sae.W_dec
        aux = (e - e_hat).pow(2).sum(-1).mean() / (e - e.mean(0)).pow(2).sum(-1).mean()
    var = (x - x.mean(0)).pow(2).sum(-1).mean()
    return rec + p.aux_coeff * var * aux, x_hat, z, aux


def grads(sae, loss) -> dict[str, torch.Tensor]:
    sae.zero_grad()
    loss.backward()
    return {n: q.grad.clone() for n, q in sae.named_parameters()}


# (d, m, k): forced paths at a small size, and a size where "auto" takes the sparse path
SIZES = [(16, 64, 4, "dense"), (16, 64, 4, "sparse"), (128, 512, 4, "auto")]


@pytest.mark.parametrize("name", FAMILY)
@pytest.mark.parametrize("aux_coeff", [0.5, 0.0])
@pytest.mark.parametrize(("d", "m", "k", "decoding"), SIZES)
def test_forward_and_gradients_equal_the_dense_formula(name, aux_coeff, d, m, k, decoding):
    sae = make(name, d, m, k, aux_coeff, decoding)
    sparse = sae.sparse_path()
    assert sparse == (decoding != "dense")  # the size picks the sparse path on its own
    x = tokens(48, d)
    dead = torch.rand(m, generator=torch.Generator().manual_seed(3)) < 0.5
    out = sae(x, TrainState(frac=0.5, dead=dead))
    ref_loss, ref_x_hat, ref_z, ref_aux = reference(sae, name, x, dead)
    z = out.code.dense()
    torch.testing.assert_close(z, ref_z, rtol=1e-5, atol=1e-5)
    assert (out.z is None) == sparse
    torch.testing.assert_close(out.x_hat, ref_x_hat, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(out.loss, ref_loss, rtol=1e-5, atol=1e-5)
    assert torch.equal(out.fired, (ref_z != 0).any(0))
    if aux_coeff > 0:
        assert float(ref_aux) > 0 and float(out.parts["aux"]) == pytest.approx(float(ref_aux))
    else:
        assert "aux" not in out.parts  # not computed at all
    ours = grads(sae, out.loss)
    theirs = grads(sae, reference(sae, name, x, dead)[0])
    for n in ours:
        torch.testing.assert_close(ours[n], theirs[n], rtol=1e-4, atol=1e-5, msg=n)
    # the decoder's gradient sits on the rows of latents that were active (or AuxK's)
    touched = ours["W_dec"].abs().sum(1) > 0
    active = (ref_z != 0).any(0) | (dead if aux_coeff > 0 else torch.zeros_like(dead))
    assert not (touched & ~active).any()
    with torch.no_grad():  # and encode / decode agree with the formula too
        torch.testing.assert_close(sae.encode(x), ref_z, rtol=1e-5, atol=1e-5)


def test_auxk_is_skipped_at_coefficient_zero(monkeypatch):
    def boom(*a, **k):
        raise AssertionError("AuxK computed at aux_coeff = 0")

    monkeypatch.setattr(topk_module, "auxk_loss", boom)
    sae = make("topk", 16, 64, 4, 0.0, "auto")
    out = sae(tokens(8, 16), TrainState(dead=torch.ones(64, dtype=torch.bool)))
    assert set(out.parts) == {"mse"} and float(out.loss) == pytest.approx(float(out.parts["mse"]))
    with pytest.raises(AssertionError, match="AuxK computed"):
        make("topk", 16, 64, 4, 0.1, "auto")(tokens(8, 16), TrainState(dead=torch.ones(64) > 0))


def test_zero_values_have_not_fired_and_decode_to_nothing():
    """k above the number of positive pre-activations: the kept ≤ 0 ones are value 0."""
    code = SparseLatents(
        torch.tensor([[2.0, 0.0], [0.0, 0.0]]), torch.tensor([[1, 3], [0, 2]]), 2, 4
    )
    assert code.fired().tolist() == [False, True, False, False]
    w = torch.arange(8.0).reshape(4, 2)
    torch.testing.assert_close(code.decode(w), torch.tensor([[4.0, 6.0], [0.0, 0.0]]))
    flat = SparseLatents.from_dense(code.dense())  # one entry, on token 0
    assert flat.rows.tolist() == [0] and flat.indices.tolist() == [1]
    torch.testing.assert_close(flat.decode(w), code.decode(w))


def test_the_size_rule():
    # the suite's sizes (d ≤ 100, m ≤ 256) stay dense; a wide SAE at small k goes sparse
    assert not any(sparse_decode_pays(d, m, 4) for d in (32, 64, 100) for m in (128, 256))
    assert sparse_decode_pays(512, 2048, 32) and not sparse_decode_pays(512, 2048, 512)
    with pytest.raises(ValueError, match="decoding must be one of"):
        bad = make("topk", 4, 8, 2, 0.0, "fast")
        bad(tokens(2, 4))


def dense_step(sae, name: str, x: torch.Tensor, lr: float) -> dict[str, torch.Tensor]:
    """One step of the recipe on the dense formula, written out: gradient, its component along
    each decoder row removed, norm clipped at 1, Adam's first step, rows renormalised."""
    g = grads(sae, reference(sae, name, x, None)[0])
    w = sae.W_dec.detach()
    u = w / w.norm(dim=1, keepdim=True)
    g["W_dec"] = g["W_dec"] - (g["W_dec"] * u).sum(1, keepdim=True) * u
    total = torch.sqrt(sum(v.pow(2).sum() for v in g.values()))
    scale = min(1.0, 1.0 / (float(total) + 1e-6))
    new = {}
    for n, q in sae.named_parameters():
        gn = g[n] * scale
        m_hat = gn  # (1 − β1) g / (1 − β1)
        v_hat = gn.pow(2)  # (1 − β2) g² / (1 − β2)
        new[n] = q.detach() - lr * m_hat / (v_hat.sqrt() + 1e-8)
    new["W_dec"] = new["W_dec"] / new["W_dec"].norm(dim=1, keepdim=True)
    return new


@pytest.mark.parametrize("name", FAMILY)
def test_one_training_step_equals_the_dense_formula(name):
    d, m, k, lr = 128, 512, 4, 1e-3
    x = tokens(64, d, seed=5)
    sae = make(name, d, m, k, 1 / 32, "auto")
    assert sae.sparse_path()
    expected = dense_step(make(name, d, m, k, 1 / 32, "auto"), name, x, lr)
    cfg = TrainConfig(steps=1, batch_size=64, lr=lr, b_dec_init="zeros")
    train_sae(sae, x, cfg, seed=0)
    for n, q in sae.named_parameters():
        torch.testing.assert_close(q.detach(), expected[n], rtol=1e-5, atol=1e-6, msg=n)


@pytest.mark.parametrize("name", FAMILY)
def test_a_short_run_ends_where_the_dense_formula_does(name):
    """40 steps (AuxK on from step 2): the sparse path (gathers, folded encoder bias) against
    the dense one (bit for bit the formula above): the same metrics to 1e-5 relative, the
    weights to 1e-5 relative or 5 % of the lr: Adam's first steps divide a gradient by its own
    magnitude, so an entry whose gradient is about 0 moves by a rounding-sized g / |g| · lr."""
    d, m, k = 128, 512, 8
    x = tokens(2048, d, seed=7) @ torch.randn(d, d, generator=torch.Generator().manual_seed(8))
    cfg = TrainConfig(steps=40, batch_size=256, lr=1e-3, dead_window=512, b_dec_init="zeros")
    runs = {}
    for decoding in ("dense", "auto"):
        sae = make(name, d, m, k, 1 / 32, decoding)
        res = train_sae(sae, x, cfg, seed=0)
        with torch.no_grad():
            z = sae.encode(x)
            fvu = float((x - sae.decode(z)).pow(2).sum() / (x - x.mean(0)).pow(2).sum())
        runs[decoding] = (sae, res, fvu, float((z != 0).sum(1).double().mean()))
    (dense, rd, fvu_d, l0_d), (sparse, rs, fvu_s, l0_s) = runs["dense"], runs["auto"]
    assert sparse.sparse_path() and not dense.sparse_path()
    assert rd.parts["aux"] > 0  # AuxK worked on dead latents in both
    for (n, p), q in zip(dense.named_parameters(), sparse.parameters(), strict=True):
        torch.testing.assert_close(q, p, rtol=1e-5, atol=0.05 * cfg.lr, msg=n)
    assert fvu_s == pytest.approx(fvu_d, rel=1e-5) and l0_s == pytest.approx(l0_d, rel=1e-5)
    assert rs.dead_fraction == rd.dead_fraction and torch.equal(rs.since_fire, rd.since_fire)
    for key, value in rd.parts.items():
        assert rs.parts[key] == pytest.approx(value, rel=1e-5), key
