"""`sparsebench run SPEC` end to end on the test-only toy pillar (no torch in its cells): the
progress lines, the end of a run, --strict, a dry run that writes nothing, and --report."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.test_toy_pillar import TOY_CLAIMS as CLAIMS

pytestmark = pytest.mark.e2e
REPO = Path(__file__).resolve().parents[1]


def sparsebench(folder: Path, *args: str) -> subprocess.CompletedProcess:
    env = dict(
        os.environ,
        PYTHONPATH=f"{REPO}{os.pathsep}{os.environ.get('PYTHONPATH', '')}",
        SPARSEBENCH_PLUGINS="tests.toy_pillar",
    )
    cmd = [sys.executable, "-m", "sparsebench.suite.cli", *args]
    return subprocess.run(cmd, cwd=folder, capture_output=True, text=True, env=env, timeout=300)


def snapshot(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in folder.rglob("*") if p.is_file()}


def test_run_shows_each_cell_ends_with_the_answer_and_strict_fails_on_bad_cells(tmp_path):
    (tmp_path / "claims.yaml").write_text(CLAIMS)
    spec = tmp_path / "toy.yaml"
    spec.write_text("benchmark: toyr\ntoy: {values: [1, 2, 55, -1]}\nclaims: [claims.yaml]\n")

    # a dry run on a fresh folder says what would run and creates nothing
    dry = sparsebench(tmp_path, "run", "toy.yaml", "-n")
    assert dry.returncode == 0, dry.stderr
    assert "toy: 4 cell(s), 0 done, 4 to run" in dry.stdout
    assert not (tmp_path / "results").exists()

    run = sparsebench(tmp_path, "run", "toy.yaml", "--cores", "2", "--strict")
    out = run.stdout
    assert run.returncode == 1, out + run.stderr
    assert "4 cell(s) to run in" in out
    lines = [ln for ln in out.splitlines() if ln.startswith("[") and "%]" in ln]
    assert len(lines) == 4 and lines[-1].startswith("[4/4 100%]")
    assert any("ok" in ln and "square 4" in ln for ln in lines)
    assert any("diverged" in ln and "the square is nan at step 3" in ln for ln in lines)
    assert any("failed" in ln and "negative values are refused" in ln for ln in lines)
    assert "4 cell(s): 1 diverged, 1 failed, 2 ok; 2 failed / diverged" in out
    assert "board   toy: results/toyr/toy/leaderboard.md" in out
    assert "claims:  results/toyr/claims.md" in out
    log = tmp_path / "results" / "toyr" / "logs" / "snakemake.log"
    assert "Finished jobid" in log.read_text()  # Snakemake's own output went to its log
    assert "Finished jobid" not in out

    # without --strict the same outcome exits 0; nothing is left to run
    again = sparsebench(tmp_path, "run", "toy.yaml", "--cores", "2")
    assert again.returncode == 0, again.stdout + again.stderr
    assert "nothing to run" in again.stdout and "2 failed / diverged" in again.stdout

    # a changed spec: the dry run names the new cell and leaves the folder byte-identical
    spec.write_text("benchmark: toyr\ntoy: {values: [1, 2, 3, 55, -1]}\nclaims: [claims.yaml]\n")
    before = snapshot(tmp_path)
    dry = sparsebench(tmp_path, "run", "toy.yaml", "-n")
    assert dry.returncode == 0, dry.stderr
    assert "toy: 5 cell(s), 4 done, 1 to run" in dry.stdout
    assert snapshot(tmp_path) == before

    # --report: the front page (outcome, summary, cells and time, environment, spec) is in it
    rep = sparsebench(tmp_path, "run", "toy.yaml", "--cores", "2", "--report")
    assert rep.returncode == 0, rep.stdout + rep.stderr
    report = tmp_path / "results" / "toyr" / "report.html"
    assert "report:  results/toyr/report.html" in rep.stdout and report.is_file()
    page = report.read_text()
    for text in ("Cells and time", "Environment", "The spec", "failed / diverged"):
        assert text in page, text
    times = json.loads((tmp_path / "results" / "toyr" / "logs" / "cell_times.json").read_text())
    assert set(times) == {"toy/v1", "toy/v2", "toy/v3", "toy/v55", "toy/v-1"}


def test_run_refuses_a_missing_spec_with_a_suggestion(tmp_path):
    got = sparsebench(tmp_path, "run", "defualt", "-n")
    assert got.returncode == 2
    assert "did you mean 'default'?" in got.stderr and "Traceback" not in got.stderr


def test_run_says_why_an_invalid_spec_stopped_it(tmp_path):
    (tmp_path / "toy.yaml").write_text("benchmark: toyr\ntoy: {valeus: [1]}\n")
    got = sparsebench(tmp_path, "run", "toy.yaml", "--cores", "1")
    assert got.returncode != 0
    assert "valeus" in got.stdout and "Traceback" not in got.stdout + got.stderr


def _processes_mentioning(text: str) -> list[str]:
    found = []
    for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            args = cmdline.read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if text in args:
            found.append(args)
    return found


@pytest.mark.slow
def test_sigterm_stops_the_run_snakemake_and_its_jobs_and_the_next_run_resumes(tmp_path):
    import signal
    import time

    (tmp_path / "toy.yaml").write_text("benchmark: toys\ntoy: {values: [1, 77]}\n")
    env = dict(
        os.environ,
        PYTHONPATH=f"{REPO}{os.pathsep}{os.environ.get('PYTHONPATH', '')}",
        SPARSEBENCH_PLUGINS="tests.toy_pillar",
        TOY_SLEEP="300",
    )
    cmd = [sys.executable, "-m", "sparsebench.suite.cli", "run", "toy.yaml", "--cores", "2"]
    proc = subprocess.Popen(cmd, cwd=tmp_path, env=env, stdout=subprocess.PIPE, text=True)
    slow = tmp_path / "results" / "toys" / "toy" / "runs" / "v77" / "record.json"
    deadline = time.monotonic() + 120
    while not slow.is_file() and time.monotonic() < deadline:  # the slow cell is in flight
        time.sleep(0.5)
    assert slow.is_file(), "the slow cell never started"
    t0 = time.monotonic()
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=90) == 143
    assert time.monotonic() - t0 < 60  # not the cell's 300 s
    time.sleep(1)
    assert _processes_mentioning(str(tmp_path)) == []  # no Snakemake or job left behind
    # nor the run's warm job server or a cell forked from it (they carry its socket's path)
    warm_log = (tmp_path / "results" / "toys" / "logs" / "warm.log").read_text()
    sock = warm_log.split("serving on ")[1].split()[0]
    assert _processes_mentioning(sock) == [] and not Path(sock).exists()
    assert not slow.exists()  # the interrupted cell has no record: it runs again
    again = sparsebench(tmp_path, "run", "toy.yaml", "--cores", "2", "--snakemake=--unlock")
    assert again.returncode == 0, again.stdout + again.stderr


@pytest.mark.slow
def test_a_cell_forked_from_the_warm_server_gives_the_same_record_as_its_own_process(tmp_path):
    """The same classification cells through `sparsebench run` and `--no-warm`: every metric
    equal (bit for bit on one machine), only the times differ."""
    spec = (
        "benchmark: warmeq\ndata_root: data\nclassification:\n  tasks:\n    digits_mlp:\n"
        "      dataset: digits\n      model: lenet300_100\n"
        "      recipe: {epochs: 2, batch_size: 64, lr: 0.05}\n"
        "  methods: {rigl: {update_interval: 5}, dense: {}}\n  sparsities: [0.9]\n  seeds: [0]\n"
    )
    got = {}
    for mode, extra in (("warm", []), ("cold", ["--no-warm"])):
        folder = tmp_path / mode
        folder.mkdir()
        (folder / "s.yaml").write_text(spec)
        run = sparsebench(folder, "run", "s.yaml", "--cores", "2", "--strict", *extra)
        assert run.returncode == 0, run.stdout + run.stderr
        log = folder / "results" / "warmeq" / "logs" / "warm.log"
        assert (log.is_file() and "job " in log.read_text()) == (mode == "warm")
        got[mode] = {
            p.parent.relative_to(folder / "results"): json.loads(p.read_text())
            for p in (folder / "results" / "warmeq").rglob("record.json")
        }
    assert len(got["warm"]) == 2 and got["warm"].keys() == got["cold"].keys()
    same = ("test_acc", "test_loss", "val_acc", "val_loss", "actual_sparsity", "train_flops")
    same += ("params_nonzero", "layer_densities_json", "mask_updates", "trained_density")
    for cell, warm in got["warm"].items():
        cold = got["cold"][cell]
        assert warm["status"] == cold["status"] == "ok"
        for key in same:
            assert warm[key] == cold[key], (cell, key)


def test_a_warm_server_that_cannot_start_leaves_the_jobs_to_start_on_their_own(tmp_path):
    (tmp_path / "toy.yaml").write_text("benchmark: toyx\ntoy: {values: [3]}\n")
    (tmp_path / "results" / "toyx" / "logs" / "warm.log").mkdir(parents=True)  # not a file
    got = sparsebench(tmp_path, "run", "toy.yaml", "--cores", "1", "--strict")
    assert got.returncode == 0, got.stdout + got.stderr
    assert "no warm job server" in got.stdout and "Traceback" not in got.stdout + got.stderr
    assert "1 cell(s): 1 ok" in got.stdout
