"""The warm job server (suite/warm.py): a job command that finds it runs in a fork of it, with
the job's folder, environment, streams, exit code and signals; one that cannot (no server,
other settings, a scheduler's job) runs on its own, with the same result."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from sparsebench.suite import warm
from sparsebench.suite.runner import RunOptions, wants_warm

REPO = Path(__file__).resolve().parents[2]
TOY_ENV = {
    "PYTHONPATH": f"{REPO}{os.pathsep}{os.environ.get('PYTHONPATH', '')}",
    "SPARSEBENCH_PLUGINS": "tests.toy_pillar",
}


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:  # a zombie is dead for our purpose
        return Path(f"/proc/{pid}/stat").read_text().split()[2] != "Z"
    except OSError:
        return False


def _wait_for(what, timeout: float = 30.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        got = what()
        if got:
            return got
        time.sleep(0.05)
    return what()


@pytest.fixture
def server(tmp_path):
    """A server of this test (light preload: the suite's CLI, no torch), its socket and log."""
    sock = tmp_path / "s" / "jobs.sock"
    sock.parent.mkdir()
    log = tmp_path / "warm.log"
    env = dict(os.environ, **TOY_ENV)
    with open(log, "w") as fh:
        proc = subprocess.Popen(
            [sys.executable, "-m", "sparsebench.suite.warm", str(sock),
             "--preload", "sparsebench.suite.cli", "--parent", str(os.getpid())],
            stdout=fh, stderr=subprocess.STDOUT, env=env,
        )  # fmt: skip
    assert _wait_for(lambda: "serving on" in log.read_text()), log.read_text()
    yield proc, sock, log
    if proc.poll() is None:
        proc.terminate()
        proc.wait(timeout=30)


def _job(tmp_path, sock, *args, extra_env=None, **kw):
    """``sparsebench <args>`` as a workflow job would run it (in tmp_path, the toy plug-in)."""
    env = {**os.environ, **TOY_ENV, **(extra_env or {})}
    if sock is not None:
        env[warm.ENV] = str(sock)
    cmd = [sys.executable, "-m", "sparsebench.suite.cli", *args]
    return subprocess.run(cmd, cwd=tmp_path, env=env, capture_output=True, text=True, **kw)


def _spec(tmp_path, values="[1, 2, -1]"):
    (tmp_path / "toy.yaml").write_text(f"benchmark: toyw\ntoy: {{values: {values}}}\n")
    return "toy.yaml"


def _record(tmp_path, value):
    path = tmp_path / "results" / "toyw" / "toy" / "runs" / f"v{value}" / "record.json"
    return json.loads(path.read_text()) if path.is_file() else None


def _lines(log: Path) -> list[str]:
    """The log's lines without their time of day (each starts with one)."""
    out = []
    for ln in log.read_text().splitlines():
        stamp, _, text = ln.partition(" ")
        assert re.fullmatch(r"\d\d:\d\d:\d\d\.\d{3}", stamp), ln
        out.append(text)
    return out


def _jobs(log: Path) -> list[str]:
    """The jobs the server forked, as logged when it forked them."""
    return [ln for ln in _lines(log) if ln.startswith("job ") and ": exit " not in ln]


def _exits(log: Path) -> list[str]:
    return [ln for ln in _lines(log) if ln.startswith("job ") and ": exit " in ln]


def test_a_job_runs_in_the_server_with_its_folder_environment_and_streams(tmp_path, server):
    _, sock, log = server
    spec = _spec(tmp_path)
    # the spec comes from the job's environment and is found relative to the job's folder
    got = _job(tmp_path, sock, "cells", "toy", "--cell", "v2", extra_env={"SPARSEBENCH_SPEC": spec})
    assert got.returncode == 0, got.stderr
    assert "[ok]" in got.stdout  # the child wrote to the job's own stdout
    assert _record(tmp_path, 2)["square"] == 4.0
    jobs = _jobs(log)
    assert len(jobs) == 1 and "cells toy --cell v2" in jobs[0]
    child = int(jobs[0].split()[1].rstrip(":"))
    assert child != os.getpid() and _record(tmp_path, 2)["status"] == "ok"


def test_exit_code_and_error_are_the_same_as_on_its_own(tmp_path, server):
    _, sock, log = server
    spec = _spec(tmp_path)
    served = _job(tmp_path, sock, "cells", "toy", "--cell", "v9", "--spec", spec)
    alone = _job(tmp_path, None, "cells", "toy", "--cell", "v9", "--spec", spec)
    assert len(_jobs(log)) == 1  # the first one was served
    assert served.returncode == alone.returncode == 1
    assert "no toy cell 'v9'" in served.stderr
    assert served.stderr == alone.stderr
    # the server's log says how each job ended, and after how long
    child = _jobs(log)[0].split()[1].rstrip(":")
    assert _wait_for(lambda: _exits(log))
    assert re.fullmatch(rf"job {child}: exit 1 after \d+\.\d\d s", _exits(log)[0])
    # argparse's own exit (2) and a missing results folder (2, one message)
    assert _job(tmp_path, sock, "cells").returncode == 2
    missing = _job(tmp_path, sock, "summary", "results/nope")
    assert missing.returncode == 2 and "no records found" in missing.stderr


def test_a_job_the_server_refuses_runs_on_its_own(tmp_path, server):
    _, sock, log = server
    spec = _spec(tmp_path)
    env = {"PYTORCH_SOMETHING": "1"}  # read at import: the server's imports did not see it
    got = _job(tmp_path, sock, "cells", "toy", "--cell", "v1", "--spec", spec, extra_env=env)
    assert got.returncode == 0, got.stderr
    assert _record(tmp_path, 1)["square"] == 1.0
    assert _jobs(log) == [] and "refused a job (its own PYTORCH_SOMETHING)" in log.read_text()


def test_no_server_a_schedulers_job_or_another_command_is_never_sent(tmp_path, monkeypatch):
    monkeypatch.setenv(warm.ENV, str(tmp_path / "gone.sock"))  # no server there
    assert warm.delegate(["cells", "toy", "--cell", "v1"]) is None
    assert warm.delegate(["validate", "s.yaml"]) is None  # not a job command
    assert warm.delegate([]) is None
    monkeypatch.setenv("SLURM_JOB_ID", "7")  # a scheduler's job: never asks, even a live one
    monkeypatch.setattr(warm.socket, "socket", None)  # would fail if it tried to connect
    assert warm.delegate(["cells", "toy", "--cell", "v1"]) is None


def test_time_dependent_settings_are_not_part_of_the_fingerprint():
    env = {"OMP_NUM_THREADS": "1", "TORCHINDUCTOR_CACHE_DIR": "/x", "LD_PRELOAD": "a.so"}
    fp = warm.fingerprint(env)
    assert fp == {"LD_PRELOAD": "a.so", "executable": sys.executable}
    assert warm.fingerprint({**env, "CUDA_VISIBLE_DEVICES": "1"}) != fp


def test_the_jobs_thread_counts_reach_openmp_and_blas():
    code = (
        "import numpy, torch, threadpoolctl;"
        "from sparsebench.suite.warm import _thread_limits;"
        "_thread_limits({'OMP_NUM_THREADS': '1'});"
        "print(sorted({d['user_api']: d['num_threads'] for d in threadpoolctl.threadpool_info()}"
        ".items())); print(torch.get_num_threads())"
    )
    env = {k: v for k, v in os.environ.items() if not k.endswith("_NUM_THREADS")}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    limits, torch_threads = out.stdout.splitlines()
    assert limits == "[('blas', 1), ('openmp', 1)]" and torch_threads == "1"


def _slow_job(tmp_path, sock, log, **popen):
    """A served job whose cell sleeps for minutes, and the pid of the child running it."""
    spec = _spec(tmp_path, "[77]")
    env = dict(os.environ, **TOY_ENV, TOY_SLEEP="300", **{warm.ENV: str(sock)})
    cmd = [sys.executable, "-m", "sparsebench.suite.cli", "cells", "toy", "--cell", "v77",
           "--spec", spec]  # fmt: skip
    job = subprocess.Popen(cmd, cwd=tmp_path, env=env, **popen)
    jobs = _wait_for(lambda: _jobs(log))
    assert jobs, log.read_text()
    child = int(jobs[0].split()[1].rstrip(":"))
    assert _alive(child)
    return job, child


def test_sigterm_to_a_job_reaches_its_child(tmp_path, server):
    _, sock, log = server
    job, child = _slow_job(tmp_path, sock, log)
    time.sleep(0.5)
    job.send_signal(signal.SIGTERM)
    assert job.wait(timeout=30) == 128 + signal.SIGTERM
    assert _wait_for(lambda: not _alive(child), 10)


def test_a_job_killed_hard_takes_its_child_with_it(tmp_path, server):
    _, sock, log = server
    job, child = _slow_job(tmp_path, sock, log)
    job.kill()
    job.wait()
    assert _wait_for(lambda: not _alive(child), 10)


def test_stopping_the_server_stops_its_jobs_and_removes_the_socket(tmp_path, server):
    proc, sock, log = server
    job, child = _slow_job(tmp_path, sock, log)
    proc.terminate()
    assert proc.wait(timeout=30) == 0
    assert job.wait(timeout=30) == 128 + signal.SIGTERM
    assert not _alive(child) and not sock.exists()


def _standbys(log: Path) -> list[int]:
    return [int(m[1]) for ln in _lines(log) if (m := re.fullmatch(r"standby (\d+) ready .*", ln))]


def test_table_jobs_run_in_a_standby_that_imported_polars_before_they_came(tmp_path, server):
    proc, sock, log = server
    assert _wait_for(lambda: _standbys(log))
    first = _standbys(log)[0]
    assert _alive(first)
    # a cells job is forked as before; the summary goes to the standby, with its own streams
    _job(tmp_path, sock, "cells", "toy", "--cell", "v1", "--spec", _spec(tmp_path))
    got = _job(tmp_path, sock, "summary", "results/nope", timeout=60)
    assert got.returncode == 2 and "no records found" in got.stderr
    jobs = _jobs(log)
    assert jobs[0].startswith("job ") and int(jobs[0].split()[1].rstrip(":")) != first
    assert jobs[1] == f"job {first}: summary results/nope"
    assert _wait_for(lambda: len(_standbys(log)) == 2)  # the next one, for the next table job
    second = _standbys(log)[1]
    proc.terminate()
    assert proc.wait(timeout=30) == 0
    assert _wait_for(lambda: not _alive(second), 10)  # an idle standby ends with its server


def test_a_table_job_is_served_when_its_standby_died(tmp_path, server):
    _, sock, log = server
    assert _wait_for(lambda: _standbys(log))
    os.kill(_standbys(log)[0], signal.SIGKILL)
    assert _wait_for(lambda: any("before any job" in ln for ln in _lines(log)))
    got = _job(tmp_path, sock, "summary", "results/nope", timeout=60)
    assert got.returncode == 2 and "no records found" in got.stderr
    ((job, pid),) = [(j.split()[2], int(j.split()[1].rstrip(":"))) for j in _jobs(log)]
    assert job == "summary" and pid not in _standbys(log)  # served, by a fork


def test_a_preload_that_is_not_fork_safe_serves_nothing(tmp_path):
    sock = tmp_path / "jobs.sock"
    got = subprocess.run(
        [sys.executable, "-m", "sparsebench.suite.warm", str(sock), "--preload", "polars"],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert got.returncode == 1
    assert "not serving" in got.stdout and "polars" in got.stdout
    assert not sock.exists()


def test_the_server_is_for_local_runs_only():
    assert wants_warm(RunOptions("s.yaml"))
    assert not wants_warm(RunOptions("s.yaml", warm=False))
    for opt in ("--profile=profiles/slurm", "--executor", "-e", "--cluster"):
        assert not wants_warm(RunOptions("s.yaml", snakemake_args=(opt, "x")))


def test_the_server_preloads_what_the_specs_builtin_pillars_need(tmp_path):
    from sparsebench.suite.runner import builtin_pillars_of

    spec = tmp_path / "s.yaml"
    spec.write_text("benchmark: b\nhessian: {}\nkernels: {}\ntoy: {values: [1]}\n")
    assert builtin_pillars_of(spec) == ["hessian", "kernels"]
    spec.write_text("benchmark: b\ntoy: {values: [1]}\n")
    assert builtin_pillars_of(spec) == []
    # no built-in pillar: the suite's CLI only, no torch
    sock = tmp_path / "jobs.sock"
    proc = subprocess.Popen(
        [sys.executable, "-m", "sparsebench.suite.warm", str(sock), "--pillars", ""],
        stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        lines = [proc.stdout.readline().split(" ", 1)[1] for _ in range(3)]
    finally:
        proc.terminate()
        proc.wait(timeout=30)
    assert [ln.split()[1] for ln in lines[:2]] == ["threadpoolctl", "sparsebench.suite.cli"]
    assert lines[2].startswith("serving on")


def test_cells_of_a_pillar_that_measures_its_process_memory_run_on_their_own():
    assert warm._forks(["cells", "classification", "--cell", "x"])
    assert not warm._forks(["cells", "hessian", "--cell", "x"])  # peak_mem_mb: its own process
    assert not warm._forks(["cells", "merging"])
    assert warm._forks(["build", "merging", "--artefact", "x"])  # no memory figure there
    assert warm._forks(["cells", "nope"])  # the command itself names the unknown pillar


def test_a_job_with_a_closed_stdin_is_served_and_stays_on_its_streams(tmp_path, server):
    _, sock, log = server
    spec = _spec(tmp_path)
    env = dict(os.environ, **TOY_ENV, **{warm.ENV: str(sock)})
    cmd = [sys.executable, "-m", "sparsebench.suite.cli", "cells", "toy", "--cell", "v1",
           "--spec", spec]  # fmt: skip
    got = subprocess.run(cmd, cwd=tmp_path, env=env, capture_output=True, text=True,
                         stdin=subprocess.DEVNULL, pass_fds=(), close_fds=True,
                         preexec_fn=lambda: os.close(0))  # fmt: skip
    assert got.returncode == 0, got.stderr
    assert "[ok]" in got.stdout and len(_jobs(log)) == 1


@pytest.mark.slow  # fault injection, as the other slow tests
def test_a_silent_or_vanished_client_does_not_stop_the_server(tmp_path, server):
    import socket

    _, sock, log = server
    spec = _spec(tmp_path)
    silent = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    silent.connect(str(sock))  # says nothing: the server gives up on it after 5 s
    gone = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    gone.connect(str(sock))
    request = json.dumps({"argv": ["cells", "toy", "--cell", "v2", "--spec", spec],
                          "cwd": str(tmp_path), "env": dict(os.environ, **TOY_ENV),
                          "fingerprint": warm.fingerprint()}).encode()  # fmt: skip
    socket.send_fds(gone, [warm._HEADER.pack(len(request))], [0, 1, 2])
    gone.sendall(request)
    gone.close()  # gone before the reply
    try:
        got = _job(tmp_path, sock, "cells", "toy", "--cell", "v1", "--spec", spec, timeout=60)
    finally:
        silent.close()
    assert got.returncode == 0, got.stderr
    assert _record(tmp_path, 1)["square"] == 1.0
    assert "Traceback" not in log.read_text()


@pytest.mark.slow  # fault injection, as the other slow tests
def test_a_killed_server_stops_its_cells_as_a_stopped_job_would(tmp_path, server):
    proc, sock, log = server
    job, child = _slow_job(tmp_path, sock, log, stderr=subprocess.PIPE, text=True)
    in_flight = tmp_path / "results" / "toyw" / "toy" / "runs" / "v77" / "record.json"
    assert _wait_for(in_flight.is_file)
    proc.kill()  # the OOM killer, say
    assert job.wait(timeout=30) == 1
    assert "the warm job server stopped" in job.stderr.read()
    assert _wait_for(lambda: not _alive(child), 15)
    assert not in_flight.exists()  # SIGTERM first: the cell forgot its record and reruns


def test_the_servers_exit_handlers_run_once_in_the_server_not_in_every_job(tmp_path):
    (tmp_path / "mod").mkdir()
    marker = tmp_path / "exit-handler-ran"
    (tmp_path / "mod" / "registers_exit.py").write_text(
        f"import atexit\natexit.register(lambda: open({str(marker)!r}, 'a').write('x'))\n"
    )
    sock = tmp_path / "jobs.sock"
    env = dict(os.environ, **TOY_ENV)
    env["PYTHONPATH"] = f"{tmp_path / 'mod'}{os.pathsep}{env['PYTHONPATH']}"
    with open(tmp_path / "warm.log", "w") as fh:
        proc = subprocess.Popen(
            [sys.executable, "-m", "sparsebench.suite.warm", str(sock), "--preload",
             "registers_exit,sparsebench.suite.cli", "--parent", str(os.getpid())],
            stdout=fh, stderr=subprocess.STDOUT, env=env,
        )  # fmt: skip
    try:
        assert _wait_for(lambda: "serving on" in (tmp_path / "warm.log").read_text())
        spec = _spec(tmp_path)
        same = {"PYTHONPATH": env["PYTHONPATH"]}  # PYTHONPATH is read at start: it must match
        got = _job(tmp_path, sock, "cells", "toy", "--cell", "v1", "--spec", spec, extra_env=same)
        assert got.returncode == 0 and len(_jobs(tmp_path / "warm.log")) == 1
        assert not marker.exists()
    finally:
        proc.terminate()
        assert proc.wait(timeout=30) == 0
    assert marker.read_text() == "x"


def _fork_standby(tmp_path, listener, trigger: bool):
    """A standby forked from this test as the server forks one during its preload (with the
    listening socket as its trigger), its stdout (the server's log) on a pipe."""
    import socket

    ours, theirs = socket.socketpair()
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child
        sys.stdout = os.fdopen(w, "w")  # Server.log's stream (pytest holds fd 1)
        warm._standby(theirs, ["json"], [ours.fileno(), r], listener if trigger else None, [])
    os.close(w)
    theirs.close()
    os.set_blocking(r, False)
    return pid, ours, r


def _read(fd) -> str:
    try:
        return os.read(fd, 4096).decode()
    except BlockingIOError:
        return ""


@pytest.mark.parametrize("wake", ["a job connects", "the server serves"])
def test_a_standby_forked_during_the_preload_imports_only_once_woken(tmp_path, wake):
    import socket

    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(str(tmp_path / "jobs.sock"))
    listener.listen(4)
    pid, chan, out = _fork_standby(tmp_path, listener, trigger=True)
    time.sleep(0.5)
    assert "ready" not in _read(out)  # waiting: the workflow is still being parsed
    client = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    if wake == "a job connects":
        client.connect(str(tmp_path / "jobs.sock"))
    else:
        chan.sendall(warm.GO)
    got = _wait_for(lambda: re.search(r"standby \d+ ready", _read(out)), 30)
    assert got
    if wake == "a job connects":
        listener.settimeout(5)
        conn, _ = listener.accept()  # the standby never accepted it: the server gets the job
        conn.close()
        chan.sendall(warm.GO)  # the server's word still comes, before any job
    chan.close()  # the server ends: its idle standby too
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    client.close()
    listener.close()
