"""Each claim file's registration read from git (the last commit that changed it) on the
claims pages, and verdicts flagged when the file changed after the rows they read ran."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest
import yaml

from sparsebench.suite import paths
from sparsebench.suite.claims import judge_all, load_files, write

from .conftest import PAPER, one, rows, table

ORDER = {"kind": "order", "a": {"method": "rigl"}, "b": {"method": "set"}, "op": ">"}
COMMITTED = "2026-01-02T00:00:00+00:00"
FLAG = "(not pre-registered: the claim file changed after its cells ran)"


def git(repo: Path, *args: str, date: str = COMMITTED) -> str:
    env = {**os.environ, "GIT_AUTHOR_DATE": date, "GIT_COMMITTER_DATE": date}
    config = ["-c", "user.name=t", "-c", "user.email=t@example.com", "-c", "commit.gpgsign=false"]
    done = subprocess.run(
        ["git", *config, *args], cwd=repo, env=env, capture_output=True, text=True, check=True
    )
    return done.stdout.strip()


def claim_file(folder: Path) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "toy.yaml"
    data = {"paper": PAPER, "defaults": {"pillar": "classification", "metric": "test_acc"},
            "claims": [one("rigl-set", **ORDER)]}  # fmt: skip
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


@pytest.fixture
def repo(tmp_path: Path) -> tuple[Path, str]:
    """A git repository holding one claim file, committed at COMMITTED; (file, short sha)."""
    path = claim_file(tmp_path / "repo" / "claims")
    root = tmp_path / "repo"
    git(root, "init", "-q")
    git(root, "add", "claims/toy.yaml")
    git(root, "commit", "-q", "-m", "claims")
    return path, git(root, "rev-parse", "--short", "HEAD")


def judged(tmp_path: Path, file: Path, started_at: str) -> tuple[str, dict]:
    """claims.md and claims.json of the file judged on runs that started at ``started_at``."""
    bench = tmp_path / "results" / "b"
    runs = table(
        rows("rigl", [0.93, 0.94, 0.935], started_at=started_at),
        rows("set", [0.90, 0.905, 0.91], started_at="2026-01-05T00:00:00+00:00"),
    )
    (bench / "classification").mkdir(parents=True, exist_ok=True)
    runs.write_parquet(paths.runs_table_in(bench / "classification"))
    files = write(judge_all(load_files([file]), bench), bench)
    return files["md"].read_text(), json.loads(files["json"].read_text())


def test_the_commit_is_shown_and_a_claim_written_after_its_cells_ran_is_flagged(repo, tmp_path):
    file, sha = repo
    md, data = judged(tmp_path, file, started_at="2026-01-01T00:00:00+00:00")
    assert f"registered at {sha} (2026-01-02T00:00:00+00:00)." in md
    row = next(line for line in md.splitlines() if line.startswith("| `rigl-set` |"))
    assert row.endswith(f"**holds** {FLAG} † |")  # †: test_acc, measured
    reg = data["claims"][0]["registration"]
    assert reg["commit"] == sha and reg["date"] == COMMITTED and reg["uncommitted"] is False
    assert reg["first_run"] == "2026-01-01T00:00:00+00:00" and reg["pre_registered"] is False
    assert data["registration"][str(file)]["text"] == f"registered at {sha} ({COMMITTED})"


def test_a_claim_committed_before_its_cells_ran_is_not_flagged(repo, tmp_path):
    file, sha = repo
    # one hour after the commit, in another time zone: 2026-01-02T01:00Z
    md, data = judged(tmp_path, file, started_at="2026-01-02T02:00:00+01:00")
    assert f"registered at {sha} (2026-01-02T00:00:00+00:00)." in md
    assert "not pre-registered" not in md
    assert data["claims"][0]["registration"]["pre_registered"] is True


def test_uncommitted_changes_are_shown_and_count_as_a_change_now(repo, tmp_path):
    file, sha = repo
    file.write_text(file.read_text() + "# edited after the run\n")
    md, data = judged(tmp_path, file, started_at="2026-01-03T00:00:00+00:00")
    assert f"registered at {sha} (2026-01-02T00:00:00+00:00), with uncommitted changes." in md
    assert FLAG in md
    assert data["claims"][0]["registration"]["uncommitted"] is True


def test_outside_a_git_checkout_the_commit_is_unknown_and_nothing_is_flagged(tmp_path, monkeypatch):
    monkeypatch.setenv("GIT_CEILING_DIRECTORIES", str(tmp_path))  # even if /tmp is in one
    file = claim_file(tmp_path / "plain")
    md, data = judged(tmp_path, file, started_at="2026-01-01T00:00:00+00:00")
    assert "Claim file " in md and "registered at an unknown commit." in md
    assert "not pre-registered" not in md
    reg = data["claims"][0]["registration"]
    assert reg["commit"] == "unknown" and reg["pre_registered"] is None


def test_reading_a_foreign_checkout_runs_none_of_its_hooks(repo):
    """The claim file's folder may be anyone's repository: its fsmonitor hook (which `git
    status` would run) must not run when the registration is read."""
    from sparsebench.suite.claims.registration import file_commit

    path, sha = repo
    root = path.parent.parent
    marker = root / "ran"
    git(root, "config", "core.fsmonitor", f"touch {marker}")
    found = file_commit(path)
    assert not marker.exists()
    assert found.sha == sha and not found.uncommitted
    path.write_text(path.read_text() + "# edited\n")
    assert file_commit(path).uncommitted and not marker.exists()
