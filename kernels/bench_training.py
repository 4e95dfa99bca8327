"""Truly sparse training, measured: one training step of a wide MLP (``mlp3x4096``: three
4096-wide hidden layers, every Linear sparse at one uniform density) as dense ``nn.Linear``,
dense x mask (the suite's ``MaskStore``), ``execution: cpu`` (our kernels on the dense weight's
values), ``execution: sparse`` (values-only layers: static, and with SET's and RigL's topology
updates) and SparseProp's fixed-pattern layers (Nikdan et al. 2023, PyPI ``sparseprop``, where
it is installed), interleaved round by round in one process on the same batch.

Each step is split into phases (forward, backward, optimizer; topology for SET and RigL, whose
updates run every ΔT = 100 steps: the update's cost is reported, and its share of a step
averaged over ΔT). Peak memory is measured in a fresh process per variant: the peak resident
set over three training steps (one of them an update) minus the resident set before the model
was built (the one-time dense build of a values-only model before its conversion is not in
the peak; the memory it leaves behind is). A width sweep at fixed
nnz per hidden layer shows values-only steps staying flat while dense grows quadratically.

Run ``make bench-sparse-training`` (or ``python -m sparsebench.kernels.bench_training``;
``--quick`` for a smoke run). Writes ``results/sparse_training/bench.json`` and prints the
tables reported in docs/kernels.md. Random inputs: this times steps, it trains nothing (the
accuracy of values-only training is on the DST board, ``suite/benchmarks/dst_sparse.yaml``).
Ours, as the benchmark's setting: uniform density over all four layers; SET at Evci et al.'s
schedule (ΔT = 100, magnitude drop, growth at zero); the update fractions at their start
values (ζ = α = 0.3).
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from sparsebench.suite.memory import rss_mb

IN_FEATURES, CLASSES, INTERVAL, FRACTION = 784, 10, 100, 0.3
VARIANTS = ("dense", "dense_mask", "cpu", "sparse", "sparse_set", "sparse_rigl", "sparseprop")
PHASES = ("forward", "backward", "optimizer", "topology")


@dataclass(frozen=True)
class Setting:
    sparsity: float
    batch: int
    optimizer: str  # sgd (momentum 0.9) | adam
    width: int = 4096


def _commit() -> str:
    from sparsebench.suite.record import git_info

    sha, dirty = git_info()
    return sha + ("+dirty" if dirty else "")


def _sparseprop():
    try:
        import sparseprop.modules as sp  # noqa: PLC0415 - optional peer
    except ImportError:
        return None
    return sp


def _model(width: int, seed: int) -> nn.Module:
    from sparsebench.suite.models import WideMLP

    torch.manual_seed(seed)
    return WideMLP(IN_FEATURES, CLASSES, width)


def _optimizer(params, name: str) -> torch.optim.Optimizer:
    if name == "sgd":
        return torch.optim.SGD(params, lr=0.01, momentum=0.9)
    return torch.optim.Adam(params, lr=1e-3)


class Runner:
    """One variant's model, optimizer and step, timed by phase."""

    def __init__(self, variant: str, s: Setting, seed: int = 0):
        from sparsebench.suite.pillars.classification.execution import (
            to_values_only,
            use_backend,
        )
        from sparsebench.suite.pillars.classification.masks import MaskStore, uniform_densities

        self.variant, self.store = variant, None
        self.model = _model(s.width, seed)
        gen = torch.Generator().manual_seed(seed)
        if variant == "sparseprop":
            sp = _sparseprop()
            store = MaskStore(self.model)
            store.random_masks(uniform_densities(store.shapes, 1 - s.sparsity), gen)
            for name, layer in list(store.layers.items()):  # their pattern: the nonzeros
                setattr(self.model, name, sp.SparseLinear(layer.weight.detach().clone(),
                                                          bias=layer.bias))  # fmt: skip
            store.remove_hooks()
        elif variant != "dense":
            self.store = MaskStore(self.model)
            densities = uniform_densities(self.store.shapes, 1 - s.sparsity)
            self.store.random_masks(densities, gen)
            if variant == "cpu":
                use_backend(self.model, self.store, "cpu")
            elif variant.startswith("sparse"):
                to_values_only(self.store)
        self.opt = _optimizer(self.model.parameters(), s.optimizer)
        if self.store is not None:  # as in a job: re-masking, and state remapped on updates
            self.store.attach(self.opt)
        self.set = _set_method(gen) if variant == "sparse_set" else None

    def step(self, x: torch.Tensor, y: torch.Tensor, update: bool) -> dict[str, float]:
        """One training step (an update iteration of SET/RigL when ``update``): seconds by
        phase."""
        t: dict[str, float] = dict.fromkeys(PHASES, 0.0)
        rigl = update and self.variant == "sparse_rigl"
        operands: dict[str, tuple[torch.Tensor, torch.Tensor]] = {}
        if rigl:
            for name, layer in self.store.sparse.items():
                layer.backward_observer = _keep(operands, name)
        t0 = time.perf_counter()
        loss = F.cross_entropy(self.model(x), y)
        t1 = time.perf_counter()
        loss.backward()
        t2 = time.perf_counter()
        t["forward"], t["backward"] = t1 - t0, t2 - t1
        if rigl:  # RigL's update iteration replaces the optimizer step
            from sparsebench.methods.dst.rigl import RigL

            for name, layer in self.store.sparse.items():
                layer.backward_observer = None
                grad_y, xin = operands[name]
                RigL.update_values(layer, FRACTION, grad_y, xin,
                                   apply=_apply(self.store, name))  # fmt: skip
            self.opt.zero_grad(set_to_none=True)
            t["topology"] = time.perf_counter() - t2
            return t
        self.opt.step()
        self.opt.zero_grad(set_to_none=True)
        t3 = time.perf_counter()
        t["optimizer"] = t3 - t2
        if update and self.set is not None:
            for name, layer in self.store.sparse.items():
                self.set.evolve_values(layer, FRACTION, name, apply=_apply(self.store, name))
            t["topology"] = time.perf_counter() - t3
        return t


def _keep(operands, name):
    def keep(grad_y, x):
        operands[name] = (grad_y.detach(), x.detach())

    return keep


def _apply(store, name: str) -> Callable[..., torch.Tensor]:
    return lambda *a: store.set_pattern(name, *a)


def _set_method(gen: torch.Generator):
    from sparsebench.methods.dst.base import RunContext
    from sparsebench.methods.dst.set import SET
    from sparsebench.suite.pillars.classification.flops import TrainFlopsCounter

    params = SET.Params(update_interval=INTERVAL, drop_fraction_anneal="cosine",
                        regrowth_init="zero")  # fmt: skip
    ctx = RunContext(total_steps=10 * INTERVAL, steps_per_epoch=INTERVAL, epochs=10,
                     batch_size=0, seed=0, generator=gen, flops=TrainFlopsCounter({}),
                     train_data=None)  # fmt: skip
    return SET(params, 0.0, ctx)


def time_setting(s: Setting, variants: tuple[str, ...], rounds: int, warmup: int) -> dict:
    """Median seconds by phase of every variant, interleaved round by round; SET and RigL
    variants run their update in every round (timed as the update) besides a plain step."""
    gen = torch.Generator().manual_seed(1)
    x = torch.randn(s.batch, IN_FEATURES, generator=gen)
    y = torch.randint(CLASSES, (s.batch,), generator=gen)
    runners = {v: Runner(v, s) for v in variants}
    plain: dict[str, list[dict[str, float]]] = {v: [] for v in variants}
    upd: dict[str, list[dict[str, float]]] = {v: [] for v in variants}
    for r in range(warmup + rounds):
        for v, run in runners.items():
            p = run.step(x, y, update=False)
            u = run.step(x, y, update=True) if v in ("sparse_set", "sparse_rigl") else None
            if r >= warmup:
                plain[v].append(p)
                if u is not None:
                    upd[v].append(u)
    out = {}
    for v in variants:
        med = {ph: statistics.median(d[ph] for d in plain[v]) for ph in PHASES}
        row = {f"{ph}_ms": 1e3 * med[ph] for ph in PHASES[:3]}
        row["step_ms"] = 1e3 * statistics.median(sum(d.values()) for d in plain[v])
        if upd[v]:
            total = statistics.median(sum(d.values()) for d in upd[v])
            row["update_ms"] = 1e3 * statistics.median(d["topology"] for d in upd[v])
            row["update_iteration_ms"] = 1e3 * total
            # over ΔT steps: ΔT - 1 plain steps and one update iteration (RigL), or ΔT plain
            # steps and one update after the last (SET)
            extra = (
                total - row["step_ms"] / 1e3
                if v == "sparse_rigl"
                else total - (sum(med[ph] for ph in PHASES[:3]))
            )
            row["update_overhead"] = extra / (INTERVAL * row["step_ms"] / 1e3)
        out[v] = row
    return out


def peak_memory(s: Setting, variant: str) -> float | None:
    """Peak resident MB of a fresh process that builds ``variant`` and trains three steps,
    minus its resident set just before building it (None when it fails)."""
    code = (
        "import json, sys; from sparsebench.kernels.bench_training import _child_memory; "
        f"print(json.dumps(_child_memory({json.dumps(asdict(s))}, {variant!r})))"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    if proc.returncode != 0:
        print(f"  memory of {variant} failed: {proc.stderr.strip().splitlines()[-1:]}")
        return None
    return json.loads(proc.stdout.strip().splitlines()[-1])


def _child_memory(setting: dict[str, Any], variant: str) -> float:
    s = Setting(**setting)
    x = torch.randn(s.batch, IN_FEATURES)
    y = torch.randint(CLASSES, (s.batch,))
    # everything the variant imports, imported before the measurement starts
    import sparsebench.methods.dst.rigl  # noqa: F401
    import sparsebench.methods.dst.set  # noqa: F401
    import sparsebench.suite.pillars.classification.execution  # noqa: F401
    from sparsebench.kernels.backends import _cpu_build

    _cpu_build.load_extension()
    Runner("sparse", Setting(0.5, 2, s.optimizer, 8)).step(x[:2, :], y[:2], update=False)
    from sparsebench.suite.memory import peak_mb, reset_peak

    before = rss_mb()
    run = Runner(variant, s)
    # the peak of training, not of building the model (a values-only model is built dense
    # once, then converted): the peak restarts from the resident set after the build
    if not reset_peak():
        raise RuntimeError("cannot reset the peak resident memory here (/proc/self/clear_refs)")
    for i in range(3):
        run.step(x, y, update=i == 1)
    return peak_mb() - before


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", default="results/sparse_training")
    ap.add_argument("--quick", action="store_true", help="a small smoke run (width 512)")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--width", type=int, help="hidden width (default 4096; --quick: 512)")
    ap.add_argument("--no-memory", action="store_true", help="skip the peak-memory processes")
    args = ap.parse_args(argv)
    if args.threads < 1:
        ap.error(f"--threads must be >= 1, got {args.threads}")
    if args.width is not None and args.width < 16:
        ap.error(
            f"--width must be >= 16 (the width sweep runs at a quarter of it), got {args.width}"
        )
    out = Path(args.out)
    try:  # before a minute of timing, not after
        out.mkdir(parents=True, exist_ok=True)
        (out / ".write-test").write_text("")
        (out / ".write-test").unlink()
    except OSError as e:
        ap.error(f"--out {args.out}: cannot write there ({e.strerror or e})")
    torch.set_num_threads(args.threads)
    from sparsebench.kernels.backends import _cpu_build

    _cpu_build.load_extension()
    have_sp = _sparseprop() is not None
    variants = tuple(v for v in VARIANTS if v != "sparseprop" or have_sp)
    width = args.width or (512 if args.quick else 4096)
    rounds, warmup = (3, 1) if args.quick else (5, 1)
    settings = [
        Setting(sp, b, o, width)
        for sp in (0.9, 0.95, 0.99)
        for b in ((64,) if args.quick else (64, 256))
        for o in ("sgd", "adam")
    ]
    result: dict[str, Any] = {
        "commit": _commit(),  # sha, "+dirty" for uncommitted changes
        "date": time.strftime("%Y-%m-%d %H:%M:%S %Z"),
        "torch": torch.__version__,
        "threads": args.threads,
        "sparseprop": "installed" if have_sp else "not installed (make oracles installs it)",
        "steps": [],
        "memory": [],
        "width_sweep": [],
    }
    t_start = time.perf_counter()
    from sparsebench.suite.record import write_json_atomic

    for i, s in enumerate(settings, 1):
        print(f"[{i}/{len(settings)}] {s} ({time.perf_counter() - t_start:.0f} s)", flush=True)
        for v, row in time_setting(s, variants, rounds, warmup).items():
            result["steps"].append({**asdict(s), "variant": v, **row})
            print(f"    {v:12s} step {row['step_ms']:8.1f} ms", flush=True)
        write_json_atomic(out / "bench.json", result)  # what is measured so far
    for sp in () if args.no_memory else (0.9, 0.95, 0.99):
        s = Setting(sp, 64, "adam", width)
        print(f"memory {s} ({time.perf_counter() - t_start:.0f} s)", flush=True)
        for v in variants:
            result["memory"].append({**asdict(s), "variant": v, "peak_mb": peak_memory(s, v)})
    nnz_hidden = round(0.01 * width * width)  # a 4096-wide layer's at 99 %
    for w in (width // 4, width // 2, width, width * 2):
        s = Setting(1 - nnz_hidden / (w * w), 64, "sgd", w)
        print(f"width {w} ({time.perf_counter() - t_start:.0f} s)", flush=True)
        for v, row in time_setting(s, ("dense", "sparse"), max(3, rounds // 2), 1).items():
            result["width_sweep"].append({**asdict(s), "variant": v, **row})
    result["seconds"] = time.perf_counter() - t_start
    write_json_atomic(out / "bench.json", result)
    print(report(result))
    return 0


def report(result: dict[str, Any]) -> str:
    """The tables of docs/kernels.md from a bench.json."""
    lines = []
    steps = result["steps"]
    by = {(r["sparsity"], r["batch"], r["optimizer"], r["variant"]): r for r in steps}
    keys = sorted({(r["sparsity"], r["batch"], r["optimizer"]) for r in steps})
    variants = [v for v in VARIANTS if any(r["variant"] == v for r in steps)]
    lines.append("| sparsity | batch | optimizer | " + " | ".join(variants) +
                 " | sparse ÷ dense | sparse ÷ cpu | sparse ÷ sparseprop |")  # fmt: skip
    lines.append("|" + "---|" * (3 + len(variants) + 3))
    for k in keys:
        ms = {v: by[(*k, v)]["step_ms"] for v in variants}
        sp = ms["sparse"]
        peer = f"{ms['sparseprop'] / sp:.2f}×" if "sparseprop" in ms else "not installed"
        lines.append(
            f"| {k[0]:g} | {k[1]} | {k[2]} | "
            + " | ".join(f"{ms[v]:.1f}" for v in variants)
            + f" | {ms['dense'] / sp:.1f}× | {ms['cpu'] / sp:.1f}× | {peer} |"
        )
    lines.append("")
    lines.append("| sparsity | batch | optimizer | variant | forward | backward | optimizer "
                 "| update (ms) | update share over ΔT = 100 |")  # fmt: skip
    lines.append("|---|---|---|---|---|---|---|---|---|")
    for r in steps:
        if r["variant"] in ("dense", "cpu", "sparse_set", "sparse_rigl"):
            u = r.get("update_ms")
            lines.append(
                f"| {r['sparsity']:g} | {r['batch']} | {r['optimizer']} | {r['variant']} | "
                f"{r['forward_ms']:.1f} | {r['backward_ms']:.1f} | {r['optimizer_ms']:.1f} | "
                + (f"{u:.1f} | {100 * r['update_overhead']:.1f} % |" if u else "– | – |")
            )
    lines.append("")
    mem = result["memory"]
    if not mem:
        lines.append("(peak memory not measured: --no-memory)")
        lines.append("")
    mv = [v for v in VARIANTS if any(r["variant"] == v for r in mem)]
    if mem:
        lines.append("| sparsity (batch 64, Adam) | " + " | ".join(mv) + " | dense ÷ sparse |")
        lines.append("|" + "---|" * (len(mv) + 2))
    for spv in sorted({r["sparsity"] for r in mem}):
        m = {r["variant"]: r["peak_mb"] for r in mem if r["sparsity"] == spv}
        ratio = m["dense"] / m["sparse"] if m.get("dense") and m.get("sparse") else None
        lines.append(f"| {spv:g} | " + " | ".join(
            "failed" if m[v] is None else f"{m[v]:.0f} MB" for v in mv
        ) + (f" | {ratio:.1f}× |" if ratio else " | – |"))  # fmt: skip
    lines.append("")
    lines.append("| width | density | dense step (ms) | sparse step (ms) | dense ÷ sparse |")
    lines.append("|---|---|---|---|---|")
    sweep = result["width_sweep"]
    for w in sorted({r["width"] for r in sweep}):
        d = {r["variant"]: r for r in sweep if r["width"] == w}
        lines.append(
            f"| {w} | {1 - d['sparse']['sparsity']:.4f} | {d['dense']['step_ms']:.1f} | "
            f"{d['sparse']['step_ms']:.1f} | "
            f"{d['dense']['step_ms'] / d['sparse']['step_ms']:.1f}× |"
        )
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
