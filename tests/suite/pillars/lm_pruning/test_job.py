"""The lm_pruning pillar's job: the block-by-block walk (calibration inputs through the blocks
already pruned), exact sparsity, what is left dense, and the spec's errors."""

from __future__ import annotations

import copy

import pytest
import torch

from sparsebench.methods.lm_pruning.base import LayerStats, LMPruningMethod, Target
from sparsebench.methods.lm_pruning.magnitude import Magnitude
from sparsebench.suite.method import NoParams
from sparsebench.suite.pillars.lm_pruning import job
from sparsebench.suite.pillars.sae.models import LMConfig, TinyLM
from sparsebench.suite.spec import SpecError, validate

CFG = LMConfig(d_model=16, n_blocks=2, n_heads=2, ctx=8, steps=1, batch_size=2)


class Spy(LMPruningMethod):
    """Halves nothing: records the statistics it is given and zeroes the first input column."""

    statistics = "norms"

    def __init__(self) -> None:
        super().__init__(NoParams())
        self.seen: list[LayerStats] = []

    def prune(self, weight, stats, target):
        self.seen.append(stats)
        out = weight.clone()
        out[:, 0] = 0.0
        return out


def _model() -> TinyLM:
    torch.manual_seed(0)
    return TinyLM(CFG).eval()


def test_each_block_is_scored_on_inputs_that_passed_the_blocks_already_pruned():
    model, calib = _model(), torch.randint(0, 128, (5, CFG.ctx))
    spy = Spy()
    tokens = job.prune_model(model, spy, Target(0.5), calib)
    # per block: q, k and v (the fused weight's three parts), proj, fc, out
    per_block = len(job.LINEARS) + 2
    assert tokens == 5 * CFG.ctx and len(spy.seen) == 2 * per_block
    # block 1's qkv input, by hand: embeddings -> block 0 as pruned -> LayerNorm 1 of block 1
    with torch.no_grad():
        x = model.tok(calib) + model.pos(torch.arange(CFG.ctx))
        x = model.blocks[0](x, None)  # already pruned (the spy zeroed its first columns)
        h = model.blocks[1].ln1(x).reshape(-1, CFG.d_model).to(torch.float64)
    got = spy.seen[per_block]  # block 1, q
    assert got.tokens == 5 * CFG.ctx
    torch.testing.assert_close(got.sq_norms, (h * h).sum(0))
    # against the unpruned block 0 the statistics would differ
    fresh = _model()
    with torch.no_grad():
        y = fresh.blocks[0](fresh.tok(calib) + fresh.pos(torch.arange(CFG.ctx)), None)
        h0 = fresh.blocks[1].ln1(y).reshape(-1, CFG.d_model).to(torch.float64)
    assert not torch.allclose(got.sq_norms, (h0 * h0).sum(0))
    # within a block every layer is scored from one pass with the block unpruned: block 0's
    # MLP output layer sees the dense block's hidden units
    with torch.no_grad():
        blk = fresh.blocks[0]
        x0 = fresh.tok(calib) + fresh.pos(torch.arange(CFG.ctx))
        b, t, d = x0.shape
        q, k, v = blk.qkv(blk.ln1(x0)).view(b, t, 3, blk.heads, d // blk.heads).unbind(2)
        a = torch.nn.functional.scaled_dot_product_attention(
            q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), is_causal=True
        )
        x1 = x0 + blk.proj(a.transpose(1, 2).reshape(b, t, d))
        hidden = torch.nn.functional.gelu(blk.fc(blk.ln2(x1))).reshape(-1, 4 * d)
    torch.testing.assert_close(spy.seen[per_block - 1].sq_norms, (hidden.double() ** 2).sum(0))


def test_magnitude_prunes_every_block_linear_to_the_target_and_leaves_the_rest():
    model = _model()
    before = copy.deepcopy(model.state_dict())
    assert job.prune_model(model, Magnitude(NoParams()), Target(0.6), torch.zeros(0)) == 0
    for block in model.blocks:  # q, k and v each pruned as a layer of their own
        parts = [*block.qkv.weight.chunk(3, dim=0), block.proj.weight, block.fc.weight,
                 block.out.weight]  # fmt: skip
        for part in parts:
            assert int((part == 0).sum()) == int(part.numel() * 0.6)
    after = model.state_dict()
    for name in ("tok.weight", "pos.weight", "unembed.weight", "ln_f.weight",
                 "blocks.0.ln1.weight", "blocks.0.qkv.bias"):  # fmt: skip
        assert torch.equal(before[name], after[name]), name


def test_an_nm_pattern_that_does_not_divide_the_layers_is_refused():
    with pytest.raises(ValueError, match=r"3:6 needs every pruned layer's inputs .* \[16, 64\]"):
        job.check_patterns(CFG, [Target(0.5, (3, 6))])
    job.check_patterns(CFG, [Target(0.5, (2, 4)), Target(0.5, (4, 8))])


def _spec(section: dict) -> dict:
    return {"benchmark": "t", "lm_pruning": {"methods": {"wanda": {}}, **section}}


@pytest.mark.parametrize(
    ("section", "message"),
    [
        ({"model": {"width": 3}}, r"lm_pruning\.model: unknown key 'width'; allowed: d_model"),
        ({"model": {"d_model": "big"}}, r"lm_pruning\.model\.d_model: 'big' is not an integer"),
        ({"model": {"d_model": 12, "n_heads": 5}}, r"multiple of model\.n_heads"),
        ({"calibration": {"sequences": 0}}, r"calibration\.sequences"),
        (
            {"patterns": ["3:2"]},
            r"lm_pruning\.patterns\.0: pattern must be 'N:M' .* or 'unstructured'",
        ),
        ({"patterns": ["unstructured", "2:4 "]}, r"lm_pruning\.patterns\.1: .*got '2:4 '"),
        ({"eval_tokens": 900_000}, r"lm_pruning\.eval_tokens: 900000 held-out tokens .* at most"),
        ({"model": {"corpus_bytes": 200_000_000}}, r"lm_pruning\.model\.corpus_bytes: .* at most"),
        ({"model": {"seed": -1}}, r"lm_pruning\.model\.seed: -1 is out of range; allowed: 0 to"),
        ({"model": {"d_model": 10**20}}, r"lm_pruning\.model\.d_model: .* out of range"),
        (
            {"calibration": {"sequences": 10**9}},
            r"calibration\.sequences: 1000000000 windows .* GiB",
        ),
        ({"methods": {"sparsegpt": {"percdamp": 0.0}}}, r"percdamp must be in \(0, 1\)"),
        ({"patterns": ["3:6"]}, r"lm_pruning\.patterns: 3:6 needs"),
        ({"sparsities": [1.0]}, r"sparsities"),
        ({"methods": {"sparsegpt": {"blocksize": 0}}}, r"sparsegpt: blocksize must be >= 1"),
        ({"methods": {"wandaa": {}}}, r"wandaa"),
    ],
)
def test_a_bad_section_is_refused_naming_the_key(section, message):
    with pytest.raises(SpecError, match=message):
        validate(_spec(section), "t.yaml")
