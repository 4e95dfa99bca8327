"""Activation sources of the SAE pillar and their artefacts.

Three kinds (``sae.sources.<name>.kind``):

* ``synthetic``: generated tokens with a known dictionary (methods/sae/synthetic.py), made in
  the job (seconds), one draw per seed;
* ``lm``: the suite's byte-level language model (:class:`.models.TinyLM`) trained on the stdlib
  corpus (:mod:`.corpus`), activations at ``hookpoint``: SAE training tokens from random windows
  of the train split, held-out tokens from windows evenly spaced over the test split (files
  never trained on; ⌈eval_tokens / ctx⌉ whole windows, so the count is rounded up to a
  multiple of ctx), with the windows kept so that the job can splice x̂ back in;
* ``image``: LeNet-300-100 trained on ``model.dataset``; training tokens are the train split's
  images, held-out tokens the test split's, at ``hookpoint``.

The model and each hookpoint's activations are artefacts (Snakemake outputs, made once, shared
by every benchmark that asks for the same ones):

``results/artefacts/sae/<kind>-<h>/model/``                   model.safetensors + meta.json
``results/artefacts/sae/<kind>-<h>/acts/<hookpoint>-<t>/``    acts.safetensors + meta.json

``<h>`` hashes the model config (and, for the LM, the Python version whose stdlib it read),
``<t>`` the token counts. ``acts.safetensors`` holds ``train`` (n_train, d) and ``eval``
(n_eval, d) float32, ``eval_inputs`` (LM: (windows, ctx + 1) int64 bytes; image: (n, 1, 28, 28)
float32) and ``eval_targets`` (image labels), ``probe_labels`` (n_eval, tasks) uint8; its
meta.json the token counts and the probe task names; the model's meta.json its training time
and held-out loss (LM: on 16,384 test-split tokens) or test accuracy. The SAE seeds vary the
SAE's initialisation and token order; the model is trained once (``model.seed``).
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F

from sparsebench.methods.sae.synthetic import SyntheticConfig, sample, true_dictionary
from sparsebench.suite import paths, tensorfile
from sparsebench.suite.pillar import Artefact
from sparsebench.suite.registry import check_fields

from . import corpus
from .models import HookedLeNet300100, ImageConfig, LMConfig, TinyLM, capture

PILLAR = "sae"
KINDS = ("synthetic", "lm", "image")
TOKENS = {"train_tokens": 262_144, "eval_tokens": 16_384}  # defaults (synthetic, lm)
_SYN = tuple(f.name for f in fields(SyntheticConfig))
KEYS: dict[str, tuple[str, ...]] = {
    "synthetic": ("kind", "widths", *_SYN, *TOKENS),
    "lm": ("kind", "widths", "hookpoint", "model", *TOKENS),
    "image": ("kind", "widths", "hookpoint", "model"),
}
MODEL_CFG = {"lm": LMConfig, "image": ImageConfig}
EVAL_CHUNK = 256  # held-out windows / images per forward pass


@dataclass(frozen=True)
class Source:
    """One activation source, resolved (defaults filled in) and validated."""

    kind: str
    hookpoint: str | None = None
    model: LMConfig | ImageConfig | None = None
    synthetic: SyntheticConfig | None = None
    train_tokens: int | None = None
    eval_tokens: int | None = None
    widths: tuple[int, ...] | None = None  # SAE widths on this source (None: sae.widths)

    @property
    def d(self) -> int:
        if self.kind == "synthetic":
            return self.synthetic.d
        return self.model.hookpoints()[self.hookpoint]

    def identity(self) -> dict[str, Any]:
        """Everything that defines the activations (for rerun triggers)."""
        out: dict[str, Any] = {"kind": self.kind}
        if self.synthetic is not None:
            out["synthetic"] = asdict(self.synthetic)
        if self.model is not None:
            out |= {"model": model_id(self), "hookpoint": self.hookpoint}
        if self.train_tokens is not None:
            out |= {"train_tokens": self.train_tokens, "eval_tokens": self.eval_tokens}
        return out


def resolve(raw: Mapping[str, Any]) -> Source:
    """The :class:`Source` of a spec entry. Raises ValueError naming the key, the value and
    what is allowed (an unknown hookpoint lists the model's hookpoints)."""
    kind = raw.get("kind")
    if kind not in KINDS:
        raise ValueError(f"kind: unknown {kind!r}; allowed: {', '.join(KINDS)}")
    extra = sorted(set(raw) - set(KEYS[kind]))
    if extra:
        raise ValueError(
            f"{extra[0]}: not a key of a source of kind {kind!r}; allowed: {', '.join(KEYS[kind])}"
        )
    has_tokens = "train_tokens" in KEYS[kind]
    tokens = {k: int(raw.get(k, v)) for k, v in TOKENS.items()} if has_tokens else {}
    for k, v in tokens.items():
        if v < 1:
            raise ValueError(f"{k} must be >= 1, got {v}")
    widths = tuple(raw["widths"]) if raw.get("widths") is not None else None
    if kind == "synthetic":
        syn = {k: raw[k] for k in _SYN if k in raw}
        check_fields(SyntheticConfig, syn)
        cfg = SyntheticConfig(**syn)
        cfg.validate()
        return Source(kind, synthetic=cfg, widths=widths, **tokens)
    cls = MODEL_CFG[kind]
    model_raw = raw.get("model") or {}
    if not isinstance(model_raw, Mapping):
        raise ValueError(f"model: expected a mapping of the {kind} model's keys, got {model_raw!r}")
    check_fields(cls, model_raw, "model.")
    model = cls(**model_raw)
    model.validate()
    hp = raw.get("hookpoint")
    if hp is None:
        raise ValueError(
            f"hookpoint: missing; a {kind} source reads one of: {', '.join(model.hookpoints())}"
        )
    if hp not in model.hookpoints():
        raise ValueError(
            f"hookpoint: {hp!r} is not a hookpoint of this {kind} model; available: "
            f"{', '.join(model.hookpoints())}"
        )
    if kind == "lm":
        check_corpus(model, tokens)
    return Source(kind, hp, model, None, widths=widths, **tokens)


def check_corpus(model: LMConfig, tokens: Mapping[str, int]) -> None:
    """The corpus holds what an lm source asks for (cheap: file sizes, no tokenizing)."""
    if tokens["train_tokens"] < model.ctx:
        raise ValueError(f"train_tokens must be >= model.ctx ({model.ctx})")
    train = corpus.size("train")
    if model.corpus_bytes > train:
        raise ValueError(
            f"model.corpus_bytes: {model.corpus_bytes} exceeds the stdlib train split "
            f"({train} bytes on Python {corpus.identity()['python']}); allowed: at most {train}"
        )
    windows = math.ceil(tokens["eval_tokens"] / model.ctx)
    test = corpus.size("test")
    if windows * (model.ctx + 1) > test - 1:
        most = (test - 1) // (model.ctx + 1) * model.ctx
        raise ValueError(
            f"eval_tokens: {tokens['eval_tokens']} held-out tokens need {windows} windows of "
            f"{model.ctx + 1} bytes; the stdlib test split has {test} bytes: allowed at most "
            f"{most}"
        )


# ------------------------------------------------------------------ artefact ids and files
def _hash(obj: Any) -> str:
    return hashlib.sha1(json.dumps(obj, sort_keys=True).encode()).hexdigest()[:8]


def model_id(src: Source) -> str:
    key: dict[str, Any] = {"model": asdict(src.model), "v": 1}
    if src.kind == "lm":
        key["corpus"] = corpus.identity()
    return f"{src.kind}-{_hash(key)}/model"


def acts_id(src: Source) -> str:
    tokens = {"train": src.train_tokens, "eval": src.eval_tokens, "v": 1}
    return f"{model_id(src).rsplit('/', 1)[0]}/acts/{src.hookpoint}-{_hash(tokens)}"


def files(artefact_id: str) -> tuple[str, str]:
    """(tensors, meta.json) of an artefact."""
    folder = paths.artefact(PILLAR, artefact_id)
    name = "acts.safetensors" if "/acts/" in artefact_id else "model.safetensors"
    return str(folder / name), str(folder / "meta.json")


def inputs(src: Source) -> tuple[str, ...]:
    """The artefact files a cell on ``src`` reads (none for synthetic sources)."""
    if src.kind == "synthetic":
        return ()
    return (files(model_id(src))[0], files(acts_id(src))[0])


def artefacts(sources: Mapping[str, Source], threads: int) -> list[Artefact]:
    """The model and activations artefacts of the spec's sources (each once)."""
    out: dict[str, Artefact] = {}
    for src in sources.values():
        if src.kind == "synthetic":
            continue
        mid, aid = model_id(src), acts_id(src)
        params = {"source": src.identity(), "kind": src.kind}
        out.setdefault(mid, Artefact(
            PILLAR, mid, f"{src.kind} model {mid.split('/')[0]}", files(mid), (), threads,
            {**params, "what": "model", "model": asdict(src.model)},
        ))  # fmt: skip
        out.setdefault(aid, Artefact(
            PILLAR, aid, f"{src.kind} activations at {src.hookpoint}", files(aid),
            (files(mid)[0],), threads,
            {**params, "what": "acts", "model": asdict(src.model), "hookpoint": src.hookpoint,
             "train_tokens": src.train_tokens, "eval_tokens": src.eval_tokens},
        ))  # fmt: skip
    return list(out.values())


def _how(artefact_id: str) -> str:
    return (
        "it is made by the workflow (sparsebench run SPEC) or "
        f"`sparsebench build sae --artefact {artefact_id} --spec SPEC`"
    )


# ------------------------------------------------------------------ building
def _source_of(params: Mapping[str, Any]) -> Source:
    cls = MODEL_CFG[params["kind"]]
    return Source(
        params["kind"], params.get("hookpoint"), cls(**params["model"]), None,
        params.get("train_tokens"), params.get("eval_tokens"),
    )  # fmt: skip


def lm_bytes(split: str, n: int) -> torch.Tensor:
    """The first ``n`` bytes of the corpus split ``split`` as int64 tokens."""
    b, _ = corpus.load(split, n)
    return torch.from_numpy(b.astype("int64"))


def _eval_windows(src: Source) -> tuple[torch.Tensor, torch.Tensor]:
    """(windows (W, ctx + 1) int64, labels (W·ctx, tasks) uint8): the held-out windows of
    :func:`corpus.held_out_windows` and the labels of each window's ctx input bytes."""
    b, lab, idx = corpus.held_out_windows(src.model.ctx, src.eval_tokens)
    windows = torch.from_numpy(b.astype("int64")[idx])
    labels = torch.from_numpy(lab[idx[:, : src.model.ctx].reshape(-1)])
    return windows, labels


def _image_data(cfg: ImageConfig, data_root: str):
    from sparsebench.suite.data import load_dataset

    return load_dataset(cfg.dataset, data_root)


def build(artefact: Artefact, data_root: str) -> None:
    """Make the model or the activations of ``artefact`` (its ``params['what']``)."""
    from .train import lm_loss, random_offsets, train_image, train_lm

    p = artefact.params
    src = _source_of(p)
    if p["what"] == "model":
        if src.kind == "lm":
            model, facts = train_lm(src.model, lm_bytes("train", src.model.corpus_bytes))
            windows, _ = _eval_windows(_with_eval(src, 16_384))
            with torch.no_grad():
                facts["test_loss"] = float(lm_loss(model, windows))
            facts["loss_unit"] = "nats per byte"
        else:
            splits = _image_data(src.model, data_root)
            model, facts = train_image(src.model, splits.train, splits.num_classes)
            x, y = splits.test.tensors
            with torch.no_grad():
                facts["test_accuracy"] = float((model(x).argmax(1) == y).float().mean())
        tensorfile.save(*artefact.outputs, model.state_dict(), {**facts, "config": p["model"]})
        return
    model = load_model(src)
    if src.kind == "lm":
        ctx = src.model.ctx
        n_win = math.ceil(src.train_tokens / ctx)
        data = lm_bytes("train", src.model.corpus_bytes)
        offs = random_offsets(len(data), ctx, n_win, src.model.seed + 1)
        train_x = torch.stack([data[o : o + ctx] for o in offs.tolist()])
        eval_inputs, probe = _eval_windows(src)
        train = torch.cat([capture(model, c, src.hookpoint) for c in train_x.split(EVAL_CHUNK)])
        train = train[: src.train_tokens]
        ev = torch.cat([capture(model, c[:, :-1], src.hookpoint)
                        for c in eval_inputs.split(EVAL_CHUNK)])  # fmt: skip
        targets, tasks = torch.zeros(0), list(corpus.TASKS)
    else:
        splits = _image_data(src.model, data_root)
        train = capture(model, splits.train.tensors[0], src.hookpoint)
        eval_inputs, targets = splits.test.tensors
        ev = capture(model, eval_inputs, src.hookpoint)
        classes = range(splits.num_classes)
        probe = torch.stack([(targets == c) for c in classes], 1).to(torch.uint8)
        tasks = [f"class_{c}" for c in classes]
    tensors = {"train": train, "eval": ev, "eval_inputs": eval_inputs,
               "eval_targets": targets, "probe_labels": probe}  # fmt: skip
    meta = {"hookpoint": src.hookpoint, "d": ev.shape[1], "train_tokens": train.shape[0],
            "eval_tokens": ev.shape[0], "probe_tasks": tasks, "model": model_id(src)}  # fmt: skip
    tensorfile.save(*artefact.outputs, tensors, meta)


def _with_eval(src: Source, n: int) -> Source:
    return Source(src.kind, src.hookpoint, src.model, None, src.train_tokens, n)


def load_model(src: Source) -> torch.nn.Module:
    """The trained model of ``src`` (eval mode), from its safetensors (no unpickling)."""
    state, _ = tensorfile.load(*files(model_id(src)), _how(model_id(src)), "SAE artefact")
    if src.kind == "lm":
        model: torch.nn.Module = TinyLM(src.model)
    else:
        w = state["fc1.weight"]
        model = HookedLeNet300100(w.shape[1], state["fc3.weight"].shape[0])
    model.load_state_dict(state)
    return model.eval()


# ------------------------------------------------------------------ what a cell reads
@dataclass
class Activations:
    """One source's activations, scaled so that E‖x‖₂ = √d on the training tokens.

    Attributes:
        kind: the source kind.
        train, eval: (n, d) float32, scaled.
        scale: the input scale c applied (the model sees x / c).
        dictionary: the true dictionary (n_features, d) for synthetic sources, else None.
        model, hookpoint: the source model and where the SAE splices in (lm, image).
        eval_inputs, eval_targets: the model inputs of the held-out tokens (and image labels).
        probe_labels, probe_tasks: binary labels (n_eval, tasks) for sparse probing.
        reference: clean and zero-ablation cross-entropy of the model on the held-out tokens
            (filled by :func:`load`).
        codes: synthetic: the true signed codes of the held-out tokens (n_eval, n_features).
        n_pairs: synthetic: the anticorrelated pairs, the first ``n_pairs`` features (one
            direction used with both signs; methods/sae/synthetic.py: ``n_bipolar``).
    """

    kind: str
    train: torch.Tensor
    eval: torch.Tensor
    scale: float
    dictionary: torch.Tensor | None = None
    model: torch.nn.Module | None = None
    hookpoint: str | None = None
    eval_inputs: torch.Tensor | None = None
    eval_targets: torch.Tensor | None = None
    probe_labels: torch.Tensor | None = None
    probe_tasks: tuple[str, ...] = ()
    reference: dict[str, float] = field(default_factory=dict)
    codes: torch.Tensor | None = None
    n_pairs: int = 0
    _clean_logp: list[torch.Tensor] = field(default_factory=list, repr=False)

    def _chunks(self):
        if self.kind == "lm":
            for w in self.eval_inputs.split(EVAL_CHUNK):
                yield w[:, :-1], w[:, 1:]
        else:
            yield from zip(self.eval_inputs.split(EVAL_CHUNK), self.eval_targets.split(EVAL_CHUNK))

    @torch.no_grad()
    def spliced(self, fn) -> tuple[float, float]:
        """(mean cross-entropy, mean KL(p_clean ‖ p_spliced)) in nats per held-out token when
        the hookpoint activation a (model units) is replaced by ``fn(a)``; ``fn=None``: clean."""
        hooks = {self.hookpoint: fn} if fn is not None else None
        if fn is None:
            self._clean_logp.clear()  # the clean pass (re)fills the reference of the KL
        elif not self._clean_logp:
            raise RuntimeError("Activations.spliced: run the clean pass (fn=None) first")
        ce_sum, kl_sum, n = 0.0, 0.0, 0
        for i, (x, y) in enumerate(self._chunks()):
            logp = F.log_softmax(self.model(x, hooks).float(), -1)
            logp, y = logp.reshape(-1, logp.shape[-1]), y.reshape(-1)
            if fn is None:
                self._clean_logp.append(logp)
            ce_sum += float(F.nll_loss(logp, y, reduction="sum"))
            # KL(p_clean ‖ p_spliced), finite where a clean probability underflows to 0
            ref = self._clean_logp[i]
            kl_sum += float(F.kl_div(logp, ref, reduction="sum", log_target=True))
            n += y.numel()
        return ce_sum / n, kl_sum / n


def load(raw: Mapping[str, Any] | Source, seed: int) -> Activations:
    """The activations a cell on source ``raw`` trains and evaluates on (seed: the synthetic
    draw; model sources are fixed). Raises ValueError on a bad source, FileNotFoundError when
    an artefact is missing."""
    # here, not at the top: the training module imports Lightning, which a spec check
    # (this module's schema and config checks) must not pay for
    from sparsebench.methods.sae.training import input_scale

    src = raw if isinstance(raw, Source) else resolve(raw)
    if src.kind == "synthetic":
        d = true_dictionary(src.synthetic, seed)
        x, codes = sample(src.synthetic, src.train_tokens + src.eval_tokens, seed, d)
        train, held = x[: src.train_tokens], x[src.train_tokens :]
        c = input_scale(train)  # > 0: the codes' signs hold in the scaled space
        held_codes = codes[src.train_tokens :].clone()
        return Activations(
            "synthetic", train * c, held * c, c, d,
            codes=held_codes, n_pairs=src.synthetic.n_bipolar,
        )  # fmt: skip
    aid = acts_id(src)
    t, meta = tensorfile.load(*files(aid), _how(aid), "SAE artefact")
    for split in ("train", "eval"):
        if t[split].ndim != 2 or t[split].shape[1] != src.d or meta.get("d") != src.d:
            raise tensorfile.ArtefactError(
                f"SAE artefact {files(aid)[0]}: {split} activations are {list(t[split].shape)} "
                f"(meta d = {meta.get('d')!r}), but hookpoint {src.hookpoint} has d = {src.d}; "
                f"remove {Path(files(aid)[0]).parent} and rebuild it: {_how(aid)}"
            )
    c = input_scale(t["train"])
    acts = Activations(
        src.kind, t["train"] * c, t["eval"] * c, c, None, load_model(src), src.hookpoint,
        t["eval_inputs"], t["eval_targets"].long(), t["probe_labels"], tuple(meta["probe_tasks"]),
    )  # fmt: skip
    ce_clean, _ = acts.spliced(None)
    ce_zero, kl_zero = acts.spliced(torch.zeros_like)
    acts.reference = {"ce_clean": ce_clean, "ce_zero": ce_zero, "kl_zero": kl_zero}
    return acts
