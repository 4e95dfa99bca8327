"""One-shot N:M magnitude pruning with fine-tuning."""

from __future__ import annotations

from dataclasses import dataclass

from sparsebench.methods.pruning.base import MaskMethod
from sparsebench.methods.pruning.magnitude import refuse_single_epoch
from sparsebench.suite.pillars.classification.nm import nm_eligible, nm_mask
from sparsebench.suite.registry import register


def parse_nm(pattern: str) -> tuple[int, int]:
    """(N, M) of an ``"N:M"`` pattern; ValueError unless 0 < N < M (2:4 and 4:8 in the
    papers; 1:4 and 2:8 in Zhou et al.'s tables)."""
    n, sep, m = str(pattern).partition(":")
    if not (sep and n.isdigit() and m.isdigit() and 0 < int(n) < int(m)):
        raise ValueError(f"pattern must be 'N:M' with 0 < N < M (e.g. '2:4'), got {pattern!r}")
    return int(n), int(m)


def check_nm_layers(m: int, layers: dict) -> None:
    """Refuse a model none of whose prunable layers splits into groups of ``m``."""
    if not any(nm_eligible(tuple(layer.weight.shape), m) for layer in layers.values()):
        shapes = ", ".join(f"{k} {tuple(v.weight.shape)}" for k, v in layers.items())
        raise ValueError(f"no prunable layer's size is a multiple of m={m} ({shapes})")


class NMPatternMethod(MaskMethod):
    """What the N:M methods share: the pattern's sparsity (their cells run at 1 - N/M only),
    the record's ``pattern`` and the models they can prune. Their ``Params`` have
    ``pattern: "N:M"``."""

    @classmethod
    def fixed_sparsity(cls, params) -> float:
        n, m = parse_nm(params.pattern)
        return 1.0 - n / m

    @classmethod
    def pattern(cls, params) -> str:
        return "{}:{}".format(*parse_nm(params.pattern))

    @classmethod
    def final_allocation(cls, params) -> str:
        return "uniform"  # every layer that can be cut into groups of M at N/M

    @classmethod
    def check_model(cls, params, layers: dict) -> None:
        check_nm_layers(parse_nm(params.pattern)[1], layers)

    @property
    def nm(self) -> tuple[int, int]:
        return parse_nm(self.params.pattern)


@register("nm_magnitude", family="pruning")
class NMMagnitude(NMPatternMethod):
    """Train dense, prune once to N:M by weight magnitude (the N largest |w| of every M
    consecutive weights, input channel fastest), fine-tune with the mask fixed: NVIDIA's
    recipe for 2:4 sparse tensor cores (Mishra et al. 2021, Sec. 3: train dense, prune 2:4
    by magnitude, retrain with the same schedule) and the one-shot baseline Zhou et al. 2021
    compare SR-STE with.

    The run's budget is split as in one-shot magnitude pruning (``dense_fraction`` = 0.5 of
    the epochs dense, then the mask; the learning-rate schedule runs on over the whole budget,
    ours: the suite's one-shot pruning budget, where NVIDIA repeat the whole schedule for the
    retraining). The sparsity is the pattern's, 1 - N/M, whatever the spec's list: the cells
    of this method run at that sparsity only. Layers whose size is not a multiple of M stay
    dense (ours, see ``suite/pillars/classification/nm.py``).

    Training FLOPs: ``3 f_D`` per example before pruning, ``3 f_S`` after.

    Source: Mishra et al. 2021, "Accelerating Sparse Deep Neural Networks", arXiv:2104.08378,
    Sec. 3 (2:4 magnitude pruning of a trained network, then retraining); N:M groups as in Zhou
    et al. 2021, "Learning N:M Fine-grained Structured Sparse Neural Networks From Scratch",
    ICLR, Sec. 3.
    """

    @dataclass
    class Params:
        pattern: str = "2:4"
        dense_fraction: float = 0.5

        def validate(self) -> None:
            parse_nm(self.pattern)
            if not 0.0 < self.dense_fraction < 1.0:
                raise ValueError(f"dense_fraction must be in (0, 1), got {self.dense_fraction}")

    @classmethod
    def check_budget(cls, params, total_steps: int, steps_per_epoch: int) -> None:
        refuse_single_epoch(cls.method_name, total_steps, steps_per_epoch)

    @property
    def prune_epoch(self) -> int:
        return max(1, min(self.ctx.epochs - 1, round(self.params.dense_fraction * self.ctx.epochs)))

    def on_train_epoch_start(self, trainer, pl_module) -> None:
        if trainer.current_epoch == self.prune_epoch:
            store = pl_module.masks
            for name in store.layers:
                w = store.weight(name).detach()
                store.set_mask(name, nm_mask(w.abs(), *self.nm))
