"""The lm_pruning pillar's job: the model artefact, the calibration and held-out windows, the
block-by-block pruning walk the methods share, and the perplexity of the result."""

from __future__ import annotations

import copy
import hashlib
import json
import math
import time
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass
from typing import Any

import torch
from torch import nn

from sparsebench.methods.lm_pruning.base import LayerStats, LMPruningMethod, Target
from sparsebench.suite import paths, tensorfile
from sparsebench.suite.pillars.sae import corpus
from sparsebench.suite.pillars.sae.models import LMConfig, TinyLM
from sparsebench.suite.pillars.sae.sources import lm_bytes

PILLAR = "lm_pruning"
CHUNK = 32  # windows per forward pass (memory: CHUNK · ctx · 4 · d_model floats)
# The linear layers of a block that are pruned (all of them: attention in, attention out,
# MLP in, MLP out); embeddings, LayerNorms and the unembedding stay dense. The model computes
# q, k and v with one fused weight; they are pruned as the three layers OPT and LLaMA have
# (each pruned on its own), from the same input statistics.
LINEARS = ("qkv", "proj", "fc", "out")
SPLIT = {"qkv": 3}


def model_id(cfg: LMConfig) -> str:
    key = {"model": asdict(cfg), "corpus": corpus.identity(), "v": 1}
    return f"lm-{hashlib.sha1(json.dumps(key, sort_keys=True).encode()).hexdigest()[:8]}/model"


def model_files(mid: str) -> tuple[str, str]:
    folder = paths.artefact(PILLAR, mid)
    return str(folder / "model.safetensors"), str(folder / "meta.json")


def _how(mid: str) -> str:
    return (
        "it is made by the workflow (sparsebench run SPEC) or "
        f"`sparsebench build lm_pruning --artefact {mid} --spec SPEC`"
    )


def eval_windows(ctx: int, tokens: int) -> torch.Tensor:
    """The held-out windows (W, ctx + 1) int64 of :func:`corpus.held_out_windows`: files the
    model never saw."""
    b, _, idx = corpus.held_out_windows(ctx, tokens)
    return torch.from_numpy(b.astype("int64")[idx])


def calibration_windows(cfg: LMConfig, sequences: int, seed: int) -> torch.Tensor:
    """``sequences`` windows of ctx bytes at random offsets of the train split (the papers
    sample their 128 calibration sequences from the training corpus); seed 1000 + seed, apart
    from the model's own training order."""
    from sparsebench.suite.pillars.sae.train import random_offsets

    data = lm_bytes("train", cfg.corpus_bytes)
    offs = random_offsets(len(data), cfg.ctx, sequences, 1000 + seed)
    return torch.stack([data[o : o + cfg.ctx] for o in offs.tolist()])


def build_model(artefact) -> None:
    """Train the model (the SAE pillar's recipe) and save it with its held-out loss."""
    from sparsebench.suite.pillars.sae.train import lm_loss, train_lm

    cfg = LMConfig(**artefact.params["model"])
    model, facts = train_lm(cfg, lm_bytes("train", cfg.corpus_bytes))
    with torch.no_grad():
        facts["test_loss"] = float(lm_loss(model, eval_windows(cfg.ctx, 16_384)))
    facts["loss_unit"] = "nats per byte"
    tensorfile.save(*artefact.outputs, model.state_dict(), {**facts, "config": asdict(cfg)})


def load_model(cfg: LMConfig) -> TinyLM:
    mid = model_id(cfg)
    state, _ = tensorfile.load(*model_files(mid), _how(mid), "language model")
    model = TinyLM(cfg)
    model.load_state_dict(state)
    return model.eval()


def check_patterns(cfg: LMConfig, targets: Iterable[Target]) -> None:
    """Refuse an N:M pattern whose M does not divide every pruned layer's inputs."""
    widths = {cfg.d_model, 4 * cfg.d_model}
    for t in targets:
        n, m = t.nm or (0, 1)
        bad = sorted(w for w in widths if w % m)
        if bad:
            raise ValueError(
                f"{n}:{m} needs every pruned layer's inputs to split into groups of {m}; this "
                f"model's layers have {sorted(widths)} inputs ({bad[0]} does not)"
            )


@dataclass
class State:
    """What the cells of one batch share."""

    cfg: LMConfig
    model: TinyLM
    eval_windows: torch.Tensor
    calibration: dict[int, torch.Tensor]  # seed -> windows
    dense_loss: float


def prepare(cfg: LMConfig, section: dict[str, Any], seeds: Iterable[int]) -> State:
    model = load_model(cfg)
    ev = eval_windows(cfg.ctx, section["eval_tokens"])
    n = section["calibration"]["sequences"]
    calib = {s: calibration_windows(cfg, n, s) for s in seeds}
    return State(cfg, model, ev, calib, held_out_loss(model, ev))


def held_out_loss(model: nn.Module, windows: torch.Tensor) -> float:
    """Mean next-byte cross-entropy (nats) over every target byte of ``windows``."""
    from sparsebench.suite.pillars.sae.train import lm_loss

    total, count = 0.0, 0
    with torch.no_grad():
        for chunk in windows.split(CHUNK):  # the SAE pillar's next-byte loss, chunk by chunk
            total += float(lm_loss(model, chunk)) * chunk[:, 1:].numel()
            count += chunk[:, 1:].numel()
    return total / count


def _linears(model: TinyLM) -> list[nn.Linear]:
    return [getattr(b, name) for b in model.blocks for name in LINEARS]


def prune_model(model: TinyLM, method: LMPruningMethod, target: Target, calib: torch.Tensor) -> int:
    """Prune every block's linear layers in place, block by block, the calibration inputs
    passed through the blocks already pruned; returns the calibration tokens used (0 for a
    method that reads none)."""
    if method.statistics == "none":
        with torch.no_grad():
            for block in model.blocks:
                for name in LINEARS:
                    _prune_layer(getattr(block, name), name, method, None, target)
        return 0
    with torch.no_grad():
        t = calib.shape[1]
        xs = [model.tok(c) + model.pos(torch.arange(t)) for c in calib.split(CHUNK)]
        for block in model.blocks:
            layers = {name: getattr(block, name) for name in LINEARS}
            stats = {
                name: _Stats(lay.in_features, method.statistics == "hessian")
                for name, lay in layers.items()
            }
            hooks = [lay.register_forward_hook(stats[name].hook) for name, lay in layers.items()]
            try:
                for x in xs:
                    block(x, None)
            finally:
                for h in hooks:
                    h.remove()
            for name, lay in layers.items():
                _prune_layer(lay, name, method, stats[name].result(), target)
            xs = [block(x, None) for x in xs]
    return int(calib.numel())


def _prune_layer(
    layer: nn.Linear, name: str, method: LMPruningMethod, stats: LayerStats | None, target: Target
) -> None:
    """Replace ``layer``'s weight by its pruned weight, a fused one part by part."""
    parts = layer.weight.detach().chunk(SPLIT.get(name, 1), dim=0)
    layer.weight.copy_(torch.cat([method.prune(w, stats, target) for w in parts]))


class _Stats:
    """Running sums of one layer's inputs (float64)."""

    def __init__(self, d: int, hessian: bool) -> None:
        self.tokens = 0
        self.sq = torch.zeros(d, dtype=torch.float64)
        self.h = torch.zeros(d, d, dtype=torch.float64) if hessian else None

    def hook(self, module: nn.Module, inputs: Sequence[torch.Tensor], output: Any) -> None:
        x = inputs[0].detach().reshape(-1, inputs[0].shape[-1]).to(torch.float64)
        self.tokens += x.shape[0]
        self.sq += (x * x).sum(0)
        if self.h is not None:
            self.h += x.T @ x

    def result(self) -> LayerStats:
        h = None if self.h is None else self.h * (2.0 / max(self.tokens, 1))
        return LayerStats(self.tokens, self.sq, h)


def _facts(model: TinyLM, state: State, loss: float) -> dict[str, Any]:
    zeros = sum(int((lay.weight == 0).sum()) for lay in _linears(model))
    pruned = sum(lay.weight.numel() for lay in _linears(model))
    head = model.unembed.weight.numel()
    return {
        "actual_sparsity": zeros / pruned,
        # dense layers count in full: the unembedding; attention's score products are left out
        "flops_rel_dense": (pruned - zeros + head) / (pruned + head),
        "eval_tokens": int(state.eval_windows[:, 1:].numel()),
        "test_loss": loss,
        "perplexity": math.exp(loss),
        "dense_perplexity": math.exp(state.dense_loss),
        "ppl_ratio": math.exp(loss - state.dense_loss),
    }


def run_dense(state: State) -> dict[str, Any]:
    return {
        **_facts(state.model, state, state.dense_loss),
        "calib_sequences": 0,
        "calib_tokens": 0,
        "prune_s": 0.0,
    }


def run_pruning(method: LMPruningMethod, target: Target, state: State, seed: int) -> dict[str, Any]:
    from sparsebench.suite.record import Diverged

    model = copy.deepcopy(state.model)
    calib = state.calibration[seed]
    t0 = time.perf_counter()
    tokens = prune_model(model, method, target, calib)
    prune_s = time.perf_counter() - t0
    loss = held_out_loss(model, state.eval_windows)
    if not math.isfinite(loss):
        raise Diverged(f"held-out loss is {loss} after pruning")
    return {
        **_facts(model, state, loss),
        "calib_sequences": calib.shape[0] if tokens else 0,
        "calib_tokens": tokens,
        "prune_s": prune_s,
    }
