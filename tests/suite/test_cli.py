import signal
import subprocess
import sys
from pathlib import Path

from sparsebench.suite import paths
from sparsebench.suite.cli import main
from sparsebench.suite.record import write_json_atomic


def test_methods_lists_parameters_defaults_and_sources(capsys):
    assert main(["methods"]) == 0
    out = capsys.readouterr().out
    assert "rigl  [dst]" in out and "update_interval: int = 100" in out
    assert "Evci" in out and "Zhu & Gupta" in out and "zeta: float = 0.3" in out


def test_retry_failed_forgets_only_failed_records(tmp_path, make_record, capsys):
    bench = tmp_path / "results" / "b"
    ok_rec, bad_rec = make_record(), make_record(status="failed", seed=1)
    ok = paths.record("b", "classification", ok_rec["cell_id"], tmp_path / "results")
    bad = paths.record("b", "classification", bad_rec["cell_id"], tmp_path / "results")
    write_json_atomic(ok, ok_rec)
    write_json_atomic(bad, bad_rec)
    hessian_bad = bench / "hessian" / "runs" / "alkane/pair/colored/n3" / "record.json"
    write_json_atomic(hessian_bad, {"status": "failed", "error": "x"})
    # A kernels record is ok with skipped rows (a backend that cannot run here), failed when
    # one of its backends failed.
    kernels_skipped = bench / "kernels" / "runs" / "64x32/s0.5/b4" / "record.json"
    kernels_bad = bench / "kernels" / "runs" / "64x32/s0.9/b4" / "record.json"
    write_json_atomic(
        kernels_skipped, {"status": "ok", "rows": [{"status": "ok"}, {"status": "skipped"}]}
    )
    write_json_atomic(
        kernels_bad,
        {
            "status": "failed",
            "error": "cpu: boom",
            "rows": [{"status": "ok"}, {"status": "failed"}],
        },
    )
    # Derived tables stay: the Snakefile makes the removed (pending) records targets, and
    # their new mtime reruns the tables downstream.
    derived = [
        bench / "classification" / name for name in ("runs.parquet", "leaderboard.md", "pareto.png")
    ] + [bench / "kernels" / "speedup.png", bench / "summary.md"]
    for d in derived:
        d.write_text("stale")
    assert main(["retry-failed", str(bench), "--dry-run"]) == 0
    assert all(p.exists() for p in (ok, bad, hessian_bad, kernels_skipped, kernels_bad))
    assert "would remove [failed]" in capsys.readouterr().out
    assert main(["retry-failed", str(bench)]) == 0
    assert ok.exists() and kernels_skipped.exists()
    assert not any(p.exists() for p in (bad, hessian_bad, kernels_bad))
    assert all(d.exists() for d in derived)
    assert "removing [failed]" in capsys.readouterr().out


def test_leaderboard_on_an_empty_folder_is_a_clear_error(tmp_path, capsys):
    assert main(["leaderboard", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert str(tmp_path) in err and "sparsebench run" in err


def test_validate_reports_a_bad_spec_with_exit_2(tmp_path, capsys):
    spec = tmp_path / "s.yaml"
    spec.write_text("benchmark: x\nclassification: {tasks: {}, methods: {dense: {}}}\n")
    assert main(["validate", str(spec)]) == 2
    assert "s.yaml: classification.tasks" in capsys.readouterr().err


def test_validate_into_a_closed_pipe_is_not_a_traceback(monkeypatch):
    """`sparsebench validate spec.yaml | head -1`: the reader closes the pipe early."""
    import os
    import sys

    class ClosedPipe:
        def write(self, text):
            raise BrokenPipeError(32, "Broken pipe")

        def flush(self):
            pass

        def fileno(self):
            return 99

    redirected = []
    monkeypatch.setattr(sys, "stdout", ClosedPipe())
    monkeypatch.setattr(os, "dup2", lambda fd, to: redirected.append(to))
    spec = Path(__file__).parents[2] / "suite/benchmarks/default.yaml"
    assert main(["validate", str(spec)]) == 0
    assert redirected == [99]  # stdout pointed at /dev/null for the final flush


def test_every_results_command_on_a_missing_or_empty_folder_is_one_clear_error(tmp_path, capsys):
    """A user error is exit 2 and one `error:` line naming the folder, never a traceback."""
    import pytest

    empty = tmp_path / "empty"
    empty.mkdir()
    commands = [["aggregate"], ["board", "--pillar", "classification"], ["summary"],
                ["leaderboard"], ["retry-failed"], ["claims"], ["curves"]]  # fmt: skip
    for folder in (tmp_path / "missing", empty):
        for cmd in commands:
            assert main([cmd[0], str(folder), *cmd[1:]]) == 2, cmd
            err = capsys.readouterr().err
            assert err.startswith("error: ") and str(folder) in err, (cmd, err)
            assert "Traceback" not in err
    with pytest.raises(SystemExit) as done:
        main(["--version"])
    assert done.value.code == 0 and capsys.readouterr().out.startswith("sparsebench ")


def test_counts_on_the_command_line_are_checked_by_argparse(capsys, monkeypatch):
    import pytest

    for argv in (["cells", "toy", "--cell", "x", "--threads", "0"],
                 ["run", "default", "--cores", "0"],
                 ["build", "toy", "--artefact", "x", "--threads", "-2"],
                 ["summary", "r", "--top", "-1"],
                 ["validate", "s.yaml", "--show", "-3"]):  # fmt: skip
        with pytest.raises(SystemExit) as done:
            main(argv)
        assert done.value.code == 2 and "is outside" in capsys.readouterr().err, argv
    monkeypatch.setenv("SPARSEBENCH_PARALLEL_JOBS", "abc")
    with pytest.raises(SystemExit):
        main(["cells", "toy", "--cell", "x"])
    assert "--parallel-jobs: 'abc' is not a whole number" in capsys.readouterr().err


def test_every_subcommand_has_a_description_and_every_argument_help():
    import argparse

    from sparsebench.suite.cli import build_parser

    sub = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    assert {"run", "cells", "curves", "claims", "validate"} <= set(sub.choices)
    for name, page in sub.choices.items():
        assert page.description and "``" not in page.description, name
        for action in page._actions:
            if not isinstance(action, argparse._HelpAction):
                assert action.help, (name, action.dest)


def test_methods_of_a_mistyped_pillar_suggest_the_name(capsys):
    assert main(["methods", "--pillar", "clasification"]) == 2
    assert "did you mean 'classification'?" in capsys.readouterr().err


def test_sigterm_to_a_table_command_unwinds_and_leaves_no_temporary_file(tmp_path):
    # Snakemake stops a job with SIGTERM: an atomic write in progress removes its temporary
    script = f"""
import os, signal, sys
from pathlib import Path
from sparsebench.suite import cli
from sparsebench.suite.atomic import atomic_path

def stopped_while_writing(args):
    with atomic_path(Path({str(tmp_path)!r}) / "summary.md") as tmp:
        tmp.write_text("half")
        os.kill(os.getpid(), signal.SIGTERM)
    return 0

cli._cmd_summary = stopped_while_writing
sys.exit(cli.main(["summary", "results/x"]))
"""
    got = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True)
    assert got.returncode == 128 + signal.SIGTERM, got.stderr
    assert list(tmp_path.iterdir()) == []
