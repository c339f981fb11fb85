"""One verified, authenticated SSH connection to one host, or the precise reason why not.

Each step has its own failure message: name resolution, the TCP connection (refused, no
route, timeout), the SSH handshake, the host key (unknown, changed, revoked) and
authentication (naming every key tried). Every step runs against one deadline.
"""

from __future__ import annotations

import contextlib
import errno
import logging
import socket
import threading
from collections.abc import Sequence
from typing import Any

from gcurun.launch.ssh.api import Connection, Deadline, HostFailure
from gcurun.launch.ssh.auth import authenticate
from gcurun.launch.ssh.hostkeys import (
    HostKeyCheck,
    KnownHostEntry,
    append_known_host,
    check_host_key,
    fingerprint,
    preferred_key_types,
)
from gcurun.launch.ssh.sshconfig import SSHTarget

KEEPALIVE_SECONDS = 15
# With keepalives flowing, a peer that acknowledges nothing for this long is gone.
TCP_USER_TIMEOUT_MS = 60_000
_RSA_TYPES = ["rsa-sha2-512", "rsa-sha2-256", "ssh-rsa"]

# paramiko logs every failed handshake with a traceback; gcurun reports the cause instead.
logging.getLogger("paramiko").addHandler(logging.NullHandler())


def connect(target: SSHTarget, known: Sequence[KnownHostEntry], deadline: Deadline,
            hops: Sequence[SSHTarget] = ()) -> Connection:
    """Connect to ``target`` (through ``hops``, its resolved ProxyJump chain), check its
    host key against ``known`` and authenticate. Raises HostFailure."""
    under: list[Connection] = []
    try:
        for hop in hops:
            sock = _tunnel(under[-1], hop, deadline) if under else _open_socket(hop, deadline)
            under.append(_handshake(hop, sock, known, deadline, via=f"jump host {hop.display}"))
        if under:
            sock = _tunnel(under[-1], target, deadline)
        elif target.proxy_command:
            sock = _proxy_command(target.proxy_command)
        else:
            sock = _open_socket(target, deadline)
        conn = _handshake(target, sock, known, deadline)
    except BaseException:
        for c in reversed(under):
            c.close()
        raise
    conn.hops = under
    return conn


def _open_socket(target: SSHTarget, deadline: Deadline) -> socket.socket:
    host, port = target.hostname, target.port
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except socket.gaierror as exc:
        raise HostFailure(
            f"cannot resolve host name '{host}': {exc.strerror}; check the name, "
            "/etc/hosts or DNS, or set HostName for it in the ssh config") from None
    failures: list[str] = []
    for family, kind, proto, _, addr in infos:
        ip = str(addr[0])
        sock = socket.socket(family, kind, proto)
        try:
            sock.settimeout(deadline.left(f"connecting to {ip} port {port}"))
            sock.connect(addr)
        except TimeoutError:
            failures.append(
                f"no answer from {ip} port {port} within {deadline.seconds:g} s: the "
                "host is down, unreachable or a firewall drops the connection; check the "
                "address, or raise --ssh-timeout")
        except OSError as exc:
            failures.append(_connect_error(ip, port, exc))
        except BaseException:
            sock.close()
            raise
        else:
            _tune_socket(sock)
            return sock
        sock.close()
    raise HostFailure("; ".join(failures))


def _connect_error(addr: str, port: int, exc: OSError) -> str:
    if exc.errno == errno.ECONNREFUSED:
        return (f"connection refused by {addr} port {port}: no SSH server listens there; "
                "start sshd, or give the right port (--ssh-port, Port in the ssh config)")
    if exc.errno in (errno.EHOSTUNREACH, errno.ENETUNREACH):
        return (f"no route to {addr} ({exc.strerror}): the host is down or not reachable "
                "from here; check the address")
    return f"cannot connect to {addr} port {port}: {exc.strerror or exc}"


def _proxy_command(command: str) -> Any:
    import paramiko

    try:
        return paramiko.ProxyCommand(command)
    except (OSError, ValueError, paramiko.ProxyCommandFailure) as exc:
        raise HostFailure(f"cannot start ProxyCommand '{command}': {exc}; fix it in the "
                          "ssh config") from None


def _tune_socket(sock: socket.socket) -> None:
    with contextlib.suppress(OSError, AttributeError):
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_USER_TIMEOUT, TCP_USER_TIMEOUT_MS)


def _tunnel(via: Connection, target: SSHTarget, deadline: Deadline) -> Any:
    import paramiko

    stage = f"opening a tunnel to {target.display} through {via.target.display}"
    try:
        return via.transport.open_channel(
            "direct-tcpip", (target.hostname, target.port), ("127.0.0.1", 0),
            timeout=deadline.left(stage))
    except paramiko.ChannelException as exc:
        raise HostFailure(
            f"jump host {via.target.display} cannot reach {target.hostname} port "
            f"{target.port}: {exc.text}; check the address, or AllowTcpForwarding on the "
            "jump host") from None
    except paramiko.SSHException as exc:
        raise HostFailure(f"{stage} failed: {exc}") from None


def _handshake(target: SSHTarget, sock: Any, known: Sequence[KnownHostEntry],
               deadline: Deadline, via: str = "") -> Connection:
    import paramiko

    prefix = f"{via}: " if via else ""
    transport = paramiko.Transport(sock)
    try:
        _prefer_known_types(transport, known, target.known_hosts_name)
        # paramiko's own timers run a little longer than the deadline, so a silent server
        # is always reported as the timeout it is.
        transport.banner_timeout = transport.handshake_timeout = \
            deadline.left("before SSH") + 1.0
        done = threading.Event()
        transport.start_client(event=done)
        if not done.wait(deadline.left("during the SSH handshake")):
            raise HostFailure(prefix + deadline.expired("during the SSH handshake"))
        if not transport.is_active():
            raise HostFailure(prefix + _handshake_error(target, transport.get_exception()))
        conn = Connection(target, transport)
        conn.notes += _verify_host_key(target, transport.get_remote_server_key(), known,
                                       prefix)
        authenticate(target, transport, deadline, prefix)
    except BaseException:
        transport.close()
        raise
    transport.set_keepalive(KEEPALIVE_SECONDS)
    return conn


def _handshake_error(target: SSHTarget, exc: BaseException | None) -> str:
    text = str(exc or "the server closed the connection")
    if "banner" in text.lower():
        return (f"{target.hostname} port {target.port} does not speak SSH ({text}); "
                "check the port (--ssh-port, Port in the ssh config)")
    return f"SSH handshake with {target.hostname} port {target.port} failed: {text}"


def _prefer_known_types(transport: Any, known: Sequence[KnownHostEntry], name: str) -> None:
    wanted: list[str] = []
    for key_type in preferred_key_types(known, name):
        wanted += _RSA_TYPES if key_type == "ssh-rsa" else [key_type]
    options = transport.get_security_options()
    available = list(options.key_types)
    first = [t for t in wanted if t in available]
    if first:
        options.key_types = first + [t for t in available if t not in first]


def _verify_host_key(target: SSHTarget, key: Any, known: Sequence[KnownHostEntry],
                     prefix: str) -> list[str]:
    """Apply the host-key policy; returns notes for the user, raises HostFailure."""
    key_type, blob = key.get_name(), key.asbytes()
    offered = f"{key_type} key {fingerprint(blob)}"
    name = target.known_hosts_name
    policy = target.host_key_policy
    if policy == "off":
        return [f"{target.display}: host key not checked (--host-key-policy off); "
                f"it offered {offered}"]
    check = check_host_key(known, [name], key_type, blob)
    if check.status == "known":
        return []
    if check.status == "unknown" and policy == "accept-new":
        path = target.known_hosts_files[0]
        try:
            append_known_host(path, name, key_type, blob)
        except OSError as exc:
            raise HostFailure(f"{prefix}cannot add the host key of {name} to {path}: "
                              f"{exc.strerror}") from None
        return [f"{target.display}: added {offered} to {path} (--host-key-policy accept-new)"]
    raise HostFailure(prefix + host_key_message(target, check, key_type, blob))


def host_key_message(target: SSHTarget, check: HostKeyCheck, key_type: str,
                     blob: bytes) -> str:
    """The reason a host key was refused, with what to do about it."""
    name, offered = target.known_hosts_name, f"{key_type} key {fingerprint(blob)}"
    if check.status == "revoked":
        return (f"the host key of {name} ({offered}) is marked @revoked in "
                f"{check.entries[0].where}; refusing to connect")
    if check.status == "unknown":
        files = ", ".join(target.known_hosts_files + target.global_known_hosts_files)
        return (f"host key of {name} is unknown: it offered {offered}, which is in none of "
                f"{files}. Verify it, then add it (ssh-keyscan -p {target.port} "
                f"{target.hostname} >> {target.known_hosts_files[0]}), or pass "
                "--host-key-policy accept-new to trust hosts seen for the first time")
    same_type = [e for e in check.entries if e.key_type == key_type]
    listed = same_type or list(check.entries)
    where = ", ".join(e.where for e in listed)
    what = ("HOST KEY CHANGED" if same_type else
            f"host key type differs (known: {', '.join(sorted({e.key_type for e in listed}))})")
    return (f"{what} for {name}: it offered {offered}, but {where} holds another key. "
            "Someone may be intercepting the connection; if the host was reinstalled, "
            f"remove the old key with: ssh-keygen -R '{name}' -f {listed[0].origin}")
