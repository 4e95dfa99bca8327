"""SAEs: our training entry point as the SAE pillar runs it (``train_sae`` on the registered
architecture, Lightning loop and all) against SAELens' ``SAETrainer`` and dictionary_learning's
trainers (their ``update(step, x)``, the loop ``trainSAE`` runs, without its wandb and
checkpointing), on the same cached activations: the default benchmark's ``lm_resid1`` (the
suite's byte-level LM, residual stream after block 1, d = 64, 65,536 training tokens; built
into results/artefacts/ on first use, as ``sparsebench run`` would) scaled as the pillar scales
them, in the same batches in the same order (the pillar's seeded ``batch_loader``), with the
same width, steps, batch size, lr (1e-3, the suite's) and schedule (constant, linear decay to 0
over the last 20 %), Adam, gradient clipping at 1, one thread. FVU and L0 on the held-out
tokens, by the suite's metrics for all three.
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from .harness import NOT_INSTALLED, Row, Variant, interleave, peer_label, peer_version

LR, SEED, DEAD_WINDOW = 1e-3, 0, 50_000  # the default benchmark's dead window (tokens)
PEERS = ("sae-lens", "dictionary-learning")
DEFAULT_SOURCE = "lm_resid1"
QUICK_SOURCE = {
    "kind": "synthetic",
    "n_features": 64,
    "d": 16,
    "train_tokens": 4096,
    "eval_tokens": 1024,
}


@dataclass(frozen=True)
class Case:
    """One SAE size and architecture. ``ours`` holds our Params; ``sae_lens`` and ``dl`` the
    peers' closest settings (coefficients are not on one scale across libraries: L0 is
    reported beside FVU)."""

    name: str
    arch: str  # topk | relu_l1 | jumprelu
    width: int
    steps: int
    batch: int
    ours: dict[str, Any] = field(default_factory=dict)
    sae_lens: dict[str, Any] = field(default_factory=dict)
    dl: dict[str, Any] = field(default_factory=dict)


CASES = (
    Case(
        "TopK k=16, width 128, batch 256, 500 steps (the suite's size)",
        "topk",
        128,
        500,
        256,
        {"k": 16},
        {"k": 16},
        {"k": 16},
    ),
    Case(
        "TopK k=32, width 2048, batch 1024, 200 steps",
        "topk",
        2048,
        200,
        1024,
        {"k": 32},
        {"k": 32},
        {"k": 32},
    ),
    Case(
        "ReLU+L1 λ=3, width 128, batch 256, 500 steps",
        "relu_l1",
        128,
        500,
        256,
        {"l1_coeff": 3.0},
        {"l1_coefficient": 3.0},
        {"l1_penalty": 3.0},
    ),
    Case(
        "JumpReLU λ=0.5, width 128, batch 256, 500 steps",
        "jumprelu",
        128,
        500,
        256,
        {"sparsity_coeff": 0.5},
        {"l0_coefficient": 0.5, "jumprelu_init_threshold": 0.05},
        {"sparsity_penalty": 0.5, "bandwidth": 0.05, "target_l0": 16.0},
    ),
)

# Ours vs each peer, by definition (besides the coefficients' scales)
DIFFERENCES = {
    ("topk", "sae-lens"): "AuxK: SAELens' dead window in steps (here the same tokens), its "
    "coefficient 1 (ours α = 1/32), no normalisation by the residual's variance; decoder not "
    "unit-norm (acts rescaled by its norms instead) and initialised at norm 0.1; b_dec from 0 "
    "(ours: geometric median)",
    ("topk", "dictionary-learning"): "AuxK: dead after 10M tokens (fixed; ours 50k, so it "
    "never fires here), k_aux = d/2 as ours; unit-norm decoder, geometric-median b_dec (of the "
    "first batch; ours of 16k tokens) as ours",
    ("relu_l1", "sae-lens"): "decoder initialised at norm 0.1 and L1 weighted by decoder norms "
    "as ours; L1 warm-up 5 % of the steps as ours; b_dec from 0 (ours: geometric median)",
    ("relu_l1", "dictionary-learning"): "StandardTrainerAprilUpdate (L1 weighted by decoder "
    "norms, as ours); sparsity warm-up 5 % as ours; b_dec from 0",
    ("jumprelu", "sae-lens"): "Adam β1 0.9 (ours 0, the paper's); step L0 loss and its 10 % "
    "warm-up as ours; b_dec from 0 (ours: geometric median)",
    ("jumprelu", "dictionary-learning"): "sparsity loss λ·(L0/target − 1)² (target 16), not "
    "λ·L0; Adam β1 0 as ours; b_dec from 0",
}


def quick_case(c: Case) -> Case:
    return Case(
        c.name.split(",")[0] + " (quick: width 32, 20 steps)",
        c.arch,
        32,
        20,
        64,
        c.ours,
        c.sae_lens,
        c.dl,
    )


# ------------------------------------------------------------------------------ activations
def activations(quick: bool):
    """The pillar's ``Activations`` (scaled): quick, a small synthetic source; else the
    default benchmark's LM source, its model and activations built first when missing."""
    from sparsebench.suite.pillars.sae import sources

    if quick:
        return sources.load(QUICK_SOURCE, SEED)
    import yaml

    import sparsebench.suite

    spec_path = Path(sparsebench.suite.__file__).parent / "benchmarks" / "default.yaml"
    raw = yaml.safe_load(spec_path.read_text())["sae"]["sources"][DEFAULT_SOURCE]
    src = sources.resolve(raw)
    if not all(Path(f).is_file() for f in sources.inputs(src)):
        _build(spec_path)
    return sources.load(src, SEED)


def _build(spec_path: Path) -> None:
    """The SAE artefacts of the default spec (the LM, then its activations), as
    ``sparsebench build`` makes them."""
    from sparsebench.suite.job import build_artefact
    from sparsebench.suite.pillar import get_pillar
    from sparsebench.suite.spec import load

    spec, pillar = load(spec_path), get_pillar("sae")
    print("  building the default benchmark's LM and its activations (once)", flush=True)
    for artefact in pillar.artefacts(spec):
        build_artefact(spec, pillar, artefact, 1)


def batches(x: torch.Tensor, batch: int) -> Iterator[torch.Tensor]:
    """The batches ``train_sae`` draws (the same seeded loader), epoch after epoch."""
    from torch.utils.data import TensorDataset

    from sparsebench.suite.data import batch_loader

    loader = batch_loader(TensorDataset(x), min(batch, len(x)), torch.Generator().manual_seed(SEED))
    while True:
        for (b,) in loader:
            yield b


def decay_start(steps: int) -> int:
    """The step where the suite's linear decay to 0 starts (methods/sae/training.py)."""
    from sparsebench.methods.sae.training import LR_DECAY_FRAC

    return math.floor((1 - LR_DECAY_FRAC) * steps)


# ------------------------------------------------------------------------------ the trainers
Encoder = Callable[[torch.Tensor], tuple[torch.Tensor, torch.Tensor]]  # x -> (x̂, z)


def train_ours(case: Case, x: torch.Tensor) -> Encoder:
    from sparsebench.methods.sae.training import TrainConfig, train_sae
    from sparsebench.suite.registry import get_method

    info = get_method(case.arch, ["sae"])
    sae = info.cls(x.shape[1], case.width, info.params_cls(**case.ours), seed=SEED)
    cfg = TrainConfig(steps=case.steps, batch_size=case.batch, lr=LR, dead_window=DEAD_WINDOW)
    sae = train_sae(sae, x, cfg, seed=SEED).sae

    def run(v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        z = sae.encode(v)
        return sae.decode(z), z

    return run


def train_sae_lens(case: Case, x: torch.Tensor) -> Encoder:
    import sae_lens
    from sae_lens.config import SAETrainerConfig
    from sae_lens.training.sae_trainer import SAETrainer

    name = {"topk": "TopK", "relu_l1": "Standard", "jumprelu": "JumpReLU"}[case.arch]
    cfg_cls = getattr(sae_lens, f"{name}TrainingSAEConfig")
    sae_cls = getattr(sae_lens, f"{name}TrainingSAE")
    warm = {
        "relu_l1": {"l1_warm_up_steps": round(0.05 * case.steps)},  # ours' warm-ups
        "jumprelu": {"l0_warm_up_steps": round(0.1 * case.steps)},
    }.get(case.arch, {})
    torch.manual_seed(SEED)
    # the activations are already scaled as the pillar scales them: no normalisation of its own
    sae = sae_cls(
        cfg_cls(
            d_in=x.shape[1], d_sae=case.width, normalize_activations="none", **warm, **case.sae_lens
        )
    )
    cfg = SAETrainerConfig(
        total_training_samples=case.steps * case.batch,
        train_batch_size_samples=case.batch,
        lr=LR,
        lr_end=LR,  # the constant schedule decays from lr itself (SAELens ignores the value)
        lr_decay_steps=case.steps - decay_start(case.steps),
        dead_feature_window=max(1, DEAD_WINDOW // case.batch),  # steps: the same tokens
    )
    trained = SAETrainer(cfg, sae, batches(x, case.batch)).fit()
    trained.eval()

    def run(v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        z = trained.encode(v)
        z = z.to_dense() if z.is_sparse else z
        return trained.decode(z), z

    return run


def train_dictionary_learning(case: Case, x: torch.Tensor) -> Encoder:
    from dictionary_learning import trainers

    common = {
        "steps": case.steps,
        "activation_dim": x.shape[1],
        "dict_size": case.width,
        "layer": 0,
        "lm_name": "sparsebench",
        "lr": LR,
        "warmup_steps": 0,
        "decay_start": decay_start(case.steps),
        "device": "cpu",
        "seed": SEED,
    }
    if case.arch == "topk":
        trainer = trainers.TopKTrainer(**common, **case.dl)
    elif case.arch == "relu_l1":
        from dictionary_learning.trainers.standard import StandardTrainerAprilUpdate

        warm = max(1, round(0.05 * case.steps))  # ours: l1_warmup_frac 0.05
        trainer = StandardTrainerAprilUpdate(**common, sparsity_warmup_steps=warm, **case.dl)
    else:
        common.pop("seed")  # its JumpReLU trainer seeds nothing itself
        torch.manual_seed(SEED)
        warm = max(1, round(0.1 * case.steps))  # ours: sparsity_warmup_frac 0.1
        trainer = trainers.JumpReluTrainer(**common, sparsity_warmup_steps=warm, **case.dl)
    for step, b in zip(range(case.steps), batches(x, case.batch)):
        trainer.update(step, b)
    ae = trainer.ae.eval()

    def run(v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return ae(v, output_features=True)

    return run


TRAINERS: dict[str, Callable[[Case, torch.Tensor], Encoder]] = {
    "ours": train_ours,
    "sae-lens": train_sae_lens,
    "dictionary-learning": train_dictionary_learning,
}


def fvu_l0(encode: Encoder, x: torch.Tensor, chunk: int = 4096) -> tuple[float, float]:
    """FVU and mean L0 of ``encode`` on the held-out tokens ``x`` (the suite's metrics)."""
    from sparsebench.methods.sae.metrics import ReconstructionStats

    stats, active = ReconstructionStats(), 0.0
    with torch.no_grad():
        for v in x.split(chunk):
            x_hat, z = encode(v)
            stats.update(v, x_hat)
            active += float((z != 0).sum())
    return stats.fvu, active / len(x)


# ------------------------------------------------------------------------------ the board rows
def compare(repeats: int, quick: bool) -> list[Row]:
    """One row per (case, peer); every installed trainer of a case runs in each repeat."""
    os.environ.setdefault("TQDM_DISABLE", "1")  # SAELens' progress bar
    acts = activations(quick)
    rows = []
    for case in map(quick_case, CASES) if quick else CASES:
        installed = [p for p in PEERS if peer_version(p)]
        print(f"  sae: {case.name} (ours, {', '.join(installed) or 'no peer'})", flush=True)
        variants = [
            Variant(v, lambda _, v=v, c=case: TRAINERS[v](c, acts.train))
            for v in ("ours", *installed)
        ]
        times = interleave(variants, repeats)
        fvu = {v.name: fvu_l0(times[v.name].result, acts.eval) for v in variants}
        for p in PEERS:
            row = Row(
                "sae",
                case.name,
                f"{case.arch} (registry) train_sae()",
                peer_label(p),
                notes=DIFFERENCES[(case.arch, p)],
            )
            row.set_times(times["ours"], times.get(p))
            row.extra = {"fvu_ours": fvu["ours"][0], "l0_ours": fvu["ours"][1]}
            if p in times:
                row.extra |= {"fvu_peer": fvu[p][0], "l0_peer": fvu[p][1]}
                row.quality = (
                    f"FVU {fvu['ours'][0]:.4f} vs {fvu[p][0]:.4f}; "
                    f"L0 {fvu['ours'][1]:.1f} vs {fvu[p][1]:.1f}"
                )
            else:
                row.status = NOT_INSTALLED
                row.quality = f"FVU {fvu['ours'][0]:.4f}; L0 {fvu['ours'][1]:.1f}"
            rows.append(row)
    return rows
