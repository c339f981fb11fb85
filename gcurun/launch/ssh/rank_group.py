"""The SSH executor: the ranks of each remote host run under one bootstrap (see
:mod:`gcurun.launch.remote.bootstrap`), started by the preflight over that host's one connection.

The job (argv, environment, secrets, binding per rank) travels on the bootstrap's stdin;
output and exits come back as frames on its stdout and become events on the supervisor's
queue (:mod:`gcurun.launch.bootstrap_group`, shared with this host's own ranks). When the
connection drops, the bootstrap stops its ranks and the group reports the ranks it lost;
when the link goes silent instead (cut), both ends give up after ``--liveness-timeout``
(:meth:`BootstrapGroup.keep_alive`): the launcher reports the host lost, and the
bootstrap, hearing no ping, fences itself.
"""

from __future__ import annotations

import socket
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

from gcurun.errors import LaunchError
from gcurun.launch.api import RankGroup, RankSpec
from gcurun.launch.bootstrap_group import BootstrapGroup
from gcurun.launch.remote.rank_env import ANY_ADDRESS
from gcurun.launch.ssh.preflight import HostSession, drain_stderr, host_sessions, remote_hosts
from gcurun.rendezvous.wire import set_liveness, show_address

if TYPE_CHECKING:
    from gcurun.launch.kinds import PreparedJob

STDERR_TAIL_BYTES = 4096
EXIT_STATUS_WAIT = 2.0


class SSHRankGroup(BootstrapGroup):
    """The ranks of one remote host, run by the bootstrap of ``session``.

    ``secrets`` are added to every rank's environment and travel only over the channel,
    as does ``forwarded`` (the launcher's environment, under every rank's own variables).
    ``kill_grace`` is how long the bootstrap waits between SIGTERM and SIGKILL when the
    launcher is gone.
    """

    def __init__(self, session: HostSession, ranks: Sequence[RankSpec], *, workdir: str,
                 secrets: Mapping[str, str] | None = None, kill_grace: float = 10.0,
                 forwarded: Mapping[str, str] | None = None) -> None:
        super().__init__(ranks, workdir=workdir, secrets=secrets, kill_grace=kill_grace,
                         forwarded=forwarded)
        self.session = session
        self.host = session.target.alias
        self.leftover = session.leftover
        self._stderr = bytearray()

    def _open(self) -> None:
        self.session.channel.settimeout(None)

    def _send(self, data: bytes) -> None:
        self.session.channel.sendall(data)

    def _watch_liveness(self, liveness: float) -> None:
        # With a ProxyCommand or a jump host there is no socket of ours to the host: the
        # bootstrap's fencing still covers it, the launcher's side waits on the channel.
        sock = getattr(self.session.connection.transport, "sock", None)
        if isinstance(sock, socket.socket):
            set_liveness(sock, liveness)

    def _recv(self) -> bytes:
        return bytes(self.session.channel.recv(65536))

    def _close(self) -> None:
        self.session.close()

    def _after_frames(self) -> None:
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


def ssh_groups(job: PreparedJob, secrets: Mapping[str, str]) -> list[RankGroup]:
    """The ranks of ``job`` on this host (local processes), then one group per remote
    host, run by the bootstrap its preflight started.

    Raises LaunchError when a remote host was not checked (a job prepared offline)."""
    from gcurun.launch.local_group import local_groups

    plan = job.plan
    groups: list[RankGroup] = list(local_groups(job, with_launcher_address(secrets,
                                                                            "127.0.0.1")))
    by_host: dict[str, list[RankSpec]] = {}
    for r in plan.ranks:                     # one pass, for plans of thousands of hosts
        by_host.setdefault(r.host, []).append(r)
    sessions = host_sessions(job)
    for name in remote_hosts(plan):
        session = sessions.get(name)
        if session is None:
            raise LaunchError(f"host {name!r} has not passed the SSH preflight; prepare the "
                              "job with its hosts checked (connect=True) before running it")
        group = SSHRankGroup(session, by_host[name], workdir=plan.workdir,
                             secrets=secrets_for(session, secrets),
                             kill_grace=job.settings.grace_seconds,
                             forwarded=plan.launcher_env)
        # A cut link says nothing: pings and the kernel's deadlines notice it on both ends.
        group.keep_alive(job.settings.liveness_timeout)
        groups.append(group)
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
