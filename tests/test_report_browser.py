"""The report and the claims page of a tiny run, opened in headless Chromium: the front page,
every pillar's board and plots, and the claims overview are there, and neither page requests
anything outside its file. Skipped without Chromium unless REQUIRE_BROWSER=1 (CI)."""

import pytest

from sparsebench.suite.pillar import get_pillar
from tests.browser import Browser, chromium, outside
from tests.test_run_command import CLAIMS, sparsebench

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

SPEC = """benchmark: tinyr
data_root: data
toy: {{values: [1, 2, -1]}}
claims: [claims.yaml]
classification:
  tasks:
    digits_mlp:
      dataset: digits
      model: lenet300_100
      recipe: {{epochs: 1, batch_size: 64, lr: 0.05}}
  methods: {{dense: {{}}, static: {{}}}}
  sparsities: [0.9]
  seeds: [0]
"""


def test_report_and_claims_page_show_everything_and_load_nothing_from_outside(tmp_path):
    chromium()  # skip (or fail under REQUIRE_BROWSER=1) before the run when there is none
    (tmp_path / "claims.yaml").write_text(CLAIMS)
    (tmp_path / "tiny.yaml").write_text(SPEC.format())
    run = sparsebench(tmp_path, "run", "tiny.yaml", "--cores", "2", "--report", "--strict")
    assert run.returncode == 1, run.stdout + run.stderr  # the toy's -1 fails: counted
    bench = tmp_path / "results" / "tinyr"
    with Browser() as browser:
        report = browser.open((bench / "report.html").as_uri())
        claims = browser.open((bench / "claims.html").as_uri())
        # the check can fail: a page that loads an outside image is caught
        control = "data:text/html,<img src='http://example.invalid/x.png'>"
        assert outside(browser.open(control, settle=1).requests) == ["http://example.invalid/x.png"]
    for page in (report, claims):
        assert page.requests, "the page was not loaded"
        assert outside(page.requests) == []
    # the front page: outcome, summary, cells and time, environment, spec
    for text in ("1 failed / diverged", "Summary", "Cells and time", "Environment", "The spec"):
        assert text in report.text, text
    assert "Claims" in report.text and "Toy" in report.text  # the result categories
    # every pillar's board page and plots are in the report (the toy pillar has no plot)
    for plot in get_pillar("classification").plots:
        assert plot.file in report.html, plot.file
    assert report.html.count("leaderboard.html") >= 2
    # the cells' own jobs are in the job graph, not only the boards that ran last
    assert "run_classification_digits_mlp" in report.html and "run_toy" in report.html
    # the claims page: the overview with the verdict as a word, not only a symbol
    assert "Overview" in claims.text and "holds" in claims.text
