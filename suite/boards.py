"""Board helpers shared by every pillar: Markdown tables of polars frames and the atomic
writing of a board's files (``leaderboard.{md,html,csv,json}`` and its plots)."""

from __future__ import annotations

import html
import math
import re
from collections.abc import Callable
from dataclasses import dataclass
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import polars as pl

from sparsebench.suite.atomic import write_atomic
from sparsebench.suite.record import write_json_atomic


def fmt(value: Any) -> str:
    """A table cell: ``–`` for null, a float by :func:`readable`, an integer with thousands
    separators, else ``str``."""
    if value is None:
        return "–"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, int):
        return f"{value:,}"
    if isinstance(value, float):
        return readable(value)
    return str(value)


def readable(x: float, digits: int = 3) -> str:
    """``x`` with ``digits`` significant digits and no exponent where a reader does not need
    one: ``1,250`` (not ``1.25e+03``), ``0.0123``; an exponent only below 0.001 (``2.7e-16``,
    an error next to zero) or for ``nan``/``inf``."""
    if x != x or x in (float("inf"), float("-inf")):
        return str(x)
    if x == 0:
        return "0"
    mag = abs(x)
    if mag < 1e-3:
        return f"{x:.{max(digits - 2, 1)}e}"
    if mag >= 10 ** (digits - 1):
        return f"{x:,.0f}"
    decimals = digits - 1 - math.floor(math.log10(mag))
    return f"{x:.{decimals}f}"


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
strong.v-holds, strong.v-fails, strong.v-inconclusive {{ padding: 0 0.35em;
  border: 1px solid; border-radius: 0.3em; white-space: nowrap; }}
.v-holds {{ background: #dcf3e1; color: #14532d; border-color: #6fbf85; }}
.v-fails {{ background: #fbe0df; color: #7f1d1d; border-color: #e08a86; }}
.v-inconclusive {{ background: #fff2c9; color: #5c4300; border-color: #d9b955; }}
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
    **{f"h{i}": {"id"} for i in range(1, 7)},  # a heading's anchor, for a contents list
    "strong": {"class"},  # a verdict badge: one of _CLASSES
    "a": {"href", "title"},
    "img": {"src", "alt", "title"},
    "ol": {"start"},
    "th": {"style"},
    "td": {"style"},
}
_VOID = frozenset({"br", "hr", "img"})
# The classes a page's CSS (_PAGE) colours: a badge adds colour to words it keeps.
_CLASSES = frozenset({"v-holds", "v-fails", "v-inconclusive"})
_ID = re.compile(r"[\w-]{1,200}")
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
            if (name == "class" and value not in _CLASSES) or (
                name == "id" and not _ID.fullmatch(value)
            ):
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


def html_page(markdown_text: str, title: str, attrs: bool = False) -> str:
    """A self-contained HTML page of a Markdown document (tables included), for
    ``snakemake --report``, which shows HTML results inline. Rendered by the ``markdown``
    package with its ``tables`` extension; raw HTML and ``<url>`` autolinks in the text are
    shown as text (the package has no safe mode: its raw-HTML and autolink processors are
    removed), and the result is cleaned by :func:`sanitize_html`, so the page runs no script
    and loads nothing from elsewhere whatever the text holds. ``title`` is HTML-escaped.
    ``attrs``: read ``{: #id}`` and ``{: .class}`` blocks (``attr_list``) as a heading's
    anchor and a badge's class (the sanitizer keeps only those), for a document whose text
    has its braces escaped (``suite.claims.outputs``)."""
    body = markdown_body(markdown_text, attrs)
    return _PAGE.format(title=html.escape(title), body=body)


def markdown_body(markdown_text: str, attrs: bool = False) -> str:
    """The sanitized HTML of a Markdown document, without a page around it (see
    :func:`html_page`)."""
    import markdown

    md = markdown.Markdown(extensions=["tables", *(["attr_list"] if attrs else [])])
    md.preprocessors.deregister("html_block")
    for pattern in ("html", "autolink", "automail"):
        md.inlinePatterns.deregister(pattern)
    return sanitize_html(md.convert(markdown_text))


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
    keys = [c for c in configuration if c in runs.columns]
    cols = [c for c in runs.columns if c not in ("trial", "trials")]
    reduced = [c for c in cols if c not in keys and (c in medians or c in largest)]
    # Trial 0 first (a null trial before it): its row's id and label stand for the
    # configuration. The group-by reads only the keys and the reduced columns; the other
    # columns are gathered from each configuration's first row, not carried through it.
    first = (
        pl.col("trial").cast(pl.Float64).fill_null(float("-inf"))  # a null trial comes first
        if "trial" in runs.columns
        else pl.lit(0.0)
    )
    count = pl.col("trials").sum() if "trials" in runs.columns else pl.len()
    read = dict.fromkeys([*keys, *reduced, *(c for c in ("trial", "trials") if c in runs.columns)])
    slim = (
        runs.select(*read, ok=pl.col("status") == "ok", _t=first)
        .with_row_index("_i")
        .filter(pl.col("ok"))
    )
    groups = (
        slim.group_by(keys, maintain_order=True)
        .agg(
            pl.col("_i").get(pl.col("_t").arg_min()).alias("_first"),
            pl.col("_t").min().alias("_t"),
            *(pl.col(c).median() if c in medians else pl.col(c).max() for c in reduced),
            count.cast(pl.Int64).alias("trials"),
        )
        .sort("_t", "_first")  # where each configuration first appears, trial 0 first
    )
    other = [c for c in cols if c not in keys and c not in reduced]
    rows = runs.select(other)[groups["_first"]] if other else pl.DataFrame()
    out = pl.concat([groups.drop("_first", "_t"), rows], how="horizontal")
    return out.select(*cols, "trials")


# ---------------------------------------------------------------------------- one board style
#
# Every pillar's board follows one convention (README, "The results layout, a record and the
# leaderboard"):
# - units: shares of a whole (accuracy, sparsity, density, dead latents) are fractions in CSV
#   and JSON (unit "fraction", 1 = 100 %) and percent in Markdown and HTML, the "%" in the
#   header; seconds, milliseconds, FLOPs, MB and counts keep their unit everywhere; ratios
#   (÷ dense, speed-ups) show as "0.55×"; unitless scores (FVU, MCC, loss recovered, an
#   exponent) as plain numbers. The JSON's ``columns`` block gives each key's unit, the
#   direction that is better and its Markdown header.
# - numbers: 3 significant digits, thousands separators, an exponent only below 0.001.
# - spread: "mean ± std" only where n ≥ 2 seeds; one seed shows its value and "(n=1)".
# - ranks: a row shares the rank of the best row of its group while Welch's t-test
#   (scipy.stats, two-sided) cannot tell it from that row at the 5 % level, shown "=2"; a row
#   of one seed cannot be told from anything and joins the group above it.
# - method names link to the paper the registry names (a URL only where the source text has
#   one; an arXiv id or a github.com path counts), and each board lists the sources it shows.
#
# The Markdown writer stays hand-rolled, measured against the libraries: great_tables has no
# Markdown output (HTML and LaTeX only; `python -X importtime -c "import great_tables"`: 0.17-0.20
# s cumulative on the development machine, 9.4 KB of HTML and CSS for a one-row table); polars'
# Config(tbl_formatting="MARKDOWN") wraps a cell longer than its width budget and a cell with a
# line break into extra table rows (a 70,000-character error became 23,000 rows) and panics
# when tbl_width_chars exceeds 65,535. Here every cell is escaped and kept on its row.

PCT = "fraction"  # the stored unit of a share; Markdown shows it in percent
HIGHER, LOWER = "higher", "lower"


@dataclass(frozen=True)
class Col:
    """One board column: ``key`` in the frame, CSV and JSON; ``header`` in Markdown (with its
    unit); ``unit`` of the stored value; ``better``: ``higher``, ``lower`` or None; ``show``:
    how Markdown writes it (``pct`` a fraction as percent, ``num`` :func:`readable`, ``int``
    with separators, ``si`` with an SI prefix, ``times`` a ratio with ×, ``sci`` one exponent
    digit, ``text`` escaped, ``code`` a code span, ``method`` a link to the source)."""

    key: str
    header: str
    unit: str = ""
    better: str | None = None
    show: str = "num"
    digits: int = 2  # decimals of pct and times, significant digits of num


def pct(value: float, digits: int) -> str:
    """100 · ``value`` with ``digits`` decimals, more where rounding would show a fraction
    short of 1 (or above 0) as exactly 100 (or 0): 99.9 % sparse is not dense-free."""
    text = f"{100 * value:.{digits}f}"
    while digits < 6 and (
        (float(text) == 100.0 and value != 1.0) or (float(text) == 0.0 and value != 0.0)
    ):
        digits += 1
        text = f"{100 * value:.{digits}f}"
    return text


def cell(value: Any, col: Col, families: tuple[str, ...] = ()) -> str:
    """``value`` as ``col`` shows it in Markdown (``–`` for null)."""
    if value is None or (isinstance(value, float) and value != value and col.show != "num"):
        return "–"
    match col.show:
        case "pct":
            return pct(value, col.digits)
        case "times":
            return f"{value:.{col.digits}f}×" if abs(value) < 100 else f"{readable(value)}×"
        case "int":
            return f"{int(round(value)):,}"
        case "si":
            return si(value)
        case "sci":
            return "0" if value == 0 else f"{value:.1e}"
        case "text":
            return md_escape(value)
        case "code":
            return md_code(value)
        case "method":
            return method_link(str(value), families)
        case "md":
            return str(value)
    return readable(value, max(col.digits, 3)) if isinstance(value, float) else fmt(value)


def si(x: float) -> str:
    """``x`` with an SI prefix and 3 significant digits: ``1.25 G``, ``830 k``, ``12``."""
    for factor, prefix in ((1e15, "P"), (1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k")):
        if abs(x) >= factor:
            return f"{readable(x / factor)} {prefix}"
    return readable(float(x))


def mean_std(mean: float | None, std: float | None, n: int | None, col: Col, unit: str = "") -> str:
    """``97.12 ± 0.15`` for n ≥ 2, ``97.12 (n=1)`` for one seed, ``–`` without a value; the
    std in the same unit and decimals as the mean; ``unit`` (e.g. ``%``) after the numbers,
    before the n."""
    if mean is None or not n:
        return "–"
    text = cell(mean, col)
    unit = f" {unit}" if unit else ""
    if n < 2 or std is None:
        return f"{text}{unit} (n=1)" if n == 1 else f"{text}{unit}"
    if col.show == "pct":
        spread = f"{100 * std:.{col.digits}f}"
    elif col.show == "num" and "." in text and "e" not in text:  # to the mean's last decimal
        spread = f"{std:.{len(text.split('.')[1])}f}"
    else:
        spread = cell(std, col)
    return f"{text} ± {spread}{unit}"


def md_frame(df: pl.DataFrame, cols: list[Col], families: tuple[str, ...] = ()) -> list[str]:
    """The Markdown lines of ``df``'s columns named by ``cols`` (header: each column's
    ``header``; cells by :func:`cell`; a column already rendered to text, e.g. a ``mean ±
    std`` cell, is escaped)."""
    lines = ["| " + " | ".join(c.header for c in cols) + " |", "|" + "---|" * len(cols)]
    for row in df.select(c.key for c in cols).iter_rows():
        cells = [
            md_escape(v) if isinstance(v, str) and c.show not in ("code", "method", "md") else
            cell(v, c, families)
            for v, c in zip(row, cols)
        ]  # fmt: skip
        lines.append("| " + " | ".join(cells) + " |")
    return lines


def columns_block(cols: list[Col], *frames: pl.DataFrame) -> dict[str, dict[str, Any]]:
    """The JSON ``columns`` block: for every key of ``frames`` its unit, the better direction
    (``higher``, ``lower`` or null) and its Markdown header; keys ``cols`` does not declare
    are identifiers or text (no unit, no direction)."""
    known = {c.key: c for c in cols}
    block: dict[str, dict[str, Any]] = {}
    for frame in frames:
        for key in frame.columns:
            c = known.get(key, Col(key, key.replace("_", " ")))
            block.setdefault(key, {"unit": c.unit, "better": c.better, "header": c.header})
    return block


def board_json(cols: list[Col], rows: pl.DataFrame, **tables: pl.DataFrame) -> dict[str, Any]:
    """A board's ``leaderboard.json``: ``units`` (the convention), ``columns``
    (:func:`columns_block` of every table), ``rows`` and each further table by name."""
    return {
        "units": "shares (unit 'fraction') are fractions, 1 = 100 %; Markdown shows them in %",
        "columns": columns_block(cols, rows, *tables.values()),
        "rows": rows.to_dicts(),
        **{name: t.to_dicts() for name, t in tables.items()},
    }


def separated(a: tuple[float, float | None, int], b: tuple[float, float | None, int]) -> bool:
    """Whether two (mean, std, n) rows differ at the 5 % level by Welch's t-test; a row of
    one seed (no std) is never separated; two rows without spread (std 0: deterministic) are
    separated when their means differ."""
    (m1, s1, n1), (m2, s2, n2) = a, b
    if n1 < 2 or n2 < 2 or s1 is None or s2 is None:
        return False
    if s1 == 0 and s2 == 0:
        return m1 != m2
    from scipy.stats import ttest_ind_from_stats

    p = ttest_ind_from_stats(m1, s1, n1, m2, s2, n2, equal_var=False).pvalue
    return bool(p < 0.05)


def noise_ranks(
    df: pl.DataFrame, mean: str, std: str, n: str, over: list[str], higher_better: bool
) -> pl.DataFrame:
    """``df`` with ``rank`` (Int64) and ``tied`` (Boolean) by ``mean`` within the ``over``
    groups: rows sorted best first; a row joins the tie group of the row above when
    :func:`separated` cannot tell it from that group's best row, else starts a group whose
    rank is its position (1, =2, =2, 4); ``tied`` marks groups of two or more. Null means:
    null rank. Row order is kept."""
    ranks: list[int | None] = [None] * df.height
    tied: list[bool | None] = [None] * df.height
    idx = df.with_row_index("_i")
    groups = idx.group_by(over, maintain_order=True) if over else [((), idx)]
    for _, g in groups:
        g = g.filter(pl.col(mean).is_not_null()).sort(mean, descending=higher_better)
        rows = list(zip(g["_i"], g[mean], g[std], g[n].fill_null(0), strict=True))
        members: list[list[int]] = []
        leader = None
        for pos, (i, m, s, k) in enumerate(rows):
            if leader is None or separated(leader, (m, s, k)):
                leader, rank = (m, s, k), pos + 1
                members.append([])
            members[-1].append(i)
            ranks[i] = rank
        for group in members:
            for i in group:
                tied[i] = len(group) > 1
    return df.with_columns(
        pl.Series("rank", ranks, dtype=pl.Int64), pl.Series("tied", tied, dtype=pl.Boolean)
    )


def rank_text(rank: int | None, tied: bool | None) -> str:
    """``2``, ``=2`` for a rank shared within noise, ``–`` unranked."""
    if rank is None:
        return "–"
    return f"={rank}" if tied else str(rank)


# An address in a method's "Source:" text: a URL, a github.com path or an arXiv id (the
# characters a Markdown link target can hold without escaping).
_URL = re.compile(r"https?://[A-Za-z0-9._~/?#=&%+-]+")
_GITHUB = re.compile(r"(?<![/\w.])github\.com/[A-Za-z0-9._~/-]+")
_ARXIV = re.compile(r"arXiv[: ]\s*(\d{4}\.\d{4,5})", re.IGNORECASE)


def source_url(source: str) -> str | None:
    """The first address in ``source`` (a registry ``MethodInfo.source``), or None."""
    found = [(m.start(), m.group(0)) for m in _URL.finditer(source)]
    found += [(m.start(), "https://" + m.group(0)) for m in _GITHUB.finditer(source)]
    found += [(m.start(), f"https://arxiv.org/abs/{m.group(1)}") for m in _ARXIV.finditer(source)]
    if not found:
        return None
    return min(found)[1].rstrip(".,;:")


def _sources(families: tuple[str, ...]) -> dict[str, str]:
    if not families:
        return {}
    from sparsebench.suite import registry

    try:
        return {n: i.source for n, i in registry.all_methods(families).items()}
    except registry.RegistryError:
        return {}


def method_link(name: str, families: tuple[str, ...]) -> str:
    """``name`` as a code span, linked to its source's address when the registry gives one."""
    url = source_url(_sources(families).get(name, ""))
    return f"[{md_code(name)}]({url})" if url else md_code(name)


def sources_lines(names: list[str], families: tuple[str, ...]) -> list[str]:
    """A "Sources" list: each of ``names`` (registered in ``families``) with the registry's
    source text, escaped, and its address."""
    known = _sources(families)
    lines = []
    for name in dict.fromkeys(names):
        text = known.get(name)
        if text:  # the docstrings' reST literals and roles (``x``, :func:`x`) read plain here
            text = re.sub(r":\w+:`([^`]+)`", r"\1", text.replace("``", ""))
            lines.append(f"- {method_link(name, families)}: {md_escape(text)}")
    return ["**Sources**", "", *lines, ""] if lines else []


def join_values(values: list[Any], sep: str = ", ") -> str:
    """Values as text without a Python list around them: ``39, 41`` (numbers by :func:`fmt`)."""
    return sep.join(fmt(v) for v in values) or "–"


def log_ticks(axis: Any, si_prefix: bool = False) -> None:
    """A log-scale matplotlib ``axis`` labelled in plain numbers (``3``, ``20``; with
    ``si_prefix``: ``2 G``, ``50 G``), more labels per decade the fewer decades the axis
    spans (1, 2, 3, 4, 5, 7 within one; powers of ten beyond three: labels never crowd), no
    minor labels:
    matplotlib's default ``4×10⁰`` labels are hard to read and overlap."""
    from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter

    class PlainLogLocator(LogLocator):
        def tick_values(self, vmin: float, vmax: float) -> Any:
            low, high = sorted((max(vmin, 1e-300), max(vmax, 1e-300)))
            decades = math.log10(high / low)
            steps = ((1.0, (1.0, 2.0, 3.0, 4.0, 5.0, 7.0)), (1.5, (1.0, 2.0, 3.0, 5.0)),
                     (3.0, (1.0, 2.0, 5.0)), (math.inf, (1.0,)))  # fmt: skip
            if si_prefix:  # "20 G" is wider than "20": one step coarser
                steps = ((1.0, (1.0, 2.0, 3.0, 5.0)), (3.0, (1.0, 2.0, 5.0)), (math.inf, (1.0,)))
            self.set_params(subs=next(subs for span, subs in steps if decades <= span))
            return super().tick_values(vmin, vmax)

    def label(v: float, _: Any) -> str:
        if si_prefix:
            for factor, prefix in ((1e12, " T"), (1e9, " G"), (1e6, " M"), (1e3, " k")):
                if v >= factor:
                    return f"{v / factor:g}{prefix}"
        return f"{v:g}" if v >= 1e-4 else f"{v:.0e}"

    axis.set_major_locator(PlainLogLocator(base=10))
    axis.set_major_formatter(FuncFormatter(label))
    axis.set_minor_formatter(NullFormatter())
