"""Mutation testing of methods/<family> with mutmut, one family at a time (``make mutants``).

    python .ci/mutants.py run [FAMILY ...] [--max-children N] [--sample N]
    python .ci/mutants.py rerun [FAMILY ...]        # survivors again, after new tests
    python .ci/mutants.py score [FAMILY ...]        # the per-family table of the last runs
    python .ci/mutants.py survivors FAMILY [--diff] # the surviving mutants' names
    python .ci/mutants.py report [FAMILY ...]       # every survivor, grouped, as Markdown

Why a staging tree: mutmut copies the code it mutates into ``mutants/`` and names each mutant
after the file's path (``methods/sae/topk.py`` -> ``methods.sae.topk``), and its trampoline
only switches a mutant on inside the module whose ``__name__`` is that name. Our code folders
install under other names (setup.py's ``package-dir``: ``methods/`` is
``sparsebench.methods``), so run from the repo root no mutant would ever be active. Each family
runs instead in ``build/mutation/<family>/``, a tree of links where the path *is* the import
name: ``sparsebench/__init__.py`` and ``sparsebench/methods`` (-> ``methods/``) and ``tests``.
mutmut copies ``sparsebench/methods/<family>`` there into ``mutants/`` and puts ``mutants/``
first on sys.path, so ``sparsebench``, ``sparsebench.methods`` and the family import from the
mutated copy under their real names; every other package (``sparsebench.suite``, the other
families) is not in the copy and falls through to the editable install's finder, unmutated.

Settings: ``[tool.mutmut]`` of pyproject.toml (mutmut's own keys, shared by every family) and
``[tool.mutmut.families.<family>]`` (``tests``: the fast unit tests, ``exclude``: files left
out, with the reason in a comment there); the staging pyproject.toml joins them.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import subprocess
import sys
import time
import tomllib
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
STAGE = ROOT / "build" / "mutation"
MUTMUT = Path(sys.executable).parent / "mutmut"
# mutmut's exit-code statuses (mutmut.stats.status_by_exit_code), folded into our columns
KILLED = {1, 3, 36, 37, -24, 24, 152, 255}  # a test failed, errored or timed out
SURVIVED = {0}


def settings() -> tuple[dict, dict[str, dict]]:
    """(mutmut's shared keys, the families) from pyproject.toml."""
    cfg = dict(tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["mutmut"])
    return cfg, cfg.pop("families")


def _toml(value) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return repr(value)
    if isinstance(value, str):
        return json.dumps(value)
    if isinstance(value, list):
        return "[" + ", ".join(_toml(v) for v in value) + "]"
    raise TypeError(f"no TOML for {value!r}")


def stage(family: str) -> Path:
    """build/mutation/<family>/: the link tree and its pyproject.toml (mutmut + pytest keys)."""
    shared, families = settings()
    fam = families[family]
    d = STAGE / family
    (d / "sparsebench").mkdir(parents=True, exist_ok=True)
    for link, target in (
        ("sparsebench/__init__.py", ROOT / "sparsebench" / "__init__.py"),
        ("sparsebench/methods", ROOT / "methods"),
        ("tests", ROOT / "tests"),
    ):
        if not (d / link).is_symlink():
            (d / link).symlink_to(target)
    src = f"sparsebench/methods/{family}"
    mutmut = {
        **shared,
        "source_paths": [src],
        "do_not_mutate": [f"{src}/{name}" for name in fam.get("exclude", [])],
        "also_copy": ["sparsebench/__init__.py", "sparsebench/methods/__init__.py"],
        "pytest_add_cli_args_test_selection": list(fam["tests"]),
    }
    pytest_ini = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["pytest"]
    lines = ["[tool.mutmut]", *(f"{k} = {_toml(v)}" for k, v in mutmut.items()), ""]
    lines += ["[tool.pytest.ini_options]"]
    lines += [f"{k} = {_toml(v)}" for k, v in pytest_ini["ini_options"].items()]
    (d / "pyproject.toml").write_text("\n".join(lines) + "\n")
    return d


def _env() -> dict[str, str]:
    # one thread per worker: mutmut forks its workers, and a forked OpenMP pool can hang
    return {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}


def statuses(family: str) -> dict[str, int | None]:
    """Every mutant of the family's last run -> mutmut's exit code (None: not run)."""
    out: dict[str, int | None] = {}
    for meta in sorted((STAGE / family / "mutants").rglob("*.py.meta")):
        out.update(json.loads(meta.read_text())["exit_code_by_key"])
    return out


def sampled(family: str, names: list[str], sample: int | None) -> list[str]:
    """The seeded random sample of ``sample`` mutant names a sampled family is scored on
    (all of them without a sample)."""
    if not sample:
        return names
    return sorted(random.Random(0).sample(sorted(names), min(sample, len(names))))


def run(family: str, max_children: int, sample: int | None) -> float:
    """One family's mutmut run; seconds it took. ``sample``: run and score only a seeded
    random sample of that many mutants (a family with too many mutants for one sitting)."""
    d = stage(family)
    start = time.time()
    names: list[str] = []
    if sample:
        if not statuses(family):  # generate the mutants: a filter matching none stops after it
            subprocess.run([str(MUTMUT), "run", "generate-only-matches-no-mutant"], cwd=d,
                           env=_env(), check=False, capture_output=True)  # fmt: skip
        codes = statuses(family)
        names = [n for n in sampled(family, list(codes), sample) if codes[n] is None]
        if not names:
            return time.time() - start
    cmd = [str(MUTMUT), "run", "--max-children", str(max_children), *names]
    subprocess.run(cmd, cwd=d, env=_env(), check=False)
    return time.time() - start


def score(family: str) -> dict[str, int]:
    codes = statuses(family)
    codes = {n: codes[n] for n in sampled(family, list(codes), settings()[1][family].get("sample"))}
    c = Counter(
        "killed" if v in KILLED else "survived" if v in SURVIVED else "no tests" if v in (5, 33)
        else "not run" if v is None else "other"
        for v in codes.values()
    )  # fmt: skip
    return {"total": len(codes), **c}


def table(families: list[str]) -> str:
    rows = ["| family | killed | survived | no tests | not run | score |", "|---" * 6 + "|"]
    for f in families:
        s = score(f)
        tried = s.get("killed", 0) + s.get("survived", 0) + s.get("no tests", 0)
        pct = f"{100 * s.get('killed', 0) / tried:.1f} %" if tried else "-"
        rows.append(
            f"| {f} | {s.get('killed', 0)} | {s.get('survived', 0)} | {s.get('no tests', 0)} "
            f"| {s.get('not run', 0)} | {pct} |"
        )
    return "\n".join(rows)


# Survivor kinds recognised from the mutated line alone, each with why it survives; the rest
# are "unreviewed" (each one read: docs/testing.md says which are gaps and which equivalent).
KINDS = (
    ("device", r"\.to\(None\)|device=None", "device placement: the tests run on the CPU, "
     "where moving to None or to the module's device is the same"),
    ("dtype", r"dtype=None", "dtype argument: the default dtype is the tensor's own here"),
    ("text", r'"XX|XX"|\'XX|XX\'', "message or key text changed where no test reads it"),
    ("axis", r"\(\+1\)|\[\+1\]|dim=\+1", "axis −1 -> +1: the same axis on the 2-D tensors "
     "these functions take (equivalent)"),
)  # fmt: skip


def kind(minus: str, plus: str) -> str:
    import re

    for name, pattern, _ in KINDS:
        if re.search(pattern, plus):
            return name
    if "device" in minus and "device" not in plus:
        return "device"
    if "dtype" in minus and "dtype" not in plus:
        return "dtype"
    quoted = re.compile(r"\"[^\"]*\"")
    if (
        quoted.findall(minus)
        and [q.lower() for q in quoted.findall(minus)] == [q.lower() for q in quoted.findall(plus)]
        and minus.lower().strip("- ") == plus.lower().strip("+ ")
    ):
        return "text"
    return "unreviewed"


def survivor_report(family: str) -> str:
    """Markdown: every survivor of the family's last run, grouped by :data:`KINDS`, each with
    its changed lines."""
    codes = statuses(family)
    keep = set(sampled(family, list(codes), settings()[1][family].get("sample")))
    groups: dict[str, list[str]] = {}
    for name in (k for k, v in sorted(codes.items()) if v in SURVIVED and k in keep):
        shown = subprocess.run([str(MUTMUT), "show", name], cwd=STAGE / family,
                               capture_output=True, text=True).stdout  # fmt: skip
        changed = [
            ln for ln in shown.splitlines() if ln[:1] in "+-" and ln[:3] not in ("+++", "---")
        ]
        minus = "\n".join(ln for ln in changed if ln.startswith("-"))
        plus = "\n".join(ln for ln in changed if ln.startswith("+"))
        short = name.removeprefix(f"sparsebench.methods.{family}.")
        body = "\n".join(f"    {ln.strip()[:1]} {ln[1:].strip()}" for ln in changed)
        groups.setdefault(kind(minus, plus), []).append(f"- `{short}`\n\n{body}\n")
    why = {n: w for n, _, w in KINDS} | {"unreviewed": "see docs/testing.md"}
    out = [f"## {family}\n"]
    for k in sorted(groups, key=lambda g: -len(groups[g])):
        out.append(f"### {k} ({len(groups[k])}): {why[k]}\n")
        out.extend(groups[k])
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    _, families = settings()
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("command", choices=["run", "rerun", "score", "survivors", "report"])
    p.add_argument("families", nargs="*", default=list(families))
    p.add_argument("--max-children", type=int, default=1)
    p.add_argument("--sample", type=int, default=None)
    p.add_argument("--diff", action="store_true", help="survivors: each one's changed lines")
    a = p.parse_args(argv)
    unknown = set(a.families) - set(families)
    if unknown:
        p.error(f"unknown families {sorted(unknown)}; known: {sorted(families)}")
    if a.command == "report":  # the survivors of every family, grouped, as Markdown
        print("\n".join(survivor_report(f) for f in a.families))
        return 0
    if a.command == "survivors":
        for f in a.families:
            codes = statuses(f)
            keep = set(sampled(f, list(codes), families[f].get("sample")))
            for name in (k for k, v in sorted(codes.items()) if v in SURVIVED and k in keep):
                print(name)
                if a.diff:
                    shown = subprocess.run([str(MUTMUT), "show", name], cwd=STAGE / f,
                                           capture_output=True, text=True).stdout  # fmt: skip
                    for line in shown.splitlines():
                        if line[:1] in "+-" and line[:3] not in ("+++", "---"):
                            print("    " + line)
        return 0
    if a.command == "rerun":  # after new tests: the survivors and untested mutants again
        for f in a.families:
            codes = statuses(f)
            keep = set(sampled(f, list(codes), families[f].get("sample")))
            names = [k for k, v in sorted(codes.items()) if v in SURVIVED | {5, 33} and k in keep]
            start = time.time()
            if names:
                subprocess.run([str(MUTMUT), "run", "--max-children", str(a.max_children),
                                *names], cwd=stage(f), env=_env(), check=False)  # fmt: skip
            print(f"{f}: {len(names)} rerun in {time.time() - start:.0f} s")
    if a.command == "run":
        for f in a.families:
            sample = a.sample or families[f].get("sample")
            secs = run(f, a.max_children, sample)
            print(f"{f}: {secs:.0f} s")
    print(table(a.families))
    return 0


if __name__ == "__main__":
    sys.exit(main())
