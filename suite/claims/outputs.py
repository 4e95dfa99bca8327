"""Verdicts -> ``claims.md`` (badge line, an overview of the counts by verdict and by why a
verdict is inconclusive, a contents list, then a table per paper; also as ``claims.html`` for
``snakemake --report``, the verdicts as coloured badges that keep their words),
``claims.json`` (every number),
``claims.tex`` (one ``\\newcommand`` per measured number and verdict, as showyourwork users cite
numbers) and the badge line ``n holds / n fails / n inconclusive``.

LaTeX macro names are letters only (TeX control words cannot hold digits or dashes): the
claim id in CamelCase with digits spelled out, prefixed ``\\claim``, suffixed with the field:
``rigl-set-static-90`` -> ``\\claimRiglSetStaticNineZeroVerdict``, ``...Estimate``, ``...Low``,
``...High``, and ``...MeanA``, ``...MeanB``, ... for the addressed cells in order (their seed
means; fractions as percent, like the leaderboards; with ``at``, the cells of the first x,
then of the next, ...). ``\\claimsHold``, ``\\claimsFail``,
``\\claimsInconclusive`` count the verdicts, and ``\\claimsInconclusive<Reason>`` the
inconclusive ones by reason kind (``NotRun``, ``Failed``, ``TooFewSeeds``, ``Ambiguous``,
``Unusable``, ``NoSpread``, ``Noise``, ``Error``: the keys of :data:`.judge.REASONS`).
"""

from __future__ import annotations

import json
import math
import re
from pathlib import Path
from typing import Any

from sparsebench.suite.atomic import write_atomic
from sparsebench.suite.boards import html_page, md_code, md_escape

from .judge import REASONS, VERDICTS, Verdict, load_tables
from .registration import NOT_PRE_REGISTERED, Registration, check

_DIGITS = ("Zero", "One", "Two", "Three", "Four", "Five", "Six", "Seven", "Eight", "Nine")
SEED_NOISE_ONLY = (
    "The interval covers the spread over seeds (or trials) only: every seed is scored on the "
    "same fixed test set, whose own sampling error (e.g. binomial, about 0.9 points at 92 % "
    "on 1,000 test images) it leaves out, and claims that share a cell are not independent."
)
# The reasons the overview lists even at zero (a reviewer reads "0 not run" as a complete
# run); the other kinds only where a verdict has them.
_ALWAYS = ("not_run", "failed", "too_few_seeds", "noise")
_WHICH = 12  # claim ids an overview row lists: a run with nothing done would list them all


def macro_name(claim_id: str, field: str) -> str:
    """``\\claim<CamelCaseId><Field>``: a valid TeX control word (letters only)."""
    words = []
    for part in claim_id.split("-"):
        word = "".join(_DIGITS[int(ch)] if ch.isdigit() else ch for ch in part)
        words.append(word[:1].upper() + word[1:])
    return "\\claim" + "".join(words) + field


def _unit(v: Verdict) -> str:
    from sparsebench.suite.pillar import get_pillar

    metrics = {m.name: m for m in get_pillar(v.claim.test["pillar"]).metrics}
    return metrics[v.claim.test["metric"]].unit


def _num(x: float | None, unit: str = "") -> str:
    """A readable number: fractions as percent with 2 decimals, else 4 significant digits."""
    if x is None:
        return "–"
    if math.isinf(x):
        return "∞" if x > 0 else "−∞"
    if unit == "fraction":
        return f"{100 * x:.2f}"
    return f"{x:.4g}"


def _letters(i: int) -> str:
    """A, B, ..., Z, AA, AB, ...: cell indices as letters (TeX control words hold no digits)."""
    out = ""
    i += 1
    while i:
        i, r = divmod(i - 1, 26)
        out = chr(ord("A") + r) + out
    return out


DEFAULT_LEVEL = 0.95


def counts(verdicts: list[Verdict]) -> dict[str, int]:
    """The overview's counts: ``holds``, ``fails``, then each reason kind of
    :data:`.judge.REASONS` for the inconclusive verdicts (zero where none has it)."""
    keys = [_row(v) for v in verdicts]
    return {k: keys.count(k) for k in ("holds", "fails", *REASONS)}


def _row(v: Verdict) -> str:
    """The overview row of ``v``: its verdict, or for an inconclusive one its reason kind."""
    return v.verdict if v.verdict != "inconclusive" else v.reason_kind or "error"


def verdict_words(v: Verdict) -> str:
    """The verdict as the pages write it: ``holds``, ``fails`` or ``inconclusive: <reason>``."""
    if v.verdict != "inconclusive":
        return v.verdict
    return f"inconclusive: {REASONS.get(v.reason_kind or '', 'unknown')}"


def _label(verdict: str, words: str, html: bool) -> str:
    """``words`` in bold; for the HTML page also the badge class its CSS colours (an
    ``attr_list`` block), so colour is added to the words, never instead of them."""
    return f"**{words}**" + (f"{{: .v-{verdict}}}" if html else "")


def _text(value: Any) -> str:
    """:func:`md_escape` with ``{`` and ``}`` escaped as well: the page's Markdown reads a
    trailing ``{: ...}`` as attributes, which text from a claim file must not set."""
    return md_escape(value).replace("{", "\\{").replace("}", "\\}")


def _code(value: Any) -> str:
    """:func:`md_code`, its escaped-text fallback with braces escaped as in :func:`_text`."""
    out = md_code(value)
    return out if out.startswith("`") else out.replace("{", "\\{").replace("}", "\\}")


def anchor(text: str, used: set[str]) -> str:
    """The anchor GitHub gives a heading of ``text`` (lower case; letters, digits, ``_``,
    ``-`` and spaces kept, spaces as ``-``; ``-1``, ``-2``, ... on repeats), so that the
    contents links of ``claims.md`` work where it is rendered and the page's headings carry
    the same ids (cut to 200 characters, the longest id a page keeps). ``used`` (the anchors
    before it) is updated."""
    base = re.sub(r"[^\w\- ]", "", text.lower()).replace(" ", "-")[:196] or "section"
    slug, i = base, 0
    while slug in used:
        i += 1
        slug = f"{base}-{i}"
    used.add(slug)
    return slug


def badge(verdicts: list[Verdict]) -> str:
    counts = {k: sum(v.verdict == k for v in verdicts) for k in VERDICTS}
    other = sum(v.claim.test.get("level", DEFAULT_LEVEL) != DEFAULT_LEVEL for v in verdicts)
    levels = f"; {other} at a level other than {DEFAULT_LEVEL:.0%}" if other else ""
    return (
        f"claims: {counts['holds']} holds / {counts['fails']} fails / "
        f"{counts['inconclusive']} inconclusive (of {len(verdicts)}){levels}"
    )


def verdict_note(v: Verdict) -> str:
    """What the verdict cell adds to holds / fails / inconclusive: a level other than the
    suite's, and for an undecided test the seeds its observed effect and spread would need."""
    level = v.claim.test.get("level", DEFAULT_LEVEL)
    out = f" (at the {level * 100:.4g}% level)" if level != DEFAULT_LEVEL else ""
    if v.verdict == "inconclusive" and v.seeds_needed is not None:
        out += f" (about {v.seeds_needed} seeds per cell would decide it)"
    return out


def seed_noise_only(v: Verdict) -> bool:
    """Whether the interval is over seeds of a measured metric (so it leaves out the fixed
    test set's own sampling error); not for a pillar's deterministic metrics."""
    from sparsebench.suite.claims.judge import _deterministic

    t = v.claim.test
    return not _deterministic(t["pillar"], t["metric"])


def to_json(verdicts: list[Verdict], registration: Registration | None = None) -> dict[str, Any]:
    """Every number of every verdict; with ``registration``, each claim file's commit and,
    per claim, the earliest start of the rows it read and whether it was pre-registered."""

    def finite(x):
        return None if x is None or not math.isfinite(x) else x

    rows = []
    for v in verdicts:
        c = v.claim
        rows.append(
            {
                "id": c.id,
                "paper": c.paper,
                "file": c.file,
                "statement": c.statement,
                "source": c.source,
                "ours": c.ours,
                "why": c.why,
                "test": c.test,
                "verdict": v.verdict,
                "reason_kind": v.reason_kind,
                "reason": v.reason,
                "seeds_needed": v.seeds_needed,
                "estimate": finite(v.estimate),
                "low": finite(v.low),
                "high": finite(v.high),
                "cells": [
                    {
                        "selector": s.selector,
                        "label": s.label,
                        "n": s.n,
                        "mean": s.mean,
                        "std": s.std,
                        "values": s.values,
                        **({"at": s.at} if s.at is not None else {}),
                    }  # fmt: skip
                    for s in v.cells
                ],
                "pairs": [
                    {k: finite(x) if isinstance(x, float) else x for k, x in p.items()}
                    for p in v.pairs
                ],  # fmt: skip
            }
        )
        if registration is not None:
            rows[-1]["registration"] = registration.claim_json(c.id, c.file)
    n = counts(verdicts)
    out: dict[str, Any] = {
        "badge": badge(verdicts),
        "counts": {
            "holds": n["holds"],
            "fails": n["fails"],
            "inconclusive": sum(n[k] for k in REASONS),
            "inconclusive_by_reason": {k: n[k] for k in REASONS},
        },
        "reasons": REASONS,
        "claims": rows,
    }
    if registration is not None:
        out["registration"] = {f: r.to_json() for f, r in registration.files.items()}
    return out


def _overview(verdicts: list[Verdict], html: bool) -> list[str]:
    """The table of counts: holds, fails, then inconclusive by reason (the kinds in
    :data:`_ALWAYS` even at zero), with the ids of the claims in every row but holds (the
    first :data:`_WHICH`: the rest are in the sections)."""
    n = counts(verdicts)
    lines = ["| verdict | claims | which |", "|---|---|---|"]
    for key in ("holds", "fails", *REASONS):
        if key in REASONS and not n[key] and key not in _ALWAYS:
            continue
        verdict = key if key in ("holds", "fails") else "inconclusive"
        words = verdict if key == verdict else f"inconclusive: {REASONS[key]}"
        mine = [_code(v.claim.id) for v in verdicts if _row(v) == key]
        more = f", and {len(mine) - _WHICH} more" if len(mine) > _WHICH else ""
        which = ", ".join(mine[:_WHICH]) + more if key != "holds" else ""
        lines.append(f"| {_label(verdict, words, html)} | {n[key]} | {which} |")
    lines.append(f"| all | {len(verdicts)} | |")
    return lines


def to_markdown(
    verdicts: list[Verdict],
    bench: str,
    registration: Registration | None = None,
    html: bool = False,
) -> str:
    """The claims page: the badge line, an overview (counts by verdict and reason), the
    contents (a link to each paper's section), then a table per paper; with
    ``registration``, each paper's claim file with the commit that registered it, and
    verdicts over rows older than the file flagged. ``html``: the Markdown for the HTML page,
    whose verdicts carry their badge class and whose headings their anchor (``attr_list``
    blocks, which the Markdown file leaves out)."""
    title = f"Claims: {bench}"
    used = {anchor(title, set()), "overview", "contents"}
    lines = [f"# {_text(title)}", "", f"**{badge(verdicts)}**", ""]

    def heading(text: str, slug: str) -> str:
        return f"## {_text(text)}" + (f" {{: #{slug}}}" if html else "")

    def late(claim_id: str) -> str:
        pre = registration.pre_registered.get(claim_id) if registration else None
        return f" ({NOT_PRE_REGISTERED})" if pre is False else ""

    papers: dict[str, list[Verdict]] = {}
    for v in verdicts:
        papers.setdefault(v.claim.paper["key"], []).append(v)
    sections = []
    for group in papers.values():
        p = group[0].claim.paper
        venue = f", {p['venue']}" if p.get("venue") else ""
        text = f"{p['authors']} ({p['year']}{venue}): {p['title']}"
        sections.append((text, anchor(text, used), group))

    lines += [heading("Overview", "overview"), "", *_overview(verdicts, html), ""]
    lines += [
        "Each claim is a paper's statement judged on this benchmark's records at our scale "
        "(the direction, not the paper's absolute numbers). Intervals are two-sided over "
        "seeds (Welch for differences, the delta method for ratios, t for means and slopes). "
        "An *inconclusive* verdict says why: *not run* (a cell the claim reads has no "
        "records), *failed* (a row of it failed, diverged or did not finish), *too few "
        "seeds* (fewer finished seeds than the test needs), *inside the noise* (the interval "
        "contains the claim's boundary: the verdict says about how many seeds per cell the "
        "observed effect and spread would need, an estimate at even odds, not a guarantee), "
        "*ambiguous cell* (a selector names several cells, or a seed twice), *unusable "
        "values* (a value missing, not finite, or one the test cannot read), *no spread* "
        "(seeds that tie on a metric that is not deterministic) or *could not be judged*. "
        "A claim over several pairs or values names the first of these that any of them "
        "has. Fractions in percent.",
        "",
        heading("Contents", "contents"),
        "",
    ]
    for i, (text, slug, group) in enumerate(sections, 1):
        n = counts(group)
        inc = len(group) - n["holds"] - n["fails"]
        lines.append(
            f"{i}. [{_text(text)}](#{slug}): {n['holds']} holds, {n['fails']} fails, "
            f"{inc} inconclusive"
        )
    lines.append("")

    for text, slug, group in sections:
        lines += [heading(text, slug), ""]
        if registration is not None:
            for file in dict.fromkeys(v.claim.file for v in group):
                # the text holds a hex sha and an ISO date only (checked when read from git)
                lines += [f"Claim file {_code(file)}: {registration.files[file].text()}.", ""]
        lines += [
            "| claim | statement | the paper | we measured | verdict |",
            "|---|---|---|---|---|",
        ]
        for v in group:
            c = v.claim
            unit = _unit(v)
            said = f"{c.source['where']}; {c.source['setting']}"
            if c.source.get("numbers"):
                said += f": {c.source['numbers']}"
            cells = "; ".join(
                f"{s.label or s.selector}: {_num(s.mean, unit)}"
                + (f" ± {_num(s.std, unit)}" if s.std is not None else "")
                + f" (n={s.n})"
                for s in v.cells
                if s.n
            )
            measured = f"{cells}. {v.reason}" if cells else v.reason
            # a claim file is anyone's data: its text (and the labels and filters the reason
            # quotes) is shown as written, never as markup
            lines.append(
                f"| {_code(c.id)} | {_text(c.statement)} | {_text(said)} | "
                f"{_text(measured)} | {_label(v.verdict, verdict_words(v), html)}"
                f"{verdict_note(v)}{late(c.id)}{' †' if seed_noise_only(v) else ''} |"
            )
        if any(seed_noise_only(v) for v in group):
            lines += ["", f"† {SEED_NOISE_ONLY}"]
        lines.append("")
        for v in group:
            ours = f" Our setting: {v.claim.ours}" if v.claim.ours else ""
            why = _text(f"{v.claim.why}{ours}")
            lines.append(f"* {_code(v.claim.id)}: why this tests the direction: {why}")
        lines.append("")
    return "\n".join(lines)


def to_tex(verdicts: list[Verdict]) -> str:
    n = counts(verdicts)
    lines = [
        "% sparsebench claims: generated by `sparsebench claims`; do not edit.",
        f"\\newcommand{{\\claimsHold}}{{{n['holds']}}}",
        f"\\newcommand{{\\claimsFail}}{{{n['fails']}}}",
        f"\\newcommand{{\\claimsInconclusive}}{{{sum(n[k] for k in REASONS)}}}",
    ]
    for kind in REASONS:  # not_run -> \claimsInconclusiveNotRun
        name = "".join(w.capitalize() for w in kind.split("_"))
        lines.append(f"\\newcommand{{\\claimsInconclusive{name}}}{{{n[kind]}}}")
    for v in verdicts:
        cid, unit = v.claim.id, _unit(v)
        lines.append(f"\\newcommand{{{macro_name(cid, 'Verdict')}}}{{{v.verdict}}}")
        # differences and means are in the metric's unit (fractions in percent, as the
        # means); ratios and slopes are plain numbers
        est_unit = unit if v.claim.test["kind"] in ("order", "equal", "value") else ""
        for name, x in (("Estimate", v.estimate), ("Low", v.low), ("High", v.high)):
            if x is not None and math.isfinite(x):
                lines.append(f"\\newcommand{{{macro_name(cid, name)}}}{{{_num(x, est_unit)}}}")
        for i, s in enumerate(v.cells):
            if s.mean is not None:
                value = _num(s.mean, unit)  # ASCII: digits, '.', '-', 'e'
                name = macro_name(cid, "Mean" + _letters(i))
                lines.append(f"\\newcommand{{{name}}}{{{value}}}")
    return "\n".join(lines) + "\n"


def write(verdicts: list[Verdict], bench_dir: str | Path) -> dict[str, Path]:
    """Write ``claims.{md,json,tex,html}`` into ``bench_dir`` (atomically), with each claim
    file's registration (:mod:`.registration`) checked against the runs tables there; return
    their paths."""
    bench_dir = Path(bench_dir)
    files = {
        "md": bench_dir / "claims.md",
        "json": bench_dir / "claims.json",
        "tex": bench_dir / "claims.tex",
        "html": bench_dir / "claims.html",
    }
    # the tables the verdicts were judged on, for when their rows ran
    tables = load_tables(bench_dir, {v.claim.test["pillar"] for v in verdicts})
    registration = check(verdicts, tables)
    write_atomic(files["md"], to_markdown(verdicts, bench_dir.name, registration))
    page = to_markdown(verdicts, bench_dir.name, registration, html=True)
    write_atomic(files["html"], html_page(page, f"{bench_dir.name}: claims", attrs=True))
    data = to_json(verdicts, registration)
    write_atomic(files["json"], json.dumps(data, indent=1, default=str) + "\n")
    write_atomic(files["tex"], to_tex(verdicts))
    return files
