"""Channel-wise CHT for CNNs: kernel-level topology evolved by CH3-L3 on the channel graph."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import torch
from torch import nn

from sparsebench.methods.dst.cht import CHT, ch3_l3_scores, top_k_random_ties
from sparsebench.suite.pillars.classification.masks import layer_densities, n_keep, top_mask
from sparsebench.suite.registry import register


def kernel_norms(weight: torch.Tensor, norm: str = "l1") -> torch.Tensor:
    """Per-kernel magnitude of a Conv2d weight ``(out, in, kh, kw)``: the L1 or L2 norm over
    the ``kh * kw`` taps. Returns ``(out, in)``."""
    w = weight.detach().flatten(2)
    return w.abs().sum(2) if norm == "l1" else w.pow(2).sum(2).sqrt()


def kernel_mask(mask: torch.Tensor) -> torch.Tensor:
    """``(out, in)`` bool: which kernels of a kernel-granular ``(out, in, kh, kw)`` mask are on."""
    return mask.flatten(2).any(2)


def expand_kernels(kmask: torch.Tensor, shape: torch.Size) -> torch.Tensor:
    """Element mask of ``shape`` ``(out, in, kh, kw)`` from a kernel mask ``(out, in)``."""
    return kmask[:, :, None, None].expand(shape).clone()


def modulation_weights(norms: torch.Tensor, active: torch.Tensor) -> torch.Tensor:
    """Our contextual modulation of the channel graph's links: each active kernel's magnitude
    divided by the mean magnitude of the active kernels, to the power 1/3, so that a path's
    three links multiply to the geometric mean of their normalised magnitudes (1 on average).
    Returns ``(out, in)`` float, 0 off ``active``."""
    mean = norms[active].mean() if bool(active.any()) else norms.new_tensor(1.0)
    if float(mean) <= 0.0:
        return active.to(norms.dtype)
    return torch.where(active, (norms / mean).clamp_min(0.0).pow(1.0 / 3.0), 0.0)


@register("cht_channel", family="dst")
class CHTChannel(CHT):
    """Channel-wise Cannistraci-Hebb Training for CNNs (after the seed paper's channel-level
    CHT: "each kernel-channel a node, with its contextual modulation"; the rest is ours).

    Conv2d layers have a kernel-level topology: kernel (o, i), all ``kh * kw`` taps of output
    channel o reading input channel i, is wholly active or not. The layer's graph is bipartite
    between its ``in_channels`` and ``out_channels`` nodes with the active kernels as links.
    A conv layer at density d keeps ``round(d * out * in)`` kernels (``n_keep``), i.e.
    ``n_kernels * kh * kw`` weights: its element density is exact to the kernel granularity.
    At each update (the CHT schedule: every ``update_interval`` epochs up to ``end_fraction``
    of the run):

    1. removal of the fraction ``zeta_t`` of the active kernels with the smallest magnitude
       (CHT's schedule: ``zeta`` = 0.3 cosine-decayed, or constant with
       ``zeta_schedule="constant"``), the kernel's L1 norm over its taps (``kernel_norm="l1"``;
       ``"l2"`` for the Euclidean norm; our choice of norm) ranked over the layer's kernels, as
       CHT ranks ``|w|`` of a layer's links (``removal`` applies to Linear layers only: a kernel
       has no sign);
    2. regrowth of as many kernels by the top CH3-L3 scores on the channel graph after removal
       (:func:`~sparsebench.methods.dst.cht.ch3_l3_scores`), ties broken at random with the
       run generator; new kernels start at zero with zero optimizer state, as CHT's links;
    3. "contextual modulation" (``modulation="magnitude"``, our definition): each length-3
       path u - o - i - v of the channel graph counts with the geometric mean of the
       normalised magnitudes of its three kernels, ``(m(u,o) m(i,o) m(i,v))^(1/3)`` with
       ``m = kernel norm / mean norm of the layer's kept kernels``, times the CH3 factor
       ``1 / sqrt((1 + d_e(o)) (1 + d_e(i)))`` whose external degrees stay topological; a path
       of strong kernels thus predicts a link more than one of weak kernels, and with all
       magnitudes equal the score is plain CH3-L3 (``modulation="none"``).

    Linear layers of the same model evolve element-wise, exactly as ``cht`` (including the
    removal of inactive neurons along Linear chains), so the method runs on LeNet-5 end to
    end. Initialisation, SWI, early stop (on the kernel overlap for conv layers) and the
    defaults are CHT's.

    The regrowth wall-clock (scoring and selection) of every update is in ``regrowth_seconds``
    (per layer: ``regrowth_seconds_by_layer``), the total in ``regrowth_seconds_total``, to
    compare with ``cht``'s element-level regrowth on the same conv layer: the channel graph of
    a conv layer has ``kh * kw`` times fewer input nodes and links.

    Training FLOPs: ``3 f_S`` per example at the kernel-level densities, plus the CH3-L3
    scoring of each update (:func:`~sparsebench.methods.dst.cht.ch3_l3_flops`, with the path
    weights' extra multiplies for conv layers); kernel norms and removal, O(nnz), are not
    counted.

    Source: Zhang, Zhao, Wu, Muscoloni, Cannistraci 2024, "Epitopological learning and
    Cannistraci-Hebb network shape intelligence brain-inspired theory for ultra-sparse
    advantage in deep learning", ICLR (CHT, CH3-L3); channel-level CHT for CNNs after the
    seed paper (2026), with our kernel-magnitude removal and modulation.
    """

    @dataclass
    class Params(CHT.Params):
        kernel_norm: Literal["l1", "l2"] = "l1"
        modulation: Literal["magnitude", "none"] = "magnitude"

    @classmethod
    def check_model(cls, params, layers: dict[str, nn.Module]) -> None:
        if not any(isinstance(m, nn.Conv2d) for m in layers.values()):
            raise ValueError("cht_channel needs a CNN (Conv2d layers); use cht for MLPs")

    @staticmethod
    def is_conv(weight: torch.Tensor) -> bool:
        return weight.dim() == 4

    @torch.no_grad()
    def init_masks(self, trainer, pl_module) -> None:
        """Random masks at the layer densities: element-wise for Linear layers,
        ``n_keep(out * in, d)`` whole kernels for Conv2d layers."""
        store = pl_module.masks
        densities = layer_densities(
            store.shapes, self.density, self.params.distribution, self.params.dense_first_layer
        )
        gen = self.ctx.generator
        for name, d in densities.items():
            w = store.weight(name)
            if d >= 1.0:
                store.set_mask(name, None)
            elif self.is_conv(w):
                k = n_keep(w.shape[0] * w.shape[1], d)
                km = top_mask(torch.rand(w.shape[:2], generator=gen), k)
                store.set_mask(name, expand_kernels(km, w.shape).to(w.device))
            else:
                scores = torch.rand(w.shape, generator=gen)
                store.set_mask(name, top_mask(scores, n_keep(w.numel(), d)).to(w.device))

    def remove(self, name: str, weight: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        if not self.is_conv(weight):
            return super().remove(name, weight, mask)
        km = kernel_mask(mask)
        norms = kernel_norms(weight, self.params.kernel_norm)
        k = int(self.zeta_now * int(km.sum()))
        drop = top_mask(torch.where(km, -norms, -torch.inf), k)
        return expand_kernels(km & ~drop, weight.shape)

    def regrow(
        self, name: str, weight: torch.Tensor, mask: torch.Tensor, kept: torch.Tensor
    ) -> torch.Tensor:
        if not self.is_conv(weight):
            return super().regrow(name, weight, mask, kept)
        k_old, k_kept = kernel_mask(mask), kernel_mask(kept)
        n_grow = int(k_old.sum()) - int(k_kept.sum())
        weighted = self.params.modulation == "magnitude"
        weights = None
        if weighted:
            weights = modulation_weights(kernel_norms(weight, self.params.kernel_norm), k_kept)
        scores = ch3_l3_scores(k_kept, weights)
        self.count_later(k_kept, weighted=weighted)
        grow = top_k_random_ties(scores, ~k_kept, n_grow, self.ctx.generator)
        return expand_kernels(grow, weight.shape)
