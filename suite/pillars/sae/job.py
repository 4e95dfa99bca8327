"""One cell of the SAE pillar: (source, width, architecture setting, seed) -> a trained SAE ->
its metrics on the source's held-out tokens. Cells of one (source, seed) share a process and
the activations, made once (:func:`.sources.load`)."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

import torch

from sparsebench.methods.sae import metrics
from sparsebench.methods.sae.training import TrainConfig, train_sae
from sparsebench.suite.record import Diverged

from .sources import Activations

RECOVERY_THRESHOLD = 0.9  # matched |cos| that counts a true feature as recovered
PROBE_K = (1, 2, 5)  # latents a sparse probe reads (SAEBench)
PROBE_SEED = 0  # the held-out halves of the probes


def evaluate(sae, acts: Activations, batch: int = 4096) -> dict[str, Any]:
    """Metrics of a trained SAE on the held-out tokens (methods/sae/metrics.py)."""
    rec = metrics.ReconstructionStats()
    firing = metrics.FiringStats(sae.width)
    l0_sum, xs, xhs, zs = 0.0, [], [], []
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
            if acts.codes is not None:
                zs.append(z)
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
        "pair_recovery": None,
        "pair_recovery_any": None,
    }
    if acts.dictionary is not None:
        out["mcc"] = metrics.mcc(sae.W_dec, acts.dictionary)
        out["recovery_rate"] = metrics.recovery_rate(sae.W_dec, acts.dictionary, RECOVERY_THRESHOLD)
    if acts.codes is not None and acts.n_pairs:
        # a pair's latent is matched at the recovery rate's |cos| threshold
        pair = (sae.W_dec, acts.dictionary, torch.cat(zs), acts.codes, acts.n_pairs)
        out["pair_recovery"] = metrics.pair_recovery(*pair, threshold=RECOVERY_THRESHOLD)
        out["pair_recovery_any"] = metrics.pair_recovery_any(*pair, threshold=RECOVERY_THRESHOLD)
    if acts.model is not None:
        out.update(splice_metrics(sae, acts))
    if acts.probe_labels is not None:
        out.update(probe_metrics(sae, acts))
    return out


def splice_metrics(sae, acts: Activations) -> dict[str, float]:
    """Loss recovered and its KL form: the SAE's reconstruction of the hookpoint activation
    (in the model's units: x̂ / c of the scaled input c·a) spliced into the model's forward
    pass on the held-out tokens, against the clean pass and zero-ablation of the hookpoint
    (methods/sae/metrics.py: loss_recovered, kl_recovered)."""
    c = acts.scale

    def splice(a: torch.Tensor) -> torch.Tensor:
        flat = a.reshape(-1, a.shape[-1]) * c
        return (sae.decode(sae.encode(flat)) / c).reshape(a.shape)

    ce_sae, kl_sae = acts.spliced(splice)
    ref = acts.reference
    return {
        "ce_clean": ref["ce_clean"],
        "ce_zero": ref["ce_zero"],
        "ce_sae": ce_sae,
        "kl_sae": kl_sae,
        "loss_recovered": metrics.loss_recovered(ref["ce_clean"], ce_sae, ref["ce_zero"]),
        "kl_recovered": metrics.kl_recovered(kl_sae, ref["kl_zero"]),
    }


def probe_metrics(sae, acts: Activations) -> dict[str, float | None]:
    """Sparse probing (methods/sae/metrics.py: sparse_probe_accuracy) on the held-out tokens:
    a fixed random half of the held-out groups (LM: whole context windows, so no probe is
    tested on the neighbours of its training bytes; image: examples) trains each task's probe,
    the other half tests it; the mean over the source's tasks (those with both classes in both
    halves) of the balanced accuracy, per k."""
    with torch.no_grad():
        z = torch.cat([sae.encode(x) for x in acts.eval.split(4096)])
    train = probe_split(acts)
    y = acts.probe_labels.bool()
    out: dict[str, float | None] = {}
    for k in PROBE_K:
        accs = []
        for t in range(y.shape[1]):
            ytr, yte = y[train, t], y[~train, t]
            if ytr.all() or not ytr.any() or yte.all() or not yte.any():
                continue
            accs.append(metrics.sparse_probe_accuracy(z[train], ytr, z[~train], yte, k))
        out[f"probe_acc_k{k}"] = sum(accs) / len(accs) if accs else None
    return out


def probe_split(acts: Activations) -> torch.Tensor:
    """(n_eval,) bool: the held-out tokens that train the probes (the same for every cell)."""
    n = acts.eval.shape[0]
    size = acts.eval_inputs.shape[1] - 1 if acts.kind == "lm" else 1  # tokens per group
    groups = torch.arange(n) // size
    n_groups = int(groups[-1]) + 1
    perm = torch.randperm(n_groups, generator=torch.Generator().manual_seed(PROBE_SEED))
    return torch.isin(groups, perm[: n_groups // 2])


def train_l0(sae, x: torch.Tensor, batch: int = 4096) -> float:
    """Inference L0 (eval mode) on the training tokens x: where a threshold was fixed on them
    (BatchTopK), the check that the SAE really runs at its nominal k."""
    with torch.no_grad():
        active = sum(float((sae.encode(c) != 0).sum()) for c in x.split(batch))
    return active / max(1, x.shape[0])


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
        b_dec_init=train["b_dec_init"],
    )
    try:
        res = train_sae(sae, acts.train, cfg, seed=seed)
    except FloatingPointError as e:  # a non-finite loss: status "diverged"
        raise Diverged(str(e)) from None
    out = evaluate(res.sae, acts)
    out.update(
        d_in=d,
        l0_train=train_l0(res.sae, acts.train),
        dead_fraction=res.dead_fraction,
        train_tokens=res.tokens,
        train_flops=res.train_flops,
        train_s=res.train_s,
        input_scale=acts.scale,
        final_parts_json=json.dumps(res.parts, sort_keys=True),
    )
    return out
