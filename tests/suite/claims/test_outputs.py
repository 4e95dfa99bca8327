"""claims.{md,json,tex}: valid LaTeX macro names, formatted values, the badge, the CLI."""

import json
import re

from sparsebench.suite.claims import badge, judge, macro_name, write
from sparsebench.suite.cli import main

from .conftest import one, rows, table

KEYS = {"classification": ("task", "method", "setting_id", "target_sparsity", "seed")}
ORDER = {"kind": "order", "a": {"method": "rigl"}, "b": {"method": "set"}, "op": ">"}


def test_macro_names_are_tex_control_words():
    assert macro_name("rigl-set-static-90", "Verdict") == r"\claimRiglSetStaticNineZeroVerdict"
    assert macro_name("snfs-set", "MeanA") == r"\claimSnfsSetMeanA"
    for cid in ("a-1", "x2y-3z", "erk-uniform-98"):
        assert re.fullmatch(r"\\[A-Za-z]+", macro_name(cid, "High"))


def test_cell_letters_go_past_z():
    from sparsebench.suite.claims.outputs import _letters

    assert [_letters(i) for i in (0, 1, 25, 26, 27, 51, 52)] == [
        "A", "B", "Z", "AA", "AB", "AZ", "BA"]  # fmt: skip


def test_outputs_carry_the_numbers_and_the_verdicts(claim, tmp_path):
    runs = table(rows("rigl", [0.93, 0.94, 0.935]), rows("set", [0.90, 0.905, 0.91]))
    held = judge(claim(ORDER), {"classification": runs}, KEYS)
    missing = judge(claim({**ORDER, "b": {"method": "snip"}}), {"classification": runs}, KEYS)
    verdicts = [held, missing]
    assert badge(verdicts) == "claims: 1 holds / 0 fails / 1 inconclusive (of 2)"
    files = write(verdicts, tmp_path / "bench")
    tex = files["tex"].read_text()
    assert r"\newcommand{\claimsHold}{1}" in tex and r"\newcommand{\claimsInconclusive}{1}" in tex
    assert r"\newcommand{\claimCOneVerdict}{holds}" in tex
    assert r"\newcommand{\claimCOneMeanA}{93.50}" in tex  # a fraction, in percent
    assert r"\newcommand{\claimCOneEstimate}{3.00}" in tex  # a difference of fractions: points
    for line in tex.splitlines()[1:]:
        assert re.fullmatch(r"\\newcommand\{\\[A-Za-z]+\}\{[-+.e0-9A-Za-z]+\}", line), line
    data = json.loads(files["json"].read_text())
    assert data["claims"][0]["cells"][0]["values"] == [0.93, 0.94, 0.935]
    assert data["claims"][1]["verdict"] == "inconclusive" and data["claims"][1]["low"] is None
    md = files["md"].read_text()
    assert "**claims: 1 holds / 0 fails / 1 inconclusive (of 2)**" in md
    assert "| **holds** |" in md and "no cell matches method=snip" in md and "93.50 ± 0.50" in md
    assert "| **inconclusive: not run** |" in md


def test_cli_checks_files_and_judges_a_results_folder(claim_file, tmp_path, capsys):
    good = claim_file([one("rigl-set", **ORDER)])
    assert main(["claims", "--check", str(good)]) == 0
    assert "1 claim(s) valid: rigl-set" in capsys.readouterr().out
    bad = claim_file([one("rigl-set", **ORDER, metric="acc")], name="bad.yaml")
    assert main(["claims", "--check", str(bad)]) == 2
    assert "bad.yaml: claim 'rigl-set': unknown metric 'acc'" in capsys.readouterr().err
    bench = tmp_path / "results" / "b"
    (bench / "classification").mkdir(parents=True)
    runs = table(rows("rigl", [0.93, 0.94, 0.935]), rows("set", [0.90, 0.905, 0.91]))
    runs.write_parquet(bench / "classification" / "runs.parquet")
    assert main(["claims", str(bench), str(good)]) == 0
    out = capsys.readouterr().out
    assert "holds  rigl-set" in out and "claims: 1 holds / 0 fails / 0 inconclusive" in out
    assert (bench / "claims.md").is_file() and (bench / "claims.tex").is_file()
    assert main(["claims", str(tmp_path / "nowhere"), str(good)]) == 2
