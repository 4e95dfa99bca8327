from sparsebench.suite.cli import main
from sparsebench.suite.record import write_json_atomic


def test_methods_lists_parameters_defaults_and_sources(capsys):
    assert main(["methods"]) == 0
    out = capsys.readouterr().out
    assert "rigl  [dst]" in out and "update_interval: int = 100" in out
    assert "Evci" in out and "Zhu & Gupta" in out and "zeta: float = 0.3" in out


def test_retry_failed_forgets_only_failed_records(tmp_path, make_record, capsys):
    bench = tmp_path / "results" / "b"
    ok = bench / "runs" / "ok" / "record.json"
    bad = bench / "runs" / "bad" / "record.json"
    write_json_atomic(ok, make_record())
    write_json_atomic(bad, make_record(status="failed", seed=1))
    hessian_bad = bench / "hessian" / "alkane" / "record.json"
    write_json_atomic(hessian_bad, {"status": "failed", "error": "x"})
    kernels_skipped = bench / "kernels" / "a" / "record.json"
    kernels_bad = bench / "kernels" / "b" / "record.json"
    write_json_atomic(kernels_skipped, {"rows": [{"status": "ok"}, {"status": "skipped"}]})
    write_json_atomic(kernels_bad, {"rows": [{"status": "ok"}, {"status": "failed"}]})
    derived = [
        bench / name
        for name in ("runs.parquet", "leaderboard.md", "pareto.png", "kernels_speedup.png")
    ]
    for d in derived:
        d.write_text("stale")
    assert main(["retry-failed", str(bench), "--dry-run"]) == 0
    assert bad.exists() and all(d.exists() for d in derived)
    assert main(["retry-failed", str(bench)]) == 0
    assert ok.exists() and kernels_skipped.exists()
    assert not any(p.exists() for p in (bad, hessian_bad, kernels_bad))
    # Snakemake reruns nothing while the tables built from the records exist: they go too.
    assert not any(d.exists() for d in derived)
    assert "removing [failed]" in capsys.readouterr().out


def test_leaderboard_on_an_empty_folder_is_a_clear_error(tmp_path, capsys):
    assert main(["leaderboard", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert str(tmp_path) in err and "snakemake" in err


def test_validate_reports_a_bad_spec_with_exit_2(tmp_path, capsys):
    spec = tmp_path / "s.yaml"
    spec.write_text("benchmark: x\ntasks: {}\nmethods: {dense: {}}\n")
    assert main(["validate", str(spec)]) == 2
    assert "s.yaml: tasks" in capsys.readouterr().err
