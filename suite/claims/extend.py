"""More seeds for the claims that the seeds run so far leave undecided, and only for them.

:func:`extend_seeds` judges the claims on a benchmark's records, takes every inconclusive
claim whose observed effect and spread say how many seeds would decide it
(:attr:`.judge.Verdict.seeds_needed`), adds ``n`` new seeds to the seeded pillars those claims
address, and lists the records of exactly the cells the claims read at the new seeds: a spec
to run (the benchmark's own, its seeds extended, so the records land beside the old ones) and
the Snakemake targets that run those cells and nothing else of it (a job that writes several
records, such as one seed's merges, writes them all).

Looking again after more seeds is a second test of the same claim: judged twice at 0.95, a
claim that holds on neither look alone can still hold by chance on one of them more often
than 5 % of the time. ``sparsebench claims --looks K`` judges at 1 − (1 − level)/K
(Bonferroni over K looks), which keeps the chance of a false verdict over all K looks at or
below 1 − level; the pages show that level on every verdict.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import yaml

from sparsebench.suite import paths
from sparsebench.suite.workflow import is_done

from .judge import _SEED_PART, Verdict, _select, judge_all, load_tables
from .parse import Claim, ClaimError

MAX_NEW_SEEDS = 20  # ours: a cap on one extension, so a typo cannot queue thousands of jobs


@dataclass
class Extension:
    """What :func:`extend_seeds` found: the claims it extends for, the spec it wrote, the
    new seeds per pillar and the records to make (Snakemake targets)."""

    claims: list[Verdict]
    spec: Path | None
    seeds: dict[str, list[int]]
    targets: list[Path]
    skipped: list[str]


def looks_level(level: float, looks: int) -> float:
    """The level at which to judge each of ``looks`` looks at a claim so that all of them
    together keep a false verdict at or below 1 − ``level`` (Bonferroni)."""
    if looks < 1:
        raise ValueError(f"looks must be at least 1, got {looks}")
    return 1 - (1 - level) / looks


def extend_seeds(
    spec_path: str | Path, bench_dir: str | Path, claims: list[Claim], n: int, out: Path
) -> Extension:
    """Judge ``claims`` on ``bench_dir``'s records and, for the undecided ones that say how
    many seeds they need, write ``out``: the spec with ``n`` new seeds in each seeded pillar
    they address; return the records of the cells they read at those seeds."""
    from sparsebench.suite.pillar import get_pillar
    from sparsebench.suite.spec import load, validate

    if not 1 <= n <= MAX_NEW_SEEDS:
        raise ClaimError(f"--extend-seeds: {n} new seeds is not allowed; 1 to {MAX_NEW_SEEDS}")
    spec = load(spec_path)
    verdicts = judge_all(claims, bench_dir)
    wanted = [v for v in verdicts if v.verdict == "inconclusive" and v.seeds_needed is not None]
    skipped, by_pillar = [], {}
    for v in wanted:
        pillar = v.claim.test["pillar"]
        section = spec.data.get(pillar)
        replicate = get_pillar(pillar).replicate
        if replicate != "seed":
            skipped.append(
                f"{v.claim.id}: pillar {pillar!r} repeats by {replicate}; raise its "
                f"{pillar}.{replicate}s in {spec.source} (about {v.seeds_needed})"
            )
            continue
        if not section or "seeds" not in section:
            skipped.append(f"{v.claim.id}: pillar {pillar!r} has no seeds in {spec.source}")
            continue
        by_pillar.setdefault(pillar, []).append(v)
    data = {k: v for k, v in spec.data.items()}
    seeds: dict[str, list[int]] = {}
    for pillar in by_pillar:
        old = [int(s) for s in data[pillar]["seeds"]]
        seeds[pillar] = list(range(max(old) + 1, max(old) + 1 + n))
        data[pillar] = {**data[pillar], "seeds": old + seeds[pillar]}
    extended = validate(data, str(out))
    targets: list[Path] = []
    tables = load_tables(bench_dir, set(by_pillar))
    for pillar, vs in by_pillar.items():
        # a cell at a new seed is one the claims read if its id, seed aside, is one of theirs
        read: set[str] = set()
        for v in vs:
            for cell in v.cells:
                rows = _select(tables[pillar], cell.selector)
                read |= {_SEED_PART.sub("", i) for i in rows["cell_id"].to_list()}
        folder = paths.bench_dir(extended.benchmark) / pillar
        # a record already done (an earlier extension, another claim's) is no target: the
        # workflow has no rule for done records, and it is read as it is
        targets += [
            paths.record_in(folder, c.id)
            for c in extended.cells(pillar)
            if c.seed in seeds[pillar]
            and _SEED_PART.sub("", c.id) in read
            and not is_done(paths.record_in(folder, c.id), c)
        ]
    written = None
    if targets:
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(yaml.safe_dump(data, sort_keys=False, allow_unicode=True))
        written = out
    return Extension([v for vs in by_pillar.values() for v in vs], written, seeds, targets, skipped)
