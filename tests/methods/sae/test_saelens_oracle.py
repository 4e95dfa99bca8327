"""Optional cross-check against SAELens (skipped unless ``sae_lens`` imports): the same TopK and
JumpReLU weights and inputs give the same encodings and reconstructions, and our explained
variance equals SAELens' streaming one. ``make oracles`` installs SAELens (the ``oracles``
extra) into ``.venv-oracles`` and runs these tests there; CI runs it.

SAELens 6.54.12 reports two EVs: ``explained_variance`` (ExplainedVarianceCalculator, about the
mean over all tokens: issue #659's fix, equal to ours) and ``explained_variance_legacy`` (a mean
over tokens of per-token ratios against the batch mean), which differs from ours.
"""

from __future__ import annotations

import pytest
import torch

from tests.oracle import peer

sae_lens = peer("sae_lens")

from sparsebench.methods.sae.jumprelu import JumpReLU  # noqa: E402
from sparsebench.methods.sae.metrics import ReconstructionStats  # noqa: E402
from sparsebench.methods.sae.topk import TopK  # noqa: E402

D, M = 16, 64


def _inputs() -> torch.Tensor:
    g = torch.Generator().manual_seed(0)
    return torch.randn(256, D, generator=g) + 3.0  # an offset: the #659 case


def _copy(ours, theirs) -> None:
    with torch.no_grad():
        for name in ("W_enc", "b_enc", "W_dec", "b_dec"):
            getattr(theirs, name).copy_(getattr(ours, name))


def test_topk_encodings_match_saelens():
    ours = TopK(D, M, TopK.Params(k=6), seed=1)
    with torch.no_grad():
        ours.b_dec.normal_()
        ours.b_enc.normal_(0, 0.1)
    theirs = sae_lens.TopKSAE(sae_lens.TopKSAEConfig(d_in=D, d_sae=M, k=6))
    _copy(ours, theirs)
    x = _inputs()
    with torch.no_grad():
        z, z_ref = ours.encode(x), theirs.encode(x)
        assert torch.allclose(z, z_ref.to_dense() if z_ref.is_sparse else z_ref, atol=1e-5)
        assert torch.allclose(ours.decode(z), theirs.decode(z_ref), atol=1e-5)


def test_jumprelu_encodings_match_saelens():
    ours = JumpReLU(D, M, JumpReLU.Params(), seed=2)
    with torch.no_grad():
        ours.b_enc.normal_(0, 0.5)
        ours.threshold.uniform_(0.05, 1.0)
    cfg = sae_lens.JumpReLUSAEConfig(d_in=D, d_sae=M, apply_b_dec_to_input=False)
    theirs = sae_lens.JumpReLUSAE(cfg)
    _copy(ours, theirs)
    with torch.no_grad():
        theirs.threshold.copy_(ours.theta())
        x = _inputs()
        z, z_ref = ours.encode(x), theirs.encode(x)
    assert torch.allclose(z, z_ref, atol=1e-5)
    assert (z != 0).any() and (z == 0).any()


def test_explained_variance_equals_saelens_streaming_ev():
    from sae_lens.evals import ExplainedVarianceCalculator

    x = _inputs()
    x_hat = x + 0.5 * torch.randn(x.shape, generator=torch.Generator().manual_seed(3))
    ours, theirs = ReconstructionStats(), ExplainedVarianceCalculator()
    for xs, xh in zip(x.split(64), x_hat.split(64)):  # streamed in batches, both
        ours.update(xs, xh)
        theirs.add_batch(sae_output=xh, hidden_acts=xs)
    assert ours.explained_variance == pytest.approx(theirs.compute(), rel=1e-6)
