"""The SSH preflight: before any rank starts, every remote host is connected to in parallel,
its host key and login checked, and gcurun's bootstrap started there, which reports its
gcurun version. The bootstraps then wait for their jobs on the same connections.

Failures are gathered and raised together (SSHConnectError), each naming its host and the
real cause; when any host fails, every connection is closed and nothing has started.
"""

from __future__ import annotations

import logging
import queue
import shlex
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from gcurun import __version__
from gcurun.config.api import Settings
from gcurun.errors import SSHConnectError
from gcurun.launch.api import LaunchPlan
from gcurun.launch.remote import bootstrap
from gcurun.launch.remote.protocol import PROTOCOL, Hello, parse_hello
from gcurun.launch.ssh.api import Connection, Deadline, HostFailure
from gcurun.launch.ssh.connect import connect
from gcurun.launch.ssh.hostkeys import KnownHostEntry, read_known_hosts
from gcurun.launch.ssh.sshconfig import SSHTarget, resolve_targets

if TYPE_CHECKING:
    from gcurun.launch.kinds import PreparedJob

log = logging.getLogger("gcurun.ssh")

BOOTSTRAP_MODULE = bootstrap.__name__
VERSION_PROBE = "import gcurun,sys;sys.stdout.write(gcurun.__version__)"
MAX_NOISE = 64 * 1024   # bytes a login shell may print before the hello line
MAX_PARALLEL = 128      # hosts connected to at once
# A host whose preflight thread is stuck where no socket timeout reaches (a name lookup,
# a ProxyCommand) is declared timed out this long after its own deadline.
OVERDUE_SLACK = 2.0


@dataclass(frozen=True)
class PreflightProgress:
    """One more host is done: ``ok`` or not, ``done`` of ``total``."""

    host: str
    ok: bool
    done: int
    total: int


@dataclass
class HostSession:
    """A checked host: its connection and the bootstrap waiting there for its job."""

    target: SSHTarget
    connection: Connection
    channel: Any                 # paramiko.Channel of the bootstrap
    hello: Hello
    leftover: bytes = b""        # what the bootstrap sent after its hello line

    def close(self) -> None:
        """Close the channel (the bootstrap exits) and the connection. Idempotent."""
        self.channel.close()
        self.connection.close()


@dataclass
class PreflightResult:
    sessions: dict[str, HostSession]
    notes: list[str] = field(default_factory=list)

    def close(self) -> None:
        for s in self.sessions.values():
            s.close()


def bootstrap_command(python: str) -> str:
    """The remote command line: the interpreter and the module, nothing else."""
    return f"exec {shlex.quote(python)} -m {BOOTSTRAP_MODULE}"


def preflight(
    targets: Sequence[SSHTarget],
    *,
    known: Sequence[KnownHostEntry] | None = None,
    version: str = __version__,
    progress: Callable[[PreflightProgress], None] | None = None,
) -> PreflightResult:
    """Check every target in parallel and return a waiting session per host alias.

    Raises SSHConnectError listing every failed host (after closing all connections).
    ``known`` defaults to the known_hosts files the targets name.
    """
    if known is None:
        paths = dict.fromkeys(p for t in targets for hop in (*t.via, t)
                              for p in hop.known_hosts_files + hop.global_known_hosts_files)
        known = read_known_hosts(paths)
    results: queue.Queue[tuple[str, HostSession | str]] = queue.Queue()
    runs = [_HostRun(t, known, version, results) for t in targets]
    gate = threading.BoundedSemaphore(MAX_PARALLEL)
    for run in runs:
        threading.Thread(target=run.run, args=(gate,), daemon=True,
                         name=f"preflight-{run.target.alias}").start()
    sessions: dict[str, HostSession] = {}
    failures: dict[str, str] = {}
    pending = {r.target.alias: r for r in runs}
    while pending:
        try:
            alias, outcome = results.get(timeout=0.2)
        except queue.Empty:
            for alias, run in list(pending.items()):
                if run.overdue():
                    results.put((alias, run.abandon()))
            continue
        if alias not in pending:
            continue
        del pending[alias]
        if isinstance(outcome, HostSession):
            sessions[alias] = outcome
        else:
            failures[alias] = outcome
        if progress is not None:
            progress(PreflightProgress(alias, isinstance(outcome, HostSession),
                                       len(sessions) + len(failures), len(targets)))
    result = PreflightResult(sessions, [n for s in sessions.values()
                                        for n in s.connection.notes])
    if failures:
        result.close()
        raise SSHConnectError(failures)
    for note in result.notes:
        log.warning("%s", note)
    return result


def remote_hosts(plan: LaunchPlan) -> list[str]:
    """The hosts of ``plan`` that run ranks over SSH, in plan order."""
    return list(dict.fromkeys(r.host for r in plan.ranks if not r.is_local))


@dataclass
class HostSessions:
    """The sessions an SSH preflight left waiting, by host: what the SSH kind keeps on a
    prepared job until its rank groups take them over."""

    sessions: dict[str, HostSession] = field(default_factory=dict)

    def close(self) -> None:
        """Close every session (its bootstrap exits, having run nothing). Idempotent."""
        sessions, self.sessions = self.sessions, {}
        for session in sessions.values():
            session.close()


def host_sessions(job: PreparedJob) -> dict[str, HostSession]:
    """The waiting session of each host the job's preflight checked (none offline)."""
    found = job.connections
    return found.sessions if isinstance(found, HostSessions) else {}


def preflight_plan(plan: LaunchPlan, settings: Settings) -> dict[str, HostSession]:
    """Check every remote host of ``plan`` with the SSH settings; a waiting session per
    host. Raises SSHConnectError (every connection closed) when any host fails, and
    UsageError for a bad ssh config."""
    names = remote_hosts(plan)
    if not names:
        return {}
    specs = {h.name: h for h in plan.hosts}
    targets = resolve_targets([specs[n] for n in names], settings.ssh, settings.sources)
    return preflight(targets, progress=_log_progress).sessions


def _log_progress(p: PreflightProgress) -> None:
    log.info("ssh preflight: %s %s (%d/%d)", p.host, "ok" if p.ok else "failed",
             p.done, p.total, extra={"preflight": p})


class _HostRun:
    """The preflight of one host, run in its own thread."""

    def __init__(self, target: SSHTarget, known: Sequence[KnownHostEntry], version: str,
                 results: queue.Queue[tuple[str, HostSession | str]]) -> None:
        self.target = target
        files = set(target.known_hosts_files + target.global_known_hosts_files)
        for hop in target.via:
            files |= set(hop.known_hosts_files + hop.global_known_hosts_files)
        self.known = [e for e in known if e.origin in files]
        self.version = version
        self.results = results
        self.deadline: Deadline | None = None
        self.stage = "waiting for a free connection slot"
        self.lock = threading.Lock()
        self.abandoned = False

    def run(self, gate: threading.BoundedSemaphore) -> None:
        with gate:
            self.deadline = Deadline(self.target.timeout)
            try:
                outcome: HostSession | str = self.check(self.deadline)
            except HostFailure as exc:
                outcome = str(exc)
            except Exception as exc:  # a bug or an unexpected paramiko error: still report
                outcome = f"unexpected error: {type(exc).__name__}: {exc}"
        with self.lock:
            if self.abandoned:
                if isinstance(outcome, HostSession):
                    outcome.close()
                return
        self.results.put((self.target.alias, outcome))

    def overdue(self) -> bool:
        d = self.deadline
        return d is not None and time.monotonic() > d.end + OVERDUE_SLACK

    def abandon(self) -> str:
        with self.lock:
            self.abandoned = True
        assert self.deadline is not None
        return self.deadline.expired(self.stage)

    def check(self, deadline: Deadline) -> HostSession:
        t = self.target
        self.stage = f"connecting to {t.display}"
        conn = connect(t, self.known, deadline, t.via)
        try:
            self.stage = "starting gcurun's bootstrap"
            channel = conn.transport.open_session(timeout=deadline.left(self.stage))
            channel.exec_command(bootstrap_command(t.python))
            self.stage = "waiting for gcurun's bootstrap to start"
            hello, leftover = _read_hello(channel, deadline, self.stage)
            if hello is None:
                raise HostFailure(self.diagnose(conn, channel, leftover, deadline))
            if hello.version != self.version:
                raise HostFailure(self.mismatch(hello.version, t.python))
            if hello.protocol != PROTOCOL:
                raise HostFailure(
                    f"gcurun's bootstrap on {t.alias} speaks protocol {hello.protocol}, this "
                    f"launcher {PROTOCOL}: the same version from another checkout; install "
                    "this gcurun there")
        except BaseException:
            conn.close()
            raise
        return HostSession(t, conn, channel, hello, leftover)

    def mismatch(self, remote: str, python: str) -> str:
        return (f"gcurun {remote} is what {python} imports on {self.target.alias}, but "
                f"this launcher is gcurun {self.version}; install gcurun=={self.version} "
                "there, or point --python (or the profile's python key) at an interpreter "
                "that has it")

    def diagnose(self, conn: Connection, channel: Any, noise: bytes,
                 deadline: Deadline) -> str:
        """Why the bootstrap ended before saying hello."""
        channel.status_event.wait(min(deadline.left(self.stage), 2.0))
        status = channel.recv_exit_status() if channel.exit_status_ready() else None
        err = drain_stderr(channel).decode(errors="replace").strip()
        python, host = self.target.python, self.target.alias
        if status == 127:
            return (f"remote interpreter '{python}' not found on {host} (exit 127: {err}); "
                    "install Python and gcurun there, or point --python (or the profile's "
                    "python key) at one")
        if status == 126:
            return f"remote interpreter '{python}' on {host} cannot be run: {err}"
        self.stage = "asking the remote interpreter for its gcurun version"
        probe = conn.transport.open_session(timeout=deadline.left(self.stage))
        probe.exec_command(f"exec {shlex.quote(python)} -c {shlex.quote(VERSION_PROBE)}")
        out, probe_err, code = _run_to_end(probe, deadline, self.stage)
        if code == 0 and out.strip() and out.strip() != self.version:
            return self.mismatch(out.strip(), python)
        if "No module named" in probe_err and "gcurun" in probe_err:
            return (f"'{python}' on {host} cannot import gcurun; install "
                    f"gcurun=={self.version} for it there, or point --python (or the "
                    "profile's python key) at an interpreter that has it")
        tail = "\n".join((err or noise.decode(errors="replace")).splitlines()[-5:])
        return (f"gcurun's bootstrap on {host} exited (status {status}) before starting: "
                f"{tail or 'no output'}")


def _read_hello(channel: Any, deadline: Deadline, stage: str) -> tuple[Hello | None, bytes]:
    """Read up to the hello line, skipping what a login shell printed first. Returns the
    hello (None when the channel ended first) and the bytes after it (or the noise)."""
    buffer = b""
    while True:
        newline = buffer.find(b"\n")
        while newline >= 0:
            hello = parse_hello(buffer[:newline + 1])
            if hello is not None:
                return hello, buffer[newline + 1:]
            buffer = buffer[newline + 1:]
            newline = buffer.find(b"\n")
        if len(buffer) > MAX_NOISE:
            return None, buffer[-4096:]
        channel.settimeout(deadline.left(stage))
        try:
            data = channel.recv(65536)
        except TimeoutError:
            raise HostFailure(deadline.expired(stage)) from None
        if not data:
            return None, buffer
        buffer += data


def drain_stderr(channel: Any) -> bytes:
    """What the channel's stderr holds now, without waiting."""
    chunks = []
    while channel.recv_stderr_ready():
        chunks.append(channel.recv_stderr(65536))
    return b"".join(chunks)


def _run_to_end(channel: Any, deadline: Deadline, stage: str) -> tuple[str, str, int]:
    """Stdout, stderr and exit status of a short remote command."""
    out, err = b"", b""
    channel.settimeout(deadline.left(stage))
    try:
        while True:
            data = channel.recv(65536)
            err += drain_stderr(channel)
            if not data:
                break
            out += data
        while not channel.exit_status_ready():
            channel.status_event.wait(deadline.left(stage))
    except TimeoutError:
        raise HostFailure(deadline.expired(stage)) from None
    err += drain_stderr(channel)
    channel.close()
    return out.decode(errors="replace"), err.decode(errors="replace"), channel.recv_exit_status()
