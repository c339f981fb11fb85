"""The SSH executor: the ranks of each remote host run under one bootstrap (see
:mod:`gcurun.launch.remote.bootstrap`), started by the preflight over that host's one connection.

The job (argv, environment, secrets, binding per rank) travels on the bootstrap's stdin;
output and exits come back as frames on its stdout and become events on the supervisor's
queue. When the connection drops, the bootstrap stops its ranks and the group reports the
ranks it lost.
"""

from __future__ import annotations

import contextlib
import json
import queue
import socket
import threading
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from gcurun.errors import LaunchError
from gcurun.launch.api import (
    Binding,
    Event,
    ExecutorErrorEvent,
    ExitEvent,
    OutputEvent,
    RankGroup,
    RankSpec,
)
from gcurun.launch.remote.protocol import ERROR, EXIT, STARTED, STREAM_KINDS, FrameReader
from gcurun.launch.remote.rank_env import ANY_ADDRESS
from gcurun.launch.ssh.preflight import HostSession, drain_stderr, remote_hosts
from gcurun.rendezvous.wire import encode_frame, show_address

if TYPE_CHECKING:
    from gcurun.launch.prepare import PreparedJob


# After asking a bootstrap to stop its ranks, its exits are awaited for the grace period
# plus this long before the connection is cut (which makes it SIGKILL them).
TERMINATE_SLACK = 5.0
STDERR_TAIL_BYTES = 4096
EXIT_STATUS_WAIT = 2.0


class SSHRankGroup:
    """The ranks of one remote host, run by the bootstrap of ``session``.

    ``secrets`` are added to every rank's environment and travel only over the channel.
    ``kill_grace`` is how long the bootstrap waits between SIGTERM and SIGKILL when the
    launcher is gone.
    """

    def __init__(self, session: HostSession, ranks: Sequence[RankSpec], *, workdir: str,
                 secrets: Mapping[str, str] | None = None, kill_grace: float = 10.0) -> None:
        self.session = session
        self.host = session.target.alias
        self._ranks = list(ranks)
        self._workdir = workdir
        self._secrets = dict(secrets or {})
        self._kill_grace = kill_grace
        self._pids: dict[int, int] = {}
        self._exited: set[int] = set()
        self._lock = threading.Lock()
        self._reader: threading.Thread | None = None
        self._terminating = False
        self._error: str | None = None
        self._stderr = bytearray()

    def job_message(self) -> dict[str, Any]:
        """What the bootstrap is told: everything about the ranks, nothing on argv."""
        return {
            "op": "job",
            "workdir": self._workdir,
            "kill_grace": self._kill_grace,
            "secrets": self._secrets,
            "ranks": [{"rank": r.rank, "argv": list(r.argv), "env": dict(r.env),
                       "binding": binding_message(r.binding)} for r in self._ranks],
        }

    def start(self, events: queue.Queue[Event]) -> None:
        with self._lock:
            if self._reader is not None or self._terminating:
                return
            self.session.channel.settimeout(None)
            try:
                self.session.channel.sendall(encode_frame(self.job_message()))
            except OSError as exc:
                self._error = f"lost the SSH connection to {self.host} while sending the job: " \
                              f"{exc}"
            self._reader = threading.Thread(target=self._read, args=(events,), daemon=True,
                                            name=f"ssh-{self.host}")
            self._reader.start()

    def terminate(self, grace_seconds: float) -> None:
        with self._lock:
            first, self._terminating = not self._terminating, True
            reader = self._reader
        if reader is None:
            self.session.close()  # never started: the bootstrap exits having run nothing
            return
        if first and reader.is_alive():
            with contextlib.suppress(OSError, EOFError):
                self.session.channel.sendall(
                    encode_frame({"op": "terminate", "grace": grace_seconds}))
        reader.join(grace_seconds + TERMINATE_SLACK)
        if reader.is_alive():
            self.session.close()
            reader.join(TERMINATE_SLACK)

    def pids(self) -> dict[int, int]:
        with self._lock:
            return dict(self._pids)

    # -- the reader thread ----------------------------------------------------------------
    def _read(self, events: queue.Queue[Event]) -> None:
        channel = self.session.channel
        frames = FrameReader()
        data = self.session.leftover
        try:
            while True:
                for kind, rank, payload in frames.feed(data):
                    self._on_frame(kind, rank, payload, events)
                self._keep_stderr()
                data = channel.recv(65536)
                if not data:
                    break
        except (OSError, EOFError) as exc:
            self._error = self._error or f"lost the SSH connection to {self.host}: {exc}"
        self._keep_stderr()
        lost = tuple(r.rank for r in self._ranks if r.rank not in self._exited)
        if lost:
            events.put(ExecutorErrorEvent(lost, self._lost_reason()))
        self.session.close()

    def _on_frame(self, kind: int, rank: int, payload: bytes,
                  events: queue.Queue[Event]) -> None:
        if kind in STREAM_KINDS:
            events.put(OutputEvent(rank, STREAM_KINDS[kind], payload))  # type: ignore[arg-type]
        elif kind == STARTED:
            with self._lock:
                self._pids[rank] = int(payload)
        elif kind == EXIT:
            result = json.loads(payload)
            self._exited.add(rank)
            events.put(ExitEvent(rank, result.get("exit_code"), result.get("signal"),
                                 result.get("error_text")))
        elif kind == ERROR:
            self._error = payload.decode(errors="replace")

    def _keep_stderr(self) -> None:
        """Keep the last few KiB the bootstrap itself wrote to stderr (a traceback)."""
        self._stderr += drain_stderr(self.session.channel)
        del self._stderr[:-STDERR_TAIL_BYTES]

    def _lost_reason(self) -> str:
        if self._error is not None:
            return self._error
        transport = self.session.connection.transport
        if not transport.is_active():
            why = str(transport.get_exception() or "")
            return (f"lost the SSH connection to {self.host}: "
                    f"{why or 'the host closed it or went down'}")
        channel = self.session.channel
        # The exit status may follow the end of the output: give it a moment.
        channel.status_event.wait(EXIT_STATUS_WAIT)
        code = channel.recv_exit_status() if channel.status_event.is_set() else -1
        status = "unknown" if code == -1 else code
        tail = self._stderr.decode(errors="replace").strip().splitlines()[-5:]
        return (f"gcurun's bootstrap on {self.host} ended (status {status}) without "
                f"reporting these ranks: {' | '.join(tail) or 'no message'}")


def binding_message(binding: Binding | None) -> dict[str, Any] | None:
    if binding is None:
        return None
    return {"cpus": list(binding.cpus), "numa_node": binding.numa_node,
            "mem_bind": binding.mem_bind}


def ssh_groups(job: PreparedJob, secrets: Mapping[str, str]) -> list[RankGroup]:
    """The ranks of ``job`` on this host (local processes), then one group per remote
    host, run by the bootstrap its preflight started.

    Raises LaunchError when a remote host was not checked (a job prepared offline)."""
    from gcurun.launch.local_group import local_groups

    plan = job.plan
    groups: list[RankGroup] = list(local_groups(job, with_launcher_address(secrets,
                                                                            "127.0.0.1")))
    for name in remote_hosts(plan):
        session = job.sessions.get(name)
        if session is None:
            raise LaunchError(f"host {name!r} has not passed the SSH preflight; prepare the "
                              "job with its hosts checked (connect=True) before running it")
        groups.append(SSHRankGroup(session, plan.ranks_on(name), workdir=plan.workdir,
                                   secrets=secrets_for(session, secrets),
                                   kill_grace=job.settings.grace_seconds))
    return groups


def secrets_for(session: HostSession, secrets: Mapping[str, str]) -> dict[str, str]:
    """The secrets of one host's ranks, where an address of the launcher given as
    ``*:PORT`` (the rendezvous, gcurun.run's service) becomes the launcher's address on
    this host's connection, which that host can reach."""
    return with_launcher_address(secrets, launcher_address(session))


def with_launcher_address(secrets: Mapping[str, str], host: str) -> dict[str, str]:
    """``secrets`` with each ``*:PORT`` value's ``*`` replaced by ``host``."""
    return {name: show_address((host, int(value[2:])))
            if value.startswith(ANY_ADDRESS + ":") else value
            for name, value in secrets.items()}


def launcher_address(session: HostSession) -> str:
    """This host's address on the SSH connection to ``session``'s host; for proxied
    connections (no socket of ours reaches the host) this host's fully qualified name."""
    sock = getattr(session.connection.transport, "sock", None)
    try:
        host = str(sock.getsockname()[0])  # type: ignore[union-attr]
    except (AttributeError, OSError, IndexError, TypeError):
        return socket.getfqdn()
    return host[7:] if host.startswith("::ffff:") else host
