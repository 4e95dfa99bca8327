"""Merging: our registered methods (``merge(MergeInputs, Params)``, found through the registry,
so this times whatever code is installed) against FusionBench's algorithm classes
(``TaskArithmeticAlgorithm``, ``DareTaskArithmetic``, ``TiesMergingAlgorithm``, their ``run``
on a pool of modules), on the same θ0 and experts: 8 experts, λ = 0.3.

Inputs: θ0 is a freshly initialised trunk of the merging pillar (``build_trunk``), each expert
θ0 + 0.01·N(0, 1) noise (train-free: merging costs the same on trained weights). Two trunks:
the default benchmark's MLP (``mlp: {width: 256, depth: 2}``) and a ViT-sized one (D = 384,
6 blocks, 6 heads, FFN ratio 4: 10.7M parameters).

FusionBench works on ``nn.Module`` s: each state dict is loaded into a trunk module before the
timed call (untimed, fresh modules each repeat: its TA and DARE change the pretrained and
fine-tuned modules in place). Its ``run`` ends by loading the merged state into the module;
ours returns the state dict.
"""

from __future__ import annotations

import contextlib
import io
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

from .harness import (
    NOT_INSTALLED,
    Row,
    Variant,
    extra_peak_mb,
    interleave,
    peak_in_child,
    peer_label,
    peer_version,
)

N_EXPERTS, LAM, NOISE = 8, 0.3, 0.01
DARE_P = 0.5  # drop rate, both
TIES_K = 0.2  # fraction kept by TIES' trim (FusionBench: threshold 20, in percent)
METHODS = ("task_arithmetic", "dare_ta", "ties")
PEER = "fusion-bench"

# Ours vs FusionBench 0.2.33, by definition (what the agreement check allows for)
DIFFERENCES = {
    "task_arithmetic": "none (θ0 + λ Σ τ_t; sums in another order: float rounding only)",
    "dare_ta": "drop masks from other random streams (ours: a CPU generator per (seed, task), "
    "keeps u ≥ p; FusionBench: the global generator, keeps u > p); so the merged weights are "
    "compared in distribution: ‖θ − θ_TA‖ / ‖θ_TA − θ0‖ of each",
    "ties": "trim keeps round(k·d) entries (ours) vs int(k·d) + 1 (FusionBench, as the "
    "official code): checked with ours at k = (int(k·d) + 1) / d; disjoint mean asked of "
    "FusionBench (merge_func 'mean'; its configs default to 'sum')",
}


@dataclass(frozen=True)
class Trunk:
    name: str
    kind: str
    width: int
    depth: int
    heads: int = 4
    mlp_ratio: int = 2

    def config(self):
        from sparsebench.suite.pillars.merging.config import TrunkConfig

        return TrunkConfig(self.kind, self.width, self.depth, self.heads, self.mlp_ratio)


TRUNKS = (Trunk("MLP trunk", "mlp", 256, 2), Trunk("ViT-sized trunk", "vit", 384, 6, 6, 4))
QUICK_TRUNKS = (Trunk("MLP trunk", "mlp", 32, 1), Trunk("ViT-sized trunk", "vit", 16, 1, 2, 2))


def trunk_of(name: str, quick: bool) -> Trunk:
    return next(t for t in (QUICK_TRUNKS if quick else TRUNKS) if t.name == name)


def make_states(trunk: Trunk, seed: int = 0) -> tuple[dict, list[dict]]:
    """θ0 (a fresh trunk) and N_EXPERTS experts θ0 + NOISE·N(0, 1), reproducible."""
    from sparsebench.suite.pillars.merging.models import build_trunk

    torch.manual_seed(seed)
    base = {k: v.detach().clone() for k, v in build_trunk(trunk.config()).state_dict().items()}
    g = torch.Generator().manual_seed(seed + 1)
    experts = [
        {k: v + NOISE * torch.randn(v.shape, generator=g) for k, v in base.items()}
        for _ in range(N_EXPERTS)
    ]
    return base, experts


def params_of(method: str, k: float = TIES_K) -> dict[str, float]:
    return {
        "task_arithmetic": {"lam": LAM},
        "dare_ta": {"p": DARE_P, "lam": LAM},
        "ties": {"k": k, "lam": LAM},
    }[method]


def ours(method: str, base: dict, experts: list[dict], k: float = TIES_K) -> Callable[[], dict]:
    """Our registered ``method``'s merge as a call returning the merged state dict."""
    from sparsebench.methods.merging.base import MergeInputs
    from sparsebench.suite.registry import get_method

    info = get_method(method, ["merging"])
    params = info.params_cls(**params_of(method, k))
    inputs = MergeInputs(base, experts)
    return lambda: info.cls().merge(inputs, params).state


def peer_pool(trunk: Trunk, base: dict, experts: list[dict]) -> dict[str, torch.nn.Module]:
    """FusionBench's model pool: θ0 as ``_pretrained_`` and one module per expert."""
    from sparsebench.suite.pillars.merging.models import build_trunk

    def module(state: dict) -> torch.nn.Module:
        m = build_trunk(trunk.config())
        m.load_state_dict(state)
        return m

    return {"_pretrained_": module(base), **{f"task{i}": module(e) for i, e in enumerate(experts)}}


def peer(method: str) -> Callable[[dict[str, torch.nn.Module]], dict]:
    """FusionBench's algorithm for ``method``: a call on a fresh pool returning the merged
    state dict (its progress prints swallowed, for both sides alike see ``quiet``)."""
    from fusion_bench.method import (
        DareTaskArithmetic,
        TaskArithmeticAlgorithm,
        TiesMergingAlgorithm,
    )
    from fusion_bench.modelpool import BaseModelPool

    if method == "task_arithmetic":
        algo = TaskArithmeticAlgorithm(scaling_factor=LAM)
        return lambda pool: algo.run(pool).state_dict()
    if method == "dare_ta":
        algo = DareTaskArithmetic(
            scaling_factor=LAM, sparsity_ratio=DARE_P, only_on_linear_weights=False, rescale=True
        )
        return lambda pool: algo.run(BaseModelPool(pool)).state_dict()
    algo = TiesMergingAlgorithm(
        scaling_factor=LAM, threshold=100 * TIES_K, remove_keys=[], merge_func="mean"
    )
    return lambda pool: algo.run(pool).state_dict()


def quiet(fn: Callable[..., Any]) -> Callable[..., Any]:
    """``fn`` with stdout swallowed (FusionBench prints per layer); applied to both sides."""

    def run(*args: Any) -> Any:
        with contextlib.redirect_stdout(io.StringIO()):
            return fn(*args)

    return run


def _flat(state: dict) -> torch.Tensor:
    return torch.cat([state[k].detach().flatten() for k in sorted(state)])


def agreement(
    method: str, base: dict, experts: list[dict], o: dict, p: dict
) -> tuple[str, dict[str, float]]:
    """How ours and the peer's merged weights agree, within the listed differences."""
    if method == "task_arithmetic":
        diff = float((_flat(o) - _flat(p)).abs().max())
        return f"max |Δ| {diff:.1e}", {"max_abs_diff": diff}
    if method == "ties":  # ours at the peer's trim count: the same entries kept
        d = _flat(base).numel()
        exact = ours(method, base, experts, k=(int(d * TIES_K) + 1) / d)()
        diff = float((_flat(exact) - _flat(p)).abs().max())
        return f"max |Δ| {diff:.1e} at the peer's trim count", {"max_abs_diff": diff}
    ta = _flat(ours("task_arithmetic", base, experts)())
    scale = float((ta - _flat(base)).norm())
    dist = {s: float((_flat(w) - ta).norm()) / scale for s, w in (("ours", o), ("peer", p))}
    return (
        f"‖θ − θ_TA‖/‖θ_TA − θ0‖ {dist['ours']:.3f} vs {dist['peer']:.3f}",
        {"dist_to_ta_ours": dist["ours"], "dist_to_ta_peer": dist["peer"]},
    )


def child_peak(trunk: str, method: str, side: str, quick: bool) -> float:
    """Extra peak MiB of one merge in this (fresh) process: inputs built and a tiny merge run
    first (imports, lazy initialisation), then the high-water mark over the measured merge."""
    torch.set_num_threads(1)
    t = trunk_of(trunk, quick)
    tiny = QUICK_TRUNKS[0]
    with contextlib.redirect_stdout(io.StringIO()):
        _merge_call(tiny, method, side)()
        return extra_peak_mb(_merge_call(t, method, side))


def _merge_call(trunk: Trunk, method: str, side: str) -> Callable[[], dict]:
    """One merge of ``side`` (ours | peer) on fresh inputs, as a call."""
    base, experts = make_states(trunk)
    if side == "ours":
        return ours(method, base, experts)
    pool, algo = peer_pool(trunk, base, experts), peer(method)
    return lambda: algo(pool)


def compare(repeats: int, quick: bool, memory: bool) -> list[Row]:
    """One row per (trunk, method): ours vs FusionBench, interleaved."""
    rows = []
    for trunk in QUICK_TRUNKS if quick else TRUNKS:
        base, experts = make_states(trunk)
        for method in METHODS:
            print(f"  merging: {method} on the {trunk.name}", flush=True)
            rows.append(_compare_one(trunk, method, base, experts, repeats, quick, memory))
    return rows


def _compare_one(
    trunk: Trunk,
    method: str,
    base: dict,
    experts: list[dict],
    repeats: int,
    quick: bool,
    memory: bool,
) -> Row:
    version = peer_version(PEER)
    n = sum(v.numel() for v in base.values())
    row = Row(
        "merging",
        f"{method}, {trunk.name} ({n:,} params, {N_EXPERTS} experts)",
        f"{method} (registry) merge()",
        peer_label(PEER),
        notes=DIFFERENCES[method],
    )
    run_ours = quiet(ours(method, base, experts))
    variants = [Variant("ours", lambda _: run_ours())]
    if version:
        variants.append(
            Variant("peer", quiet(peer(method)), lambda: peer_pool(trunk, base, experts))
        )
    else:
        row.status = NOT_INSTALLED
    times = interleave(variants, repeats, warmup=0 if quick else 1)
    row.set_times(times["ours"], times.get("peer"))
    if version:
        o, p = times["ours"].result, times["peer"].result
        row.quality, row.extra = agreement(method, base, experts, o, p)
    if memory:
        args = {"trunk": trunk.name, "method": method, "quick": quick}
        mod = "benchmarks.peers.merging"
        row.ours_peak_mb = peak_in_child(mod, "child_peak", side="ours", **args)
        if version:
            row.peer_peak_mb = peak_in_child(mod, "child_peak", side="peer", **args)
    return row
