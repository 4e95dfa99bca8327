"""claims.md and claims.html from a claim file written to attack them: every text field holds
markup, links and images; the pages show it as text and run or load nothing."""

from __future__ import annotations

import json

import markdown

from sparsebench.suite.claims import judge, load_file, write

from ..test_boards import HOSTILE, assert_inert, visible_text
from .conftest import rows, table

KEYS = {"classification": ("task", "method", "setting_id", "target_sparsity", "seed")}
ATTACK = " ".join(HOSTILE)


def test_claim_text_is_shown_as_written_and_never_as_markup(claim_file, tmp_path):
    claim = {
        "id": "evil-1",
        "statement": ATTACK,
        "source": {"where": ATTACK, "setting": "s | x", "numbers": ATTACK},
        "ours": ATTACK,
        "why": ATTACK + "\n\n# not a heading",
        "test": {"kind": "order", "a": {"method": "rigl"}, "b": {"method": "set"}, "op": ">"},
    }
    paper = {"key": "evil", "authors": "<b>A</b>", "year": 2026, "title": ATTACK}
    [parsed] = load_file(claim_file([claim], paper=paper))
    runs = table(rows("rigl", [0.93, 0.94, 0.935]), rows("set", [0.90, 0.905, 0.91]))
    files = write([judge(parsed, {"classification": runs}, KEYS)], tmp_path / "bench")
    md, page = files["md"].read_text(), files["html"].read_text()

    for tag in ("<script", "<img", "<iframe", "<b>"):
        assert tag not in md, tag
    assert_inert(markdown.markdown(md, extensions=["tables"]))  # inert wherever it renders
    assert_inert(page)
    assert "<h1>not a heading" not in page and "<b>" not in page
    shown = visible_text(page)
    for text in HOSTILE:
        # statement, where, numbers, ours, why, and the title in its heading and in the
        # contents: seven times each, as written
        assert shown.count(text) == 7, text
    assert "<b>A</b> (2026): " + ATTACK in shown
    # the table keeps its five columns: the '|' of the setting is text
    row = next(line for line in md.splitlines() if line.startswith("| `evil-1` |"))
    assert len(row.replace("\\|", "").split("|")) == 7
    # claims.json holds the data as written
    data = json.loads(files["json"].read_text())["claims"][0]
    assert data["statement"] == ATTACK and data["source"]["numbers"] == ATTACK
