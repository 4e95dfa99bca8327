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
