"""Side-by-side wall-clock checks of two DST claims that a training board cannot show:

(a) channel-wise CHT's regrowth step against element-wise CHT's on the same LeNet-5 conv
    layers (the seed paper: channel-level regrowth "orders of magnitude" cheaper), and
(b) HASTE's group-shared fixed fan-in output layer against an unstructured mask of the same
    nnz (the masked RigL/ERK-style baseline) on our ``cpu`` kernel backend.

Run (about 10 s on one core once the cpu extension is built; its first build takes a minute
and is cached)::

    .venv/bin/python -m sparsebench.suite.pillars.classification.bench_dst
    .venv/bin/python -m sparsebench.suite.pillars.classification.bench_dst --json out.json

It prints Markdown tables and then the JSON of every number. (a) times exactly what
``CHT.evolve`` times as a layer's regrowth (``regrow``: CH3-L3 scoring and the top-k
selection, FLOPs bookkeeping excluded) on random masks at each sparsity, median over
``repeats``; Linear layers are left out since ``cht_channel`` evolves them element-wise
exactly as ``cht``. (b) times forward + backward (grad of input, weight values and bias) of the
output layer per backend and mask, rounds interleaved, median over ``repeats``. The whole-run
mask-update wall-clock of every DST job is in its record instead (``regrowth_s``,
``regrowth_updates``; see ``table.py``).
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from typing import Any

import torch
from torch import nn

LENET5_INPUT = (1, 28, 28)  # mnist5k
WIDE1K_OUTPUT = (100, 1000)  # LeNet-300-100's output layer on wide1k: (in, out)


def _ctx(model: nn.Module, input_shape: tuple[int, ...], seed: int):
    from sparsebench.suite.pillars.classification.flops import TrainFlopsCounter, layer_flops

    from .lit import RunContext

    return RunContext(
        total_steps=100,
        steps_per_epoch=10,
        epochs=10,
        batch_size=64,
        seed=seed,
        generator=torch.Generator().manual_seed(seed),
        flops=TrainFlopsCounter(layer_flops(model, input_shape)),
        train_data=None,
    )


@torch.no_grad()
def cht_regrowth(
    sparsities: tuple[float, ...] = (0.9, 0.95, 0.98),
    repeats: int = 7,
    input_shape: tuple[int, ...] = LENET5_INPUT,
    seed: int = 0,
) -> list[dict[str, Any]]:
    """Median wall-clock (ms) of one regrowth step of ``cht`` (element-level graph) and
    ``cht_channel`` (channel graph) on each Conv2d layer of LeNet-5 at each sparsity.

    Each (layer, sparsity, method): a random mask at density ``1 - s`` (elements for ``cht``,
    whole kernels for ``cht_channel``, as their ``init_masks``), the weights of a fresh
    LeNet-5 on it, the method's own removal, then ``repeats`` timed calls of its ``regrow``
    after one untimed call. Returns one row per (layer, sparsity) with both medians and their
    ratio ``element_ms / channel_ms``."""
    from sparsebench.methods.dst.cht import CHT
    from sparsebench.methods.dst.cht_channel import CHTChannel, expand_kernels
    from sparsebench.suite.models import build_model
    from sparsebench.suite.pillars.classification.masks import n_keep, top_mask

    torch.manual_seed(seed)
    model = build_model("lenet5", input_shape, 10)
    convs = {n: m for n, m in model.named_modules() if isinstance(m, nn.Conv2d)}
    rows = []
    for s in sparsities:
        d = 1.0 - s
        for name, conv in convs.items():
            w = conv.weight.detach().clone()
            gen = torch.Generator().manual_seed(seed)
            row: dict[str, Any] = {"layer": name, "shape": list(w.shape), "sparsity": s}
            for label, cls in (("element", CHT), ("channel", CHTChannel)):
                method = cls(cls.Params(), s, _ctx(model, input_shape, seed))
                if label == "element":
                    mask = top_mask(torch.rand(w.shape, generator=gen), n_keep(w.numel(), d))
                else:
                    k = n_keep(w.shape[0] * w.shape[1], d)
                    km = top_mask(torch.rand(w.shape[:2], generator=gen), k)
                    mask = expand_kernels(km, w.shape)
                weight = w * mask
                kept = method.remove(name, weight, mask)
                times = []
                for r in range(repeats + 1):
                    t0 = time.perf_counter()
                    method.regrow(name, weight, mask, kept)
                    dt = (time.perf_counter() - t0) * 1e3
                    method._pending = []  # the queued FLOPs: not needed here
                    if r:
                        times.append(dt)
                graph = mask.flatten(2).any(2) if label == "channel" else mask.flatten(1)
                row[f"{label}_graph"] = list(graph.shape)
                row[f"{label}_links"] = int(graph.sum())
                row[f"{label}_ms"] = statistics.median(times)
            row["ratio"] = row["element_ms"] / row["channel_ms"]
            rows.append(row)
    return rows


def haste_kernel(
    batches: tuple[int, ...] = (64, 256),
    density: float = 0.1,
    group_size: int = 16,
    shape: tuple[int, int] = WIDE1K_OUTPUT,
    repeats: int = 100,
    warmup: int = 10,
    backend: str = "cpu",
    seed: int = 0,
) -> list[dict[str, Any]]:
    """Median microseconds of forward + backward of the output layer ``Linear(in, out)``
    (``shape = (in, out)``) at ``density``: dense, dense x mask (unstructured random mask),
    and on ``backend`` with HASTE's group-shared mask (fan-in ``round(density * in)`` per
    group of ``group_size`` outputs, as :class:`~sparsebench.methods.dst.haste.HASTE`) and
    with an unstructured random mask of the same nnz. One row per batch size, with the ratio
    ``haste_us / masked_us`` (below 1: HASTE faster). Rounds are interleaved so that machine
    load hits every variant alike."""
    from sparsebench.kernels import SparseLinear, get_backend
    from sparsebench.methods.dst.haste import HASTE, _row_topk
    from sparsebench.suite.pillars.classification.masks import top_mask

    from ..kernels.job import MaskedLinear

    get_backend(backend)  # unavailable: BackendUnavailableError with the reason
    n_in, n_out = shape
    gen = torch.Generator().manual_seed(seed)
    dense = nn.Linear(n_in, n_out)
    fan_in = max(1, min(n_in, round(density * n_in)))
    n_groups = -(-n_out // group_size)
    cols = _row_topk(torch.rand((n_groups, n_in), generator=gen), fan_in)
    haste_mask = HASTE.group_mask(cols, n_out, group_size)
    nnz = int(haste_mask.sum())
    random_mask = top_mask(torch.rand((n_out, n_in), generator=gen), nnz)
    modules = {
        "dense": dense,
        "dense_mask": MaskedLinear(dense, random_mask),
        "haste": SparseLinear.from_dense(dense, haste_mask, backend=backend),
        "masked": SparseLinear.from_dense(dense, random_mask, backend=backend),
    }
    rows = []
    for batch in batches:
        x = torch.randn(batch, n_in, generator=gen).requires_grad_(True)
        grad_y = torch.randn(batch, n_out, generator=gen)
        times: dict[str, list[float]] = {k: [] for k in modules}
        for r in range(warmup + repeats):
            for name, module in modules.items():
                params = [p for p in module.parameters() if p.requires_grad]
                t0 = time.perf_counter()
                y = module(x)
                torch.autograd.grad(y, [x, *params], grad_y)
                dt = (time.perf_counter() - t0) * 1e6
                if r >= warmup:
                    times[name].append(dt)
        med = {k: statistics.median(v) for k, v in times.items()}
        rows.append(
            {
                "batch": batch,
                "shape": [n_out, n_in],
                "density": nnz / (n_out * n_in),
                "nnz": nnz,
                "fan_in": fan_in,
                "group_size": group_size,
                "backend": backend,
                **{f"{k}_us": v for k, v in med.items()},
                "ratio": med["haste"] / med["masked"],
            }
        )
    return rows


def run(
    sparsities: tuple[float, ...] = (0.9, 0.95, 0.98),
    regrowth_repeats: int = 7,
    batches: tuple[int, ...] = (64, 256),
    kernel_repeats: int = 100,
    threads: int = 1,
    backend: str = "cpu",
    input_shape: tuple[int, ...] = LENET5_INPUT,
    output_shape: tuple[int, int] = WIDE1K_OUTPUT,
    seed: int = 0,
) -> dict[str, Any]:
    """Both measurements on ``threads`` torch threads; returns ``{"setting", "cht_regrowth",
    "haste_kernel"}`` (lists of rows, see :func:`cht_regrowth` and :func:`haste_kernel`)."""
    before = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        cht = cht_regrowth(sparsities, regrowth_repeats, input_shape, seed)
        haste = haste_kernel(
            batches, shape=output_shape, repeats=kernel_repeats, backend=backend, seed=seed
        )
    finally:
        torch.set_num_threads(before)
    setting = {
        "threads": threads,
        "torch_version": torch.__version__,
        "regrowth_repeats": regrowth_repeats,
        "kernel_repeats": kernel_repeats,
    }
    return {"setting": setting, "cht_regrowth": cht, "haste_kernel": haste}


def markdown(result: dict[str, Any]) -> str:
    """The two Markdown tables of a :func:`run` result."""
    lines = [
        "Regrowth step of one conv layer (CH3-L3 scoring + top-k selection), median ms:",
        "",
        "| layer | sparsity | element graph (links) | cht ms | channel graph (links) "
        "| cht_channel ms | element / channel |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in result["cht_regrowth"]:
        eg, cg = r["element_graph"], r["channel_graph"]
        lines.append(
            f"| {r['layer']} | {r['sparsity']:g} | {eg[0]} x {eg[1]} ({r['element_links']}) "
            f"| {r['element_ms']:.3f} | {cg[0]} x {cg[1]} ({r['channel_links']}) "
            f"| {r['channel_ms']:.3f} | {r['ratio']:.1f}x |"
        )
    lines += [
        "",
        "Output layer forward + backward, median µs:",
        "",
        "| layer | density | batch | dense | dense x mask | backend | HASTE mask "
        "| unstructured mask | HASTE / unstructured |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for r in result["haste_kernel"]:
        o, i = r["shape"]
        lines.append(
            f"| Linear({i}, {o}), G={r['group_size']}, fan-in {r['fan_in']} "
            f"| {r['density']:.3g} | {r['batch']} | {r['dense_us']:.0f} "
            f"| {r['dense_mask_us']:.0f} | {r['backend']} | {r['haste_us']:.0f} "
            f"| {r['masked_us']:.0f} | {r['ratio']:.2f} |"
        )
    s = result["setting"]
    lines += ["", f"({s['threads']} thread(s), torch {s['torch_version']})"]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--regrowth-repeats", type=int, default=7)
    p.add_argument("--kernel-repeats", type=int, default=100)
    p.add_argument("--backend", default="cpu", help="kernel backend for (b) (default: cpu)")
    p.add_argument("--json", help="also write the JSON result to this file")
    a = p.parse_args(argv)
    result = run(
        regrowth_repeats=a.regrowth_repeats,
        kernel_repeats=a.kernel_repeats,
        threads=a.threads,
        backend=a.backend,
    )
    print(markdown(result))
    print()
    text = json.dumps(result, indent=1)
    print(text)
    if a.json:
        with open(a.json, "w") as f:
            f.write(text + "\n")


if __name__ == "__main__":
    main()
