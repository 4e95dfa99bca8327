"""A claim file is anyone's data: numbers that are not finite are refused where it is read,
and its size, encoding, aliases and nesting are bounded (the same bounds as a spec's)."""

from __future__ import annotations

from pathlib import Path

import pytest

from sparsebench.suite.claims import ClaimError, load_file
from sparsebench.suite.spec import SpecError
from sparsebench.suite.spec import load as load_spec

HEAD = """\
paper: {key: toy2026, authors: A. Author, year: 2026, title: A paper}
defaults: {pillar: classification, metric: test_acc%s}
claims:
  - id: c-1
    statement: s
    source: {where: T1, setting: x}
    why: w
    test: {%s}
"""
ORDER = "kind: order, a: {method: rigl}, b: {method: set}, op: '>'"
EQUAL = "kind: equal, a: {method: rigl}, b: {method: set}"
RATIO = "kind: ratio, a: {method: rigl}, b: {method: set}, op: '>'"
VALUE = "kind: value, a: {method: rigl}, op: '>'"


def write(tmp_path: Path, text: str | bytes, name: str = "toy.yaml") -> Path:
    path = tmp_path / name
    if isinstance(text, bytes):
        path.write_bytes(text)
    else:
        path.write_text(text)
    return path


@pytest.mark.parametrize(
    ("defaults", "test", "message"),
    [
        ("", ORDER + ", margin: -.inf", r"claim 'c-1': test\.margin: -inf is not a finite"),
        ("", EQUAL + ", tol: 1e309", r"claim 'c-1': test\.tol: inf is not a finite number"),
        ("", RATIO + ", threshold: .inf", r"claim 'c-1': test\.threshold: inf is not a finite"),
        ("", ORDER + ", level: .NaN", r"claim 'c-1': test\.level: nan is not a finite number"),
        (", level: .nan", ORDER, r"toy\.yaml: defaults\.level: nan is not a finite number"),
        ("", ORDER + ", margin: " + "9" * 400, r"test\.margin: 9{400} is not a finite number"),
        ("", VALUE + ", bound: -1e400", r"test\.bound: -inf is not a finite number"),
    ],
)
def test_a_number_that_is_not_finite_is_refused_naming_file_claim_and_key(
    tmp_path, defaults, test, message
):
    with pytest.raises(ClaimError, match=message):
        load_file(write(tmp_path, HEAD % (defaults, test)))


def test_finite_numbers_still_load(tmp_path):
    level = ", level: 0.9, level_why: the paper's level"
    [claim] = load_file(write(tmp_path, HEAD % (level, ORDER + ", margin: 1e-3")))
    assert claim.test["margin"] == 0.001 and claim.test["level"] == 0.9


# ten aliases of ten aliases ...: 50 aliases in 272 bytes, a million nodes expanded
BOMB = "a: &a [1, 1, 1, 1, 1, 1, 1, 1, 1, 1]\n" + "".join(
    f"{n}: &{n} [{', '.join([f'*{p}'] * 10)}]\n" for p, n in zip("abcde", "bcdef", strict=True)
)
MANY = "x: &x 1\ny: [" + ", ".join(["*x"] * 101) + "]\n"
SELF = "x: &x [1, *x]\n"
DEEP = "x: " + "[" * 65 + "]" * 65 + "\n"
# 30 levels that hold 30 that hold 30: shallow as written, over 90 deep once expanded
NESTED = "".join(
    f"{n}: &{n} " + "[" * 30 + (f"*{p}" if p else "1") + "]" * 30 + "\n"
    for p, n in (("", "a"), ("a", "b"), ("b", "c"))
)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (BOMB, r"toy\.yaml: its aliases \(\*name\) expand it to more than 100000 nodes"),
        (MANY, r"toy\.yaml: it uses more than 100 aliases \(\*name\), the most allowed"),
        (SELF, r"toy\.yaml: an alias \(\*name\) makes the node at 1:4 contain itself"),
        (DEEP, r"toy\.yaml: it nests more than 64 levels deep, the most allowed"),
        (NESTED, r"toy\.yaml: its aliases \(\*name\) nest it more than 64 levels deep"),
    ],
)
@pytest.mark.parametrize("reader", ["claim", "spec"])
def test_aliases_and_nesting_are_bounded_in_claim_files_and_specs(tmp_path, text, message, reader):
    path = write(tmp_path, text)
    error, load = (ClaimError, load_file) if reader == "claim" else (SpecError, load_spec)
    with pytest.raises(error, match=message):
        load(path)


def test_a_file_over_one_mib_is_refused_before_it_is_parsed(tmp_path):
    path = write(tmp_path, "# " + "x" * (1 << 20) + "\n")
    with pytest.raises(ClaimError, match=r"toy\.yaml: the claim file is larger than 1048576"):
        load_file(path)
    with pytest.raises(SpecError, match=r"toy\.yaml: the spec is larger than 1048576 bytes"):
        load_spec(path)


def test_a_file_that_is_not_utf8_is_refused_naming_the_file(tmp_path):
    path = write(tmp_path, b"paper: {key: k, title: caf\xe9}\n", name="latin1.yaml")
    with pytest.raises(ClaimError, match=r"latin1\.yaml: not UTF-8 \(byte 26: .*\); a claim file"):
        load_file(path)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("a: 1\n? [1, 2]\n: 3\n", r"a key must be a plain value, got a list"),
        ("x: &x {a: 1}\ny:\n  <<: *x\n", r"merge keys \(<<\) are not supported"),
    ],
)
def test_keys_that_yaml_allows_and_a_spec_cannot_hold_are_refused(tmp_path, text, message):
    with pytest.raises(SpecError, match=rf"spec\.yaml: not valid YAML: {message}"):
        load_spec(write(tmp_path, text, name="spec.yaml"))
    with pytest.raises(ClaimError, match=message):
        load_file(write(tmp_path, text))
