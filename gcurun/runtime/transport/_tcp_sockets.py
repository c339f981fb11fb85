"""Socket-level helpers of the ``tcp`` transport's connections
(:mod:`.tcp_connections`): tuning a link's socket, dialing a same-host peer's abstract
Unix socket, handing the shared-memory rings of a same-host link over it, and naming
why a connection attempt failed."""

from __future__ import annotations

import os
import socket
import time

from gcurun.rendezvous import wire
from gcurun.runtime.transport import shm

SOCKET_BUFFER_BYTES = 4 << 20


def failure_reason(exc: BaseException) -> str:
    """A connection attempt's failure, in a few words."""
    if isinstance(exc, TimeoutError) or isinstance(exc, socket.timeout):
        return "timed out"
    if isinstance(exc, OSError) and exc.strerror:
        return exc.strerror.lower()
    return str(exc) or type(exc).__name__


def tune(sock: socket.socket) -> None:
    """Make a link's socket non-blocking, with large buffers and (TCP) no Nagle delay."""
    sock.setblocking(False)
    for option in (socket.SO_SNDBUF, socket.SO_RCVBUF):
        try:
            sock.setsockopt(socket.SOL_SOCKET, option, SOCKET_BUFFER_BYTES)
        except OSError:
            pass
    if sock.family in (socket.AF_INET, socket.AF_INET6):
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)


def dial_unix(name_hex: str | None) -> socket.socket | None:
    """A connection to a same-host peer's abstract Unix socket, or None (another network
    namespace, no Unix sockets): the caller falls back to TCP."""
    if not name_hex or not hasattr(socket, "AF_UNIX"):
        return None
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        sock.connect(bytes.fromhex(name_hex))
    except (OSError, ValueError):
        sock.close()
        return None
    return sock


def send_channel(sock: socket.socket) -> shm.Channel:
    """Create the rings of a new same-host link and hand their memory to the peer."""
    channel, fd = shm.Channel.create()
    try:
        socket.send_fds(sock, [b"M"], [fd])
    except OSError:
        channel.close()
        raise
    finally:
        os.close(fd)
    return channel


def receive_channel(sock: socket.socket, deadline: float) -> shm.Channel:
    """The rings of a new same-host link, from the peer that created them (see
    :func:`send_channel`); raises :class:`wire.WireError` if none came by ``deadline``."""
    sock.settimeout(max(0.01, deadline - time.monotonic()))
    try:
        message, fds, _, _ = socket.recv_fds(sock, 1, 1)
    except TimeoutError:
        raise wire.WireError("timed out waiting for the shared memory") from None
    if message != b"M" or len(fds) != 1:
        for fd in fds:
            os.close(fd)
        raise wire.WireError("sent no shared memory where it promised some")
    return shm.Channel(fds[0], creator=False)
