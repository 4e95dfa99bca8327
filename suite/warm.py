"""A warm interpreter for the workflow's jobs: torch and Lightning imported once per run.

Every job of a local run is a new ``python -m sparsebench.suite.cli cells ...`` process that
would pay seconds importing torch and Lightning before its first cell (``perf startup``
measures it). ``sparsebench run`` starts one server per run that imports them while Snakemake
parses the workflow; a job command that finds ``$SPARSEBENCH_WARM`` connects to it and the
server forks a child that runs the same command line, with the job's working folder,
environment and standard streams (passed as file descriptors). The job process waits for the
child's exit status and returns it, so Snakemake sees an ordinary job: same command, same log,
same exit code; Ctrl-C, SIGTERM and SIGHUP sent to the job reach the child.

Each job is still its own process (a fork of the same pristine parent), so nothing a cell
does leaks into the next one and cells' own seconds are measured as before. A job runs on its
own, exactly as without the server, whenever the server cannot serve it: no server
(plain ``snakemake``, ``--no-warm``), another interpreter (``--use-conda``), a scheduler's job
(SLURM and the like run jobs on their nodes), an import-time setting that differs from the
server's (``OMP_NUM_THREADS``, ``CUDA_VISIBLE_DEVICES``, ...), or a server that has gone.

Only modules that start no thread of their own are preloaded: a fork copies only the calling
thread, and polars (jemalloc's background threads, its spill cleaner) and pandas are not
fork-safe. The server checks this after preloading and refuses to serve otherwise. torch,
NumPy and OpenBLAS re-create their thread pools after a fork (the way PyTorch's DataLoader
workers start). The jobs that read and write tables (aggregate and boards, summary, claims)
need polars and pandera (0.5-0.9 s of imports): the server keeps a *standby*, a child forked
ahead of time that imports them and then waits for the next such job and becomes it; a new
standby is forked as soon as one is taken. A standby that died (or none yet) leaves its job to
an ordinary fork.
"""

from __future__ import annotations

import atexit
import gc
import json
import os
import selectors
import signal
import socket
import struct
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path

ENV = "SPARSEBENCH_WARM"  # the server's socket path, set by `sparsebench run` for Snakemake
# Job commands the server runs; any other command runs on its own.
COMMANDS = frozenset({"cells", "build", "aggregate", "summary", "claims"})
# Variables read when torch, NumPy or Lightning are imported: a job whose values differ from
# the server's runs on its own (the server's imports would not honour them).
IMPORT_TIME_PREFIXES = (
    "OMP_",
    "MKL_",
    "OPENBLAS_",
    "KMP_",
    "GOTO",
    "CUDA_",
    "NVIDIA_",
    "HIP_",
    "ROCR_",
    "PYTORCH_",
    "TORCH",
    "TRITON_",
    "PL_",
    "LD_",
    "PYTHON",
    "MPLBACKEND",
    "POLARS_",
)
# Set per job by Snakemake (from the rule's threads) and honoured by the child at run time:
# thread counts through threadpoolctl, the others are read when used, not when imported.
RUN_TIME_VARS = (
    "OMP_NUM_THREADS",
    "GOTO_NUM_THREADS",
    "MKL_NUM_THREADS",
    "OPENBLAS_NUM_THREADS",
    "VECLIB_MAXIMUM_THREADS",
    "NUMEXPR_NUM_THREADS",
    "TORCHINDUCTOR_CACHE_DIR",
    "PYTORCH_NVML_BASED_CUDA_CHECK",
)
# A job inside a scheduler's allocation runs there, never in the server of the submitting run.
SCHEDULER_VARS = ("SLURM_JOB_ID", "PBS_JOBID", "LSB_JOBID", "JOB_ID", "FLUX_JOB_ID")
# Modules every job imports, in the order that overlaps best with the workflow's parse.
PRELOAD = (
    "threadpoolctl",
    "torch",
    "lightning.pytorch",
    "matplotlib",
    "scipy.stats",
    "sparsebench.suite.job",
    "sparsebench.suite.lightning",
    "sparsebench.suite.cli",
)
# Jobs that read and write tables. They need polars and pandera, which no fork may follow, so
# each runs in a standby: a child forked ahead of its job that imports these meanwhile.
TABLE_COMMANDS = frozenset({"aggregate", "summary", "claims"})
TABLE_PRELOAD = (
    "matplotlib.pyplot",  # the boards' plots, and markdown their HTML pages
    "matplotlib.backends.backend_agg",
    "markdown",
    "polars",
    "sparsebench.suite.schemas",
    "sparsebench.suite.tables",
    "sparsebench.suite.boards",
)
STOP_SIGNALS = {signal.SIGINT, signal.SIGTERM, signal.SIGHUP}
LIGHT_PRELOAD = ("threadpoolctl", "sparsebench.suite.cli")
GO = b"g"  # the server's word to a standby spawned during the preload: import now
FORK_UNSAFE = ("polars", "pandera", "pyarrow")
_HEADER = struct.Struct("!I")


def fingerprint(env: dict[str, str] | None = None) -> dict[str, str]:
    """What must match between the server and a job: the interpreter and the variables read
    at import time."""
    env = dict(os.environ if env is None else env)
    out = {
        k: v
        for k, v in env.items()
        if k.startswith(IMPORT_TIME_PREFIXES) and k not in RUN_TIME_VARS
    }
    out["executable"] = sys.executable
    return out


# ---------------------------------------------------------------------------- the job's side
def delegate(argv: Sequence[str]) -> int | None:
    """Run ``sparsebench <argv>`` in the warm server and return its exit code; None when it
    cannot (the caller then runs the command itself)."""
    path = os.environ.get(ENV)
    if not path or not argv or argv[0] not in COMMANDS:
        return None
    if any(v in os.environ for v in SCHEDULER_VARS) or not _forks(argv):
        return None
    for fd in (0, 1, 2):  # a closed stream: /dev/null, so the socket below cannot take it
        try:
            os.fstat(fd)
        except OSError:
            os.open(os.devnull, os.O_RDWR)
    try:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.connect(path)
    except OSError:
        return None
    with sock:
        env = {k: v for k, v in os.environ.items() if k != ENV}
        request = json.dumps(
            {"argv": list(argv), "cwd": os.getcwd(), "env": env, "fingerprint": fingerprint()}
        ).encode()
        try:
            socket.send_fds(sock, [_HEADER.pack(len(request))], [0, 1, 2])
            sock.sendall(request)
            reply = sock.makefile("r", encoding="utf-8")
            first = reply.readline().split()
        except OSError:
            return None
        if len(first) != 2 or first[0] != "pid":
            return None  # refused (another interpreter or settings): run it here
        child = int(first[1])
        return _wait(reply, child)


def _forks(argv: Sequence[str]) -> bool:
    """False for the cells of a pillar that may not run in a fork (:attr:`Pillar.fork_cells`:
    its records report the process's own resident memory, which a forked child counts
    differently: the libraries' pages it shares with the server are not in its resident set
    until it touches them)."""
    if argv[0] != "cells" or len(argv) < 2:
        return True
    from sparsebench.suite.pillar import PillarError, get_pillar

    try:
        return get_pillar(argv[1]).fork_cells
    except PillarError:
        return True  # the command itself says what is wrong


def _wait(reply, child: int) -> int:
    """Forward the signals that stop a job to the child's process group; return its status."""

    def forward(signum, frame):
        try:
            os.killpg(child, signum)
        except ProcessLookupError:
            pass

    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, forward)
    while True:
        line = reply.readline()  # a forwarded signal does not end it (PEP 475)
        if not line:  # the server is gone: so must its child be, as a stopped job would
            _stop(child)
            print(f"sparsebench: the warm job server stopped (job pid {child})", file=sys.stderr)
            return 1
        parts = line.split()
        if len(parts) == 2 and parts[0] == "exit":
            return int(parts[1])


def _stop(child: int, grace: float = 10.0) -> None:
    """SIGTERM to the child's group (a cell then forgets its in-flight record and reruns next
    time), SIGKILL after ``grace`` seconds."""
    try:
        os.killpg(child, signal.SIGTERM)
    except ProcessLookupError:
        return
    deadline = time.monotonic() + grace
    while time.monotonic() < deadline:
        try:
            os.killpg(child, 0)
        except ProcessLookupError:
            return
        time.sleep(0.05)
    try:
        os.killpg(child, signal.SIGKILL)
    except ProcessLookupError:
        pass


# ------------------------------------------------------------------------- the server's side
class Server:
    """Preload, then fork one child per job; report each child's exit status to its job."""

    def __init__(self, path: str, parent: int | None = None) -> None:
        self.path = path
        self.parent = parent
        self.children: dict[int, socket.socket] = {}  # child pid -> its job's connection
        self.sel = selectors.DefaultSelector()
        self.fp: dict[str, str] = {}
        self.added: dict[str, str] = {}  # variables the preloaded modules set on import
        self.stopping = False
        self.wake: tuple[socket.socket, ...] = ()
        self.started: dict[int, float] = {}  # child pid -> when it was forked
        self.standby: tuple[int, socket.socket] | None = None  # pid, channel of a table job
        self.table_modules: list[str] = []  # what a standby imports
        self.listener: socket.socket | None = None  # set before the preload by main()
        self.standby_waits = False  # the standby waits for GO (spawned during the preload)

    @staticmethod
    def log(text: str) -> None:
        """One line of the server's log (``logs/warm.log``), with the time of day."""
        print(f"{time.strftime('%H:%M:%S')}.{int(time.time() * 1000) % 1000:03d} {text}",
              flush=True)  # fmt: skip

    def preload(
        self, modules: Sequence[str] = PRELOAD, pillars: Sequence[str] | None = None
    ) -> None:
        """Import ``modules`` and the built-in ``pillars`` (all when None) with their
        methods."""
        import importlib

        before = dict(os.environ)
        self.fp = fingerprint(before)  # a job is compared with what these imports saw
        for name in modules:
            t0 = time.perf_counter()
            importlib.import_module(name)
            self.log(f"preloaded {name} in {time.perf_counter() - t0:.2f} s")
            if name == "torch" and self.listener is not None:
                trigger = self.listener.dup()  # the child closes the listener's own fd
                try:
                    self._spawn_standby(pillars, trigger=trigger)
                finally:
                    trigger.close()
        # The built-in pillars and their methods; not plug-ins, which the jobs load (one
        # that imports polars at its top must not stop the server).
        _import_methods(pillars)
        unsafe = [m for m in FORK_UNSAFE if m in sys.modules]
        if unsafe:
            raise RuntimeError(
                f"preloading imported {', '.join(unsafe)}, which is not fork-safe; the jobs "
                "run on their own"
            )
        self.added = {k: v for k, v in os.environ.items() if before.get(k) != v}
        self.table_modules = [*TABLE_PRELOAD, *_pillar_modules(pillars, ("table", "board"))]
        # What the preload made lives as long as the server: out of the collector's reach, a
        # child's first full collection does not walk torch's and Lightning's millions of
        # objects (0.25 s of a board job) nor write to their pages (copy-on-write).
        gc.freeze()

    def serve(self, listener: socket.socket) -> None:
        self.wake = socket.socketpair()  # a signal's byte ends select() without its timeout
        for end in self.wake:
            end.setblocking(False)
        signal.set_wakeup_fd(self.wake[1].fileno())
        # A child's exit wakes the select() too (its byte), so its job hears at once.
        signal.signal(signal.SIGCHLD, lambda signum, frame: None)
        self.sel.register(listener, selectors.EVENT_READ, None)
        self.sel.register(self.wake[0], selectors.EVENT_READ, "wake")
        self.listener = listener
        if self.standby is not None and self.standby_waits:
            try:  # the word to import, if no job has given it already
                self.standby[1].sendall(GO)
            except OSError:  # it died meanwhile (reaped below)
                pass
        elif self.standby is None:
            self._spawn_standby()
        self.standby_waits = False
        while not self.stopping:
            for key, _ in self.sel.select(timeout=0.2):
                if key.data is None:
                    self._accept(listener)
                elif key.data == "wake":
                    try:
                        self.wake[0].recv(512)
                    except BlockingIOError:
                        pass
                else:  # a job's connection closed (or sent more): its job is gone
                    self._job_gone(key.fileobj, key.data)
            self._reap()
            if self.parent is not None and os.getppid() != self.parent:
                break  # the run that started this server died without stopping it
        self.shutdown()

    def _accept(self, listener: socket.socket) -> None:
        conn, _ = listener.accept()
        conn.settimeout(5.0)  # a client that connects and says nothing must not hold the rest
        try:
            request, fds = _receive(conn)
            conn.settimeout(None)
        except (OSError, ValueError) as e:
            self.log(f"a job's request was unreadable: {e}")
            conn.close()
            return
        theirs = request.get("fingerprint") or {}
        if theirs != self.fp:
            keys = sorted(k for k in {*theirs, *self.fp} if theirs.get(k) != self.fp.get(k))
            self.log(f"refused a job (its own {', '.join(keys)}): it runs on its own")
            for fd in fds:
                os.close(fd)
            try:
                conn.sendall(b"refused settings\n")
            except OSError:
                pass
            conn.close()
            return
        request["env"] = {**request["env"], **self.added}  # as if imported there
        table = request["argv"][0] in TABLE_COMMANDS
        pid = self._hand_to_standby(request, fds) if table else None
        if pid is None:
            pid = self._fork(lambda close: _child(request, fds, close), extra=[conn])
        for fd in fds:  # before the next fork: no other child may hold the job's streams
            os.close(fd)
        if table and self.standby is None and not self.stopping:
            self._spawn_standby()
        self.children[pid] = conn
        self.sel.register(conn, selectors.EVENT_READ, pid)
        self.started[pid] = time.perf_counter()
        self.log(f"job {pid}: {' '.join(request['argv'])[:200]}")
        try:
            conn.sendall(f"pid {pid}\n".encode())
        except OSError:  # the job is gone already: so goes its child
            self._job_gone(conn, pid)

    def _fork(self, child: Callable[[list[int]], None], extra: Sequence[socket.socket] = ()) -> int:
        """Fork ``child(fds to close)`` (which never returns) as its own process group."""
        sys.stdout.flush()
        sys.stderr.flush()
        # Held until the child has its own handlers: one arriving between the fork and them
        # would run the server's handler in the child and be lost.
        signal.pthread_sigmask(signal.SIG_BLOCK, STOP_SIGNALS)
        pid = os.fork()
        if pid == 0:  # the child: only the server's sockets, never its jobs' or standby's
            others = [*extra, *self.wake, *self.children.values()]
            if self.listener is not None:
                others.append(self.listener)
            if self.standby is not None:
                others.append(self.standby[1])
            child([s.fileno() for s in others])
        try:  # here too: a signal for the group may come before the child has run
            os.setpgid(pid, pid)
        except OSError:  # the child got there first (or has exec'd, which it never does)
            pass
        signal.pthread_sigmask(signal.SIG_UNBLOCK, STOP_SIGNALS)
        return pid

    def _spawn_standby(
        self, pillars: Sequence[str] | None = None, trigger: socket.socket | None = None
    ) -> None:
        """Fork the standby of the next table job; it imports :attr:`table_modules`.

        With a ``trigger`` (the listening socket, during the preload, once torch is in: a
        table job needs torch for the method registry but not Lightning), the standby waits
        until a job connects (the workflow is parsed: a core is free while Lightning is
        imported) or the server serves, then imports the table modules and the ``pillars``'
        methods: off the first cell's way. (A claims job, rarely the first table job, then
        imports scipy.stats itself.)"""
        ours, theirs = socket.socketpair()
        if trigger is None:
            modules, methods = self.table_modules, None
        else:
            modules = [*TABLE_PRELOAD, *_pillar_modules(pillars, ("table", "board"))]
            methods = pillars
        try:
            pid = self._fork(
                lambda close: _standby(theirs, modules, close, trigger, methods), extra=[ours]
            )
        finally:
            theirs.close()
        self.standby = (pid, ours)
        self.standby_waits = trigger is not None

    def _hand_to_standby(self, request: dict, fds: list[int]) -> int | None:
        """Send the job to the standby; its pid, or None when there is no standby to take it
        (the job is then forked as any other)."""
        if self.standby is None:
            return None
        pid, chan = self.standby
        self.standby = None
        body = json.dumps(request).encode()
        try:
            socket.send_fds(chan, [_HEADER.pack(len(body))], fds)
            chan.sendall(body)
        except OSError as e:  # it died meanwhile (reaped below)
            self.log(f"the standby {pid} could not take a job: {e}")
            pid = None
        chan.close()
        return pid

    def _job_gone(self, conn: socket.socket, pid: int) -> None:
        try:
            data = conn.recv(1)
        except OSError:
            data = b""
        if not data:  # killed hard (SIGKILL): its child must not run on unattended
            try:
                os.killpg(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            self.sel.unregister(conn)

    def _reap(self) -> None:
        while self.children or self.standby is not None:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return
            if pid == 0:
                return
            code = os.waitstatus_to_exitcode(status)
            if self.standby is not None and pid == self.standby[0]:  # died waiting for a job
                self.log(f"standby {pid}: exit {code} before any job; table jobs are forked")
                self.standby[1].close()
                self.standby = None
                continue
            self._report(pid, 128 - code if code < 0 else code)  # a signal: as a shell says

    def _report(self, pid: int, code: int) -> None:
        conn = self.children.pop(pid, None)
        t0 = self.started.pop(pid, None)
        took = "" if t0 is None else f" after {time.perf_counter() - t0:.2f} s"
        self.log(f"job {pid}: exit {code}{took}")
        if conn is not None:
            try:
                self.sel.unregister(conn)
            except (KeyError, ValueError):
                pass
            try:
                conn.sendall(f"exit {code}\n".encode())
            except OSError:
                pass
            conn.close()

    def stop(self, signum=None, frame=None) -> None:
        self.stopping = True  # the wake-up socket ends the select() at once

    def shutdown(self) -> None:
        if self.standby is not None:  # waiting for a job: its channel's end stops it
            pid, chan = self.standby
            self.standby = None
            chan.close()
            try:
                os.killpg(pid, signal.SIGKILL)
                os.waitpid(pid, 0)
            except (ProcessLookupError, ChildProcessError):
                pass
        for pid in list(self.children):
            try:
                os.killpg(pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
        deadline = time.time() + 10
        while self.children and time.time() < deadline:
            self._reap()
            time.sleep(0.05)
        for pid in list(self.children):
            try:
                os.killpg(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            try:
                os.waitpid(pid, 0)  # certain now: its job gets a status, not a closed socket
            except ChildProcessError:
                pass
            self._report(pid, 128 + signal.SIGKILL)


def _receive(conn: socket.socket) -> tuple[dict, list[int]]:
    head, fds, _, _ = socket.recv_fds(conn, _HEADER.size, 3)
    while len(head) < _HEADER.size:
        more = conn.recv(_HEADER.size - len(head))
        if not more:
            raise ValueError("connection closed in the header")
        head += more
    (size,) = _HEADER.unpack(head)
    body = b""
    while len(body) < size:
        more = conn.recv(min(1 << 16, size - len(body)))
        if not more:
            raise ValueError("connection closed in the request")
        body += more
    if len(fds) != 3:
        raise ValueError(f"expected 3 file descriptors, got {len(fds)}")
    return json.loads(body), fds


def _leave_server(close: Sequence[int]) -> None:
    """In a forked child: its own process group (the job forwards signals to it), default
    signal handlers, none of the server's sockets."""
    os.setpgid(0, 0)
    signal.set_wakeup_fd(-1)
    for sig in (signal.SIGTERM, signal.SIGHUP, signal.SIGCHLD):
        signal.signal(sig, signal.SIG_DFL)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, STOP_SIGNALS)
    for fd in close:
        os.close(fd)


def _standby(
    chan: socket.socket,
    modules: Sequence[str],
    close: Sequence[int],
    trigger: socket.socket | None = None,
    methods: Sequence[str] | None = None,
) -> None:
    """In a forked child: import ``modules`` (polars and pandera: no fork may follow them),
    then wait for a job on ``chan`` and become it. Never returns; exits when the server
    closes the channel first. With a ``trigger`` (the server's listening socket, never
    accepted on here) it first waits for a job to connect there or for :data:`GO` on
    ``chan``, and imports the built-in ``methods`` pillars' methods too (None: all)."""
    import importlib
    import select

    try:
        _leave_server(close)
        awaiting_go = trigger is not None
        if trigger is not None:
            ready, _, _ = select.select([chan, trigger], [], [])
            trigger.close()
            if chan in ready:
                if chan.recv(len(GO)) != GO:
                    raise ValueError("the server closed the channel")
                awaiting_go = False
        t0 = time.perf_counter()
        for name in modules:
            importlib.import_module(name)
        if trigger is not None:
            _import_methods(methods)
        gc.freeze()  # as the server's preload: its own imports too
        gc.freeze()  # as the server's preload: its own imports too
        Server.log(f"standby {os.getpid()} ready in {time.perf_counter() - t0:.2f} s")
        if awaiting_go and chan.recv(len(GO)) != GO:  # the server sends it before any job
            raise ValueError("the server closed the channel")
        request, fds = _receive(chan)
    except BaseException as e:  # the server's channel closed, or an import failed
        if not isinstance(e, ValueError | OSError | KeyboardInterrupt):
            Server.log(f"standby {os.getpid()}: {e!r}")
        sys.stdout.flush()
        os._exit(0 if isinstance(e, ValueError) else 1)
    chan.close()
    _child(request, fds, close=[], left=True)


def _child(request: dict, fds: list[int], close: Sequence[int], left: bool = False) -> None:
    """In the forked child: become the job (its streams, folder, environment, arguments), run
    the command line and exit with its code. Never returns."""
    import traceback

    code = 1
    try:
        if not left:
            _leave_server(close)
        for i, fd in enumerate(fds):
            os.dup2(fd, i)
            os.close(fd)
        atexit._clear()  # the server's exit handlers are the server's (matplotlib's tmp dir)
        _fresh_random_state()
        os.chdir(request["cwd"])
        os.environ.clear()
        os.environ.update(request["env"])
        sys.argv = ["sparsebench", *request["argv"]]
        _thread_limits(request["env"])
        from sparsebench.suite.cli import main

        try:
            code = main(request["argv"])
        except SystemExit as e:  # as the interpreter ends on sys.exit(...)
            if e.code is None:
                code = 0
            elif isinstance(e.code, int):
                code = e.code
            else:
                print(e.code, file=sys.stderr)
                code = 1
        except KeyboardInterrupt:
            code = 130
        except BaseException:
            traceback.print_exc()
            code = 1
        atexit._run_exitfuncs()
    finally:
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except Exception:
                pass
        os._exit(code if isinstance(code, int) else 1)


def _import_methods(pillars: Sequence[str] | None) -> None:
    """Import the methods of the built-in ``pillars`` (all when None)."""
    from sparsebench.suite.pillar import builtin_pillars
    from sparsebench.suite.registry import discover, package_exists

    for pillar in builtin_pillars():
        if pillars is not None and pillar.name not in pillars:
            continue
        for family in pillar.families:
            package = pillar.method_package(family)
            if package_exists(package):
                discover(package)


def _pillar_modules(pillars: Sequence[str] | None, names: Sequence[str]) -> list[str]:
    """The modules ``names`` of the built-in ``pillars`` (all when None) that exist."""
    import importlib.util

    from sparsebench.suite.pillar import builtin_pillars

    out = []
    for pillar in builtin_pillars():
        if pillars is not None and pillar.name not in pillars:
            continue
        package = type(pillar).__module__
        for name in names:
            if importlib.util.find_spec(f"{package}.{name}") is not None:
                out.append(f"{package}.{name}")
    return out


def _fresh_random_state() -> None:
    """Unseeded global generators as a new process has them (each job's own entropy), not
    one state shared by every fork; the cells seed their own."""
    for name, reseed in (("numpy", lambda m: m.random.seed()), ("torch", lambda m: m.seed())):
        module = sys.modules.get(name)
        if module is not None:
            reseed(module)


def _thread_limits(env: dict[str, str]) -> None:
    """The job's thread counts, which a new process's OpenMP and BLAS would read from its
    environment when loaded (here, they were loaded by the server)."""
    from threadpoolctl import threadpool_limits

    def count(*names: str) -> int | None:
        for name in names:
            value = env.get(name, "")
            if value.isdigit() and int(value) > 0:
                return int(value)
        return None

    omp = count("OMP_NUM_THREADS")
    blas = count("OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "GOTO_NUM_THREADS", "OMP_NUM_THREADS")
    limits = {k: v for k, v in (("openmp", omp), ("blas", blas)) if v is not None}
    if limits:
        threadpool_limits(limits=limits)


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m sparsebench.suite.warm SOCKET [--parent PID]``: the server of one run."""
    import argparse

    ap = argparse.ArgumentParser(prog="python -m sparsebench.suite.warm")
    ap.add_argument("socket", help="the Unix socket to listen on (created; removed at the end)")
    ap.add_argument("--parent", type=int, help="stop when this process is gone")
    ap.add_argument(
        "--pillars",
        help="the built-in pillars of the run, comma-separated: their methods and what their "
        "jobs import (torch, Lightning) are preloaded; none: only the suite's CLI",
    )
    ap.add_argument(
        "--preload",
        help="only these modules, comma-separated, and no pillar or method (tests, debugging)",
    )
    args = ap.parse_args(argv)
    server = Server(args.socket, args.parent)
    signal.signal(signal.SIGTERM, server.stop)
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the run forwards Ctrl-C to its jobs
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        # Listening before the preload: a job that starts meanwhile waits for the rest of the
        # import rather than paying all of it; if the preload fails, it runs on its own.
        listener.bind(args.socket)
        listener.listen(64)
        server.listener = listener
        try:
            pillars = None if args.pillars is None else [p for p in args.pillars.split(",") if p]
            if args.preload is not None:
                server.preload([m for m in args.preload.split(",") if m], pillars=[])
            elif pillars == []:  # a run of plug-in pillars alone: what they need is unknown
                server.preload(LIGHT_PRELOAD, pillars=[])
            else:
                server.preload(PRELOAD, pillars)
        except Exception as e:
            server.log(f"not serving: {e}")
            return 1
        server.log(f"serving on {args.socket}")
        server.serve(listener)
    finally:
        listener.close()
        Path(args.socket).unlink(missing_ok=True)
        try:  # the run's private folder, when the run could not remove it (killed)
            Path(args.socket).parent.rmdir()
        except OSError:
            pass
        atexit._run_exitfuncs()
        atexit._clear()
        sys.stdout.flush()
    os._exit(0)  # not the interpreter's teardown of torch and Lightning (a second or two)


if __name__ == "__main__":
    sys.exit(main())
