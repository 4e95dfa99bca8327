"""SparseProp: one training step of kernels/bench_training.py's wide MLP as our values-only
layers (``execution: sparse``) against SparseProp's ``SparseLinear`` (fixed pattern), built by
that benchmark's own ``Runner`` (nothing duplicated: ``make bench-sparse-training`` has the
full sweep, phases and memory) at one of its settings, here at one thread with CPU time."""

from __future__ import annotations

from .harness import NOT_INSTALLED, Row, Timing, Variant, interleave, peer_label, peer_version

PEER = "sparseprop"
STEPS = 5  # training steps per timed repeat (one step is tens of ms)
DIFFERENCES = (
    "SparseProp takes its pattern from the weight's nonzeros (ours from the mask); both fixed "
    "here (no topology update); same batch, same optimizer"
)


def compare(repeats: int, quick: bool) -> list[Row]:
    import torch

    from sparsebench.kernels.bench_training import CLASSES, IN_FEATURES, Runner, Setting

    s = Setting(0.95, 64, "adam", 256 if quick else 4096)
    row = Row(
        "sparseprop",
        f"training step, {s.width}-wide MLP (3 hidden layers), sparsity {s.sparsity:g}, "
        f"batch {s.batch}, Adam ({STEPS} steps per repeat)",
        "execution: sparse (values-only layers)",
        peer_label(PEER),
        notes=DIFFERENCES,
    )
    print(f"  sparseprop: {row.case}", flush=True)
    gen = torch.Generator().manual_seed(1)
    x = torch.randn(s.batch, IN_FEATURES, generator=gen)
    y = torch.randint(CLASSES, (s.batch,), generator=gen)
    names = ["sparse"] + (["sparseprop"] if peer_version(PEER) else [])
    runners = {n: Runner(n, s) for n in names}

    def steps(run: Runner):
        for _ in range(STEPS):
            run.step(x, y, update=False)

    variants = [Variant(n, lambda _, r=r: steps(r)) for n, r in runners.items()]
    times = interleave(variants, repeats, warmup=1)
    per_step = {
        n: Timing([c / STEPS for c in t.cpu], [w / STEPS for w in t.wall]) for n, t in times.items()
    }
    row.set_times(per_step["sparse"], per_step.get("sparseprop"))
    if "sparseprop" not in runners:
        row.status = NOT_INSTALLED
    return [row]
