"""One verified, authenticated SSH connection to one host, or the precise reason why not.

Each step has its own failure message: name resolution, the TCP connection (refused, no
route, timeout), the SSH handshake, the host key (unknown, changed, revoked) and
authentication (naming every key tried). Every step runs against one deadline.
"""

from __future__ import annotations

import contextlib
import errno
import logging
import os
import socket
import threading
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from gcurun.launch.hostkeys import (
    HostKeyCheck,
    KnownHostEntry,
    append_known_host,
    check_host_key,
    fingerprint,
    preferred_key_types,
)
from gcurun.launch.sshconfig import DEFAULT_IDENTITIES, SSHTarget

if TYPE_CHECKING:
    import paramiko

KEEPALIVE_SECONDS = 15
# With keepalives flowing, a peer that acknowledges nothing for this long is gone.
TCP_USER_TIMEOUT_MS = 60_000
_RSA_TYPES = ["rsa-sha2-512", "rsa-sha2-256", "ssh-rsa"]

# paramiko logs every failed handshake with a traceback; gcurun reports the cause instead.
logging.getLogger("paramiko").addHandler(logging.NullHandler())


class HostFailure(Exception):
    """Why one host cannot be used; ``str()`` is the message for the user."""


@dataclass
class Connection:
    """An authenticated connection; ``hops`` are the ProxyJump connections under it."""

    target: SSHTarget
    transport: paramiko.Transport
    hops: list[Connection] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    def close(self) -> None:
        self.transport.close()
        for hop in reversed(self.hops):
            hop.close()


class Deadline:
    """The time left for one host's whole preflight, on a monotonic clock."""

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds
        self.end = time.monotonic() + seconds

    def left(self, stage: str) -> float:
        """Seconds left; raises HostFailure naming ``stage`` when none are."""
        remaining = self.end - time.monotonic()
        if remaining <= 0:
            raise HostFailure(self.expired(stage))
        return remaining

    def expired(self, stage: str) -> str:
        return (f"timed out after {self.seconds:g} s {stage}; the host or network is slow "
                "or stuck: check it, or raise --ssh-timeout")


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
        _authenticate(target, transport, deadline, prefix)
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


@dataclass(frozen=True)
class _Candidate:
    label: str
    key: Any = None          # a paramiko PKey or AgentKey; None when unusable
    why_not: str = ""        # why an identity could not be tried


def _authenticate(target: SSHTarget, transport: Any, deadline: Deadline, prefix: str) -> None:
    import paramiko

    transport.auth_timeout = deadline.left("before authentication")
    try:
        transport.auth_none(target.user)
        return
    except paramiko.BadAuthenticationType as exc:
        allowed = list(exc.allowed_types)
    except paramiko.SSHException:
        allowed = ["publickey"]
    if "publickey" not in allowed:
        raise HostFailure(
            f"{prefix}{target.hostname} accepts only {', '.join(allowed) or 'nothing'} for "
            f"user '{target.user}'; gcurun logs in with keys: enable PubkeyAuthentication "
            "there") from None
    tried: list[str] = []
    agent = _open_agent()
    try:
        if _try_keys(target, transport, deadline, prefix, agent, tried):
            return
    finally:
        if agent is not None:
            agent.close()
    keys = "; ".join(tried) if tried else "none (no identity file, no agent key)"
    raise HostFailure(
        f"{prefix}authentication as '{target.user}' on {target.hostname} failed; keys "
        f"tried: {keys}. Add the public key to ~{target.user}/.ssh/authorized_keys there, "
        "or choose a key with --ssh-identity-file")


def _try_keys(target: SSHTarget, transport: Any, deadline: Deadline, prefix: str,
              agent: Any, tried: list[str]) -> bool:
    """Offer keys until one is accepted (True); records each refusal in ``tried``."""
    import paramiko

    agent_keys = {k.asbytes(): k for k in agent.get_keys()} if agent is not None else {}
    for cand in _candidates(target, agent_keys):
        if cand.key is None:
            tried.append(f"{cand.label} ({cand.why_not})")
            continue
        try:
            transport.auth_timeout = deadline.left("during authentication")
            if not transport.auth_publickey(target.user, cand.key):
                return True
            raise HostFailure(f"{prefix}{target.hostname} wants a second factor after the "
                              f"key {cand.label}; gcurun cannot supply one")
        except paramiko.AuthenticationException:
            tried.append(f"{cand.label} (rejected)")
        except paramiko.SSHException as exc:
            if not transport.is_active():
                raise HostFailure(
                    f"{prefix}{target.hostname} closed the connection during authentication "
                    f"as '{target.user}' after trying {'; '.join(tried) or 'no key'}: too "
                    "many keys (MaxAuthTries)? Choose one with --ssh-identity-file or "
                    "IdentitiesOnly") from None
            tried.append(f"{cand.label} ({exc})")
    return False


def _candidates(target: SSHTarget, agent_keys: dict[bytes, Any]) -> Iterator[_Candidate]:
    """Keys in the order they are offered: explicit identity files, then agent keys (only
    those matching an identity file under IdentitiesOnly), then the default identity
    files when no identity file was named."""
    offered: set[bytes] = set()
    explicit = list(target.identity_files)
    defaults = [os.path.expanduser(p) for p in DEFAULT_IDENTITIES] if not explicit else []
    wanted_blobs = set()
    for path in explicit:
        cand = _load_identity(path)
        if cand.key is not None:
            offered.add(cand.key.asbytes())
            yield cand
            continue
        blob = _public_blob(path)
        if blob is not None and blob in agent_keys:
            wanted_blobs.add(blob)
        else:
            yield cand
    for blob, key in agent_keys.items():
        if blob in offered or (target.identities_only and blob not in wanted_blobs):
            continue
        offered.add(blob)
        yield _Candidate(f"agent key {key.get_name()} {fingerprint(blob)}", key)
    for path in defaults:
        if os.path.exists(path):
            cand = _load_identity(path)
            if cand.key is None or cand.key.asbytes() not in offered:
                yield cand


def _load_identity(path: str) -> _Candidate:
    import paramiko

    label = path
    try:
        key = paramiko.PKey.from_path(path)
    except FileNotFoundError:
        return _Candidate(label, why_not="no such file")
    except (paramiko.PasswordRequiredException, TypeError):
        # cryptography raises TypeError for an encrypted key loaded without a password
        return _Candidate(label, why_not="encrypted; load it into ssh-agent with ssh-add")
    except (OSError, paramiko.SSHException, ValueError) as exc:
        return _Candidate(label, why_not=f"unusable: {exc}")
    return _Candidate(f"{path} ({key.get_name()} {fingerprint(key.asbytes())})", key)


def _public_blob(path: str) -> bytes | None:
    import base64

    try:
        with open(path + ".pub", encoding="utf-8") as f:
            return base64.b64decode(f.read().split()[1])
    except (OSError, IndexError, ValueError):
        return None


def _open_agent() -> Any:
    """A connection to the user's ssh-agent, or None without one. Each host gets its own:
    one agent connection must not serve signatures for several threads at once."""
    if not os.environ.get("SSH_AUTH_SOCK"):
        return None
    import paramiko

    try:
        return paramiko.Agent()
    except (paramiko.SSHException, OSError):
        return None
