"""The claims page a reviewer reads first: the overview counts (by verdict, and by why an
inconclusive verdict is undecided), the contents links, verdicts as words with a colour
badge, and the reason kind the judge gives each inconclusive verdict."""

from __future__ import annotations

import json
import re

from sparsebench.suite.boards import html_page
from sparsebench.suite.claims import Verdict, judge, load_file, write
from sparsebench.suite.claims.judge import REASONS
from sparsebench.suite.claims.outputs import anchor, counts, to_json, to_markdown, to_tex

from ..test_boards import HOSTILE, assert_inert, visible_text
from .conftest import PAPER, rows, table

KEYS = {"classification": ("task", "method", "setting_id", "target_sparsity", "seed")}
ORDER = {"kind": "order", "a": {"method": "rigl"}, "b": {"method": "set"}, "op": ">"}
RUNS = table(rows("rigl", [0.93, 0.94, 0.935]), rows("set", [0.90, 0.905, 0.91]))


def kind_of(claim, test, runs=RUNS) -> tuple[str, str | None]:
    v = judge(claim(test), {"classification": runs}, KEYS)
    return v.verdict, v.reason_kind


def test_each_reason_kind_comes_from_a_tiny_case(claim):
    assert kind_of(claim, ORDER) == ("holds", None)
    assert kind_of(claim, {**ORDER, "op": "<"}) == ("fails", None)
    # a cell with no records at all: not run (and no table of the pillar: the same)
    assert kind_of(claim, {**ORDER, "b": {"method": "snip"}}) == ("inconclusive", "not_run")
    assert judge(claim(ORDER), {}, KEYS).reason_kind == "not_run"
    failed = table(rows("rigl", [0.93, 0.94]), rows("set", [0.90, 0.91], status="failed"))
    assert kind_of(claim, ORDER, failed) == ("inconclusive", "failed")
    one_seed = table(rows("rigl", [0.93, 0.94, 0.935]), rows("set", [0.90]))
    assert kind_of(claim, ORDER, one_seed) == ("inconclusive", "too_few_seeds")
    # means 0.92 and 0.915 with a spread of 0.01: the interval of the difference holds 0
    noisy = table(rows("rigl", [0.91, 0.92, 0.93]), rows("set", [0.905, 0.915, 0.925]))
    assert kind_of(claim, ORDER, noisy) == ("inconclusive", "noise")
    ties = table(rows("rigl", [0.93, 0.93]), rows("set", [0.90, 0.90]))
    assert kind_of(claim, ORDER, ties) == ("inconclusive", "no_spread")
    two = table(RUNS.to_dicts(), rows("set", [0.8, 0.8, 0.81], setting="other"))
    assert kind_of(claim, ORDER, two) == ("inconclusive", "ambiguous")
    nan = table(rows("rigl", [0.93, float("nan")]), rows("set", [0.90, 0.91]))
    assert kind_of(claim, ORDER, nan) == ("inconclusive", "unusable")


def test_a_combined_verdict_names_what_blocks_it_first(claim):
    # rigl vs set inside the noise, snip not run: the claim waits on snip first
    noisy = table(rows("rigl", [0.91, 0.92, 0.93]), rows("set", [0.905, 0.915, 0.925]))
    ranking = {"kind": "ranking", "order": [{"method": "rigl"}, {"method": "set"},
                                            {"method": "snip"}]}  # fmt: skip
    v = judge(claim(ranking), {"classification": noisy}, KEYS)
    assert (v.verdict, v.reason_kind) == ("inconclusive", "not_run")
    assert [p.get("reason_kind") for p in v.pairs] == ["noise", "not_run", "not_run"]
    # with every cell there, the same ranking is undecided by the noise alone
    v = judge(claim(ranking), {"classification": table(noisy.to_dicts(), rows(
        "snip", [0.5, 0.51, 0.52]))}, KEYS)  # fmt: skip
    assert (v.verdict, v.reason_kind) == ("inconclusive", "noise")


def test_an_inconclusive_verdict_without_a_reason_kind_is_refused(claim):
    c = claim(ORDER)
    try:
        Verdict(c, "inconclusive", "why")
    except ValueError as e:
        assert "reason kind" in str(e)
    else:
        raise AssertionError("accepted")
    assert Verdict(c, "holds", "r", reason_kind="noise").reason_kind is None


def hand_built(claim) -> list[Verdict]:
    """2 holds, 1 fails, 3 not run, 1 failed, 2 too few seeds, 1 inside the noise, 1 error."""
    c = claim(ORDER)
    kinds = [None, None, "fails", "not_run", "not_run", "not_run", "failed", "too_few_seeds",
             "too_few_seeds", "noise", "error"]  # fmt: skip
    out = []
    for i, k in enumerate(kinds):
        verdict = "holds" if k is None else "fails" if k == "fails" else "inconclusive"
        kind = k if verdict == "inconclusive" else None
        out.append(Verdict(c, verdict, f"reason {i}", reason_kind=kind))
    return out


def test_the_overview_counts_are_the_hand_count(claim):
    verdicts = hand_built(claim)
    want = {"holds": 2, "fails": 1, "not_run": 3, "failed": 1, "too_few_seeds": 2,
            "ambiguous": 0, "unusable": 0, "no_spread": 0, "noise": 1, "error": 1}  # fmt: skip
    assert counts(verdicts) == want
    md = to_markdown(verdicts, "b")
    overview = md[md.index("## Overview") : md.index("## Contents")]
    shown = dict(re.findall(r"^\| \*\*([^*]+)\*\* \| (\d+) \|", overview, re.M))
    assert shown == {
        "holds": "2",
        "fails": "1",
        "inconclusive: not run": "3",
        "inconclusive: failed": "1",
        "inconclusive: too few seeds": "2",
        "inconclusive: inside the noise": "1",
        "inconclusive: could not be judged": "1",
    }  # fmt: skip (kinds at zero beyond the four a reviewer always sees are left out)
    assert "| all | 11 | |" in overview
    data = to_json(verdicts)["counts"]
    assert data["holds"] == 2 and data["fails"] == 1 and data["inconclusive"] == 8
    assert data["inconclusive_by_reason"]["not_run"] == 3
    tex = to_tex(verdicts)
    for line in (r"\claimsHold}{2}", r"\claimsFail}{1}", r"\claimsInconclusive}{8}",
                 r"\claimsInconclusiveNotRun}{3}", r"\claimsInconclusiveFailed}{1}",
                 r"\claimsInconclusiveTooFewSeeds}{2}", r"\claimsInconclusiveNoise}{1}",
                 r"\claimsInconclusiveAmbiguous}{0}", r"\claimsInconclusiveError}{1}"):  # fmt: skip
        assert "\\newcommand{" + line in tex, line


def test_anchors_follow_githubs_rule():
    used: set[str] = set()
    assert anchor("Evci et al. (2020, ICML): Rigging the Lottery", used) == (
        "evci-et-al-2020-icml-rigging-the-lottery"
    )
    assert anchor("Evci et al. (2020, ICML): Rigging the Lottery", used) == (
        "evci-et-al-2020-icml-rigging-the-lottery-1"
    )
    assert anchor("<script>", used) == "script" and anchor("!!", used) == "section"
    assert len(anchor("x" * 500, used)) <= 200  # the longest id a page keeps, suffix included


def test_the_page_says_each_verdict_in_words_and_links_each_paper(claim_file, tmp_path):
    paper2 = {**PAPER, "key": "other2025", "title": "Another paper", "year": 2025}
    files = [
        claim_file(
            [
                {
                    "id": "c-1",
                    "statement": "s",
                    "source": {"where": "T1", "setting": "x"},
                    "why": "w",
                    "test": ORDER,
                }
            ]
        ),  # fmt: skip
        claim_file(
            [
                {
                    "id": "c-2",
                    "statement": "s",
                    "source": {"where": "T1", "setting": "x"},
                    "why": "w",
                    "test": {**ORDER, "op": "<"},
                },
                {
                    "id": "c-3",
                    "statement": "s",
                    "source": {"where": "T1", "setting": "x"},
                    "why": "w",
                    "test": {**ORDER, "b": {"method": "snip"}},
                },
            ],
            name="two.yaml",
            paper=paper2,
        ),  # fmt: skip
    ]
    claims = [c for f in files for c in load_file(f)]
    verdicts = [judge(c, {"classification": RUNS}, KEYS) for c in claims]
    out = write(verdicts, tmp_path / "bench")
    md, page = out["md"].read_text(), out["html"].read_text()
    for emoji in ("✅", "❌", "❔"):
        assert emoji not in md and emoji not in page
    # the words are text in the page, the badge only adds a class the page's CSS colours
    assert '<strong class="v-holds">holds</strong>' in page
    assert '<strong class="v-fails">fails</strong>' in page
    assert '<strong class="v-inconclusive">inconclusive: not run</strong>' in page
    assert ".v-holds {" in page and ".v-inconclusive {" in page
    shown = visible_text(page[page.index("<body>") :])
    for words in ("holds", "fails", "inconclusive: not run", "inconclusive: inside the noise"):
        assert words in shown, words
    # the Markdown file has the words, without the page's attribute blocks
    assert "| **inconclusive: not run** |" in md and "{:" not in md
    # every contents link leads to a heading of the page, in both files
    links = re.findall(r'<a href="#([^"]+)">', page)
    ids = re.findall(r'<h2 id="([^"]+)">', page)
    assert links == ["a-author-2026-a-paper", "a-author-2025-another-paper"]
    assert set(links) <= set(ids) and {"overview", "contents"} <= set(ids)
    assert "1. [A. Author \\(2026\\): A paper](#a-author-2026-a-paper): 1 holds, 0 fails" in md
    assert json.loads(out["json"].read_text())["claims"][2]["reason_kind"] == "not_run"


ATTACK = " ".join([*HOSTILE, "[evil](http://evil.example/x)", "{: .v-holds #overview}",
                   "{: onclick=alert(1)}"])  # fmt: skip


def test_hostile_claim_text_stays_inert_on_the_page(claim_file, tmp_path):
    claim = {
        "id": "evil-1",
        "statement": ATTACK + " {: .v-fails}",
        "source": {"where": ATTACK, "setting": "s | x {: #x}", "numbers": ATTACK},
        "ours": ATTACK,
        "why": ATTACK,
        "test": {**ORDER, "b": {"method": "snip"}},
    }
    paper = {"key": "evil", "authors": "<b>A</b> {: #contents}", "year": 2026,
             "title": ATTACK + " {: .v-holds}"}  # fmt: skip
    [parsed] = load_file(claim_file([claim], paper=paper))
    out = write([judge(parsed, {"classification": RUNS}, KEYS)], tmp_path / "bench")
    page = out["html"].read_text()
    assert_inert(page)
    low = page.lower()
    for tag in re.findall(
        r"<[a-z][^>]*>", low[low.index("<body>") :]
    ):  # no tag loads or links anything outside
        assert "://" not in tag, tag
        assert set(re.findall(r'\s([a-z-]+)="', tag)) <= {"href", "id", "class", "style"}, tag
    assert "@import" not in low and "url(" not in low and "<link" not in low
    # the only badge is the verdict's own, the only ids the page's own anchors
    assert page.count('class="v-') == 1 + 6  # the verdict, and the overview's six rows
    assert '<strong class="v-inconclusive">inconclusive: not run</strong>' in page
    ids = re.findall(r'\sid="([^"]+)"', page)
    assert ids[:2] == ["overview", "contents"] and len(ids) == 3 and "x" not in ids
    shown = visible_text(page[page.index("<body>") :])
    assert shown.count("{: .v-holds #overview}") == 7  # as written, every time
    assert "[evil](http://evil.example/x)" in shown


def test_html_page_keeps_only_known_badge_classes_and_plain_ids():
    text = '## T {: #good-id }\n\n## U {: #bad"id }\n\n**x**{: .v-holds}\n\n**y**{: .evil}\n'
    page = html_page(text, "t", attrs=True)
    assert '<h2 id="good-id">T</h2>' in page and '<strong class="v-holds">x</strong>' in page
    assert "<strong>y</strong>" in page and "evil" not in page.split("<body>")[1]
    # without attrs (a leaderboard), a brace block is text
    assert "{: #good-id }" in html_page(text, "t")
    assert set(REASONS) >= {"not_run", "failed", "too_few_seeds", "noise"}


def test_an_overview_row_names_a_dozen_claims_and_counts_the_rest(claim):
    c = claim(ORDER)
    verdicts = [Verdict(c, "inconclusive", "r", reason_kind="not_run") for _ in range(15)]
    row = next(line for line in to_markdown(verdicts, "b").splitlines() if "not run**" in line)
    assert row.count("`c-1`") == 12 and row.endswith(", and 3 more |") and "| 15 |" in row
