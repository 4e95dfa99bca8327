"""One cell of the SAE pillar: (source, width, architecture setting, seed) -> a trained SAE ->
its metrics on the source's held-out tokens. Cells of one (source, seed) share a process and
the activations, made once (:func:`load_source`)."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import torch

from sparsebench.methods.sae import metrics
from sparsebench.methods.sae.module import TrainConfig, input_scale, train_sae
from sparsebench.methods.sae.synthetic import SyntheticConfig, sample, true_dictionary
from sparsebench.suite.record import Diverged

SOURCE_KINDS = ("synthetic",)
RECOVERY_THRESHOLD = 0.9  # matched |cos| that counts a true feature as recovered


@dataclass
class Activations:
    """One source's activations, scaled so that E‖x‖₂ = √d on the training tokens.

    Attributes:
        train, eval: (n, d) float32.
        scale: the input scale applied.
        dictionary: the true dictionary (n_features, d) for synthetic sources, else None.
    """

    kind: str
    train: torch.Tensor
    eval: torch.Tensor
    scale: float
    dictionary: torch.Tensor | None = None


def synthetic_config(source: Mapping[str, Any]) -> SyntheticConfig:
    keys = SyntheticConfig.__dataclass_fields__
    return SyntheticConfig(**{k: v for k, v in source.items() if k in keys})


def load_source(source: Mapping[str, Any], seed: int) -> Activations:
    """Make the activations of one source for one seed. Raises ValueError on a bad source."""
    kind = source["kind"]
    if kind not in SOURCE_KINDS:
        raise ValueError(f"unknown activation source kind {kind!r}; known: {SOURCE_KINDS}")
    cfg = synthetic_config(source)
    d = true_dictionary(cfg, seed)
    x, _ = sample(cfg, source["train_tokens"] + source["eval_tokens"], seed, d)
    train, held = x[: source["train_tokens"]], x[source["train_tokens"] :]
    c = input_scale(train)
    return Activations(kind, train * c, held * c, c, d)


def evaluate(sae, acts: Activations, batch: int = 4096) -> dict[str, Any]:
    """Metrics of a trained SAE on the held-out tokens (methods/sae/metrics.py)."""
    rec = metrics.ReconstructionStats()
    firing = metrics.FiringStats(sae.width)
    l0_sum, xs, xhs = 0.0, [], []
    with torch.no_grad():
        for i in range(0, acts.eval.shape[0], batch):
            x = acts.eval[i : i + batch]
            z = sae.encode(x)
            x_hat = sae.decode(z)
            rec.update(x, x_hat)
            firing.update(z)
            l0_sum += float((z != 0).sum())
            xs.append(x)
            xhs.append(x_hat)
    out = {
        "mse": rec.mse,
        "explained_variance": rec.explained_variance,
        "fvu": rec.fvu,
        "l0": l0_sum / max(1, rec.n),
        "dense_fraction_1pct": firing.dense_fraction(0.01),
        "dense_fraction_10pct": firing.dense_fraction(0.10),
        "shrinkage": metrics.shrinkage(torch.cat(xs), torch.cat(xhs)),
        "bipolar_fraction": firing.bipolar_fraction(),
        "mcc": None,
        "recovery_rate": None,
    }
    if acts.dictionary is not None:
        out["mcc"] = metrics.mcc(sae.W_dec, acts.dictionary)
        out["recovery_rate"] = metrics.recovery_rate(sae.W_dec, acts.dictionary, RECOVERY_THRESHOLD)
    return out


def run_sae(info, params, acts: Activations, width: int, train: Mapping[str, Any], seed: int):
    """Train architecture ``info`` with ``params`` at ``width`` on ``acts``; the record's
    metric columns."""
    d = acts.train.shape[1]
    sae = info.cls(d, width, params, seed=seed)
    cfg = TrainConfig(
        steps=train["steps"],
        batch_size=train["batch_size"],
        lr=train["lr"],
        dead_window=train["dead_window"],
    )
    try:
        res = train_sae(sae, acts.train, cfg, seed=seed)
    except FloatingPointError as e:  # a non-finite loss: status "diverged"
        raise Diverged(str(e)) from None
    out = evaluate(res.sae, acts)
    out.update(
        d_in=d,
        dead_fraction=res.dead_fraction,
        train_tokens=res.tokens,
        train_flops=res.train_flops,
        train_s=res.train_s,
        input_scale=acts.scale,
        final_parts_json=json.dumps(res.parts, sort_keys=True),
    )
    return out
