"""Board helpers shared by every pillar: Markdown tables of polars frames and the atomic
writing of a board's files (``leaderboard.{md,html,csv,json}`` and its plots)."""

from __future__ import annotations

import html
import re
from collections.abc import Callable
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import polars as pl

from sparsebench.suite.atomic import write_atomic
from sparsebench.suite.record import write_json_atomic


def fmt(value: Any) -> str:
    """A table cell: ``–`` for null, 3 significant digits for a float, else ``str``."""
    if value is None:
        return "–"
    if isinstance(value, float):
        return f"{value:.3g}"
    return str(value)


# Markdown punctuation that could start a link, an image, emphasis, code or a table column
# (the backslash first, so that the escapes added after it stay escapes).
_MD_PUNCT = re.compile(r"([\\`*_\[\]()!|])")


def md_escape(value: Any) -> str:
    """``value`` as inert inline Markdown text: HTML-significant characters as entities, the
    punctuation of links, images, emphasis, code and tables backslash-escaped, and line breaks
    as spaces, so that text from a claim file, a spec or an error shows as written and can
    neither add markup, a link or an image nor break a table row. Not for the start of a line
    (``1. `` or ``- `` there would still start a list)."""
    text = _MD_PUNCT.sub(r"\\\1", str(value))
    text = text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
    return re.sub(r"\r\n|\r|\n", " ", text)


def md_code(value: Any) -> str:
    """``value`` as a code span when that shows it as written (no backtick, pipe or line break
    in it: inside a code span escapes show literally), else as :func:`md_escape` text."""
    text = str(value)
    return md_escape(text) if re.search(r"[`|\r\n]", text) else f"`{text}`"


def md_table(df: pl.DataFrame) -> list[str]:
    """The Markdown lines of ``df`` (header, rule, one line per row; cells by :func:`fmt`,
    text cells escaped by :func:`md_escape`: they hold names and labels from the spec)."""
    lines = ["| " + " | ".join(df.columns) + " |", "|" + "---|" * len(df.columns)]
    lines += [
        "| " + " | ".join(md_escape(v) if isinstance(v, str) else fmt(v) for v in row) + " |"
        for row in df.iter_rows()
    ]
    return lines


_PAGE = """<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>{title}</title>
<style>
body {{ font-family: system-ui, sans-serif; margin: 1.5em; max-width: 110em; }}
table {{ border-collapse: collapse; margin: 0.8em 0; font-size: 0.9em; }}
th, td {{ border: 1px solid #ccc; padding: 0.25em 0.5em; vertical-align: top; }}
th {{ background: #f3f3f3; }}
code {{ background: #f6f6f6; padding: 0 0.2em; }}
</style></head><body>
{body}
</body></html>
"""


# The tags Markdown makes of headings, paragraphs, lists, emphasis, code, rules, links,
# images and tables, and the attributes it gives them: the only markup a page may hold.
_TAGS = frozenset(
    "h1 h2 h3 h4 h5 h6 p br hr em strong code pre blockquote ul ol li a img "
    "table thead tbody tr th td".split()
)
_ATTRS = {
    "a": {"href", "title"},
    "img": {"src", "alt", "title"},
    "ol": {"start"},
    "th": {"style"},
    "td": {"style"},
}
_VOID = frozenset({"br", "hr", "img"})
_ALIGN = re.compile(r"text-align: (left|right|center);?")


def _local_url(url: str) -> bool:
    """A fragment or a relative link (no scheme such as ``javascript:``, no host): a page
    loads and links nothing outside itself and its folder."""
    if any(ord(ch) <= 0x20 or ch == "\\" for ch in url) or url.startswith("//"):
        return False  # browsers drop blanks in a URL and read a backslash as '/'
    return ":" not in re.split(r"[/?#]", url, maxsplit=1)[0]


class _Sanitizer(HTMLParser):
    """Rebuilds rendered HTML keeping only :data:`_TAGS` with their :data:`_ATTRS` (local
    links only); any other tag, comment or declaration is shown as text."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.out: list[str] = []

    def _tag(self, tag: str, attrs: list[tuple[str, str | None]]) -> str:
        keep = []
        for name, value in attrs:
            value = value or ""
            if name not in _ATTRS.get(tag, ()):
                continue
            if name in ("href", "src") and not _local_url(value):
                continue
            if name == "style" and not _ALIGN.fullmatch(value):
                continue
            keep.append(f' {name}="{html.escape(value)}"')
        return f"<{tag}{''.join(keep)}>"

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag == "img" and not any(k == "src" and _local_url(v or "") for k, v in attrs):
            return  # an image from elsewhere (or none): nothing to show
        if tag in _TAGS:
            self.out.append(self._tag(tag, attrs))
        else:
            self.out.append(html.escape(self.get_starttag_text() or f"<{tag}>"))

    def handle_startendtag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag in _VOID:
            self.handle_starttag(tag, attrs)
        else:
            self.out.append(html.escape(self.get_starttag_text() or f"<{tag}/>"))

    def handle_endtag(self, tag: str) -> None:
        if tag in _TAGS and tag not in _VOID:
            self.out.append(f"</{tag}>")
        elif tag not in _VOID:
            self.out.append(html.escape(f"</{tag}>"))

    def handle_data(self, data: str) -> None:
        self.out.append(html.escape(data, quote=False))

    def handle_comment(self, data: str) -> None:
        self.out.append(html.escape(f"<!--{data}-->"))

    def handle_decl(self, decl: str) -> None:
        self.out.append(html.escape(f"<!{decl}>"))

    def unknown_decl(self, data: str) -> None:
        self.out.append(html.escape(f"<![{data}]>"))

    def handle_pi(self, data: str) -> None:
        self.out.append(html.escape(f"<?{data}>"))


def sanitize_html(fragment: str) -> str:
    """``fragment`` with only the markup Markdown produces for text, tables, code, local links
    and images; everything else (``<script>``, ``<iframe>``, event handlers, ``javascript:``
    or external URLs) shown as text or dropped."""
    parser = _Sanitizer()
    parser.feed(fragment)
    parser.close()
    return "".join(parser.out)


def html_page(markdown_text: str, title: str) -> str:
    """A self-contained HTML page of a Markdown document (tables included), for
    ``snakemake --report``, which shows HTML results inline. Rendered by the ``markdown``
    package with its ``tables`` extension; raw HTML and ``<url>`` autolinks in the text are
    shown as text (the package has no safe mode: its raw-HTML and autolink processors are
    removed), and the result is cleaned by :func:`sanitize_html`, so the page runs no script
    and loads nothing from elsewhere whatever the text holds. ``title`` is HTML-escaped."""
    import markdown

    md = markdown.Markdown(extensions=["tables"])
    md.preprocessors.deregister("html_block")
    for pattern in ("html", "autolink", "automail"):
        md.inlinePatterns.deregister(pattern)
    body = sanitize_html(md.convert(markdown_text))
    return _PAGE.format(title=html.escape(title), body=body)


def write_board_files(
    out_dir: Path,
    markdown: str,
    table: pl.DataFrame,
    json_data: dict[str, Any] | None = None,
    plots: dict[str, Callable[[Path], None]] | None = None,
) -> dict[str, Path]:
    """Write ``leaderboard.md`` (``markdown``), ``leaderboard.html`` (the same as a page, for
    ``snakemake --report``), ``leaderboard.csv`` (``table``),
    ``leaderboard.json`` (``json_data``, default the table's rows) and each plot
    (file name -> ``draw(path)``; the path may be a temporary name: pass ``format="png"``),
    every file atomically. Returns the paths by kind: md, csv, json, png (the first plot) and
    each plot's file name."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    files = {k: out_dir / f"leaderboard.{k}" for k in ("md", "html", "csv", "json")}
    write_atomic(files["md"], markdown)
    page = html_page(markdown, f"{out_dir.name} leaderboard")
    write_atomic(files["html"], page)
    write_atomic(files["csv"], table.write_csv)
    if json_data is None:
        write_atomic(files["json"], table.write_json)
    else:
        write_json_atomic(files["json"], json_data)
    for i, (name, draw) in enumerate((plots or {}).items()):
        files[name] = out_dir / name
        if i == 0:
            files["png"] = files[name]
        write_atomic(files[name], draw)
    return files


def failed_lines(runs: pl.DataFrame) -> list[str]:
    """Markdown lines listing the cells of ``runs`` whose status is not ``ok`` (with their
    error), or nothing when every cell finished."""
    failed = runs.filter(pl.col("status") != "ok")
    if not failed.height:
        return []
    lines = [f"{failed.height} cell(s) did not finish:", ""]
    lines += [
        f"- {md_code(r['cell_id'])} ({md_escape(r['status'])}): {md_escape(r['error'])}"
        for r in failed.iter_rows(named=True)
    ]
    return [*lines, ""]


def over_trials(
    runs: pl.DataFrame,
    configuration: list[str],
    medians: list[str],
    largest: tuple[str, ...] = (),
) -> pl.DataFrame:
    """The ok rows of ``runs``, one per configuration (the ``configuration`` columns present),
    for a pillar that measures each cell in several trials (independent jobs): ``medians``
    columns the median over the configuration's trials (robust to one trial slowed by a busy
    machine), ``largest`` the largest (a worst case), ``trials`` their number, every other
    column trial 0's. A table with one row per configuration comes back as it is, ``trials``
    1; one that already has ``trials`` keeps its counts."""
    ok = runs.filter(pl.col("status") == "ok")
    if "trial" in ok.columns:  # trial 0 first: its id and label stand for the configuration
        ok = ok.sort("trial", nulls_last=False, maintain_order=True)
    keys = [c for c in configuration if c in ok.columns]
    rest = [c for c in ok.columns if c not in keys and c not in ("trial", "trials")]

    def agg(c: str) -> pl.Expr:
        if c in medians:
            return pl.col(c).median()
        return pl.col(c).max() if c in largest else pl.col(c).first()

    count = pl.col("trials").sum() if "trials" in ok.columns else pl.len()
    out = ok.group_by(keys, maintain_order=True).agg(
        *map(agg, rest), count.cast(pl.Int64).alias("trials")
    )
    return out.select(*(c for c in ok.columns if c not in ("trial", "trials")), "trials")
