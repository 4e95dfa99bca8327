"""The kernels board in the shared style: readable headers with units, the p10–p90 range of
the rounds next to each median, no Python list in the text, backend links and the JSON
columns block; expectations written by hand from the rows below."""

from __future__ import annotations

import json
import re

import polars as pl

from sparsebench.suite import claims
from sparsebench.suite.pillars.kernels.board import write_leaderboard

from .test_trials import _row


def kernel_runs() -> pl.DataFrame:
    """cpu and torch_csr at 50, 90, 99 % sparsity, one trial, rounds spread ± 10 %."""
    rows = []
    for backend, base in (("cpu", 2.0), ("torch_csr", 0.5)):
        for s in (0.5, 0.9, 0.99):
            speedup = base / (1 - s) ** 0.5
            r = _row(0, backend, s, speedup, 1.0)
            rows.append(r | {"ms_p10": 0.9, "ms_p90": 1.1, "nnz": int(16_777_216 * (1 - s))})
    return pl.DataFrame(rows)


def test_board_reads_alike_with_ranges_units_and_links(tmp_path, monkeypatch) -> None:
    monkeypatch.setattr(claims, "BUILTIN", tmp_path / "no-claims")
    (tmp_path / "no-claims").mkdir()
    files = write_leaderboard(kernel_runs(), tmp_path / "out")
    md = files["md"].read_text(encoding="utf-8")
    assert "2 thread(s), device cpu." in md and not re.search(r"\[(?:'|\d)", md)
    assert "| shape (out×in) | pattern | batch | op | sparsity (%) | backend | nonzeros |" in md
    assert "| median (p10–p90) (ms) | speed-up vs dense |" in md
    # cpu at 99 %: nnz 167,772; 1 ms with rounds 0.9–1.1 ms; speed-up 2 / sqrt(0.01) = 20×
    assert "| 4096×4096 | random | 64 | forward | 99 | `cpu` | 167,772 | 1.00 (0.900–1.10) |" in md
    assert "| 20.00× |" in md
    # torch_csr's registered source has no address: a code span; the list of sources follows
    assert "`torch_csr`" in md and "**Sources**" in md
    data = json.loads(files["json"].read_text(encoding="utf-8"))
    assert data["columns"]["ms_p90"] == {"unit": "ms", "better": "lower", "header": "p90 (ms)"}
    assert data["columns"]["speedup_vs_dense"]["better"] == "higher"
    assert data["columns"]["sparsity"]["unit"] == "fraction"
    assert data["rows"][0]["sparsity"] in (0.5, 0.9, 0.99)  # JSON keeps the fraction
    assert files["speedup.png"].read_bytes()[:4] == b"\x89PNG"
