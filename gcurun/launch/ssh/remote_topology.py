"""Remote hosts' topology, read over the connections the SSH preflight opened.

Each host runs the stdlib-only sysfs reader (:mod:`gcurun.hosts.sysfs_snapshot`, sent on
stdin to the interpreter the bootstrap runs under) on a second channel of its connection,
in parallel; its JSON becomes a :class:`~gcurun.hosts.topology.Topology`. Then the remote
ranks of a plan are bound exactly as local ones (:func:`bind_remote_ranks`).
"""

from __future__ import annotations

import shlex
import threading
import time
from collections.abc import Mapping

from gcurun.config.api import Settings
from gcurun.errors import SSHConnectError
from gcurun.hosts.topology import Topology, TopologyError, parse_topology_json, remote_probe_source
from gcurun.launch.api import LaunchPlan
from gcurun.launch.planning.binding import bind_plan
from gcurun.launch.ssh.preflight import HostSession


def probe_command(python: str) -> str:
    return f"exec {shlex.quote(python)} - /sys"


def read_remote_topology(session: HostSession, timeout: float) -> Topology:
    """Run the sysfs reader on ``session``'s host. Raises TopologyError or OSError."""
    channel = session.connection.transport.open_session(timeout=timeout)
    try:
        deadline = time.monotonic() + timeout
        channel.settimeout(timeout)
        channel.exec_command(probe_command(session.hello.python))
        channel.sendall(remote_probe_source().encode())
        channel.shutdown_write()
        out = bytearray()
        while True:
            channel.settimeout(max(0.1, deadline - time.monotonic()))
            data = channel.recv(65536)
            if not data:
                break
            out += data
        err = b""
        while channel.recv_stderr_ready():
            err += channel.recv_stderr(65536)
        if not out and err:
            raise TopologyError(err.decode(errors="replace").strip().splitlines()[-1])
        return parse_topology_json(out.decode(errors="replace"))
    finally:
        channel.close()


def read_remote_topologies(sessions: Mapping[str, HostSession],
                           timeout: float) -> dict[str, Topology]:
    """Every host's topology, read in parallel. Raises SSHConnectError naming each host
    whose topology could not be read."""
    found: dict[str, Topology] = {}
    failures: dict[str, str] = {}
    lock = threading.Lock()

    def one(host: str, session: HostSession) -> None:
        try:
            topo = read_remote_topology(session, timeout)
        except (OSError, TopologyError, EOFError) as exc:
            with lock:
                failures[host] = f"reading its CPU/NUMA topology failed: {exc}"
            return
        with lock:
            found[host] = topo

    threads = [threading.Thread(target=one, args=item, daemon=True, name=f"topology-{item[0]}")
               for item in sessions.items()]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout + 5.0)
    for host in sessions:
        if host not in found and host not in failures:
            failures[host] = f"reading its CPU/NUMA topology took over {timeout:.0f}s"
    if failures:
        raise SSHConnectError(failures)
    return found


def bind_remote_ranks(plan: LaunchPlan, settings: Settings,
                      sessions: Mapping[str, HostSession]) -> tuple[LaunchPlan, tuple[str, ...]]:
    """``plan`` with the ranks of the ``sessions``' hosts bound per ``--bind-to`` and
    ``--map-by`` (unchanged for ``none``), and the oversubscription warnings."""
    if settings.bind_to == "none" or not sessions:
        return plan, ()
    topologies = read_remote_topologies(sessions, settings.ssh.timeout)
    return bind_plan(plan, topologies, settings.bind_to, settings.map_by,
                     oversubscribe=settings.oversubscribe, user_env=settings.env,
                     hosts=tuple(sessions))
