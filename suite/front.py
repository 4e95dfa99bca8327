"""The front page of a benchmark's Snakemake report (``snakemake --report``, or ``sparsebench
run SPEC --report``): what was run and what came out, on the page a reviewer opens first.

Snakemake renders ``suite/rules/report/workflow.rst`` with Jinja, given the workflow's
``config``; :class:`FrontPage` sits in that config and renders itself only then (so that a run
or a dry run that makes no report computes and writes nothing for it). Its HTML comes from
Markdown through the boards' sanitizer: every string from the spec, a record or an error is
escaped, links stay inside the results folder, and nothing loads from outside.
"""

from __future__ import annotations

import html
import platform
import sys
from dataclasses import dataclass
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path

from sparsebench.suite import paths

# The cell outcomes the front page's table counts.
STATES = ("ok", "failed", "diverged")
# The config key the report's template reads.
CONFIG_KEY = "_sparsebench_front_page"


def _version(package: str) -> str:
    try:
        return version(package)
    except PackageNotFoundError:
        return "not installed"


def environment(cores: int | None) -> list[tuple[str, str]]:
    """The versions and machine a report was made with (no torch import: package metadata)."""
    from sparsebench.suite.record import git_info

    sha, dirty = git_info(Path(__file__).resolve().parent)
    rows = [
        ("sparsebench", _version("sparsebench")),
        ("git commit", f"{sha}{' (uncommitted changes)' if dirty else ''}"),
        ("Python", platform.python_version()),
    ]
    rows += [(p, _version(p)) for p in ("torch", "lightning", "snakemake", "polars", "pandera")]
    rows += [
        ("machine", f"{platform.system()} {platform.machine()} {platform.processor()}".strip()),
        ("CPU cores (machine / given to the run)", f"{_cpus()} / {cores or 'not given'}"),
        ("interpreter", sys.executable),
    ]
    return rows


def _cpus() -> str:
    import os

    return str(os.cpu_count() or "?")


def _esc(text: object) -> str:
    from sparsebench.suite.boards import md_escape

    return md_escape(text)


def md_code(text: object) -> str:
    from sparsebench.suite.boards import md_code as code

    return code(text)


def indented_code(lines: list[str]) -> list[str]:
    """Markdown's fenced code blocks as indented ones (the page's Markdown has no fences)."""
    out, inside = [], False
    for ln in lines:
        if ln.startswith("```"):
            inside = not inside
            out.append("")
            continue
        out.append("    " + ln if inside else ln)
    return out


def job_lines(bench: str, pillars: list[str]) -> list[str]:
    """Cells, their outcome and their time per pillar, from the runs tables (every cell of the
    spec, including those an earlier run made: the Snakemake statistics below show only the
    jobs this DAG ran)."""
    import polars as pl

    from sparsebench.suite.runner import per_cell
    from sparsebench.suite.tables import read_runs

    lines = [
        "| pillar | cells | ok | failed | diverged | cell time total | mean | max | job logs |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---|",
    ]
    for pillar in pillars:
        table = paths.runs_table(bench, pillar)
        if not table.is_file():
            continue
        cells = per_cell(read_runs(table))
        count = {s: cells.filter(pl.col("status") == s).height for s in STATES}
        secs = cells.get_column("cell_s").drop_nulls()
        total, mean, most = (
            (f"{secs.sum():.1f} s", f"{secs.mean():.2f} s", f"{secs.max():.2f} s")
            if len(secs)
            else ("–", "–", "–")
        )
        logs = sorted((paths.pillar_dir(bench, pillar) / "logs").glob("*.log"))
        links = ", ".join(f"[{_esc(p.stem)}]({pillar}/logs/{p.name})" for p in logs[:40])
        more = f" and {len(logs) - 40} more" if len(logs) > 40 else ""
        lines.append(
            f"| {_esc(pillar)} | {cells.height} | {count['ok']} | {count['failed']} | "
            f"{count['diverged']} | {total} | {mean} | {most} | {links or '–'}{more} |"
        )
    return lines


def front_markdown(bench: str, spec_file: Path, pillars: list[str], cores: int | None) -> str:
    """The front page as Markdown (escaped text; relative links into the results folder)."""
    from sparsebench.suite.runner import outcome

    got = outcome(bench, pillars)
    states = ", ".join(f"{n} {s}" for s, n in sorted(got.counts.items())) or "no records yet"
    lines = [
        f"Benchmark **{_esc(bench)}** from {md_code(spec_file.name)}: {sum(got.counts.values())} "
        f"cell(s), {states}; **{got.bad} failed / diverged**.",
        "",
    ]
    for pillar, status, label, error in got.problems[:10]:
        lines.append(f"- {_esc(status)}: {_esc(pillar)} {_esc(label)}: {_esc(error[:300])}")
    summary = paths.summary(bench)
    lines += ["", "## Summary", ""]
    if summary.is_file():
        body = summary.read_text().splitlines()
        lines += indented_code(body[1:] if body and body[0].startswith("# ") else body)
    else:
        lines.append("No summary yet: the run has not reached its boards.")
    lines += ["", "## Cells and time", "", *job_lines(bench, pillars), ""]
    claims = paths.bench_dir(bench) / "claims.md"
    if claims.is_file():
        lines += ["Papers' claims: see the **Claims** section of this report.", ""]
    lines += ["## Environment", "", "| | |", "|---|---|"]
    lines += [f"| {_esc(k)} | {_esc(v)} |" for k, v in environment(cores)]
    lines += ["", "## The spec", "", f"{md_code(spec_file)}:", ""]
    try:
        spec_text = spec_file.read_text(errors="replace")
    except OSError as e:
        spec_text = f"(unreadable: {e})"
    # an indented code block: shown as written, whatever the spec holds (no fence to close)
    lines += ["    " + ln for ln in spec_text.splitlines()[:400]]
    return "\n".join(lines) + "\n"


@dataclass
class FrontPage:
    """Renders (``str``) the front page's HTML, indented for the ``.. raw:: html`` block of
    workflow.rst, when Snakemake's report asks for it."""

    bench: str
    spec_file: str
    pillars: tuple[str, ...]
    cores: int | None = None
    indent: int = 3

    def html(self) -> str:
        from sparsebench.suite.boards import markdown_body

        text = front_markdown(self.bench, Path(self.spec_file), list(self.pillars), self.cores)
        return markdown_body(text)

    def __str__(self) -> str:
        try:
            body = self.html()
        except Exception as e:  # noqa: BLE001 - the report still renders, saying why
            body = f"<p>The front page could not be made: {html.escape(repr(e))}</p>"
        # Snakemake's report centres its home page vertically: a page taller than the window
        # would lose its top (the outcome) above the fold, so the front page scrolls in a box
        box = '<div style="max-height: 78vh; overflow-y: auto; padding-right: 1em">'
        body = f"{box}\n{body}\n</div>"
        pad = " " * self.indent
        return "\n".join(pad + ln if ln.strip() else "" for ln in body.splitlines())
