"""The SAE pillar's model sources: the stdlib corpus and its labels, the hooked models, the
artefacts (built for real at a tiny size), splicing x̂ back in and the probe split."""

from __future__ import annotations

import pytest
import torch

from sparsebench.suite.models import LeNet300100
from sparsebench.suite.pillars.sae import corpus, sources
from sparsebench.suite.pillars.sae.job import probe_split, splice_metrics
from sparsebench.suite.pillars.sae.models import (
    HookedLeNet300100,
    LMConfig,
    TinyLM,
    capture,
)


def test_labels_mark_comments_strings_keywords_and_numbers_by_hand():
    text = 'x = 12  # hi\nif x:\n    s = "ab"\n'
    lab = corpus.labels(text)
    col = {t: i for i, t in enumerate(corpus.TASKS)}

    def marked(task):
        return "".join(c for c, m in zip(text, lab[:, col[task]]) if m)

    assert marked("comment") == "# hi"
    assert marked("string") == '"ab"'
    assert marked("keyword") == "if"
    assert marked("number") == "12"


def test_the_split_is_by_file_and_deterministic():
    files = corpus._files()
    splits = [corpus.split_of(rel) for rel, _ in files]
    assert {"train", "test"} == set(splits)
    assert 0.04 < splits.count("test") / len(splits) < 0.2  # about 10 %
    assert corpus.split_of("os.py") == corpus.split_of("os.py")
    b, lab = corpus.load("train", 10_000)
    assert b.shape == (10_000,) and lab.shape == (10_000, len(corpus.TASKS))
    assert int(b.max()) < corpus.VOCAB
    with pytest.raises(ValueError, match="unknown corpus split 'val'"):
        corpus.load("val", 10)
    with pytest.raises(ValueError, match="fewer than the"):
        corpus.load("test", 10**9)


def test_hooks_read_and_replace_activations():
    torch.manual_seed(0)
    cfg = LMConfig(d_model=16, n_blocks=2, n_heads=2, ctx=8)
    lm = TinyLM(cfg).eval()
    x = torch.randint(0, corpus.VOCAB, (3, 8))
    clean = lm(x)
    assert clean.shape == (3, 8, corpus.VOCAB)
    same = lm(x, {hp: (lambda a: a) for hp in cfg.hookpoints()})
    assert torch.equal(same, clean)
    a = capture(lm, x, "blocks.1.hook_resid_post")
    assert a.shape == (24, 16)
    zeroed = lm(x, {"blocks.1.hook_resid_post": torch.zeros_like})
    assert torch.allclose(zeroed, zeroed[:1, :1].expand_as(zeroed))  # no information left

    plain = LeNet300100(784, 10)
    hooked = HookedLeNet300100(784, 10)
    hooked.load_state_dict(plain.state_dict())
    img = torch.rand(5, 1, 28, 28)
    assert torch.allclose(hooked(img), plain(img))
    assert capture(hooked, img, "fc2.hook_post").shape == (5, 100)
    assert (capture(hooked, img, "fc1.hook_post") >= 0).all()  # after the ReLU


TINY_LM = {
    "kind": "lm",
    "hookpoint": "blocks.0.hook_resid_post",
    "model": {"d_model": 16, "n_blocks": 1, "n_heads": 2, "ctx": 16, "steps": 5,
              "batch_size": 4, "warmup": 2, "corpus_bytes": 20_000},
    "train_tokens": 512,
    "eval_tokens": 256,
}  # fmt: skip


@pytest.fixture(scope="module")
def lm_acts(tmp_path_factory):
    """The tiny LM source built through its artefacts (model, then activations)."""
    mp = pytest.MonkeyPatch()
    mp.setenv("SPARSEBENCH_ARTEFACTS", str(tmp_path_factory.mktemp("arts")))
    src = sources.resolve(TINY_LM)
    arts = sources.artefacts({"s": src}, threads=1)
    assert [a.params["what"] for a in arts] == ["model", "acts"]
    assert arts[1].inputs == (arts[0].outputs[0],)  # the activations need the model
    with pytest.raises(FileNotFoundError, match="sparsebench build sae --artefact"):
        sources.load(src, 0)
    for a in arts:
        sources.build(a, "data")
    yield src, sources.load(src, 0)
    mp.undo()


def test_lm_activations_have_the_token_counts_and_the_scale(lm_acts):
    src, acts = lm_acts
    assert acts.train.shape == (512, 16) and acts.eval.shape == (256, 16)
    assert float(acts.train.norm(dim=1).mean()) == pytest.approx(16**0.5, rel=1e-4)
    assert acts.eval_inputs.shape == (16, 17) and acts.probe_labels.shape == (256, 4)
    ref = acts.reference
    assert ref["ce_zero"] > 0 and ref["ce_clean"] > 0 and ref["kl_zero"] >= 0
    assert sources.inputs(src) == tuple(sources.files(i)[0] for i in
                                        (sources.model_id(src), sources.acts_id(src)))  # fmt: skip


def test_a_perfect_reconstruction_recovers_all_the_loss(lm_acts):
    """An identity "SAE" spliced in (through the input scale and back) changes nothing: loss
    recovered 1, KL 0; one that outputs zeros is the zero-ablation: loss recovered 0."""

    class Identity:
        def encode(self, x):
            return x

        def decode(self, z):
            return z

    class Zero(Identity):
        def decode(self, z):
            return torch.zeros_like(z)

    _, acts = lm_acts
    out = splice_metrics(Identity(), acts)
    assert out["loss_recovered"] == pytest.approx(1.0, abs=1e-5)
    assert out["kl_sae"] == pytest.approx(0.0, abs=1e-6)
    assert out["kl_recovered"] == pytest.approx(1.0, abs=1e-5)
    zero = splice_metrics(Zero(), acts)
    assert zero["loss_recovered"] == pytest.approx(0.0, abs=1e-5)


def test_probe_halves_split_whole_windows(lm_acts):
    _, acts = lm_acts
    train = probe_split(acts)
    assert int(train.sum()) == 128  # 8 of the 16 windows
    per_window = train.view(16, 16)
    assert bool((per_window.all(1) | ~per_window.any(1)).all())  # never split inside a window


def test_a_spliced_pass_needs_the_clean_pass_first(lm_acts):
    from dataclasses import replace

    _, acts = lm_acts
    fresh = replace(acts, _clean_logp=[])
    with pytest.raises(RuntimeError, match="clean pass"):
        fresh.spliced(torch.zeros_like)
    ce, kl = fresh.spliced(None)
    assert ce == pytest.approx(acts.reference["ce_clean"]) and kl == pytest.approx(0.0, abs=1e-6)


def test_the_zero_pair_control_differs_only_in_the_pairs_signs():
    """sae.yaml's synthetic_nopairs: the same dictionary, firings and magnitudes as the source
    with pairs, every feature positive (so the pairs' signs are the one difference)."""
    from pathlib import Path

    import yaml

    spec = yaml.safe_load((Path(__file__).parents[4] / "suite/benchmarks/sae.yaml").read_text())
    srcs = spec["sae"]["sources"]
    assert {k: v for k, v in srcs["synthetic_nopairs"].items() if k != "n_bipolar"} == {
        k: v for k, v in srcs["synthetic"].items() if k != "n_bipolar"
    }
    small = {"train_tokens": 1024, "eval_tokens": 256}
    pairs = sources.load({**srcs["synthetic"], **small}, seed=0)
    none = sources.load({**srcs["synthetic_nopairs"], **small}, seed=0)
    assert (pairs.n_pairs, none.n_pairs) == (32, 0) and torch.equal(
        pairs.dictionary, none.dictionary
    )
    assert torch.equal(pairs.codes.abs(), none.codes) and bool((pairs.codes[:, :32] < 0).any())
    assert torch.equal(pairs.codes[:, 32:], none.codes[:, 32:])
