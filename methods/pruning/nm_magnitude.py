"""One-shot N:M magnitude pruning with fine-tuning."""

from __future__ import annotations

from dataclasses import dataclass

from sparsebench.methods.pruning.base import MaskMethod
from sparsebench.methods.pruning.magnitude import MagnitudeOneShot
from sparsebench.suite.pillars.classification.nm import nm_eligible, nm_mask, parse_nm
from sparsebench.suite.registry import register

#: Least share of the prunable weights an N:M pattern must reach (ours): the layers whose size
#: is not a multiple of M stay dense, and a pattern that leaves most weights dense would be
#: filed at a sparsity the network is far from.
MIN_NM_COVERAGE = 0.5


def check_nm_layers(m: int, layers: dict) -> None:
    """Refuse a model whose layers that split into groups of ``m`` hold less than
    :data:`MIN_NM_COVERAGE` of its prunable weights."""
    if _coverage(m, layers) < MIN_NM_COVERAGE:
        dense = {k: v for k, v in layers.items() if not nm_eligible(tuple(v.weight.shape), m)}
        shapes = ", ".join(f"{k} {tuple(v.weight.shape)}" for k, v in dense.items())
        fits = [c for c in (4, 8, 2, 16) if _coverage(c, layers) >= MIN_NM_COVERAGE]
        hint = f"; M = {', '.join(map(str, fits))} fit this model" if fits else ""
        raise ValueError(
            f"pattern with M = {m} leaves most of this model dense: a layer whose size is not "
            f"a multiple of M stays dense ({shapes}), more than {1 - MIN_NM_COVERAGE:.0%} of "
            f"the prunable weights (MIN_NM_COVERAGE, methods/pruning/nm_magnitude.py){hint}"
        )


def _coverage(m: int, layers: dict) -> float:
    """Share of the prunable weights in layers that split into groups of ``m``."""
    total = sum(v.weight.numel() for v in layers.values())
    cut = sum(v.weight.numel() for v in layers.values() if nm_eligible(tuple(v.weight.shape), m))
    return cut / total if total else 1.0


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
class NMMagnitude(NMPatternMethod, MagnitudeOneShot):
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

    def prune(self, store) -> None:
        """One-shot magnitude's step (its schedule and budget checks), N:M masks of |w|."""
        for name in store.layers:
            store.set_mask(name, nm_mask(store.weight(name).detach().abs(), *self.nm))
