"""Board pages from untrusted text: the shared escaping helper, the HTML page's whitelist, and
a failed record's error on the shared failed-cell list and the classification board."""

from __future__ import annotations

import html
import re
from pathlib import Path

import markdown
import polars as pl

from sparsebench.suite.boards import failed_lines, html_page, md_code, md_escape, write_board_files
from sparsebench.suite.pillars.classification.board import write_leaderboard
from sparsebench.suite.pillars.classification.table import COLUMNS
from sparsebench.suite.schemas import COMMON_DTYPES, polars_dtype

# What a claim file, a spec or an error message may hold that must never act on a page.
HOSTILE = [
    "<script>alert(1)</script>",
    "<img src=x onerror=alert(1)>",
    "<iframe src=https://evil.example>",
    "[x](javascript:alert(1))",
    "![](https://evil.example/p.png)",
]


def assert_inert(page: str) -> None:
    """No script, image or frame tag, no event handler, no link or source off the page."""
    low = page.lower()
    for tag in ("<script", "<img", "<iframe"):
        assert tag not in low, tag
    assert not re.search(r"<[^>]*\son\w+\s*=", low)  # onerror= inside a tag
    for tag in re.findall(r"<[a-z][^>]*>", low):  # real tags: text has its '<' escaped
        for url in re.findall(r"""\s(?:href|src)\s*=\s*["']?([^"'\s>]*)""", tag):
            assert "javascript:" not in url and "://" not in url and not url.startswith("//")


def visible_text(page: str) -> str:
    """The page's text as a reader sees it (tags removed, entities decoded)."""
    return html.unescape(re.sub(r"<[^>]+>", "", page))


def test_md_escape_makes_text_inert_and_keeps_it_readable():
    assert md_escape("a|b <i>&\nc") == "a\\|b &lt;i&gt;&amp; c"
    assert md_escape("[x](javascript:alert(1))") == "\\[x\\]\\(javascript:alert\\(1\\)\\)"
    assert md_escape("![](u) *e* _u_ `c` \\") == "\\!\\[\\]\\(u\\) \\*e\\* \\_u\\_ \\`c\\` \\\\"
    assert md_escape("line\r\nbreak\rand\nmore") == "line break and more"
    assert md_escape(3) == "3"
    # rendered, the escaped text is the original, and nothing else
    for text in HOSTILE:
        rendered = markdown.markdown(md_escape(text), extensions=["tables"])
        assert rendered == "<p>" + html.escape(text, quote=False) + "</p>"


def test_md_code_falls_back_to_text_for_what_a_code_span_cannot_hold():
    assert md_code("t/rigl/seed0") == "`t/rigl/seed0`"
    assert md_code("a`b") == "a\\`b"
    assert md_code("a|b") == "a\\|b"


def test_html_page_shows_raw_html_as_text_and_keeps_only_local_links():
    text = "\n\n".join(
        [
            "# Title",
            *HOSTILE,
            "<https://evil.example/auto> <a href='https://evil.example'>a</a> <!-- hidden -->",
            "[rel](other/page.html) [frag](#claims) [js](JaVaScRiPt:alert(1)) "
            "[host](//evil.example/x) [blank](java\tscript:alert(1))",
            "**bold** `code` *em* ![plot](plot.png)",
            "| a | b |\n|---|---|\n| 1 | <b>2</b> |",
        ]
    )
    page = html_page(text, "t <b>")
    plot = '<img alt="plot" src="plot.png">'  # a board's own plot, next to the page: kept
    assert plot in page
    assert_inert(page.replace(plot, ""))
    body = page[page.index("<body>") :]
    for raw in ("<script>alert(1)</script>", "<img src=x onerror=alert(1)>", "<!-- hidden -->"):
        assert raw in visible_text(body), raw  # shown as written, not dropped
    assert '<a href="other/page.html">rel</a>' in body and '<a href="#claims">frag</a>' in body
    assert "<a>js</a>" in body and "<a>host</a>" in body  # the link text stays, not the URL
    assert "<strong>bold</strong>" in body and "<code>code</code>" in body
    assert "<th>a</th>" in body and "<td>&lt;b&gt;2&lt;/b&gt;</td>" in body
    assert "<title>t &lt;b&gt;</title>" in page


def test_a_failed_cells_error_is_text_on_the_board_files(tmp_path: Path):
    runs = pl.DataFrame(
        {
            "cell_id": ["t/rigl/seed0", "t/set/seed0"],
            "status": ["failed", "ok"],
            "error": [" ".join(HOSTILE) + "\nTraceback | line 2", None],
        }
    )
    lines = failed_lines(runs)
    assert lines[0] == "1 cell(s) did not finish:"
    files = write_board_files(tmp_path, "\n".join(["# Board", "", *lines]), runs)
    md, page = files["md"].read_text(), files["html"].read_text()
    assert_inert(markdown.markdown(md))  # the .md is inert where it is rendered too
    assert_inert(page)
    shown = visible_text(page)
    for text in HOSTILE:
        assert text in shown, text
    assert "Traceback | line 2" in shown  # one list item: the line break is a space


def test_classification_board_shows_a_failed_records_error_as_text(make_record, tmp_path):
    records = [
        make_record(method="dense", seed=0, test_acc=0.95),
        make_record(method="rigl", seed=0, status="failed", error=" ".join(HOSTILE)),
    ]
    dtypes = {**COMMON_DTYPES, **{c: polars_dtype(t) for c, t in COLUMNS.items()}}
    runs = pl.from_dicts(records, schema_overrides=dtypes, infer_schema_length=None)
    files = write_leaderboard(runs, tmp_path)
    md, page = files["md"].read_text(), files["html"].read_text()
    assert "## Failed runs (1)" in md
    assert_inert(markdown.markdown(md, extensions=["tables"]))
    assert_inert(page)
    shown = visible_text(page)
    for text in HOSTILE:
        assert text in shown, text


# ---------------------------------------------------------------------------- one board style


def test_numbers_read_without_exponents_and_units_stay_in_headers():
    from sparsebench.suite.boards import PCT, Col, cell, columns_block, md_frame, readable, si

    assert readable(1250.0) == "1,250" and readable(0.01234) == "0.0123"
    assert readable(12.345) == "12.3" and readable(2.7e-16) == "2.7e-16"
    assert si(1.25e9) == "1.25 G" and si(830_000.0) == "830 k"
    acc = Col("acc", "test acc (%)", PCT, "higher", "pct")
    assert cell(0.97123, acc) == "97.12" and cell(None, acc) == "–"
    sparsity = Col("s", "sparsity (%)", PCT, None, "pct", digits=0)
    assert cell(0.999, sparsity) == "99.9" and cell(1.0, sparsity) == "100"  # not all gone
    assert cell(0.0004, sparsity) == "0.04" and cell(0.0, sparsity) == "0"
    assert cell(0.98, sparsity) == "98" and cell(0.9999, acc) == "99.99"
    lines = md_frame(pl.DataFrame({"acc": [0.5]}), [acc])
    assert lines[0] == "| test acc (%) |" and lines[2] == "| 50.00 |"
    assert columns_block([acc], pl.DataFrame({"acc": [0.5], "task_name": ["a"]})) == {
        "acc": {"unit": "fraction", "better": "higher", "header": "test acc (%)"},
        "task_name": {"unit": "", "better": None, "header": "task name"},
    }


def test_one_seed_shows_n1_and_two_seeds_mean_and_std():
    from sparsebench.suite.boards import PCT, Col, mean_std

    acc = Col("acc", "acc (%)", PCT, "higher", "pct")
    assert mean_std(0.9712, 0.0015, 3, acc) == "97.12 ± 0.15"
    assert mean_std(0.97, None, 1, acc) == "97.00 (n=1)"
    assert mean_std(0.1234, 0.01, 2, Col("fvu", "FVU")) == "0.123 ± 0.010"
    assert mean_std(None, None, 0, acc) == "–"


def test_a_tie_within_noise_is_marked_and_clear_gaps_are_not():
    from sparsebench.suite.boards import noise_ranks, rank_text

    # a: 0.90 ± 0.01, b: 0.895 ± 0.01 (3 seeds each): Welch t = 0.005 / sqrt(2 · 0.0001 / 3)
    # = 0.61, p ≈ 0.57: tied. c: 0.50 ± 0.01: t = 49 against a: its own rank, 3.
    df = pl.DataFrame(
        {"m": ["c", "a", "b"], "mean": [0.50, 0.90, 0.895], "std": [0.01] * 3, "n": [3] * 3}
    )
    out = noise_ranks(df, "mean", "std", "n", [], higher_better=True)
    got = {m: rank_text(r, t) for m, r, t in out.select("m", "rank", "tied").rows()}
    assert got == {"a": "=1", "b": "=1", "c": "3"}
    # lower is better (an FVU): the order turns round, the rule stays
    low = noise_ranks(df, "mean", "std", "n", [], higher_better=False)
    assert dict(low.select("m", "rank").rows()) == {"c": 1, "a": 2, "b": 2}
    # one seed has no spread to test: never ranked apart
    one = df.with_columns(n=pl.lit(1), std=pl.lit(None, dtype=pl.Float64))
    assert noise_ranks(one, "mean", "std", "n", [], True)["rank"].to_list() == [1, 1, 1]


def test_method_links_take_an_address_only_from_the_source_text():
    from sparsebench.suite.boards import method_link, source_url, sources_lines

    assert source_url("Zhu & Gupta 2017, arXiv:1710.01878, Sec. 3.") == (
        "https://arxiv.org/abs/1710.01878"
    )
    assert source_url("code github.com/prateeky2806/ties-merging.") == (
        "https://github.com/prateeky2806/ties-merging"
    )
    assert source_url("Evci et al. 2020, ICML, Algorithm 1") is None
    assert source_url("see https://example.org/a_b?x=1 (text)") == "https://example.org/a_b?x=1"
    assert method_link("gmp", ("pruning",)) == "[`gmp`](https://arxiv.org/abs/1710.01878)"
    assert method_link("rigl", ("dst",)) == "`rigl`"  # its source names no address
    assert method_link("not_registered", ("dst",)) == "`not_registered`"
    lines = sources_lines(["rigl", "rigl"], ("dst",))
    assert lines[0] == "**Sources**" and len(lines) == 4 and "Rigging the Lottery" in lines[2]


def test_over_trials_equals_grouping_by_hand():
    """Medians, the largest, trial 0's other columns and the order in which configurations
    first appear (trial 0 first, a null trial before it), against a plain-Python grouping."""
    import random
    import statistics

    import polars as pl

    from sparsebench.suite.boards import over_trials

    rng = random.Random(5)
    rows = [
        {
            "cell_id": f"c{i}",
            "shape": rng.choice(["a", "b", "c"]),
            "batch": rng.choice([1, 64]),
            "trial": rng.choice([0, 1, 2, None]),
            "ms": rng.uniform(1, 2),
            "err": rng.uniform(0, 1),
            "status": rng.choice(["ok", "ok", "ok", "failed"]),
        }
        for i in range(200)
    ]
    runs = pl.DataFrame(rows)
    got = over_trials(runs, ["shape", "batch"], ["ms"], largest=("err",))
    ok = [r for r in rows if r["status"] == "ok"]
    ok = sorted(enumerate(ok), key=lambda p: (-1 if p[1]["trial"] is None else p[1]["trial"], p[0]))
    groups: dict[tuple, list[dict]] = {}
    for _, r in ok:
        groups.setdefault((r["shape"], r["batch"]), []).append(r)
    want = [
        {
            "cell_id": g[0]["cell_id"],
            "shape": k[0],
            "batch": k[1],
            "ms": statistics.median(r["ms"] for r in g),
            "err": max(r["err"] for r in g),
            "status": "ok",
            "trials": len(g),
        }
        for k, g in groups.items()
    ]
    assert got.to_dicts() == want


def test_over_trials_puts_a_null_trial_first_and_takes_trial_as_a_key():
    import polars as pl

    from sparsebench.suite.boards import over_trials

    runs = pl.DataFrame({"status": ["ok"] * 3, "k": [1, 1, 1], "ms": [3.0, 1.0, 2.0],
                         "cell_id": ["t-5", "tnull", "t0"], "trial": [-5, None, 0]})  # fmt: skip
    assert over_trials(runs, ["k"], ["ms"])["cell_id"].to_list() == ["tnull"]
    # one row per trial, in trial order (null first)
    assert over_trials(runs, ["k", "trial"], ["ms"])["cell_id"].to_list() == ["tnull", "t-5", "t0"]
