"""A single-node SLURM on this machine, for the cluster tests and for trying `profiles/slurm`
before a real cluster: munged, slurmctld and slurmd started by hand, no accounting.

``python -m sparsebench.suite.slurm_local up [--folder F]`` starts it (``make slurm-up``) and
``down`` stops it (``make slurm-down``: its jobs cancelled first, then the daemons it started,
by their process ids); tests use :func:`start` / :func:`stop`. Needs the
Debian packages ``slurmctld slurmd slurm-client munge`` and root (the daemons run as root and
munged as the munge user).

The configuration goes to the default path, /etc/slurm/slurm.conf (marked as ours, and
removed again on ``down``): the SLURM executor plugin strips every ``SLURM_*`` variable,
``SLURM_CONF`` included, before it submits, and refuses ``--export`` in ``slurm_extra``, so
jobs and the ``srun`` inside them find the configuration only there. A machine whose
/etc/slurm/slurm.conf is not ours has a SLURM of its own: :func:`start` refuses to touch it.

Settings (checked against Slurm 22.05): ``proctrack/linuxproc`` and ``task/none`` (the cgroup
defaults fail in containers), ``select/cons_tres`` with ``CR_Core`` (``CR_Core_Memory`` gives a
job without ``--mem`` the whole node), ``MinJobAge=3600`` (squeue, the status command without
accounting, forgets a job after MinJobAge), and a ``cgroup.conf`` naming ``cgroup/v1``
(22.05's slurmd initialises a cgroup plugin whatever the proctrack).
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

CONF = Path("/etc/slurm/slurm.conf")
MARK = "# written by sparsebench.suite.slurm_local"
DEFAULT_FOLDER = Path("/tmp/sparsebench-slurm")
BINARIES = ("munged", "munge", "unmunge", "slurmctld", "slurmd", "scontrol", "sinfo", "sbatch")


class SlurmUnavailable(RuntimeError):
    """SLURM cannot start on this machine; the message says why."""


@dataclass
class LocalSlurm:
    folder: Path
    cpus: int

    @property
    def logs(self) -> list[Path]:
        return sorted((self.folder / "log").glob("*.log"))

    def log_tail(self, lines: int = 20) -> str:
        out = []
        for log in self.logs:
            text = log.read_text(errors="replace").splitlines()[-lines:]
            out.append(f"--- {log}\n" + "\n".join(text))
        return "\n".join(out)


def _run(cmd: list[str], timeout: float = 30) -> subprocess.CompletedProcess:
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)


def _wait(check, timeout: float, what: str, cluster: LocalSlurm | None = None) -> None:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if check():
            return
        time.sleep(0.5)
    tail = f"\n{cluster.log_tail()}" if cluster is not None else ""
    raise SlurmUnavailable(f"{what} within {timeout:g} s{tail}")


def _munge_ok() -> bool:
    try:
        enc = _run(["munge", "-n"], timeout=10)
        return enc.returncode == 0 and (
            subprocess.run(
                ["unmunge"], input=enc.stdout, capture_output=True, text=True, timeout=10
            ).returncode
            == 0  # fmt: skip
        )
    except (OSError, subprocess.TimeoutExpired):
        return False


def _start_munge(folder: Path) -> None:
    """Start munged unless one answers; one started here is stopped again by :func:`stop`
    (its process id goes to ``folder``/munged.pid)."""
    if _munge_ok():
        return
    key = Path("/etc/munge/munge.key")
    if not key.exists():
        key.parent.mkdir(parents=True, exist_ok=True)
        key.write_bytes(os.urandom(1024))
        shutil.chown(key, "munge", "munge")
        key.chmod(0o400)
    run = Path("/run/munge")
    run.mkdir(parents=True, exist_ok=True)
    shutil.chown(run, "munge", "munge")
    run.chmod(0o755)
    started = _run(["su", "-s", "/bin/sh", "munge", "-c", "munged"])
    if started.returncode != 0:
        raise SlurmUnavailable(f"munged did not start: {started.stderr.strip()}")
    _wait(_munge_ok, 10, "munge -n | unmunge did not succeed")
    pid = Path("/run/munge/munged.pid")
    if pid.exists():
        (folder / "munged.pid").write_text(pid.read_text())


def config(folder: Path, cpus: int, memory_mb: int) -> str:
    """The slurm.conf of a one-node cluster whose state, spool, pid and log files live in
    ``folder``."""
    return f"""{MARK}: a one-node cluster for tests, removed by `make slurm-down`
ClusterName=sparsebench
SlurmctldHost=localhost
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
StateSaveLocation={folder}/state
SlurmdSpoolDir={folder}/spool
SlurmctldPidFile={folder}/slurmctld.pid
SlurmdPidFile={folder}/slurmd.pid
SlurmctldLogFile={folder}/log/slurmctld.log
SlurmdLogFile={folder}/log/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
MinJobAge=3600
ReturnToService=2
NodeName=localhost NodeAddr=127.0.0.1 CPUs={cpus} RealMemory={memory_mb} State=UNKNOWN
PartitionName=cpu Nodes=localhost Default=YES MaxTime=INFINITE State=UP
"""


def _node_facts() -> tuple[int, int]:
    """(CPUs, about 90 % of the memory) as slurmd -C reports them."""
    out = _run(["slurmd", "-C"]).stdout
    facts = dict(p.split("=", 1) for p in out.split() if "=" in p)
    return int(facts.get("CPUs", os.cpu_count() or 1)), int(int(facts["RealMemory"]) * 0.9)


def start(folder: Path = DEFAULT_FOLDER, timeout: float = 60) -> LocalSlurm:
    """Start munged (if none answers), slurmctld and slurmd with the configuration written to
    /etc/slurm/slurm.conf; returns once the node is idle.

    Raises:
        SlurmUnavailable: a binary is missing, not root, a SLURM of the machine's own (or one
            started from another folder that still answers), or a daemon that does not come
            up in ``timeout`` seconds (with the logs' tails).
    """
    missing = [b for b in BINARIES if shutil.which(b) is None]
    if missing:
        raise SlurmUnavailable(
            f"not installed: {', '.join(missing)} (apt-get install --no-install-recommends "
            "slurmctld slurmd slurm-client munge)"
        )
    if os.geteuid() != 0:
        raise SlurmUnavailable("the daemons are started as root, and this process is not")
    if CONF.exists() and MARK not in CONF.read_text(errors="replace"):
        raise SlurmUnavailable(f"{CONF} exists and is not ours: this machine has its own SLURM")
    stop(folder)  # leftovers of an earlier run from this folder
    cluster = LocalSlurm(folder, 0)
    try:
        if CONF.exists() and _answers(["scontrol", "ping"]):
            raise SlurmUnavailable(
                f"a SLURM controller already answers with {CONF} (started from another "
                "folder: `make slurm-down` or its folder's stop); not starting a second"
            )
        for sub in ("state", "spool", "log"):
            (folder / sub).mkdir(parents=True, exist_ok=True)
        _start_munge(folder)
        cluster.cpus, memory = _node_facts()
        CONF.parent.mkdir(parents=True, exist_ok=True)
        CONF.write_text(config(folder, cluster.cpus, memory))
        (CONF.parent / "cgroup.conf").write_text(f"{MARK}\nCgroupPlugin=cgroup/v1\n")
        for cmd in (["slurmctld", "-c"], ["slurmd", "-N", "localhost"]):
            done = _run(cmd)
            if done.returncode != 0:
                raise SlurmUnavailable(f"{cmd[0]} did not start: {done.stderr.strip()}\n"
                                       f"{cluster.log_tail()}")  # fmt: skip
            if cmd[0] == "slurmctld":
                _wait(lambda: _answers(["scontrol", "ping"]), timeout,
                      "slurmctld did not answer scontrol ping", cluster)  # fmt: skip
        _wait(lambda: _node_state() == "idle", timeout, "the node did not become idle", cluster)
    except SlurmUnavailable:
        stop(folder)
        raise
    except (OSError, subprocess.SubprocessError, KeyError, ValueError, LookupError) as e:
        stop(folder)
        raise SlurmUnavailable(f"{type(e).__name__}: {e}\n{cluster.log_tail()}") from e
    return cluster


def _answers(cmd: list[str]) -> bool:
    try:
        return _run(cmd, timeout=10).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


def _node_state() -> str:
    try:
        return _run(["sinfo", "-h", "-N", "-o", "%t"], timeout=10).stdout.strip()
    except (OSError, subprocess.TimeoutExpired):
        return ""


def _ours(pid: int, name: str) -> bool:
    """Whether process ``pid`` is still the daemon ``name`` (a pid file may outlive it, and
    its number be another process's by now)."""
    try:
        return Path(f"/proc/{pid}/comm").read_text().strip() == name
    except OSError:
        return False


def _cancel_jobs(timeout: float = 30) -> None:
    """Cancel every job of the cluster and wait (at most ``timeout`` s) until none runs, so
    that no job's processes outlive the daemons."""
    try:
        ids = _run(["squeue", "-h", "-o", "%i"], timeout=10).stdout.split()
        if ids:
            _run(["scancel", "--full", *ids], timeout=10)
        end = time.monotonic() + timeout
        while (
            time.monotonic() < end and _run(["squeue", "-h", "-o", "%i"], timeout=10).stdout.strip()
        ):
            time.sleep(0.5)
    except (OSError, subprocess.TimeoutExpired):
        pass


def stop(folder: Path = DEFAULT_FOLDER) -> None:
    """Stop what :func:`start` started from ``folder``: cancel the cluster's jobs, then stop
    slurmd, slurmctld and (if it was started here) munged by the process ids in ``folder``,
    and remove our /etc/slurm configuration."""
    ctld = folder / "slurmctld.pid"
    if ctld.exists() and shutil.which("squeue"):
        _cancel_jobs()
    for name in ("slurmd", "slurmctld", "munged"):
        pid_file = folder / f"{name}.pid"
        try:
            pid = int(pid_file.read_text().strip())
        except (OSError, ValueError):
            continue
        try:
            if _ours(pid, name):
                os.kill(pid, signal.SIGTERM)
                for _ in range(40):
                    if not _ours(pid, name):
                        break
                    time.sleep(0.25)
                else:
                    os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        pid_file.unlink(missing_ok=True)
    for conf in (CONF, CONF.parent / "cgroup.conf"):
        if conf.exists() and MARK in conf.read_text(errors="replace"):
            conf.unlink()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description="a one-node SLURM on this machine")
    ap.add_argument("action", choices=("up", "down"))
    ap.add_argument("--folder", type=Path, default=DEFAULT_FOLDER)
    args = ap.parse_args(argv)
    if args.action == "down":
        stop(args.folder)
        print("stopped")
        return 0
    try:
        cluster = start(args.folder)
    except SlurmUnavailable as e:
        print(f"SLURM cannot start here: {e}", file=sys.stderr)
        return 1
    print(f"one-node SLURM up ({cluster.cpus} CPUs, partition cpu); logs in {args.folder}/log")
    return 0


if __name__ == "__main__":
    sys.exit(main())
